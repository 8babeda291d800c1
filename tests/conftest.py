"""Shared fixtures: the real data in ../shared/data (or $RHNSEARCH_TEST_DATA), the smoke
sweeps of the session, and real Ray clusters of `ray start` nodes on loopback; the tiers
(tiers.py) that the fixtures a test uses give it."""

import functools
import http.server
import importlib.util
import io
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import psutil
import pytest

import tiers
from lab_services import mlflow_pg_server, postgres_uri  # noqa: F401 (fixtures of the session)
from ports import free_port

ROOT = Path(__file__).resolve().parents[1]
JSB_SPACE = ROOT / "spaces" / "jsb_optimization.yaml"
SHARED_DATA = Path(os.environ.get("RHNSEARCH_TEST_DATA", ROOT.parent / "shared" / "data"))
SLOW_SECONDS = 30  # a test of the fast tier that runs longer fails: mark it slow

# The tiers each fixture gives the tests that use it, directly or through another fixture.
SWEEP = ("slow", "cluster")
FIXTURE_TIERS = {
    "jsb_smoke": SWEEP,
    "ptb_budget_smoke": SWEEP,
    "ptb_hsg_smoke": SWEEP,
    "jsb_diverging": SWEEP,
    "sweeps": SWEEP,
    "ray_sweep": SWEEP,
    "cluster": ("cluster",),
    "local_ray": ("cluster",),
    "s3_server": ("services",),
    "postgres_uri": ("services",),
    "mlflow_pg_server": ("services",),
    "mlflow_srv": ("services",),
    "browser": ("services",),
    "ui": ("services",),  # test_ui.py's `rhnsearch ui` server
    "slurm": ("services", "cluster", "slow"),
    "requeued_sweep": ("services", "cluster", "slow"),
}
# Session fixtures that mostly wait: each starts at the session's first test when a selected
# test uses it, so that its wait overlaps the tests before that one.
EARLY = ("requeued_sweep",)
# Under pytest-xdist (`-n 2 --dist loadgroup`, the README's test command) the tests that use
# a session fixture too costly to make twice run in one worker: a group per fixture family.
XDIST_GROUPS = {
    "jsb_smoke": "smoke-sweeps",
    "ptb_budget_smoke": "smoke-sweeps",
    "ptb_hsg_smoke": "smoke-sweeps",
    "jsb_diverging": "smoke-sweeps",
    "slurm": "slurm",  # one Slurm of the session's own: its daemons, ports and requeued job
}
IN_XDIST_WORKER = "PYTEST_XDIST_WORKER" in os.environ
XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
RUN = {"fast tier alone": True}  # whether no selected test carries a tier (at collection's end)
CPU_SECONDS = pytest.StashKey[float]()


def pytest_configure(config):
    for name, text in tiers.TIERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    # pytest-xdist's own marker, named here too so that --strict-markers holds without it
    config.addinivalue_line("markers", "xdist_group(name): run in one pytest-xdist worker")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        for name in item.fixturenames:  # the closure: fixtures of fixtures too
            for tier in FIXTURE_TIERS.get(name, ()):
                item.add_marker(tier)
        groups = {XDIST_GROUPS[n] for n in item.fixturenames if n in XDIST_GROUPS}
        if groups:
            item.add_marker(pytest.mark.xdist_group("+".join(sorted(groups))))


@pytest.fixture(autouse=True)
def _tier_guard(request):
    """Holds the running test for `tiers.needs`; an unmarked test that left Ray running in
    this process fails."""
    tiers.RUNNING["item"] = request.node
    yield
    tiers.RUNNING.pop("item", None)
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized() and not request.node.get_closest_marker("cluster"):
        ray.shutdown()
        pytest.fail(f"{request.node.nodeid} started Ray: mark it `cluster`", pytrace=False)


def tiered(item) -> bool:
    return any(item.get_closest_marker(t) for t in tiers.TIERS)


def pytest_collection_finish(session):
    RUN["fast tier alone"] = not any(tiered(item) for item in session.items)


