"""`rhnsearch ui` on the JSB smoke sweep's store, loaded in headless Chromium: the experiment,
its sweep, the sweep's nested trial runs and its plots are on the pages a user opens.
Screenshots are kept in $RHNSEARCH_TEST_ARTIFACTS (default results/test-artifacts/). The same
server checks the export's HTTP path."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pandas as pd
import psutil
import pytest

import tiers
from conftest import ROOT, rhnsearch_cli
from ports import free_port

ARTIFACTS = Path(os.environ.get("RHNSEARCH_TEST_ARTIFACTS", ROOT / "results" / "test-artifacts"))


def wait_for_health(url: str, proc, timeout: float = 240):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        assert proc.poll() is None, f"rhnsearch ui exited: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, f"the MLflow UI did not answer in {timeout} s"
        time.sleep(1)


def start_ui(port: int, tracking_uri: str, cwd: Path) -> subprocess.Popen:
    """`rhnsearch ui` on 127.0.0.1:PORT serving TRACKING_URI, in its own process group."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rhnsearch.cli",
            "ui",
            "--port",
            str(port),
            "--tracking-uri",
            tracking_uri,
        ],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def listening(port: int) -> list[str]:
    """The local addresses of the sockets listening on `port`."""
    return [
        c.laddr.ip
        for c in psutil.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    ]


