"""How tests/data/old_layout_COMMIT.tar.gz were made: two small sweeps of the JSB smoke preset,
written by rhnsearch at COMMIT, for test_old_layout.py to resume and extend with today's code:
dd9c428 (before issue 33's redesign of the storage layout) and 82b0eeb (the last whose record
had no format version, and whose Tune state pickled the sweep's files' modules under sweep/).

- `old-finished`: 2 cells (rhn and dtrnn at depth 1), 2 settings each, 2 epochs, FIFO: it
  finished (for `sweep extend`);
- `old-killed`: the same cells, 10 epochs; its driver was SIGKILLed once a trial had finished
  and another was between epochs 2 and 8 (for `sweep resume`).

Both write under ROOT (/tmp/rhnsearch-old-layout-COMMIT), a fixed absolute path: their
storage in ROOT/sweeps and their MLflow store in ROOT/mlflow.db (sqlite), its artifacts in
ROOT/artifacts, the data dir they record ROOT/data (left out of the tarball). The sweep's state
file (rhnsearch_sweep.json: storage, tracking_uri, data_dir, space_path) and MLflow's artifact
locations record ROOT, so the test unpacks the tarball at ROOT again (and points data_dir at
its own data).

Run with a checkout of COMMIT on PYTHONPATH (this script as it is today):
    git worktree add /tmp/old COMMIT
    PYTHONPATH=/tmp/old python tests/data/make_old_layout.py COMMIT /path/to/shared/data
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
SPACE = HERE.parent.parent / "spaces" / "jsb_optimization.yaml"
CELLS = ["--set", "archs=[rhn, dtrnn]", "--set", "depths=[1]", "--scheduler", "fifo"]


def command(root: Path, name: str, epochs: int, data_dir: str) -> list[str]:
    return [
        sys.executable, "-m", "rhnsearch.cli", "sweep", "run", str(SPACE), "--preset", "smoke",
        *CELLS, "--set", f"fixed.epochs={epochs}", "--data-dir", data_dir, "--name", name,
        "--storage-path", str(root / "sweeps"), "--tracking-uri", f"sqlite:///{root}/mlflow.db",
        "--json",
    ]  # fmt: skip


def results(root: Path, name: str) -> dict[str, list[dict]]:
    found = {}
    for trial in (root / "sweeps" / name).glob("*/result.json"):
        rows = []
        for line in trial.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
        found[trial.parent.name] = rows
    return found


def main(commit: str, data_dir: str):
    root = Path(f"/tmp/rhnsearch-old-layout-{commit}")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    # The data dir, at ROOT/data: the sweeps record it in their state and in every trial's
    # config (pickled in Tune's state), so the test puts its own data there (a symlink); a
    # copy here, not a symlink, as the sweep records the data dir's resolved path.
    shutil.copytree(Path(data_dir) / "jsb_chorales", root / "data" / "jsb_chorales")
    data_dir = str(root / "data")
    env = {**os.environ, "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "0", "TUNE_GLOBAL_CHECKPOINT_S": "0"}
    subprocess.run(command(root, "old-finished", 2, data_dir), cwd=root, env=env, check=True)
    proc = subprocess.Popen(
        command(root, "old-killed", 10, data_dir), cwd=root, env=env, start_new_session=True
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        rows = results(root, "old-killed").values()
        if sum(bool(r) and r[-1]["epoch"] == 10 for r in rows) >= 1 and any(
            r and 2 <= r[-1]["epoch"] < 8 for r in rows
        ):  # a trial finished, one half way (2 trials run at once on 2 cores)
            break
        time.sleep(0.2)
    tree = psutil.Process(proc.pid).children(recursive=True)
    os.killpg(proc.pid, signal.SIGKILL)
    for p in tree:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(tree, timeout=30)
    proc.wait()
    with tarfile.open(HERE / f"old_layout_{commit}.tar.gz", "w:gz") as tar:
        for path in sorted(root.iterdir()):  # sweeps/, mlflow.db, artifacts/ (MLflow's)
            if path.name != "data":
                tar.add(path, arcname=path.name)


if __name__ == "__main__":
    main(*sys.argv[1:])