def cpu_seconds() -> float:
    """This process's CPU seconds and its waited-for children's."""
    return sum(
        usage.ru_utime + usage.ru_stime
        for usage in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    start = cpu_seconds()
    try:
        return (yield)
    finally:
        item.stash[CPU_SECONDS] = cpu_seconds() - start


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test of the fast tier that took longer than SLOW_SECONDS fails: mark it `slow`.
    Its wall time when the fast tier runs alone (under xdist, SLOW_SECONDS times the workers:
    each shares the cores with the others); its CPU time, its subprocesses' included, when it
    shares the machine with the other tiers' clusters and servers, which slow its wall time
    by as much as they like. The CPU limit is SLOW_SECONDS times the cores: torch's threads
    spin while they wait for a core (a CLI run of 8 CPU s alone took 31 in a full run)."""
    report = yield
    if call.when != "call" or not report.passed or tiered(item):
        return report
    if RUN["fast tier alone"]:
        spent, limit, unit = call.duration, SLOW_SECONDS * XDIST_WORKERS, "s"
    else:
        spent, limit, unit = item.stash[CPU_SECONDS], SLOW_SECONDS * os.cpu_count(), "CPU s"
    if spent > limit:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {spent:.0f} {unit}, more than the fast "
            f"tier's {limit} {unit}: mark it `slow`"
        )
    return report


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (SHARED_DATA / "jsb_chorales" / "jsb-chorales-quarter.json").exists():
        pytest.fail(f"test data not found in {SHARED_DATA}: set RHNSEARCH_TEST_DATA")
    return SHARED_DATA


@pytest.fixture(scope="session")
def jsb(data_dir):
    from rhnsearch.data import load_dataset

    return load_dataset("jsb", data_dir=data_dir, allow_fetch=False)


@pytest.fixture(scope="session")
def ptb_sample(data_dir):
    from rhnsearch.data import load_dataset

    return load_dataset("ptb-sample", data_dir=data_dir, allow_fetch=False)


@contextmanager
def http_file_server(root: Path):
    """A real HTTP server on 127.0.0.1 serving the files under `root`; yields its URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # no request or error lines on the test's stderr
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(root))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# Commands that run a sweep on Ray, or start a server, unless they refuse their input (exit 2).
STARTS = {
    ("sweep", "run"): SWEEP,
    ("sweep", "resume"): SWEEP,
    ("sweep", "submit"): SWEEP,
    ("ui",): ("services",),
}


def run_in_group(command: list, what: str, *, cwd, env: dict, timeout: float, check: bool):
    """Run COMMAND (named WHAT in errors) in a session of its own, its output captured; its
    whole process group is killed if it outlives TIMEOUT (no Ray or server left behind), and
    with CHECK an exit other than 0 fails the test with the end of its output."""
    proc = subprocess.Popen(
        [str(c) for c in command],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{what} ran over {timeout}s:\n{err[-4000:]}") from None
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{what} exited {proc.returncode}:\n{err[-4000:]}\nstdout:\n{out[-3000:]}"
        )
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def rhnsearch_cli(*args, cwd, timeout=300, check=True, env=None):
    """Run the real `rhnsearch` command line in a subprocess (`run_in_group`). A command that
    started Ray or a server fails a test that lacks the tier (tiers.needs)."""
    words = tuple(map(str, args))
    proc = run_in_group(
        [sys.executable, "-m", "rhnsearch.cli", *words],
        f"rhnsearch {' '.join(words)}",
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
    )
    for start, needed in STARTS.items():
        if words[: len(start)] == start and proc.returncode != 2:
            for tier in needed:
                tiers.needs(tier, f"ran `rhnsearch {' '.join(start)}`")
    if check and proc.returncode != 0:
        raise AssertionError(
            f"rhnsearch {' '.join(words)} exited "
            f"{proc.returncode}:\n{proc.stderr[-4000:]}\nstdout:\n{proc.stdout[-3000:]}"
        )
    return proc


def json_summary(proc) -> dict:
    """The summary a `sweep run/resume --json` printed: stdout holds that one line and nothing
    else (Ray's and Tune's own printing goes to stderr)."""
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, f"stdout is not one JSON line:\n{proc.stdout[-3000:]}"
    return json.loads(lines[0])


