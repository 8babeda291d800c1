"""Sweeps written by an earlier rhnsearch still resume and extend: of commit dd9c428 (before
issue 33's redesign of the storage layout) and of 82b0eeb (the last before the record's format
version, its Tune state pickled under the modules' old names). tests/data/old_layout_COMMIT.tar.gz
holds a sweep whose driver was SIGKILLed midway (`old-killed`) and a finished one
(`old-finished`), their storage and their MLflow store (tests/data/make_old_layout.py says how
they were made)."""

import fcntl
import gc
import math
import shutil
import tarfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from test_sweep import check_child_runs, run_fields

from conftest import json_summary, rhnsearch_cli

HERE = Path(__file__).resolve().parent
COMMITS = ("dd9c428", "82b0eeb")
CELLS = 2  # rhn and dtrnn at depth 1


@contextmanager
def unpacked(commit: str, data_dir: Path):
    """COMMIT's tarball unpacked at the absolute path its sweeps were made at (their state
    files, Tune's pickled trial configs and MLflow's artifact locations record it: nothing is
    rewritten), with its data the session's (one test at a time holds it: a lock file beside
    it); removed afterwards."""
    root = Path(f"/tmp/rhnsearch-old-layout-{commit}")
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        close_connections_under(root)
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        try:
            with tarfile.open(HERE / "data" / f"old_layout_{commit}.tar.gz") as tar:
                tar.extractall(root, filter="data")
            (root / "data").symlink_to(data_dir)
            yield root
        finally:
            shutil.rmtree(root, ignore_errors=True)


def close_connections_under(root: Path):
    """Close this process's pooled connections to a database under ROOT. MLflow keeps one
    SQLAlchemy engine per store URI for the life of the process: a connection left in its pool
    by an earlier test (test_bad_input.py opens the old store in-process) would go on reading
    the removed file, not the one unpacked at the same path."""
    import sqlalchemy

    for engine in [o for o in gc.get_objects() if isinstance(o, sqlalchemy.engine.Engine)]:
        if str(engine.url.database or "").startswith(str(root)):
            engine.dispose()


@pytest.fixture(params=COMMITS)
def old_layout(request, data_dir):
    with unpacked(request.param, data_dir) as root:
        yield root


def runs_of(client: MlflowClient, sweep: str, kind: str = "trial") -> list:
    experiment = client.get_experiment_by_name("jsb_optimization").experiment_id
    return client.search_runs(
        [experiment], f"tags.kind = '{kind}' and tags.sweep = '{sweep}'", max_results=1000
    )


def recorded(client: MlflowClient, runs) -> dict:
    """A run's id -> what it recorded (run_fields), with its end time and final loss."""
    return {
        r.info.run_id: (*run_fields(client, r), r.info.end_time, r.data.metrics.get("test_loss"))
        for r in runs
    }


@pytest.mark.slow
@pytest.mark.cluster
def test_a_sweep_of_the_old_layout_resumes_and_extends(old_layout, tmp_path):
    """`sweep resume` of the killed sweep: each of its 4 trials once, those that had finished
    as they were, the others completed on their own runs, the parent run FINISHED. `sweep
    extend --samples 3` of the finished one: 2 new trials, the 4 old runs as they were."""
    storage, uri = old_layout / "sweeps", f"sqlite:///{old_layout / 'mlflow.db'}"
    client = MlflowClient(uri)
    killed = runs_of(client, "old-killed")
    finished_before = recorded(client, [r for r in killed if r.info.status == "FINISHED"])
    assert finished_before and len(killed) >= 2  # as the kill left it: 1 or 2 finished, 1 on
    (parent,) = runs_of(client, "old-killed", "sweep")
    assert parent.info.status == "RUNNING"

    proc = rhnsearch_cli(
        "sweep", "resume", "old-killed", "--storage-path", storage, "--json", cwd=tmp_path
    )
    summary = json_summary(proc)
    assert summary["complete"] and summary["trials"] == summary["completed"] == 4, summary
    runs = runs_of(client, "old-killed")
    check_child_runs(client, runs, 4)  # every trial once
    assert all(r.data.tags["status"] == "completed" for r in runs)
    assert all(math.isfinite(r.data.metrics["best_valid_loss"]) for r in runs)
    assert {r.info.run_id for r in killed} <= {r.info.run_id for r in runs}  # the same runs
    now = recorded(client, runs)
    assert {k: now[k] for k in finished_before} == finished_before
    (after,) = runs_of(client, "old-killed", "sweep")
    assert after.info.run_id == parent.info.run_id and after.info.status == "FINISHED"

    old = recorded(client, runs_of(client, "old-finished"))
    assert len(old) == 2 * CELLS
    proc = rhnsearch_cli(
        "sweep",
        "extend",
        "old-finished",
        "--samples",
        "3",
        "--storage-path",
        storage,
        "--json",
        cwd=tmp_path,
    )
    summary = json_summary(proc)
    assert summary["complete"] and summary["trials"] == 3 * CELLS, summary
    runs = runs_of(client, "old-finished")
    check_child_runs(client, runs, 3 * CELLS)
    now = recorded(client, runs)
    assert {k: now[k] for k in old} == old
    (parent,) = runs_of(client, "old-finished", "sweep")
    assert parent.info.status == "FINISHED"
