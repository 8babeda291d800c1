"""A Ray cluster with token authentication (a head node of `ray start`, as `rhnsearch
cluster` starts them): every command that joins it, or sends it a job, without its token or
with another is refused in one line, exit 2, before it writes anything: no storage folder,
no MLflow store, no change to the sweep it would resume or extend."""

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from test_old_layout import unpacked

from conftest import JSB_SPACE, RayCluster, rhnsearch_cli

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def head():
    """One head-only cluster for every case of the module."""
    nodes = RayCluster()
    try:
        yield nodes.head()
    finally:
        nodes.stop()


@pytest.fixture(scope="module")
def old_sweeps(data_dir):
    """The old layout's sweeps (test_old_layout.py), to resume and extend."""
    with unpacked("dd9c428", data_dir) as root:
        yield root


def tree(root) -> dict:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_client_without_the_clusters_token_is_refused_in_one_line(
    head, old_sweeps, data_dir, tmp_path
):
    """`sweep run --address`, `resume`, `extend` and `submit`, each without a token and with a
    wrong one. (`ray.init` alone retries a refused token for 20 s; rhnsearch asks the GCS once
    first.) The 8 cases run at once."""
    old = ["--storage-path", old_sweeps / "sweeps"]
    commands = {
        "run": ["run", JSB_SPACE, "--preset", "smoke", "--address", head.gcs],
        "submit": ["submit", JSB_SPACE, "--preset", "smoke", "--address", head.dashboard],
        "resume": ["resume", "old-killed", *old, "--address", head.gcs],
        "extend": ["extend", "old-finished", "--samples", "3", *old, "--address", head.gcs],
    }
    tokens = {
        "none": {"RAY_ADDRESS": ""},  # the cluster's token is in head.env only
        "wrong": {**head.env, "RAY_AUTH_TOKEN": "0" * 32},
    }
    before = tree(old_sweeps)

    def refuse(command: str, token: str):
        where = tmp_path / f"{command}-{token}"
        cwd, storage, store = where / "cwd", where / "storage", where / "mlflow.db"
        cwd.mkdir(parents=True)
        args = commands[command]
        if command in ("run", "submit"):
            uri = f"sqlite:///{store}" if command == "run" else "http://127.0.0.1:9"
            args += ["--data-dir", data_dir, "--tracking-uri", uri, "--storage-path", storage]
            args += ["--name", "tokens"]
        proc = rhnsearch_cli("sweep", *args, cwd=cwd, check=False, env=tokens[token], timeout=240)
        return proc, cwd, storage, store

    cases = [(c, t) for c in commands for t in tokens]
    with ThreadPoolExecutor(len(cases)) as pool:
        done = dict(zip(cases, pool.map(lambda case: refuse(*case), cases)))
    for (command, token), (proc, cwd, storage, store) in done.items():
        case = f"sweep {command}, token {token}: {proc.stderr[-2000:]}"
        assert proc.returncode == 2, case
        assert "refused this client's token" in proc.stderr.strip().splitlines()[-1], case
        assert "Traceback" not in proc.stderr, case
        assert not storage.exists() and os.listdir(cwd) == [], case
        assert proc.stderr.count("\n") == 1 and not store.exists(), case
    assert tree(old_sweeps) == before  # resume and extend changed nothing