def rhnsearch_main(*args, cwd, env=None, check=True):
    """Run the command line's `main` in this process (the same code as `rhnsearch ARGS`,
    without a new interpreter's imports): for commands that start no Ray and set no global
    state (results, analyze, budget, sweep check, --help). Logging goes to the captured
    stderr, as main sets it up in a fresh process."""
    from rhnsearch.cli import main

    out, err, root = io.StringIO(), io.StringIO(), logging.getLogger()
    handlers, level, before = root.handlers[:], root.level, os.getcwd()
    saved = {k: os.environ.get(k) for k in (env or {})}
    root.handlers = []
    os.environ.update(env or {})
    os.chdir(cwd)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse: --help, usage errors
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(before)
        root.handlers, root.level = handlers, level
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    result = subprocess.CompletedProcess(
        ["rhnsearch", *map(str, args)], code, out.getvalue(), err.getvalue()
    )
    if check and code != 0:
        raise AssertionError(
            f"rhnsearch {' '.join(map(str, args))} exited {code}:\n"
            f"{result.stderr[-4000:]}\nstdout:\n{result.stdout[-3000:]}"
        )
    return result


class SmokeSweep:
    """A finished smoke sweep: its working dir, MLflow store URI and JSON summary. SPACE: a
    study of spaces/ (its smoke preset), or a space file of one's own."""

    def __init__(self, cwd: Path, space: str | Path, name: str, data_dir: Path, *extra, env=None):
        self.cwd, self.name, self.data_dir = cwd, name, data_dir
        self.tracking_uri = f"sqlite:///{cwd / 'results' / 'mlflow.db'}"
        where = (
            [space]
            if isinstance(space, Path)
            else [ROOT / "spaces" / f"{space}.yaml", "--preset", "smoke"]
        )
        proc = rhnsearch_cli(
            "sweep",
            "run",
            *where,
            "--data-dir",
            data_dir,
            "--name",
            name,
            "--json",
            *extra,
            cwd=cwd,
            env=env,
        )
        self.stderr = proc.stderr
        self.summary = json_summary(proc)
        self.experiment = Path(space).stem

    def client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(self.tracking_uri)

    def child_runs(self):
        client = self.client()
        exp = client.get_experiment_by_name(self.experiment)
        return client.search_runs([exp.experiment_id], "tags.kind = 'trial'", max_results=10000)


@pytest.fixture(scope="session")
def sweeps_dir(tmp_path_factory) -> Path:
    """One working dir (with its results/ store) shared by the smoke sweeps of the session."""
    return tmp_path_factory.mktemp("sweeps")


@pytest.fixture(scope="session")
def jsb_smoke(sweeps_dir, data_dir) -> SmokeSweep:
    """The JSB optimization study's smoke preset, run once per session on a local Ray; its
    best model is registered as version 1 of `registered`."""
    sweep = SmokeSweep(
        sweeps_dir, "jsb_optimization", "smoke-jsb", data_dir, "--register-model", "jsb-smoke-best"
    )
    sweep.registered = "jsb-smoke-best"
    return sweep


@pytest.fixture(scope="session")
def ptb_budget_smoke(sweeps_dir, data_dir) -> SmokeSweep:
    """The PTB budget study's smoke preset at depths 1, 2 and 10, untied and tied: 6 cells
    (the preset's 20 add nothing the tests check), 3 epochs, not 6 (one trial a cell: no rung
    decides anything, and the tests read the final numbers, not the curve's length)."""
    return SmokeSweep(
        sweeps_dir,
        "ptb_budget",
        "smoke-ptb-budget",
        data_dir,
        "--set",
        PTB_SMOKE_DEPTHS,
        "--set",
        "fixed.epochs=3",
    )


PTB_SMOKE_DEPTHS = "depths=[1, 2, 10]"
HSG_SMOKE_DEPTHS = [10, 20]


@pytest.fixture(scope="session")
def ptb_hsg_smoke(sweeps_dir, data_dir) -> SmokeSweep:
    """The HSG study's smoke preset at depths 10 and 20, with and without HSG: 4 cells, 2
    epochs, not 4 (one trial a cell, as the budget sweep's)."""
    return SmokeSweep(
        sweeps_dir,
        "ptb_hsg",
        "smoke-ptb-hsg",
        data_dir,
        "--set",
        f"depths={HSG_SMOKE_DEPTHS}",
        "--set",
        "fixed.epochs=2",
    )


