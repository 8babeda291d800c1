"""Faults done for real, each asserting that nothing is lost: a trial's worker SIGKILLed
mid-epoch, a worker node of a two-node Ray cluster stopped, the MLflow server down for part
of a sweep (or until its end), and a results dir that is read-only, full or not a dir."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from conftest import rhnsearch_cli
from test_sweep import JSB_SPACE, check_child_runs, free_port, two_node_cluster  # noqa: F401

pytestmark = pytest.mark.slow
SMALL = ["--set", "archs=[rhn]", "--set", "scheduler.name=fifo"]


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


# -- a sweep driver running in the background ----------------------------------------------
class Sweep:
    """`rhnsearch sweep run` in its own process group; its Tune results read from disk."""

    def __init__(self, cwd: Path, name: str, data_dir: Path, *args, env=None):
        self.cwd, self.name = cwd, name
        self.out, self.err = open(cwd / f"{name}.out", "w+"), open(cwd / f"{name}.err", "w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rhnsearch.cli", "sweep", "run", str(JSB_SPACE), "--preset",
             "smoke", "--data-dir", str(data_dir), "--name", name, "--json", *map(str, args)],
            cwd=cwd, stdout=self.out, stderr=self.err, env={**os.environ, **(env or {})},
            start_new_session=True)

    def results(self) -> dict[str, list[dict]]:
        """Trial dir -> the results Tune has written for it so far."""
        found = {}
        for path in (self.cwd / "results" / "sweeps" / self.name).glob("*/result.json"):
            rows = []
            for line in path.read_text().splitlines():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:  # a line being written
                    break
            found[path.parent.name] = rows
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
        summary = next((json.loads(line) for line in reversed(out.splitlines())
                        if line.startswith('{"name"')), None)  # Ray may print after it
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


def child_runs(uri: str) -> list:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("jsb_optimization")
    if experiment is None:
        return []
    return client.search_runs([experiment.experiment_id], "tags.kind = 'trial'")


def assert_full_histories(client: MlflowClient, run, epochs: int):
    """Every per-epoch metric of the run has steps 1..epochs, each once."""
    for key in ("train_loss", "valid_loss", "best_valid_loss", "lr", "epoch"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert sorted(steps) == list(range(1, epochs + 1)), (key, steps)


def assert_went_on_from_a_checkpoint(rows: list[dict], epochs: int):
    """Tune's results of a trial that lost its worker once: epochs 1..k in the first worker,
    then k+1..epochs in a second one, from the checkpoint of epoch k. Tune registers a
    checkpoint only after it has logged the epoch's result (a `save` task on the worker
    fetches it), so a worker lost between the two repeats that one epoch, with the same
    numbers: training from a checkpoint is deterministic."""
    pids = [r["pid"] for r in rows]
    split = next(i for i, pid in enumerate(pids) if pid != pids[0])
    first, second = rows[:split], rows[split:]
    assert len({r["pid"] for r in second}) == 1, pids
    assert [r["epoch"] for r in first] == list(range(1, split + 1)), pids
    start = second[0]["epoch"]
    assert start in (split, split + 1), [r["epoch"] for r in rows]
    assert [r["epoch"] for r in second] == list(range(start, epochs + 1))
    if start == split:  # the repeated epoch
        for key in ("train_loss", "valid_loss"):
            assert second[0][key] == first[-1][key], (key, first[-1], second[0])


# -- a trial's worker killed ---------------------------------------------------------------
def test_trial_worker_killed_mid_epoch_resumes_from_its_checkpoint(tmp_path, data_dir,
                                                                   sweeps):
    """SIGKILL the trial's Ray worker mid-epoch: Tune retries it from its last checkpoint on
    a new worker; one MLflow run, every epoch once, the same losses as an unbroken run."""
    from rhnsearch.data import load_dataset
    from rhnsearch.search.trainable import trial_config
    from rhnsearch.train import Trainer
    epochs = 10
    sweep = sweeps(tmp_path, "worker-killed", data_dir, *SMALL, "--set", "depths=[6]",
                   "--set", "samples=1", "--set", f"fixed.epochs={epochs}")
    uri = f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}"

    # Tune's results first: the driver must have made the sqlite store before we read it.
    wait_until(lambda: any(rows and rows[-1]["epoch"] >= 2
                           for rows in sweep.results().values()), "epoch 2 is reported")
    wait_until(lambda: any(r.data.metrics.get("epoch", 0) >= 2 for r in child_runs(uri)),
               "MLflow shows epoch 2")
    (worker,) = [p for p in psutil.Process(sweep.proc.pid).children(recursive=True)
                 if " ".join(p.cmdline()).startswith("ray::ImplicitFunc")]
    kill_all([worker])

    code, summary, err = sweep.wait()
    assert code == 0 and summary and summary["completed"] == 1, err[-3000:]
    assert summary["complete"]
    client = MlflowClient(uri)
    runs = child_runs(uri)
    check_child_runs(client, runs, 1)  # one run, not two
    assert_full_histories(client, runs[0], epochs)
    ((trial_dir, results),) = sweep.results().items()
    pids = [r["pid"] for r in results]
    assert pids[0] == worker.pid and len(set(pids)) == 2, pids  # it went on in a new worker
    assert_went_on_from_a_checkpoint(results, epochs)
    config = json.loads((tmp_path / "results" / "sweeps" / sweep.name / trial_dir /
                         "params.json").read_text())
    unbroken = Trainer(trial_config(config), load_dataset("jsb", data_dir, allow_fetch=False))
    unbroken.fit()
    logged = sorted(client.get_metric_history(runs[0].info.run_id, "valid_loss"),
                    key=lambda m: m.step)
    assert [m.value for m in logged] == [h["valid_loss"] for h in unbroken.history]


def test_resume_after_tune_deleted_the_checkpoint_its_saved_state_names(tmp_path, data_dir,
                                                                        sweeps):
    """Tune deletes a superseded checkpoint before it saves its state naming the new one
    (ray-project/ray#27790): a driver killed in between left a sweep that `sweep resume`
    could not finish (seen in CI). Kill the driver, leave the files as that race does (the
    state's checkpoint gone, a newer one there), resume: the trial goes on from the newer
    checkpoint and its run has every epoch once."""
    import torch

    from rhnsearch.search.sweep import stale_checkpoints
    epochs = 20
    sweep = sweeps(tmp_path, "stale-state", data_dir, *SMALL, "--set", "depths=[1]",
                   "--set", "samples=1", "--set", f"fixed.epochs={epochs}")
    uri = f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}"
    wait_until(lambda: any(r.data.metrics.get("epoch", 0) >= 5 for r in child_runs(uri)),
               "MLflow shows epoch 5")
    sweep.stop()
    (run,) = child_runs(uri)
    logged = int(run.data.metrics["epoch"])
    directory = tmp_path / "results" / "sweeps" / sweep.name
    for path in next(directory.glob("run_trial_*")).glob("checkpoint_*"):
        held = torch.load(path / "trainer.pt", weights_only=True)["epoch"]
        if held != logged:  # leave one, of an epoch the driver logged, as Tune leaves it:
            shutil.rmtree(path)
    (checkpoint,) = next(directory.glob("run_trial_*")).glob("checkpoint_*")
    index = int(checkpoint.name[-6:])  # registered in place of the one the state names
    newer = checkpoint.rename(checkpoint.with_name(f"checkpoint_{index + 1:06d}"))
    ((trial_dir, named),) = stale_checkpoints(directory)
    assert trial_dir == newer.parent and named < newer.name

    proc = rhnsearch_cli("sweep", "resume", sweep.name, "--json", cwd=tmp_path, timeout=400)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["complete"] and summary["completed"] == 1, proc.stderr[-3000:]
    rows = sweep.results()[newer.parent.name]
    resumed = [r["epoch"] for r in rows if r["pid"] != rows[0]["pid"]]
    assert resumed == list(range(logged + 1, epochs + 1))
    client = MlflowClient(uri)
    (run,) = child_runs(uri)
    assert run.data.tags["status"] == "completed"
    assert_full_histories(client, run, epochs)


# -- a worker node stopped -----------------------------------------------------------------
def node_processes(gcs: str, head: bool) -> list[psutil.Process]:
    """One node of the cluster at `gcs`: its raylet with the workers under it, and its
    agents (found by the raylet's node id)."""
    port = gcs.rsplit(":", 1)[1]
    (raylet,) = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"]
                 and p.info["cmdline"][0].endswith("/raylet")
                 and any(a.startswith("--gcs-address=") and a.endswith(f":{port}")
                         for a in p.info["cmdline"])
                 and ("--head" in p.info["cmdline"]) == head]
    node_id = next(a for a in raylet.info["cmdline"] if a.startswith("--node_id="))[10:]
    agents = [p for p in psutil.process_iter(["cmdline"])
              if f"--node-id={node_id}" in (p.info["cmdline"] or [])]
    return [raylet, *raylet.children(recursive=True), *agents]


def test_worker_node_stopped_its_trials_finish_on_the_head(two_node_cluster, tmp_path,
                                                           data_dir, sweeps):
    """Stop the worker node (its raylet, workers and agents) while it runs a trial: the
    trial goes on from its checkpoint on the head and the sweep completes."""
    gcs, _, env = two_node_cluster
    epochs = 8
    sweep = sweeps(tmp_path, "node-lost", data_dir, "--address", gcs, *SMALL, "--set",
                   "depths=[2]", "--set", "samples=3", "--set", f"fixed.epochs={epochs}",
                   env=env)
    on_worker = set()

    def trial_on_worker_node_at_epoch_2():
        on_worker.update(p.pid for p in node_processes(gcs, head=False))
        return any(rows[-1]["epoch"] >= 2 and rows[-1]["pid"] in on_worker
                   for rows in sweep.results().values() if rows)
    wait_until(trial_on_worker_node_at_epoch_2, "a trial on the worker node reached epoch 2")
    victims = node_processes(gcs, head=False)
    kill_all(victims)  # `ray stop` on the worker node
    victims = {p.pid for p in victims}

    code, summary, err = sweep.wait()
    assert code == 0 and summary and summary["completed"] == 3, err[-3000:]
    assert summary["complete"]
    uri = f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}"
    client = MlflowClient(uri)
    runs = child_runs(uri)
    check_child_runs(client, runs, 3)
    for run in runs:
        assert_full_histories(client, run, epochs)
    moved = [rows for rows in sweep.results().values() if rows[0]["pid"] in victims]
    assert moved, "no trial was running on the stopped node"
    for rows in moved:  # went on from its checkpoint, on the head (the only node left)
        assert_went_on_from_a_checkpoint(rows, epochs)
        assert rows[-1]["pid"] not in victims


# -- the MLflow server down ----------------------------------------------------------------
class MlflowServer:
    """A real `mlflow server` on 127.0.0.1 that can be killed and started again on the same
    port and sqlite store (test_sweep's `mlflow_server` fixture runs one for good)."""

    def __init__(self, root: Path):
        self.root, self.port, self.proc = root, free_port(), None
        self.uri = f"http://127.0.0.1:{self.port}"

    def start(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port",
             str(self.port), "--backend-store-uri", f"sqlite:///{self.root / 'server.db'}",
             "--artifacts-destination", str(self.root / "artifacts"), "--workers", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

        def healthy():
            try:
                return urllib.request.urlopen(f"{self.uri}/health", timeout=2).status == 200
            except OSError:
                return False
        wait_until(healthy, "mlflow server answers", timeout=120)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def mlflow_srv(tmp_path):
    """A running MlflowServer, killed at the end."""
    server = MlflowServer(tmp_path)
    server.start()
    yield server
    server.kill()


class Relay:
    """A loopback TCP relay to a server: `cut()` drops every connection and refuses new
    ones, as a network outage does; `restore()` relays again at once (a restarted `mlflow
    server` takes seconds, which a short sweep may not outlast)."""

    def __init__(self, target_port: int):
        self.target, self.port = target_port, free_port()
        self.lock, self.connections, self.listener = threading.Lock(), [], None
        self.restore()

    def restore(self):
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.listener.settimeout(0.2)
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def cut(self):
        self.listener.close()
        with self.lock:
            for conn in self.connections:
                self._close(conn)
            self.connections.clear()

    def _accept(self, listener):
        while listener.fileno() != -1:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.connections += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source, sink):
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        self._close(sink)

    @staticmethod
    def _close(conn):
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        conn.close()


def test_mlflow_down_mid_sweep_records_reach_it_when_back(mlflow_srv, tmp_path, data_dir,
                                                          sweeps):
    """Cut the sweep off the server after the first epoch; while it is cut off a trial ends
    and another starts; restore it: every trial has its one run, full history and status."""
    epochs = 4
    relay = Relay(mlflow_srv.port)
    sweep = sweeps(tmp_path, "mlflow-down", data_dir, "--tracking-uri",
                   f"http://127.0.0.1:{relay.port}", *SMALL, "--set", "depths=[1,2]",
                   "--set", f"fixed.epochs={epochs}")
    wait_until(lambda: any(r.data.metrics.get("epoch", 0) >= 1
                           for r in child_runs(mlflow_srv.uri)), "MLflow shows epoch 1")
    relay.cut()
    before = {trial for trial, rows in sweep.results().items() if rows}

    def trial_ended_and_another_started():
        results = sweep.results()
        ended = any(rows and rows[-1]["status"] != "running" for rows in results.values())
        return ended and any(rows for trial, rows in results.items() if trial not in before)
    wait_until(trial_ended_and_another_started, "a trial ended and another started")
    relay.restore()

    code, summary, err = sweep.wait()
    assert code == 0 and summary and summary["trials"] == 4, err[-3000:]
    assert summary["complete"]
    assert "is not answering" in err and "is back" in err
    client = MlflowClient(mlflow_srv.uri)
    runs = child_runs(mlflow_srv.uri)
    check_child_runs(client, runs, 4)
    for run in runs:
        assert_full_histories(client, run, epochs)
    assert not (tmp_path / "results" / "sweeps" / sweep.name / "mlflow_pending.jsonl").exists()


def test_mlflow_down_to_the_end_then_resume_sends_what_was_kept(mlflow_srv, tmp_path,
                                                                data_dir, sweeps):
    """The server dies for good mid-sweep: the trials still finish; the driver keeps the
    records on disk and ends with one line naming the fix; with the server back, `sweep
    resume` sends them and closes the sweep."""
    epochs = 3
    sweep = sweeps(tmp_path, "mlflow-gone", data_dir, "--tracking-uri", mlflow_srv.uri,
                   *SMALL, "--set", "depths=[1]", "--set", f"fixed.epochs={epochs}")
    wait_until(lambda: any(r.data.metrics.get("epoch", 0) >= 1
                           for r in child_runs(mlflow_srv.uri)), "MLflow shows epoch 1")
    mlflow_srv.kill()

    code, summary, err = sweep.wait()
    assert code == 2 and "Traceback" not in err, err[-3000:]
    pending = tmp_path / "results" / "sweeps" / sweep.name / "mlflow_pending.jsonl"
    assert pending.exists() and f"saved in {pending}" in err
    assert f"rhnsearch sweep resume {sweep.name}" in err.strip().splitlines()[-1]
    assert all(rows[-1]["status"] == "completed" for rows in sweep.results().values())

    mlflow_srv.start()
    proc = rhnsearch_cli("sweep", "resume", sweep.name, "--json", cwd=tmp_path, timeout=300)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["complete"] and summary["completed"] == 2
    client = MlflowClient(mlflow_srv.uri)
    runs = child_runs(mlflow_srv.uri)
    check_child_runs(client, runs, 2)
    for run in runs:
        assert_full_histories(client, run, epochs)
    assert not pending.exists()


def test_driver_killed_while_mlflow_is_down_loses_no_record(mlflow_srv, tmp_path, data_dir,
                                                            sweeps):
    """Kill the server, then the whole driver (its local Ray too) while records wait for the
    server: they are in the journal on disk, and `sweep resume` sends them, once each."""
    epochs = 4
    sweep = sweeps(tmp_path, "driver-lost", data_dir, "--tracking-uri", mlflow_srv.uri,
                   *SMALL, "--set", "depths=[1]", "--set", f"fixed.epochs={epochs}")
    wait_until(lambda: any(r.data.metrics.get("epoch", 0) >= 1
                           for r in child_runs(mlflow_srv.uri)), "MLflow shows epoch 1")
    mlflow_srv.kill()
    journal = tmp_path / "results" / "sweeps" / sweep.name / "mlflow_pending.jsonl"

    def journaled_epochs():
        if not journal.exists():
            return set()
        return {(r["trial_id"], step) for line in journal.read_text().splitlines()
                for r in [json.loads(line)] for key, _, _, step in r["metrics"]
                if key == "epoch"}
    wait_until(lambda: any(step >= 2 for _, step in journaled_epochs()),
               "an epoch >= 2 is journaled")
    sweep.stop()  # SIGKILL to the driver's process group
    kept = journaled_epochs()

    mlflow_srv.start()
    proc = rhnsearch_cli("sweep", "resume", sweep.name, "--json", cwd=tmp_path, timeout=400)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["complete"] and summary["completed"] == 2, proc.stderr[-3000:]
    client = MlflowClient(mlflow_srv.uri)
    runs = child_runs(mlflow_srv.uri)
    check_child_runs(client, runs, 2)
    for run in runs:
        assert_full_histories(client, run, epochs)
    sent = {(r.data.tags["trial_id"], m.step) for r in runs
            for m in client.get_metric_history(r.info.run_id, "epoch")}
    assert kept and kept <= sent
    assert not journal.exists()


# -- the results dir not writable ----------------------------------------------------------
def mount_tmpfs(path: Path, options: str):
    path.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")


@pytest.fixture
def results_dir(tmp_path):
    """tmp_path/results, as the test's case makes it; unmounted afterwards."""
    path = tmp_path / "results"
    yield path
    if path.is_mount():
        subprocess.run(["umount", str(path)], check=True)


def fill(directory: Path):
    """Write zeros into `directory` until its disk is full."""
    with open(directory / "filler", "wb", buffering=0) as out:
        while True:
            try:
                out.write(bytes(4096))
            except OSError:
                return


@pytest.mark.parametrize("case", ["read-only", "full", "a file"])
def test_results_dir_not_writable_is_one_line_before_the_sweep(case, results_dir, tmp_path,
                                                               data_dir):
    if case == "read-only":  # root writes through chmod: a read-only mount stops it
        mount_tmpfs(results_dir, "size=1m,ro")
    elif case == "full":
        mount_tmpfs(results_dir, "size=64k")
        fill(results_dir)
    else:
        results_dir.write_text("not a directory\n")
    before = sorted(tmp_path.rglob("*"))
    proc = rhnsearch_cli("sweep", "run", JSB_SPACE, "--preset", "smoke", "--data-dir",
                         data_dir, cwd=tmp_path, check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert f"results directory {results_dir}" in proc.stderr and "not writable" in proc.stderr
    assert sorted(tmp_path.rglob("*")) == before


# -- a trial ended again by a resumed sweep ------------------------------------------------
def test_resumed_driver_leaves_finished_runs_as_they_were(tmp_path):
    """A trial that finished in MLflow just before the driver died may still be running in
    Tune's saved state, so the resumed sweep completes it again: its run keeps its end time
    and status. A failed run, which the resume retries, is ended again."""
    from ray.tune.experiment import Trial

    from rhnsearch.search.tracking import MLflowTracker
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("resume")
    parent = client.create_run(experiment).info.run_id

    def driver():
        tracker = MLflowTracker(client.tracking_uri, experiment, parent, "s", str(tmp_path))
        tracker.setup()
        return tracker
    done, retried = (Trial("run_trial", config={"cell": {"arch": "rhn", "depth": 1}},
                           trial_id=name, stub=True) for name in ("done", "retried"))
    first = driver()
    for trial, status in ((done, "completed"), (retried, "failed")):
        first.on_trial_result(0, [], trial, {"epoch": 1, "valid_loss": 2.0})
        trial.update_last_result({"epoch": 1, "status": status})
        (first.on_trial_complete if status == "completed" else first.on_trial_error)(
            0, [], trial)
    def trial_runs():
        return {r.data.tags["trial_id"]: r
                for r in client.search_runs([experiment], "tags.kind = 'trial'")}
    runs = trial_runs()
    assert runs["retried"].info.status == "FAILED"

    second = driver()  # the resumed sweep: Tune completes both again
    time.sleep(0.01)
    for trial in (done, retried):
        trial.update_last_result({"epoch": 1, "status": "running"})
        second.on_trial_complete(0, [], trial)
    after = trial_runs()
    assert after["done"].info.end_time == runs["done"].info.end_time
    assert after["done"].data.tags["status"] == "completed"
    assert after["retried"].info.status == "FINISHED"
    assert after["retried"].info.end_time > runs["retried"].info.end_time