@pytest.fixture(scope="module")
def ui(jsb_smoke):
    """`rhnsearch ui` on a free loopback port, serving the smoke sweeps' store (a server: the
    `services` tier, conftest.FIXTURE_TIERS)."""
    tiers.needs("services", "starts the MLflow UI server")
    port = free_port()
    proc = start_ui(port, jsb_smoke.tracking_uri, jsb_smoke.cwd)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, proc)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the ui command and the mlflow server it runs
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def page_text(browser: str, url: str, screenshot: str, *expected: str) -> str:
    """The rendered text of URL in headless Chromium (the MLflow UI is a React app: the DOM is
    dumped after 15 s of virtual time); a screenshot is kept. Retried while text is missing."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for _ in range(3):
        with tempfile.TemporaryDirectory() as profile:
            proc = subprocess.run(
                [
                    browser,
                    *tiers.HEADLESS_CHROMIUM,
                    "--disable-quic",
                    f"--user-data-dir={profile}",
                    "--window-size=1600,1000",
                    "--virtual-time-budget=15000",
                    f"--screenshot={ARTIFACTS / screenshot}",
                    "--dump-dom",
                    url,
                ],
                capture_output=True,
                text=True,
                timeout=180,
            )
        dom = re.sub(r"<script.*?</script>|<style.*?</style>", " ", proc.stdout, flags=re.S)
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))
        if all(e in text for e in expected):
            break
    return text


def test_ui_shows_the_experiment_its_sweep_and_nested_runs(ui, jsb_smoke, browser):
    client = jsb_smoke.client()
    experiment = client.get_experiment_by_name("jsb_optimization")
    (parent,) = client.search_runs([experiment.experiment_id], "tags.kind = 'sweep'")
    children = jsb_smoke.child_runs()
    names = [r.info.run_name for r in children]
    base = f"{ui}/#/experiments/{experiment.experiment_id}"

    # The runs table, sorted by a metric so that nested runs are listed, not folded.
    order = quote("metrics.`best_valid_loss`")
    text = page_text(
        browser,
        f"{base}/runs?orderByKey={order}&orderByAsc=true",
        "mlflow_ui_runs.png",
        "jsb_optimization",
        *names,
    )
    assert "jsb_optimization" in text and "smoke-jsb" in text
    assert [n for n in names if n not in text] == []
    assert f"{len(children) + 1} matching runs" in text
    assert (ARTIFACTS / "mlflow_ui_runs.png").stat().st_size > 10_000

    # A trial's page names its parent sweep run: the runs are nested.
    child = children[0]
    text = page_text(
        browser, f"{base}/runs/{child.info.run_id}", "mlflow_ui_trial.png", "Parent run"
    )
    assert child.info.run_name in text
    assert re.search(r"Parent run\s+smoke-jsb", text), text[:2000]

    # The sweep's plots are artifacts of its parent run.
    text = page_text(
        browser,
        f"{base}/runs/{parent.info.run_id}/artifacts/plots/swarm.png",
        "mlflow_ui_sweep_plots.png",
        "swarm.png",
    )
    assert "plots" in text and "swarm.png" in text and "curves.png" in text


def test_export_through_the_server_matches_the_sqlite_store(ui, jsb_smoke, tmp_path):
    """Over HTTP, histories come from get_metric_history per run: the same rows as the one
    SELECT on the sqlite file."""
    for extra in ([], ["--history"]):
        frames = []
        for uri, name in ((ui, "http"), (jsb_smoke.tracking_uri, "sqlite")):
            out = tmp_path / f"{name}{len(extra)}.parquet"
            rhnsearch_cli(
                "results",
                "export",
                "--experiment",
                "jsb_optimization",
                "--tracking-uri",
                uri,
                "--out",
                out,
                *extra,
                cwd=tmp_path,
            )
            frames.append(pd.read_parquet(out))
        pd.testing.assert_frame_equal(*frames)
    assert len(frames[0]) > jsb_smoke.summary["trials"]


@pytest.mark.services  # starts `rhnsearch ui`, an MLflow server
def test_ui_listens_on_loopback_only_and_a_signal_takes_its_server_down(tmp_path):
    """`rhnsearch ui` without --host: the server listens on 127.0.0.1 only and the machine's
    other addresses are refused; MLflow's job runner (its huey consumers) is not started.
    `kill PID` (a process manager) or Ctrl-C on `rhnsearch ui` alone, not on its process
    group: the MLflow server and every process it started end, and the port is free. (The
    two UIs, one for each signal, run side by side.)"""
    others = [
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]
    uis = {}
    try:
        for signum in (signal.SIGTERM, signal.SIGINT):
            port = free_port()
            uis[signum] = (
                port,
                start_ui(port, f"sqlite:///{tmp_path / f'mlflow{int(signum)}.db'}", tmp_path),
            )
        for signum, (port, proc) in uis.items():
            wait_for_health(f"http://127.0.0.1:{port}", proc)
            assert set(listening(port)) == {"127.0.0.1"}
            for address in others:  # the machine's other interfaces are refused
                with socket.socket() as s:
                    s.settimeout(5)
                    assert s.connect_ex((address, port)) != 0, address
            tree = psutil.Process(proc.pid).children(recursive=True)
            commands = [" ".join(p.cmdline()) for p in tree]
            assert any("uvicorn" in c for c in commands)
            assert not any("huey" in c or "_job_runner" in c for c in commands), commands
            proc.send_signal(signum)
            assert proc.wait(timeout=60) == 128 + signum, signum.name
            gone, alive = psutil.wait_procs(tree, timeout=10)
            assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == [], signum.name
            with socket.socket() as s:  # a new server can listen on the port (as servers do,
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT)
                s.bind(("127.0.0.1", port))
                s.listen()
    finally:  # a failed check leaves a UI up: its server runs in a session of its own
        for _, proc in uis.values():
            if proc.poll() is None:
                for child in psutil.Process(proc.pid).children(recursive=True):
                    child.kill()
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_ui_server_gives_the_runs_datasets_and_the_models_tab(ui, jsb_smoke):
    """What the runs table's Dataset column and the experiment's Models tab read, asked of
    the UI's own server: every run's dataset input, and the sweep's best model."""
    experiment = jsb_smoke.client().get_experiment_by_name("jsb_optimization").experiment_id

    def post(path: str, body: dict) -> dict:
        request = urllib.request.Request(
            f"{ui}/api/2.0/mlflow/{path}",
            method="POST",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.loads(answer.read())

    runs = post("runs/search", {"experiment_ids": [experiment], "max_results": 1000})["runs"]
    assert len(runs) == jsb_smoke.summary["trials"] + 1
    names = {d["dataset"]["name"] for r in runs for d in r["inputs"]["dataset_inputs"]}
    assert names == {"jsb"} and all(r["inputs"]["dataset_inputs"] for r in runs)
    models = post("logged-models/search", {"experiment_ids": [experiment]})["models"]
    best = jsb_smoke.summary["best"]["run_id"]
    assert "model" in [m["info"]["name"] for m in models if m["info"]["source_run_id"] == best]


def test_ui_turns_mlflows_job_runner_off_unless_the_environment_asks_for_it():
    from rhnsearch.cli.ui import JOB_RUNNER, server_env

    assert server_env({"PATH": "/bin"}) == {JOB_RUNNER: "false", "PATH": "/bin"}
    assert server_env({JOB_RUNNER: "true"})[JOB_RUNNER] == "true"