# A cell of one's own, as a researcher writes it: Chen's MinimalRNN in the cell interface.
MINIMAL_RNN = '''
import torch
from torch import nn


class MinimalRNNCell(nn.Module):
    """u = sigm(U s + V z), s' = u s + (1 - u) z, with z = tanh(W x) projected ahead."""

    def __init__(self, input_size, width, depth):
        super().__init__()
        self.input_size, self.width, self.depth = input_size, width, depth
        self.encode = nn.Linear(input_size, width)
        self.gate = nn.Linear(2 * width, width)

    def project(self, x):
        return torch.tanh(self.encode(x))

    def forward(self, z, s, mask=None):
        read = s if mask is None else s * mask
        u = torch.sigmoid(self.gate(torch.cat([read, z], -1)))
        return u * s + (1 - u) * z, {"update": u}
'''
OWN_CELL = "labcells:MinimalRNNCell"


@pytest.fixture(scope="session")
def own_cell_dir(tmp_path_factory) -> Path:
    """A folder outside the project holding labcells.py, a cell of one's own."""
    folder = tmp_path_factory.mktemp("lab")
    (folder / "labcells.py").write_text(MINIMAL_RNN)
    return folder


@pytest.fixture(scope="session")
def jsb_diverging(sweeps_dir, data_dir, own_cell_dir) -> SmokeSweep:
    """A lab's own study, from a space file outside the project that names no report kind
    (so `cells`): on JSB, learning rates up to 200 and loose clipping, so that settings
    diverge, which the swarm plot and the report must show; beside RHN and DT-RNN a cell of
    one's own (OWN_CELL), from a folder on the driver's PYTHONPATH that Ray ships to its
    workers. Its own experiment, jsb_diverging, in the session's store."""
    space = own_cell_dir / "lab_study.yaml"
    space.write_text(LAB_STUDY)
    sweep = SmokeSweep(
        sweeps_dir,
        space,
        "smoke-jsb-diverging",
        data_dir,
        "--experiment",
        "jsb_diverging",
        env={"PYTHONPATH": str(own_cell_dir)},
    )
    sweep.experiment = "jsb_diverging"
    return sweep


LAB_STUDY = f"""# A study of one's own: our cell beside RHN and DT-RNN on JSB, at equal budgets.
description: our MinimalRNN beside RHN and DT-RNN, with settings that diverge
dataset: jsb
archs: [rhn, dtrnn, "{OWN_CELL}"]
depths: [1, 6]
budget: {{1: 6k, 6: 16k}}
samples: 3
fixed: {{epochs: 3, batch_size: 32, optimizer: sgd}}
params:
  lr: {{loguniform: [0.05, 200]}}
  momentum: {{uniform: [0.0, 0.95]}}
  init_scale: {{loguniform: [0.01, 0.3]}}
  t_bias: {{uniform: [-5.0, -1.0]}}
  clip: {{loguniform: [1000, 10000]}}
  seed: {{randint: [0, 1000000]}}
scheduler: {{name: cell_asha, grace_period: 1, reduction_factor: 3}}
resources: {{cpu: 1, gpu: 0}}
"""


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3-compatible server (moto) on 127.0.0.1 for the session. Its test credentials
    are in this process's environment (pyarrow and boto3 read them, and the Ray nodes the
    tests start inherit them); a storage URI names its endpoint (S3Server.uri)."""
    from s3_server import S3Server

    tiers.needs("services", "starts the S3 server")
    if importlib.util.find_spec("moto") is None:
        tiers.missing("moto's S3 server", "pip install -e '.[test]'")
    server = S3Server(tmp_path_factory.mktemp("s3"), free_port())
    saved = {
        k: os.environ.get(k)
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
    }
    os.environ.update({k: server.env[k] for k in saved})
    yield server
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def slurm():
    """A single-node Slurm of the session's own (slurm_cluster.py; root, Debian's daemons)."""
    from slurm_cluster import Slurm

    tiers.needs("services", "starts Slurm")
    root = Path(tempfile.mkdtemp(prefix="slurm", dir="/tmp"))  # short: munge's socket
    cluster = Slurm(root)
    yield cluster
    cluster.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def requeued_sweep(slurm, tmp_path_factory, data_dir):
    """test_slurm's long job, submitted and driven beside the other tests (RequeuedSweep)."""
    from test_slurm import RequeuedSweep

    job = RequeuedSweep(slurm, tmp_path_factory.mktemp("requeued"), data_dir)
    yield job
    job.stop()


