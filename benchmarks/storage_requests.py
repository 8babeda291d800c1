"""Sweep storage cost: the JSB smoke sweep with its storage on a local directory and on an S3
bucket, side by side in one run.

Starts moto's S3-compatible server on 127.0.0.1 (its requests counted from its access log: on
a real bucket each one is latency and money), then runs `rhnsearch sweep run` on the smoke
preset in a fresh process for each storage, alternating over --rounds (the same seed, so the
same trials), all in one MLflow store. Prints per sweep: the trials phase and the whole
command in seconds, the bucket's requests, requests per trial-epoch (trial-epochs from
MLflow) and the commonest requests; then one JSON line: medians per storage and the ratio of
bucket to directory seconds.

    python benchmarks/storage_requests.py [--rounds 1] [--set archs=[rhn] ...]
"""

import argparse
import collections
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[1]
SPACE = ROOT / "spaces" / "jsb_optimization.yaml"
REQUEST = re.compile(r'"(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def requests(log: Path) -> list[tuple[str, str]]:
    return REQUEST.findall(log.read_text())


def kind(method: str, path: str) -> str:
    """A request with its trial, checkpoint number, timestamp and query left out."""
    path = re.sub(r"/run_trial_[^/?]+", "/TRIAL", path.split("?")[0])
    path = re.sub(r"checkpoint_\d+", "checkpoint_N", path)
    path = re.sub(r"-[-0-9_]+\.(json|pkl)", r"-T.\1", path)
    return f"{method} {path}"


def trial_epochs(store: str, sweep: str) -> int:
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("jsb_optimization")
    runs = client.search_runs(
        [experiment.experiment_id], f"tags.sweep = '{sweep}' and tags.kind = 'trial'"
    )
    return sum(int(run.data.metrics.get("epoch", 0)) for run in runs)


def sweep(work: Path, name: str, storage: str, data_dir: str | None, sets: list, env: dict):
    args = [
        sys.executable,
        "-m",
        "rhnsearch.cli",
        "sweep",
        "run",
        str(SPACE),
        "--preset",
        "smoke",
        "--name",
        name,
        "--storage-path",
        storage,
        "--json",
    ]
    args += ["--data-dir", data_dir] if data_dir else []
    for item in sets:
        args += ["--set", item]
    start = time.monotonic()
    proc = subprocess.run(args, cwd=work, capture_output=True, text=True, env=env)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"{name} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    return seconds, summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--data-dir", help="as `rhnsearch sweep run --data-dir`")
    parser.add_argument("--set", action="append", default=[], help="space override")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="storage-bench-"))
    port, log = free_port(), work / "s3.log"
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        import boto3

        s3 = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{port}",
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        )
        for _ in range(100):
            try:
                s3.create_bucket(Bucket="sweeps")
                break
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.2)
        storages = {
            "directory": str(work / "sweeps"),
            "bucket": f"s3://sweeps/runs?endpoint_override=127.0.0.1:{port}&scheme=http",
        }
        store = f"sqlite:///{work / 'results' / 'mlflow.db'}"
        rows = collections.defaultdict(list)
        for r in range(args.rounds):
            for where, storage in storages.items():
                before = len(requests(log))
                seconds, summary = sweep(
                    work, f"{where}-{r}", storage, args.data_dir, args.set, env
                )
                made = requests(log)[before:]
                epochs = trial_epochs(store, f"{where}-{r}")
                rows[where].append(
                    {
                        "seconds": seconds,
                        "trials": summary["trials_seconds"],
                        "requests": len(made),
                        "per_epoch": len(made) / epochs,
                    }
                )
                print(
                    f"{where:9s} round {r}: command {seconds:6.1f} s, trials "
                    f"{summary['trials_seconds']:6.1f} s, {epochs} trial-epochs, "
                    f"{len(made)} requests ({len(made) / epochs:.2f} per trial-epoch)",
                    flush=True,
                )
                for name, count in collections.Counter(kind(*m) for m in made).most_common(8):
                    print(f"    {count:6d}  {name}")
    finally:
        os.killpg(server.pid, signal.SIGKILL)
    medians = {
        where: {key: statistics.median(row[key] for row in rows[where]) for key in rows[where][0]}
        for where in rows
    }
    print(
        json.dumps(
            {
                **{
                    f"{where}_{key}": round(value, 2)
                    for where, values in medians.items()
                    for key, value in values.items()
                },
                "bucket_over_directory": round(
                    medians["bucket"]["trials"] / medians["directory"]["trials"], 2
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
