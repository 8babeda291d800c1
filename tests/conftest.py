"""Shared fixtures: the real data in ../shared/data (or $RHNSEARCH_TEST_DATA)."""
import os
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("RHNSEARCH_TEST_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (SHARED_DATA / "jsb_chorales" / "jsb-chorales-quarter.json").exists():
        pytest.fail(f"test data not found in {SHARED_DATA}: set RHNSEARCH_TEST_DATA")
    return SHARED_DATA


@pytest.fixture(scope="session")
def jsb(data_dir):
    from rhnsearch.data import load_dataset
    return load_dataset("jsb", data_dir, allow_fetch=False)


@pytest.fixture(scope="session")
def ptb_sample(data_dir):
    from rhnsearch.data import load_dataset
    return load_dataset("ptb-sample", data_dir, allow_fetch=False)


@contextmanager
def http_file_server(root: Path):
    """A real HTTP server on 127.0.0.1 serving the files under `root`; yields its URL."""
    import functools
    import http.server
    import threading
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def rhnsearch_cli(*args, cwd, timeout=900, check=True, env=None):
    """Run the real `rhnsearch` command line in a subprocess (its whole process group is
    killed if it outlives `timeout`, so no Ray process is left behind)."""
    import signal
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, "-m", "rhnsearch.cli", *map(str, args)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})}, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"rhnsearch {' '.join(map(str, args))} ran over {timeout}s:\n"
                             f"{err[-4000:]}") from None
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check and proc.returncode != 0:
        raise AssertionError(f"rhnsearch {' '.join(map(str, args))} exited "
                             f"{proc.returncode}:\n{err[-4000:]}\nstdout:\n{out[-3000:]}")
    return result


class SmokeSweep:
    """A finished smoke sweep: its working dir, MLflow store URI and JSON summary."""

    def __init__(self, cwd: Path, space: str, name: str, data_dir: Path, *extra):
        import json
        self.cwd, self.name = cwd, name
        self.tracking_uri = f"sqlite:///{cwd / 'results' / 'mlflow.db'}"
        proc = rhnsearch_cli("sweep", "run", ROOT / "spaces" / f"{space}.yaml", "--preset",
                             "smoke", "--data-dir", data_dir, "--name", name, "--json",
                             *extra, cwd=cwd)
        self.stderr = proc.stderr
        self.summary = json.loads(proc.stdout.strip().splitlines()[-1])
        self.experiment = space

    def client(self):
        from mlflow.tracking import MlflowClient
        return MlflowClient(self.tracking_uri)

    def child_runs(self):
        client = self.client()
        exp = client.get_experiment_by_name(self.experiment)
        return client.search_runs([exp.experiment_id], "tags.kind = 'trial'",
                                  max_results=10000)


@pytest.fixture(scope="session")
def sweeps_dir(tmp_path_factory) -> Path:
    """One working dir (with its results/ store) shared by the smoke sweeps of the session."""
    return tmp_path_factory.mktemp("sweeps")


@pytest.fixture(scope="session")
def jsb_smoke(sweeps_dir, data_dir) -> SmokeSweep:
    """The JSB optimization study's smoke preset, run once per session on a local Ray."""
    return SmokeSweep(sweeps_dir, "jsb_optimization", "smoke-jsb", data_dir)


@pytest.fixture(scope="session")
def ptb_budget_smoke(sweeps_dir, data_dir) -> SmokeSweep:
    return SmokeSweep(sweeps_dir, "ptb_budget", "smoke-ptb-budget", data_dir)


@pytest.fixture(scope="session")
def ptb_hsg_smoke(sweeps_dir, data_dir) -> SmokeSweep:
    return SmokeSweep(sweeps_dir, "ptb_hsg", "smoke-ptb-hsg", data_dir)


@pytest.fixture(scope="session")
def jsb_diverging(sweeps_dir, data_dir) -> SmokeSweep:
    """A small JSB sweep with learning rates up to 200 and loose clipping: settings diverge,
    which the swarm plot and the report must show (its own experiment, in the session's
    store)."""
    sweep = SmokeSweep(sweeps_dir, "jsb_optimization", "smoke-jsb-diverging", data_dir,
                       "--experiment", "jsb_diverging", "--set", "archs=[rhn, dtrnn]",
                       "--set", "depths=[1, 6]", "--set", "params.lr={loguniform: [0.05, 200]}",
                       "--set", "params.clip={loguniform: [1000, 10000]}", "--set", "samples=3",
                       "--set", "fixed.epochs=3")
    sweep.experiment = "jsb_diverging"
    return sweep