@pytest.fixture(scope="session", autouse=True)
def _early_starts(request):
    """Start the EARLY fixtures the selected tests use, at the session's first test. Not in
    an xdist worker, which does not know which tests it will be sent: there they start with
    the first test that uses them, and the other worker goes on meanwhile."""
    if IN_XDIST_WORKER:
        return
    used = {name for item in request.session.items for name in item.fixturenames}
    for name in EARLY:
        if name in used:
            request.getfixturevalue(name)


@pytest.fixture(scope="session")
def browser() -> str:
    """Debian's headless Chromium (a test that needs one fails in CI where it is missing)."""
    return tiers.chromium()


def stop_ray_under(temp_dir: str):
    """Stop only the Ray processes of one node (those whose command line names its temp
    dir): `ray stop` would also stop every other Ray on the machine."""
    procs = [
        p
        for p in psutil.process_iter(["cmdline"])
        if any(temp_dir in arg for arg in (p.info["cmdline"] or []))
    ]
    kill_all(procs)  # one may end (and its pid be reused) between the listing and the kill


class RayCluster:
    """Nodes started with `ray start` on loopback, with the cluster's own auth token and each
    node its own temp dir and ports (as on real machines: nodes sharing a temp dir would
    garbage-collect each other's runtime_env packages). A worker may run in its own mount
    namespace with an empty tmpfs over each of `hide`: it cannot see the driver's disk."""

    def __init__(self):
        self.gcs_port = self.dashboard_port = None  # chosen as the head starts
        self.env = {"RAY_ADDRESS": "", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex}
        self.temp_dirs = []

    def _node_args(self, cpus: int, gpus: int) -> list[str]:
        # Short paths (/tmp/rt...): Ray's unix socket paths must fit in 107 bytes.
        self.temp_dirs.append(f"/tmp/rt{uuid.uuid4().hex[:8]}")
        return [
            "--node-ip-address",
            "127.0.0.1",
            "--num-cpus",
            str(cpus),
            "--num-gpus",
            str(gpus),
            "--disable-usage-stats",
            "--temp-dir",
            self.temp_dirs[-1],
        ] + [
            arg
            for flag in (
                "--dashboard-agent-listen-port",
                "--dashboard-agent-grpc-port",
                "--metrics-export-port",
                "--runtime-env-agent-port",
                "--node-manager-port",
                "--object-manager-port",
            )
            for arg in (flag, str(free_port()))
        ]

    def _start(self, command, hide=()):
        """Run `ray start` (COMMAND() builds its arguments afresh: new ports, a new temp dir).
        On a loaded machine a node can miss the 30 s that `ray start` gives its raylet to
        register (Ray's own constant: "timed out during startup"); its processes are then
        stopped and it is started once more, as an operator would."""
        tiers.needs("cluster", "starts Ray nodes")
        for _attempt in (1, 2):
            cmd = command()
            if hide:  # mount the tmpfs, then start the node inside that namespace
                mounts = " && ".join(f"mount -t tmpfs tmpfs {p}" for p in hide)
                cmd = [
                    "unshare",
                    "-m",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    f"{mounts} && exec {subprocess.list2cmdline(cmd)}",
                ]
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=180, env={**os.environ, **self.env}
            )
            if proc.returncode == 0 or "timed out during startup" not in proc.stderr:
                break
            stop_ray_under(self.temp_dirs[-1])
        assert proc.returncode == 0, proc.stderr[-2000:]

    def head(self, cpus: int = 1, gpus: int = 0):
        def command():
            self.gcs_port, self.dashboard_port = free_port(), free_port()
            return [
                "ray",
                "start",
                "--head",
                "--port",
                str(self.gcs_port),
                "--dashboard-host",
                "127.0.0.1",
                "--dashboard-port",
                str(self.dashboard_port),
                "--include-dashboard",
                "true",
                "--ray-client-server-port",
                str(free_port()),
                *self._node_args(cpus, gpus),
            ]

        self._start(command)
        return self

    @property
    def gcs(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def worker(self, cpus: int = 1, hide=()):
        self._start(
            lambda: ["ray", "start", "--address", self.gcs, *self._node_args(cpus, 0)], hide
        )
        return self

    def stop(self):
        for temp_dir in self.temp_dirs:
            stop_ray_under(temp_dir)
            shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture
def cluster():
    """A Ray cluster of `ray start` nodes on loopback (start them with .head() and .worker()),
    stopped after the test."""
    nodes = RayCluster()
    yield nodes
    nodes.stop()


# -- a sweep driver running in the background ----------------------------------------------
def kill_all(procs):
    """SIGKILL these processes and wait until they are gone."""
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)


def wait_until(predicate, what: str, timeout: float = 240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting until {what}")


class Sweep:
    """`rhnsearch sweep run` of the JSB smoke preset (or the `rhnsearch sweep` COMMAND given,
    e.g. a confirmation round) in its own process group; its Tune results read from its
    storage (default: results/sweeps in its working dir). Tune's file loggers are on
    (TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=0; a sweep turns them off by default) and Tune syncs
    the storage at every step (TUNE_GLOBAL_CHECKPOINT_S=0; by default every 10 s or more), so
    that a test sees every result as Tune logged it, with the pid of the worker that reported
    it, as it comes."""

    def __init__(
        self, cwd: Path, name: str, data_dir: Path, *args, storage=None, env=None, command=None
    ):
        tiers.needs("cluster", "runs a sweep")
        self.cwd, self.name = cwd, name
        self.storage = str(storage or cwd / "results" / "sweeps")
        self.out, self.err = open(cwd / f"{name}.out", "w+"), open(cwd / f"{name}.err", "w+")
        where = ["--storage-path", str(storage)] if storage else []
        run = ("run", JSB_SPACE, "--preset", "smoke", "--data-dir", data_dir, "--name", name)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rhnsearch.cli",
                "sweep",
                *map(str, command or run),
                "--json",
                *where,
                *map(str, args),
            ],
            cwd=cwd,
            stdout=self.out,
            stderr=self.err,
            env={
                **os.environ,
                "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "0",
                "TUNE_GLOBAL_CHECKPOINT_S": "0",
                **(env or {}),
            },
            start_new_session=True,
        )

    def results(self) -> dict[str, list[dict]]:
        """Trial dir -> the results Tune has written for it so far."""
        from rhnsearch.files import storage

        found = {}
        for trial in storage.listdir(storage.join(self.storage, self.name)):
            text = storage.read_text(storage.join(self.storage, self.name, trial, "result.json"))
            rows = []
            for line in (text or "").splitlines():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:  # a line being written
                    break
            if text is not None:
                found[trial] = rows
        return found

    def wait(self, timeout: float = 600) -> tuple[int, dict | None, str]:
        """(exit code, JSON summary or None, stderr) once the driver has ended."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.out.seek(0), self.err.seek(0)
        out, err = self.out.read(), self.err.read()
        summary = next(
            (json.loads(line) for line in reversed(out.splitlines()) if line.startswith('{"name"')),
            None,
        )  # Ray may print after it
        return self.proc.returncode, summary, err

    def stop(self):
        """SIGKILL the driver and every process under it (its local Ray's workers too, some
        of which leave its process group), and wait until they are gone."""
        if self.proc.poll() is None:
            tree = psutil.Process(self.proc.pid).children(recursive=True)
            os.killpg(self.proc.pid, signal.SIGKILL)
            kill_all(tree)
            self.proc.wait()


@pytest.fixture
def sweeps():
    started = []

    def start(*args, **kwargs):
        started.append(Sweep(*args, **kwargs))
        return started[-1]

    yield start
    for sweep in started:
        sweep.stop()
