"""Faults done for real, each asserting that nothing is lost: a trial's worker SIGKILLed
mid-epoch, a worker node of a two-node Ray cluster stopped, the MLflow server down for part
of a sweep (or until its end), and a results dir that is read-only, full or not a dir."""

import itertools
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient
from test_report import Page
from test_sweep import check_child_runs

from rhnsearch.cli.ui import server_env
from rhnsearch.files.layout import STATE_FILE
from rhnsearch.search.space import Cell
from rhnsearch.sweep.lifecycle import mark_resumed
from rhnsearch.sweep.record import read_record

from conftest import (
    JSB_SPACE,
    ROOT,
    free_port,
    json_summary,
    kill_all,
    rhnsearch_cli,
    rhnsearch_main,
    wait_until,
)

SMALL = ["--set", "archs=[rhn]", "--set", "scheduler.name=fifo"]


def child_runs(uri: str, sweep: str | None = None) -> list:
    """The trial runs in the store (of SWEEP only, given one: the module's MLflow server
    holds the sweeps of several tests)."""
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("jsb_optimization")
    if experiment is None:
        return []
    only = f" and tags.sweep = '{sweep}'" if sweep else ""
    return client.search_runs([experiment.experiment_id], "tags.kind = 'trial'" + only)


def driver_lines(stderr: str) -> str:
    """The driver's own stderr, without the lines Ray forwards from trial workers (a worker
    Ray stops at the end may print its SIGTERM as a traceback: Ray's shutdown, not ours)."""
    return "\n".join(
        line for line in stderr.splitlines() if not re.match(r"(\x1b\[\d+m)?\(\w+ pid=\d+", line)
    )


def assert_full_histories(client: MlflowClient, run, epochs: int):
    """Every per-epoch metric of the run has steps 1..epochs, each once."""
    for key in ("train_loss", "valid_loss", "best_valid_loss", "lr", "epoch"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert sorted(steps) == list(range(1, epochs + 1)), (key, steps)


def assert_went_on_from_a_checkpoint(rows: list[dict], epochs: int):
    """Tune's results of a trial that lost its worker (or its driver) once or more: each new
    worker goes on from a checkpoint (not from epoch 1), its epochs in order, repeating an
    epoch with the same numbers: training from a checkpoint is deterministic. (Tune's JSON
    logger, on for these tests, keeps its file in the storage on Tune's own period and takes
    that copy back when it restores a trial: the epochs a worker reported after the last copy
    may be missing, so a new worker can start past the last epoch listed.)"""
    segments = [list(group) for _, group in itertools.groupby(rows, key=lambda r: r["pid"])]
    assert len(segments) >= 2 and len({r["pid"] for r in rows}) == len(segments), [
        r["pid"] for r in rows
    ]
    seen = {}
    for segment in segments:
        epochs_here = [r["epoch"] for r in segment]
        start = epochs_here[0]
        assert epochs_here == list(range(start, start + len(segment))), epochs_here
        assert start == 1 if not seen else start > 1, (start, max(seen))
        for r in segment:
            if r["epoch"] in seen:  # a repeated epoch
                for key in ("train_loss", "valid_loss"):
                    assert r[key] == seen[r["epoch"]][key], (key, r["epoch"])
            seen[r["epoch"]] = r
    assert rows[-1]["epoch"] == epochs


def command_line(process: psutil.Process) -> str:
    """The process's command line ("" for one that is exiting: a zombie has none)."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


# -- a trial's worker killed, then its driver -----------------------------------------------
def test_worker_then_driver_killed_trial_goes_on_from_its_checkpoints(tmp_path, data_dir, sweeps):
    """One trial, two faults. SIGKILL the trial's Ray worker mid-epoch: Tune retries it from
    its last checkpoint on a new worker. Then the race of ray-project/ray#27790: Tune deletes
    a superseded checkpoint before it saves its state naming the new one, and a driver killed
    in between left a sweep that `sweep resume` could not finish (seen in CI). Kill the
    driver, leave the files as that race does (the state's checkpoint gone, a newer one
    there, and a file a kill cut short), resume: the trial goes on from the newer checkpoint
    and the cut file is gone. One MLflow run, every epoch once, the same losses as an unbroken
    run. (Tune saves its state at every step here, see Sweep, so that the state names the
    checkpoint just before the newest, as the race leaves it; on its own period the state may
    name none yet.)"""
    import torch

    from rhnsearch.data import load_dataset
    from rhnsearch.search.trial import TrialSpec
    from rhnsearch.sweep.checkpoints import saved_state, stale_checkpoints
    from rhnsearch.train import Trainer

    epochs = 14
    sweep = sweeps(
        tmp_path,
        "worker-killed",
        data_dir,
        *SMALL,
        "--set",
        "depths=[6]",  # epochs long enough for a kill to land mid-epoch
        "--set",
        "samples=1",
        "--set",
        f"fixed.epochs={epochs}",
    )
    uri = f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}"

    # Tune's results first: the driver must have made the sqlite store before we read it.
    wait_until(
        lambda: any(rows and rows[-1]["epoch"] >= 2 for rows in sweep.results().values()),
        "epoch 2 is reported",
    )
    wait_until(
        lambda: any(r.data.metrics.get("epoch", 0) >= 2 for r in child_runs(uri)),
        "MLflow shows epoch 2",
    )
    (worker,) = [
        p
        for p in psutil.Process(sweep.proc.pid).children(recursive=True)
        if command_line(p).startswith("ray::ImplicitFunc")
    ]
    kill_all([worker])

    def went_on_in_a_new_worker_past(epoch: int) -> bool:
        return any(
            rows[-1]["pid"] != worker.pid and rows[-1]["epoch"] >= epoch
            for rows in sweep.results().values()
            if rows
        )

    wait_until(lambda: went_on_in_a_new_worker_past(6), "the new worker reported epoch 6")
    sweep.stop()
    ((trial_dir, before),) = sweep.results().items()
    workers = {r["pid"] for r in before}
    assert before[0]["pid"] == worker.pid and len(workers) == 2
    directory = tmp_path / "results" / "sweeps" / sweep.name
    held = {}  # epoch of each complete checkpoint (one the kill cut short has no file yet)
    for path in (directory / trial_dir).glob("checkpoint_*"):
        if (path / "trainer.pt").exists():
            held[path] = torch.load(path / "trainer.pt", weights_only=True)["epoch"]
        else:
            shutil.rmtree(path)
    checkpoint = min(held, key=held.get)  # the one Tune registered; leave it alone, as the
    for path in set(held) - {checkpoint}:  # race leaves it
        shutil.rmtree(path)
    logged = held[checkpoint]
    index = int(checkpoint.name[-6:])  # registered in place of the one the state names
    newer = checkpoint.rename(checkpoint.with_name(f"checkpoint_{index + 1:06d}"))
    ((stale_dir, named),) = stale_checkpoints(str(directory), saved_state(str(directory)))
    assert stale_dir == str(newer.parent) and named < newer.name
    leftover = directory / ".experiment_state-x.json.0123abcd.tmp"  # as a kill mid-file leaves
    leftover.write_text('{"trial_')

    proc = rhnsearch_cli(
        "sweep",
        "resume",
        sweep.name,
        "--json",
        cwd=tmp_path,
        timeout=400,
        env={"TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "0"},
    )  # its results too
    summary = json_summary(proc)
    assert summary["complete"] and summary["completed"] == 1, proc.stderr[-3000:]
    assert not leftover.exists()
    rows = sweep.results()[trial_dir]
    resumed = [r["epoch"] for r in rows if r["pid"] not in workers]
    assert resumed == list(range(logged + 1, epochs + 1))
    assert_went_on_from_a_checkpoint(rows, epochs)  # on each of its three workers
    client = MlflowClient(uri)
    runs = child_runs(uri)
    check_child_runs(client, runs, 1)  # one run, not two
    assert runs[0].data.tags["status"] == "completed"
    assert_full_histories(client, runs[0], epochs)
    config = json.loads((directory / trial_dir / "params.json").read_text())
    cells = read_record(str(directory.parent), sweep.name).cells
    unbroken = Trainer(
        TrialSpec.from_tune(config, cells).config,
        load_dataset("jsb", data_dir=data_dir, allow_fetch=False),
    )
    unbroken.fit()
    history = sorted(
        client.get_metric_history(runs[0].info.run_id, "valid_loss"), key=lambda m: m.step
    )
    assert [m.value for m in history] == [h["valid_loss"] for h in unbroken.history]


def test_pruning_keeps_the_registered_checkpoint_and_any_newer_one(tmp_path):
    """A trial's first checkpoint seen by a (resumed) driver clears the older ones left in its
    folder, never the one registered nor a newer one its worker has written since."""
    from rhnsearch.files.storage import split
    from rhnsearch.sweep.checkpoints import prune

    for index in range(1, 5):
        (tmp_path / f"checkpoint_{index:06d}").mkdir()
        (tmp_path / f"checkpoint_{index:06d}" / "trainer.pt").write_bytes(b"x")
    prune(split(str(tmp_path))[0], str(tmp_path), None, keep="checkpoint_000003")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_000003", "checkpoint_000004"]
    prune(split(str(tmp_path))[0], str(tmp_path), ["checkpoint_000003"], keep="checkpoint_000004")
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint_000004"]


def test_only_the_trials_a_resume_runs_again_have_their_checkpoint_names_repaired(tmp_path):
    """In Tune's saved state (as Ray 2.60 lays it out), a finished trial (TERMINATED) that
    names a checkpoint no longer in its folder is left alone: a resume does not run it again
    (and looking in every finished trial's folder, 5,000 of them, would cost the resume). A
    running and an errored trial naming one are repaired from the next checkpoint."""
    from rhnsearch.sweep.checkpoints import repair_checkpoint_names, saved_state

    def trial(status: str) -> list[str]:
        manager = {"_type": "CLOUDPICKLE_FALLBACK", "value": b"checkpoint_000001".hex()}
        info = {"trial_id": status, "status": status, "relative_logdir": f"run_trial_{status}"}
        return [json.dumps(info), json.dumps({"checkpoint_manager": manager})]

    statuses = ["TERMINATED", "RUNNING", "ERROR"]
    state = {"trial_data": [trial(s) for s in statuses], "stats": {"start_time": 0.0}}
    (tmp_path / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps(state))
    for status in statuses:
        newer = tmp_path / f"run_trial_{status}" / "checkpoint_000002"
        newer.mkdir(parents=True)
        with zipfile.ZipFile(newer / "trainer.pt", "w") as z:  # as torch.save writes it
            z.writestr("trainer/data.pkl", b"x")
    repair_checkpoint_names(str(tmp_path), saved_state(str(tmp_path)))
    assert {
        s: sorted(p.name for p in (tmp_path / f"run_trial_{s}").iterdir()) for s in statuses
    } == {
        "TERMINATED": ["checkpoint_000002"],
        "RUNNING": ["checkpoint_000001"],
        "ERROR": ["checkpoint_000001"],
    }


@pytest.mark.parametrize(
    "state",
    ['{"trials": []}', '{"trial_data": [["{}", "{}"]]}', '{"trial_data": [["not json", {}]]}'],
)
def test_a_saved_state_laid_out_otherwise_is_one_warning(state, tmp_path, caplog):
    """A Tune release whose saved state is laid out otherwise: the repair says so in one
    warning line and leaves the sweep's files as they were."""
    from rhnsearch.sweep.checkpoints import repair_checkpoint_names, saved_state

    (tmp_path / "experiment_state-2026-01-01_00-00-00.json").write_text(state)
    (tmp_path / "run_trial_0" / "checkpoint_000001").mkdir(parents=True)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    repair_checkpoint_names(str(tmp_path), saved_state(str(tmp_path)))
    (record,) = [r for r in caplog.records if r.name.startswith("rhnsearch.")]
    assert record.levelname == "WARNING" and "\n" not in record.getMessage()
    assert "not laid out as this version of rhnsearch expects" in record.getMessage()
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("state", ["read", "renamed", "unreadable"])
def test_runs_are_deleted_only_on_the_strength_of_a_state_read(state, tmp_path, caplog):
    """A sweep's trial run that Tune's saved state does not list is deleted (a killed driver
    had started it before Tune saved it; the resume ran its setting again), but only where
    that state was read: a state renamed (as a Ray release might) or unreadable deletes
    nothing, and says so in one warning line."""
    from rhnsearch.files.layout import SweepPaths
    from rhnsearch.sweep.close import drop_lost_runs
    from rhnsearch.sweep.record import ParentRun

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("drop")
    parent = client.create_run(experiment).info.run_id
    for trial in ("saved", "unsaved"):
        client.create_run(
            experiment, tags={"mlflow.parentRunId": parent, "trial_id": trial, "kind": "trial"}
        )
    folder = tmp_path / "sweep"
    folder.mkdir()
    listed = json.dumps({"trial_data": [[json.dumps({"trial_id": "saved"}), "{}"]]})
    name, text = {
        "read": ("experiment_state-2026-11-25_06-00-00.json", listed),
        "renamed": ("tune_experiment_state-2026-11-25_06-00-00.json", listed),
        "unreadable": ("experiment_state-2026-11-25_06-00-00.json", '{"trial_data": [['),
    }[state]
    (folder / name).write_text(text)
    paths = SweepPaths(str(tmp_path), "sweep")
    left = drop_lost_runs(client, ParentRun(client.tracking_uri, experiment, parent, paths))
    kept = {
        r.data.tags["trial_id"] for r in client.search_runs([experiment], "tags.kind = 'trial'")
    }
    assert kept == ({"saved"} if state == "read" else {"saved", "unsaved"})
    assert {run.tags["trial_id"] for run in left} == kept
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("rhnsearch.")]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert (
        "deleted 1 MLflow run" if state == "read" else "every MLflow run of the sweep is kept"
    ) in warnings[0]


def test_tune_writes_the_storage_in_whole_files(tmp_path):
    """Tune copies its state and the checkpoints into the storage file by file. Through the
    sweep's filesystem a file appears under its name only once it is whole: a writer killed
    mid-file (a driver killed mid-copy: an empty searcher state, seen in a test run) leaves no
    file cut short, and a copy as Tune makes it gives the same tree. A storage given as a
    file:// URI is written the same way."""
    import pyarrow.fs as pafs

    from rhnsearch.files.layout import sweep_storage
    from rhnsearch.files.storage import split

    storage = tmp_path / "storage"
    storage.mkdir()
    assert sweep_storage(f"file://{storage}/", None) == str(storage)
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import os; from rhnsearch.files.storage import split; "
                f"s = split('{storage}')[0].open_output_stream('{storage}/state.json'); "
                "s.write(b'x' * 5000); s.flush(); os._exit(9)"
            ),
        ],
        timeout=120,
    )
    assert killed.returncode == 9
    (left,) = [p.name for p in storage.iterdir()]  # no state.json: only the hidden temporary
    assert left.startswith(".state.json.") and left.endswith(".tmp"), left
    staging = tmp_path / "staging"
    (staging / "checkpoint_000001").mkdir(parents=True)
    (staging / "experiment_state.json").write_text('{"trial_data": []}')
    (staging / "checkpoint_000001" / "trainer.pt").write_bytes(os.urandom(300_000))
    pafs.copy_files(
        str(staging), str(storage / "run"), destination_filesystem=split(str(storage))[0]
    )
    copied = {
        p.relative_to(storage / "run"): p.read_bytes()
        for p in (storage / "run").rglob("*")
        if p.is_file()
    }
    assert copied == {
        p.relative_to(staging): p.read_bytes() for p in staging.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize("where", ["directory", "bucket"])
def test_an_experiment_state_uploaded_half_written_keeps_the_stored_one(
    where, tmp_path, s3_server, jsb_smoke
):
    """Tune rewrites its experiment state in place while its upload of the last one may still
    be reading it (seen in CI: an empty state in the storage, then a resume refused). Copied
    as Tune copies it, an empty or half-written state (a real sweep's, cut anywhere), or a
    whole one followed by the next one's tail, leaves the stored one as it was; the next
    whole one replaces it; any other file is stored as it comes."""
    import pyarrow.fs as pafs

    from rhnsearch.compat.ray import newest_experiment_state
    from rhnsearch.files import storage

    root = str(tmp_path / "storage") if where == "directory" else s3_server.uri(s3_server.bucket())
    filesystem, path = storage.split(root)
    filesystem.create_dir(path)
    staging = tmp_path / "staging"
    staging.mkdir()
    state = staging / "experiment_state-2026-11-25_06-00-00.json"

    def upload(text: str) -> str | None:
        state.write_text(text)
        (staging / "progress.csv").write_text(text)
        pafs.copy_files(str(staging), path, destination_filesystem=filesystem)
        assert storage.read_text(storage.join(root, "progress.csv")) == text
        return storage.read_text(storage.join(root, state.name))

    sweep = jsb_smoke.cwd / "results" / "sweeps" / jsb_smoke.name
    newest = newest_experiment_state([p.name for p in sweep.iterdir()])
    whole = (sweep / newest).read_text()  # as Tune wrote it
    assert upload(whole) == whole
    assert upload("") == whole
    for cut in (len(whole) // 2, whole.index('"stats"'), len(whole) - 1):
        assert upload(whole[:cut]) == whole, whole[cut - 40 : cut]
    first_trial = json.dumps(json.loads(whole)["trial_data"][0])
    longer = whole.replace('"trial_data": [', f'"trial_data": [{first_trial}, ', 1)
    assert upload(whole + longer[len(whole) :]) == whole  # read on across a rewrite (seen in CI)
    newer = whole.replace('"start_time": ', '"start_time": 1')
    assert newer != whole and upload(newer) == newer


def test_a_saved_state_cut_short_is_refused_in_one_line(jsb_smoke, tmp_path):
    """A sweep whose saved searcher state is cut short (written by an older rhnsearch, or
    not through the sweep's filesystem): `sweep resume` refuses it in one line, exit 2,
    before Ray starts, and changes no file (Tune would start the experiment again)."""
    storage = tmp_path / "storage"
    shutil.copytree(jsb_smoke.cwd / "results" / "sweeps" / jsb_smoke.name, storage / jsb_smoke.name)
    (state,) = (storage / jsb_smoke.name).glob("searcher-state-*.pkl")
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    before = {p: p.read_bytes() for p in storage.rglob("*") if p.is_file()}
    proc = rhnsearch_main(
        "sweep",
        "resume",
        jsb_smoke.name,
        "--storage-path",
        storage,
        "--address",
        "127.0.0.1:1",  # unreachable: a regression cannot start the sweep again
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"saved state {state.name}" in proc.stderr and "cannot be resumed" in proc.stderr
    assert {p: p.read_bytes() for p in storage.rglob("*") if p.is_file()} == before


# -- a worker node stopped -----------------------------------------------------------------
def raylet(gcs: str, head: bool) -> psutil.Process:
    port = gcs.rsplit(":", 1)[1]
    (found,) = [
        p
        for p in psutil.process_iter(["cmdline"])
        if p.info["cmdline"]
        and p.info["cmdline"][0].endswith("/raylet")
        and any(
            a.startswith("--gcs-address=") and a.endswith(f":{port}") for a in p.info["cmdline"]
        )
        and ("--head" in p.info["cmdline"]) == head
    ]
    return found


def node_id(gcs: str, head: bool) -> str:
    return next(a for a in raylet(gcs, head).info["cmdline"] if a.startswith("--node_id="))[10:]


def node_processes(gcs: str, head: bool) -> list[psutil.Process]:
    """One node of the cluster at `gcs`: its raylet with the workers under it, and its
    agents (found by the raylet's node id)."""
    node, node_name = raylet(gcs, head), node_id(gcs, head)
    agents = [
        p
        for p in psutil.process_iter(["cmdline"])
        if f"--node-id={node_name}" in (p.info["cmdline"] or [])
    ]
    return [node, *node.children(recursive=True), *agents]


def test_nodes_sharing_no_disk_keep_the_sweep_in_a_bucket(
    tmp_path, data_dir, sweeps, s3_server, cluster
):
    """A worker node that sees no directory of the test (its own mount namespace, an empty
    tmpfs over the test's whole tmp dir: the driver's working dir and its results/); only a
    bucket in common. Without --storage-path the sweep is refused; on the bucket, the trials
    checkpoint into it and no trial file lands on a local disk. Stopping the worker node
    moves its trial to the head, from its checkpoint in the bucket; killing the driver and
    `sweep resume --storage-path s3://...` completes the sweep, with every epoch of every trial
    in MLflow once and the best model kept."""
    driver, epochs = tmp_path / "driver", 12
    bucket = s3_server.bucket()
    storage = s3_server.uri(bucket)
    driver.mkdir()
    cluster.head(cpus=1).worker(cpus=1, hide=[tmp_path])
    refused = rhnsearch_cli(
        "sweep",
        "run",
        JSB_SPACE,
        "--preset",
        "smoke",
        "--address",
        cluster.gcs,
        "--data-dir",
        data_dir,
        cwd=driver,
        check=False,
        env=cluster.env,
    )
    assert refused.returncode == 2 and "pass --storage-path" in refused.stderr
    assert refused.stderr.count("\n") == 1
    sweep = sweeps(
        driver,
        "split",
        data_dir,
        "--address",
        cluster.gcs,
        *SMALL,
        "--set",
        "depths=[2]",
        "--set",
        "samples=4",
        "--set",
        f"fixed.epochs={epochs}",
        storage=storage,
        env=cluster.env,
    )
    on_worker = set()

    def trial_on_worker_node_at_epoch_2():
        on_worker.update(p.pid for p in node_processes(cluster.gcs, head=False))
        return any(
            rows[-1]["epoch"] >= 2 and rows[-1]["pid"] in on_worker
            for rows in sweep.results().values()
            if rows
        )

    wait_until(trial_on_worker_node_at_epoch_2, "a trial on the worker reached epoch 2")
    head = node_id(cluster.gcs, head=True)
    victims = node_processes(cluster.gcs, head=False)
    kill_all(victims)  # `ray stop` on the worker node
    victims = {p.pid for p in victims}

    def moved_trial_went_on():
        return any(
            rows[0]["pid"] in victims and rows[-1]["pid"] not in victims
            for rows in sweep.results().values()
            if rows
        )

    wait_until(moved_trial_went_on, "the worker's trial went on on the head")
    sweep.stop()
    results = sweep.results()
    assert not all(rows and rows[-1]["status"] != "running" for rows in results.values()), (
        "the sweep ended before the kill"
    )
    proc = rhnsearch_cli(
        "sweep",
        "resume",
        "split",
        "--address",
        cluster.gcs,
        "--storage-path",
        storage,
        "--json",
        cwd=driver,
        timeout=400,
        env={**cluster.env, "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "0"},
    )
    local = [
        p
        for d in (driver, *map(Path, cluster.temp_dirs))
        for p in d.rglob("*")
        if p.name == "trainer.pt" or p.name.startswith("checkpoint_")
    ]
    assert not local, local  # (Tune's JSON logger, on for this test, stages its files)
    summary = json_summary(proc)
    assert summary["complete"] and summary["completed"] == 4, proc.stderr[-3000:]
    uri = f"sqlite:///{driver / 'results' / 'mlflow.db'}"
    client = MlflowClient(uri)
    runs = child_runs(uri)
    check_child_runs(client, runs, 4)
    for run in runs:
        assert_full_histories(client, run, epochs)
    moved = [rows for rows in sweep.results().values() if rows[0]["pid"] in victims]
    assert moved, "no trial was running on the stopped node"
    for rows in moved:
        assert_went_on_from_a_checkpoint(rows, epochs)
    by_trial = {r.data.tags["trial_id"]: r for r in runs}
    for rows in moved:
        assert by_trial[rows[0]["trial_id"]].data.tags["node_id"] == head
    keys = s3_server.keys(bucket, "sweeps/split/")
    checkpoints = {k.split("/")[2] for k in keys if k.endswith("/trainer.pt")}
    assert len(checkpoints) == 4, keys  # each trial's newest checkpoint, in the bucket
    assert not (driver / "results" / "sweeps" / "split" / "mlflow_pending.jsonl").exists()
    parent = client.get_run(runs[0].data.tags["mlflow.parentRunId"])
    best = parent.data.tags["best_run_id"]
    (model,) = client.search_logged_models(
        [parent.info.experiment_id], filter_string=f"source_run_id = '{best}'"
    )
    assert model.name == "model"
    assert_device_hours_add_up(client, parent.info.run_id, runs, tmp_path / "report")


def assert_device_hours_add_up(client: MlflowClient, parent_id: str, runs, where: Path):
    """Device-hours across a stopped worker and a resumed driver: each trial held at least
    the seconds of its epochs, the parent run's totals (and per cell) are the sums over its
    trials, and its report's row says the same."""
    parent = client.get_run(parent_id)
    for run in runs:
        m = run.data.metrics
        epochs = client.get_metric_history(run.info.run_id, "epoch_seconds")
        assert epochs and m["held_seconds"] >= sum(h.value for h in epochs), run.info.run_id
        assert m["cpu_seconds"] == m["held_seconds"] and m.get("gpu_seconds", 0) == 0
    for unit in ("cpu", "gpu"):
        total = sum(r.data.metrics.get(f"{unit}_seconds", 0) for r in runs) / 3600
        assert parent.data.metrics[f"{unit}_hours"] == pytest.approx(total, rel=1e-12), unit
    for cell in {r.data.params["cell"] for r in runs}:
        spent = [r.data.metrics["cpu_seconds"] for r in runs if r.data.params["cell"] == cell]
        assert parent.data.metrics[f"cpu_hours/{cell}"] == pytest.approx(sum(spent) / 3600)
    page = Page(
        Path(client.download_artifacts(parent_id, "report/report.html", str(where))).read_text()
    )
    facts = {r["field"]: r["value"] for r in page.table_rows("header-facts")}
    assert facts["CPU-hours spent"].split()[0] == f"{parent.data.metrics['cpu_hours']:.3f}"


# -- the MLflow server down ----------------------------------------------------------------
class MlflowServer:
    """A real `mlflow server` on 127.0.0.1 that can be killed and started again on the same
    port and sqlite store."""

    def __init__(self, root: Path):
        self.root, self.port, self.proc = root, free_port(), None
        self.uri = f"http://127.0.0.1:{self.port}"

    def start(self):
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--backend-store-uri",
                f"sqlite:///{self.root / 'server.db'}",
                "--artifacts-destination",
                str(self.root / "artifacts"),
                "--workers",
                "1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=server_env(os.environ),  # MLflow's job runner off, as `rhnsearch ui` has it
        )

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

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture(scope="module")
def _mlflow_server(tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    yield server
    server.kill()


@pytest.fixture
def mlflow_srv(_mlflow_server):
    """The module's MlflowServer, running (started again where a test before left it
    killed): one server for the module's tests, each of them reading its own sweep's runs."""
    if not _mlflow_server.running():
        _mlflow_server.start()
    return _mlflow_server


class Relay:
    """A loopback TCP relay to a server: `cut()` drops every connection and refuses new
    ones, as a network outage does; `restore()` relays again at once (a restarted `mlflow
    server` takes seconds, which a short sweep may not outlast). `hold()` makes it go silent:
    connections are accepted and what they send is kept; `release()` forwards what it held
    and relays again."""

    def __init__(self, target_port: int):
        self.target, self.port = target_port, free_port()
        self.lock, self.connections, self.listener = threading.Lock(), [], None
        self.flowing = threading.Event()
        self.flowing.set()
        self.restore()

    def hold(self):
        self.flowing.clear()

    def release(self):
        self.flowing.set()

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
                self.flowing.wait()
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


def test_mlflow_down_to_the_end_then_resume_elsewhere_sends_what_was_kept(
    mlflow_srv, tmp_path, data_dir, sweeps, s3_server
):
    """The server dies for good mid-sweep on a bucket: the trials still finish; the driver
    keeps the records on its disk and a copy in the bucket, and ends with one line naming the
    fix; with the server back, `sweep resume` run from another directory (another machine's
    disk) sends them from the bucket and closes the sweep, and the copy goes."""
    epochs = 3
    bucket = s3_server.bucket()
    storage = s3_server.uri(bucket)
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    sweep = sweeps(
        first,
        "mlflow-gone",
        data_dir,
        "--tracking-uri",
        mlflow_srv.uri,
        *SMALL,
        "--set",
        "depths=[1]",
        "--set",
        f"fixed.epochs={epochs}",
        storage=storage,
        env={"RHNSEARCH_MLFLOW_WAIT": "2"},  # not 30 s: gone for good
    )
    wait_until(
        lambda: any(
            r.data.metrics.get("epoch", 0) >= 1 for r in child_runs(mlflow_srv.uri, sweep.name)
        ),
        "MLflow shows epoch 1",
    )
    mlflow_srv.kill()

    code, summary, err = sweep.wait()
    assert code == 2 and "Traceback" not in driver_lines(err), err[-3000:]
    key = "sweeps/mlflow-gone/mlflow_pending.jsonl"
    assert key in s3_server.keys(bucket)
    assert f"saved in s3://{bucket}/{key}?" in err
    assert f"rhnsearch sweep resume {sweep.name}" in err.strip().splitlines()[-1]
    assert all(rows[-1]["status"] == "completed" for rows in sweep.results().values())

    mlflow_srv.start()
    proc = rhnsearch_cli(
        "sweep", "resume", sweep.name, "--storage-path", storage, "--json", cwd=second, timeout=300
    )
    summary = json_summary(proc)
    assert summary["complete"] and summary["completed"] == 2, proc.stderr[-3000:]
    client = MlflowClient(mlflow_srv.uri)
    runs = child_runs(mlflow_srv.uri, sweep.name)
    check_child_runs(client, runs, 2)
    for run in runs:
        assert_full_histories(client, run, epochs)
    assert key not in s3_server.keys(bucket)


def test_driver_killed_while_mlflow_is_down_loses_no_record(mlflow_srv, tmp_path, data_dir, sweeps):
    """Kill the server, then the whole driver (its local Ray too) while records wait for the
    server: they are in the journal on disk, and `sweep resume` sends them, once each."""
    epochs = 4
    sweep = sweeps(
        tmp_path,
        "driver-lost",
        data_dir,
        "--tracking-uri",
        mlflow_srv.uri,
        *SMALL,
        "--set",
        "depths=[1]",
        "--set",
        f"fixed.epochs={epochs}",
    )
    wait_until(
        lambda: any(
            r.data.metrics.get("epoch", 0) >= 1 for r in child_runs(mlflow_srv.uri, sweep.name)
        ),
        "MLflow shows epoch 1",
    )
    mlflow_srv.kill()
    journal = tmp_path / "results" / "sweeps" / sweep.name / "mlflow_pending.jsonl"

    def journaled_epochs():
        if not journal.exists():
            return set()
        return {
            (r["trial_id"], step)
            for line in journal.read_text().splitlines()
            for r in [json.loads(line)]
            for key, _, _, step in r["metrics"]
            if key == "epoch"
        }

    wait_until(
        lambda: any(step >= 2 for _, step in journaled_epochs()), "an epoch >= 2 is journaled"
    )
    sweep.stop()  # SIGKILL to the driver's process group
    kept = journaled_epochs()

    mlflow_srv.start()
    proc = rhnsearch_cli("sweep", "resume", sweep.name, "--json", cwd=tmp_path, timeout=400)
    summary = json_summary(proc)
    assert summary["complete"] and summary["completed"] == 2, proc.stderr[-3000:]
    client = MlflowClient(mlflow_srv.uri)
    runs = child_runs(mlflow_srv.uri, sweep.name)
    check_child_runs(client, runs, 2)
    for run in runs:
        assert_full_histories(client, run, epochs)
    sent = {
        (r.data.tags["trial_id"], m.step)
        for r in runs
        for m in client.get_metric_history(r.info.run_id, "epoch")
    }
    assert kept and kept <= sent
    assert not journal.exists()
    # MLflow's client printed no links as the resume ended each run on the server (nor read
    # each run back for them: uris.server_settings); what it prints goes to the driver.log
    log = (journal.parent / "driver.log").read_text()
    assert "View run" not in log + proc.stdout + proc.stderr


def test_a_resumed_tag_the_server_drops_is_one_warning_and_the_resume_goes_on(
    tmp_path, monkeypatch, caplog
):
    """`sweep resume` tags the parent run `resumed`; where the server is gone between the
    store check and the tag (here: nothing listens), one warning line names the sweep and
    the resume goes on. With the store there, the tag is set."""
    (tmp_path / "old").mkdir()
    shutil.copy(ROOT / "tests" / "data" / "sweep_state_dd9c428.json", tmp_path / "old" / STATE_FILE)
    record = read_record(str(tmp_path), "old")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    gone = replace(record, tracking_uri=f"http://127.0.0.1:{free_port()}")
    with caplog.at_level(logging.WARNING, logger="rhnsearch"):
        mark_resumed(gone)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("sweep old: its parent run is not tagged resumed: ")
    assert "\n" not in warning

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(store)
    parent = client.create_run(client.create_experiment("resumed")).info.run_id
    mark_resumed(replace(record, tracking_uri=store, parent_run_id=parent))
    assert client.get_run(parent).data.tags["resumed"].startswith(time.strftime("%Y-%m-%d"))


def test_a_silent_then_cut_off_server_stalls_nothing_and_loses_nothing(
    mlflow_srv, tmp_path, data_dir, sweeps
):
    """The tracking server goes silent mid-sweep (connections accepted, nothing answered)
    for 12 s, then answers what it held: the trials keep training and reporting to Tune
    while it is silent. Then the sweep is cut off the server (every connection dropped, new
    ones refused); while it is cut off a trial ends and another starts; it is restored. Every
    trial has its one run, every epoch once and its status, and the sweep closes."""
    epochs = 9
    relay = Relay(mlflow_srv.port)
    sweep = sweeps(
        tmp_path,
        "silent",
        data_dir,
        "--tracking-uri",
        f"http://127.0.0.1:{relay.port}",
        "--set",
        "archs=[rhn, dtrnn]",
        "--set",
        "scheduler.name=fifo",  # every trial its 9 epochs: the sweep outlasts both faults
    )  # 16 trials
    wait_until(lambda: child_runs(mlflow_srv.uri, sweep.name), "the sweep's first run")

    def results() -> int:
        return sum(len(rows) for rows in sweep.results().values())

    relay.hold()
    before = results()
    time.sleep(12)
    during = results() - before
    assert sweep.proc.poll() is None, "the sweep ended while the server was silent"
    relay.release()
    assert during >= 10, (before, during)  # unstalled, 2 CPUs log about 6 a second here

    relay.cut()
    cut = sweep.results()
    started = {trial for trial, rows in cut.items() if rows}
    ended = {trial for trial, rows in cut.items() if rows and rows[-1]["status"] != "running"}

    def trial_ended_and_another_started():
        now = sweep.results()
        return any(
            rows and rows[-1]["status"] != "running" and trial not in ended
            for trial, rows in now.items()
        ) and any(rows for trial, rows in now.items() if trial not in started)

    wait_until(trial_ended_and_another_started, "a trial ended and another started")
    assert sweep.proc.poll() is None, "the sweep ended while it was cut off"
    relay.restore()

    code, summary, err = sweep.wait()
    assert code == 0 and summary and summary["complete"] and summary["trials"] == 16, err[-3000:]
    assert "is not answering" in err and "is back" in err
    client = MlflowClient(mlflow_srv.uri)
    experiment = client.get_experiment_by_name("jsb_optimization").experiment_id
    (parent,) = client.search_runs([experiment], "tags.kind = 'sweep' and tags.sweep = 'silent'")
    assert parent.info.status == "FINISHED"
    runs = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    check_child_runs(client, runs, 16)  # one run per trial
    for run in runs:
        assert_full_histories(client, run, epochs)
    assert not (tmp_path / "results" / "sweeps" / sweep.name / "mlflow_pending.jsonl").exists()


@pytest.mark.slow
def test_trials_on_fake_gpus_are_placed_spent_and_refused_without_cuda(tmp_path, data_dir, cluster):
    """A node started with `--num-gpus 2` on this CPU-only machine: trials asking for 0.25 GPU
    may share them, four to a GPU at most (at most 8 at once), and each run records the GPU Ray
    gave it and the GPU-seconds it held (its wall time times 0.25), the parent run their totals
    per cell and in all, and `sweep status` them beside the plan's. Without CUDA in torch a
    trial fails with one line that says so, and the sweep exits 1; with
    RHNSEARCH_ALLOW_CPU_FALLBACK=1 they train on the CPU and the sweep exits 0."""
    args = [
        *("--set", "resources={cpu: 1, gpu: 0.25}", "--set", "archs=[rhn]", "--set"),
        *("depths=[1, 2]", "--set", "scheduler.name=fifo", "--set", "fixed.epochs=2"),
    ]
    space = [JSB_SPACE, "--preset", "smoke", "--data-dir", data_dir, *args]
    args = ["sweep", "run", *space, "--storage-path", tmp_path / "storage", "--json"]
    cluster.head(cpus=8, gpus=2)
    refused = rhnsearch_cli(
        *args,
        "--set",
        "samples=1",
        "--set",
        "depths=[1]",
        "--address",
        cluster.gcs,
        "--name",
        "no-cuda",
        cwd=tmp_path,
        check=False,
        env=cluster.env,
    )
    plan = tmp_path / "plan.json"  # planned GPU-hours, timed on this CPU
    plan.write_text(
        rhnsearch_main(
            "sweep",
            "plan",
            *space,
            "--gpus",
            "2",
            "--set",
            "samples=4",
            "--json",
            cwd=tmp_path,
        ).stdout
    )
    fallback = rhnsearch_cli(
        *args,
        "--set",
        "samples=4",
        "--address",
        cluster.gcs,
        "--name",
        "cpu-fallback",
        "--plan",
        plan,
        cwd=tmp_path,
        env={**cluster.env, "RHNSEARCH_ALLOW_CPU_FALLBACK": "1"},
    )
    summary = json_summary(refused)
    assert refused.returncode == 1 and summary["failed"] == 1, refused.stderr[-3000:]
    uri = f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("jsb_optimization").experiment_id
    for run in client.search_runs([experiment], "tags.sweep = 'no-cuda' and tags.kind = 'trial'"):
        assert run.data.tags["status"] == "failed" and run.info.status == "FAILED"
        error = run.data.tags["error"]
        assert error.startswith("RuntimeError: Ray gave this trial GPU") and "\n" not in error
        assert "sees no CUDA device" in error and "RHNSEARCH_ALLOW_CPU_FALLBACK" in error
    summary = json_summary(fallback)
    assert fallback.returncode == 0 and summary["completed"] == 8
    runs = client.search_runs([experiment], "tags.sweep = 'cpu-fallback' and tags.kind = 'trial'")
    assert {r.data.tags["gpu_ids"] for r in runs} <= {"0", "1"}
    assert {r.data.tags["device"] for r in runs} == {"cpu"}
    # when each trial held its share of a GPU, by the driver's clock: from Ray starting it
    # (its run made) to its end
    spans = [(r.info.start_time, r.info.end_time, r.data.tags["gpu_ids"]) for r in runs]
    moments = sorted(t for start, end, _ in spans for t in (start, end))
    at_once = [[gpu for start, end, gpu in spans if start <= t <= end] for t in moments]
    # (how many overlap here depends on how fast two cores start their workers, which take
    # turns at their imports: cluster/worker_start.py; Tune may even run these short trials
    # one after another on one actor, as a fresh-clone CI run did at stop 76; Ray need not
    # give a trial the second GPU until the first holds four, so that at most 4 may run on one)
    assert max(len(running) for running in at_once) <= 8
    assert max(max(running.count("0"), running.count("1")) for running in at_once) <= 4
    assert all({"0", "1"} <= set(running) for running in at_once if len(running) > 4)

    # GPU-hours as spent: each trial its wall time times its quarter GPU; the sweep the sums
    for run in runs:
        m = run.data.metrics
        assert (
            m["gpu_seconds"] == m["held_seconds"] * 0.25 and m["cpu_seconds"] == m["held_seconds"]
        )
        assert m["held_seconds"] >= sum(  # its wall time holds its epochs
            h.value for h in client.get_metric_history(run.info.run_id, "epoch_seconds")
        )
    (parent,) = client.search_runs(
        [experiment], "tags.sweep = 'cpu-fallback' and tags.kind = 'sweep'"
    )
    cells = {r.data.params["cell"] for r in runs}
    per_cell = {
        c: sum(r.data.metrics["gpu_seconds"] for r in runs if r.data.params["cell"] == c) / 3600
        for c in cells
    }
    assert len(cells) == 2 and parent.data.metrics["gpu_hours"] == pytest.approx(
        sum(per_cell.values()), rel=1e-12
    )
    for cell, hours in per_cell.items():
        assert parent.data.metrics[f"gpu_hours/{cell}"] == pytest.approx(hours, rel=1e-12)
    planned = json.loads(plan.read_text())
    status = json.loads(
        rhnsearch_main(
            "sweep",
            "status",
            "cpu-fallback",
            "--storage-path",
            tmp_path / "storage",
            "--json",
            cwd=tmp_path,
        ).stdout
    )
    assert status["unit"] == "gpu_hours" and status["statuses"] == {"completed": 8}
    for row in status["cells"]:
        assert row["spent"] == pytest.approx(per_cell[row["cell"]], rel=1e-12)
        (timed,) = [c for c in planned["cells"] if c["cell"] == row["cell"]]
        assert row["planned"] == pytest.approx(timed["seconds"] * 0.25 / 3600, rel=1e-9)
    assert parent.data.metrics["planned_gpu_hours"] == pytest.approx(status["planned"])
    table = rhnsearch_main(
        "sweep", "status", "cpu-fallback", "--storage-path", tmp_path / "storage", cwd=tmp_path
    ).stdout
    print(table)  # the plan-vs-spent table, for the record
    assert "planned GPU-hours" in table and "spent GPU-hours" in table


# -- the results dir not writable ----------------------------------------------------------
def mount_tmpfs(path: Path, options: str):
    path.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
    )
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
def test_results_dir_not_writable_is_one_line_before_the_sweep(
    case, results_dir, tmp_path, data_dir
):
    if case == "read-only":  # root writes through chmod: a read-only mount stops it
        mount_tmpfs(results_dir, "size=1m,ro")
    elif case == "full":
        mount_tmpfs(results_dir, "size=64k")
        fill(results_dir)
    else:
        results_dir.write_text("not a directory\n")
    before = sorted(tmp_path.rglob("*"))
    proc = rhnsearch_main(
        "sweep",
        "run",
        JSB_SPACE,
        "--preset",
        "smoke",
        "--data-dir",
        data_dir,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert f"results directory {results_dir}" in proc.stderr and "not writable" in proc.stderr
    assert sorted(tmp_path.rglob("*")) == before


def test_a_sweep_on_read_only_storage_is_refused_before_ray_and_left_as_it_was(jsb_smoke):
    """The finished smoke sweep, its folder then mounted read-only (a disk remounted, a
    lab's archive): `sweep resume`, `extend` and `confirm` each refuse in one line, exit 2,
    before Ray starts, and leave the folder and the MLflow store as they were (no state
    half-written, no parent run set running again)."""
    import hashlib

    import ray

    folder = jsb_smoke.cwd / "results" / "sweeps" / jsb_smoke.name
    store = jsb_smoke.cwd / "results" / "mlflow.db"

    def files():
        return sorted((p, p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*"))

    bound = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if bound.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bound.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)
        before, stored = files(), hashlib.sha256(store.read_bytes()).hexdigest()
        for command, *args in (
            ("resume",),
            ("extend", "--samples", "4"),
            ("confirm", "--top", "1", "--seeds", "2"),
        ):
            proc = rhnsearch_main(
                "sweep", command, jsb_smoke.name, *args, cwd=jsb_smoke.cwd, check=False
            )
            assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
            assert f"sweep {jsb_smoke.name}: its folder {folder} cannot be written" in proc.stderr
            assert f"`sweep {command}` writes its state" in proc.stderr
            assert not ray.is_initialized()
        assert files() == before
        assert hashlib.sha256(store.read_bytes()).hexdigest() == stored
    finally:
        subprocess.run(["umount", str(folder)], check=True)


# -- a trial ended again by a resumed sweep ------------------------------------------------
def test_a_journal_the_sender_never_catches_up_with_keeps_only_its_unsent_records(
    tmp_path, monkeypatch
):
    """A sweep whose sender stays a few records behind its trials never empties its journal
    (mlflow_pending.jsonl goes once MLflow has every record): past COMPACT_BYTES the journal is
    rewritten with its unsent records, so it stays small over the sweep, and a driver that
    dies then finds every record it has not sent, numbered as before."""
    from rhnsearch.tracking import journal as journals

    monkeypatch.setattr(journals, "COMPACT_BYTES", 4096)  # 4 MB in a sweep; 4 kB here
    journal, sizes = journals.Journal(tmp_path), []
    for n in range(1, 301):
        journal.append(journals.Record(f"t{n % 7}", metrics=[["loss", 1.0 / n, 0, n]]))
        if n > 3:
            journal.ack(n - 3)  # MLflow has all but the last 3
        sizes.append(journal.path.stat().st_size)
    assert max(sizes) < 4096 + 200, max(sizes)
    reopened = journals.Journal(tmp_path)  # the next driver, after this one died
    assert reopened.last == 300 and reopened.sent() == 297
    assert [r.seq for r in reopened.records(reopened.sent())] == [298, 299, 300]
    reopened.ack(300)
    assert not reopened.path.exists()


def test_a_sender_working_through_a_long_journal_reads_and_rewrites_it_in_linear_time(
    tmp_path, monkeypatch
):
    """A resumed driver's sender may find thousands of records a killed driver never sent. It
    reads them a batch at a time from the journal (the lines already sent are skipped, not
    parsed: a sent line that is damaged hides nothing after it), and the journal is rewritten
    only once half of COMPACT_BYTES has been sent since, not at every batch."""
    from rhnsearch.tracking import journal as journals

    monkeypatch.setattr(journals, "COMPACT_BYTES", 4096)
    journal = journals.Journal(tmp_path)
    for n in range(1, 601):
        journal.append(journals.Record(f"t{n % 7}", metrics=[["loss", 1.0 / n, 0, n]]))
    size = journal.path.stat().st_size
    assert size > 8 * 4096
    rewrites, inode, read = 0, journal.path.stat().st_ino, []
    while journal.sent() < 600:
        batch = journal.records(journal.sent(), 5)
        assert [r.seq for r in batch] == list(range(journal.sent() + 1, journal.sent() + 6))
        read += batch
        journal.ack(batch[-1].seq)
        if journal.path.exists() and journal.path.stat().st_ino != inode:
            rewrites, inode = rewrites + 1, journal.path.stat().st_ino
            assert journal.path.read_text().startswith('{"trial_id"')  # whole lines kept
    assert [r.seq for r in read] == list(range(1, 601)) and not journal.path.exists()
    assert 0 < rewrites <= size // 2048, rewrites  # at every ack past 4 kB: over 100

    journal = journals.Journal(tmp_path / "other")  # a sent line damaged hides nothing
    for n in range(1, 6):
        journal.append(journals.Record("t", metrics=[["loss", 1.0, 0, n]]))
    journal.ack(2)
    text = journal.path.read_text().splitlines(keepends=True)
    journal.path.write_text(text[0] + '{"trial_id": "t", "metr' + text[1][-12:] + "".join(text[2:]))
    assert [r.seq for r in journal.records(2)] == [3, 4, 5]
    assert [r.seq for r in journal.records(1)] == []  # an unsent one damaged ends the list


def io_bytes() -> tuple[int, int]:
    """The bytes this process has read and written through system calls (/proc/self/io)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["rchar"]), int(fields["wchar"])


def test_a_backlog_is_read_and_rewritten_in_bytes_linear_in_its_length(tmp_path, monkeypatch):
    """A sender that works through a backlog of 20,000 records, 500 a batch (the sender's
    BATCH), reads the journal about once and copies it about once more in all (its rewrites
    past COMPACT_BYTES), not its whole length at every batch: the bytes counted by the kernel.
    Before, the journal was read whole at every batch and rewritten at every COMPACT_BYTES / 2
    sent: 41 and 20 times its length here. A sender whose records come from its queue only
    acknowledges them: its scans go on from where the last ended too."""
    from rhnsearch.tracking import journal as journals

    monkeypatch.setattr(journals, "COMPACT_BYTES", 64 << 10)
    journal = journals.Journal(tmp_path)
    for n in range(1, 20_001):
        journal.append(journals.Record(f"t{n % 7}", metrics=[["loss", 1.0 / n, 0, n]]))
    size = journal.path.stat().st_size
    read, written = io_bytes()
    while journal.sent() < 20_000:
        batch = journal.records(journal.sent(), 500)
        assert [r.seq for r in batch] == list(range(journal.sent() + 1, journal.sent() + 501))
        journal.ack(batch[-1].seq)
    read, written = (after - before for after, before in zip(io_bytes(), (read, written)))
    assert not journal.path.exists()
    assert read < 2.5 * size and written < 1.5 * size, (read / size, written / size)

    # a sender whose records come from its queue reads none back, and acknowledges them
    journal = journals.Journal(tmp_path / "queued")
    for n in range(1, 20_001):
        journal.append(journals.Record(f"t{n % 7}", metrics=[["loss", 1.0 / n, 0, n]]))
    read, written = io_bytes()
    for seq in range(500, 20_001, 500):
        journal.ack(seq)
    read, written = (after - before for after, before in zip(io_bytes(), (read, written)))
    assert not journal.path.exists()
    assert read < 2.5 * size and written < 1.5 * size, (read / size, written / size)


def test_a_line_torn_by_a_machine_gone_down_does_not_swallow_the_next_drivers_records(
    tmp_path,
):
    """A machine that goes down may leave the journal's last line torn (its end never reached
    the disk). The next driver's journal cuts it off, so that what it appends starts a line of
    its own and is sent; a last line that is whole but for its newline is kept."""
    from rhnsearch.tracking import journal as journals

    journal = journals.Journal(tmp_path)
    for n in range(1, 4):
        journal.append(journals.Record("t", metrics=[["loss", 1.0, 0, n]]))
    journal.ack(1)
    text = journal.path.read_text()
    journal.path.write_text(text[: text.rindex("\n", 0, -1) + 20])  # record 3 torn
    reopened = journals.Journal(tmp_path)
    assert reopened.last == 2
    reopened.append(journals.Record("t", metrics=[["loss", 2.0, 0, 4]]))
    assert [(r.seq, r.metrics[0][3]) for r in reopened.records(1)] == [(2, 2), (3, 4)]

    reopened.path.write_text(reopened.path.read_text().rstrip("\n"))  # only the newline lost
    again = journals.Journal(tmp_path)
    again.append(journals.Record("t", metrics=[["loss", 3.0, 0, 5]]))
    assert [r.seq for r in again.records(1)] == [2, 3, 4]


def test_resumed_driver_leaves_finished_runs_as_they_were(tmp_path):
    """A trial that finished in MLflow just before the driver died may still be running in
    Tune's saved state, so the resumed sweep completes it again: its run keeps its end time
    and status. A failed run, which the resume retries, is ended again."""
    from ray.tune.experiment import Trial

    from rhnsearch.files.layout import SweepPaths
    from rhnsearch.sweep.record import ParentRun
    from rhnsearch.tracking import callback as tracking
    from rhnsearch.tracking import sender

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("resume")
    parent = client.create_run(experiment).info.run_id
    cells = {"rhn d1 w8": Cell("rhn", 1, False, 8, 9)}

    def driver():
        sender._SENDERS.clear()  # a driver process of its own, with a sender of its own
        run = ParentRun(client.tracking_uri, experiment, parent, SweepPaths(str(tmp_path), "s"))
        tracker = tracking.MLflowTracker(run, cells)  # its storage: a directory
        tracker.setup()
        return tracker

    done, retried = (
        Trial("run_trial", config={"cell": "rhn d1 w8"}, trial_id=name, stub=True)
        for name in ("done", "retried")
    )
    first = driver()
    for trial, status in ((done, "completed"), (retried, "failed")):
        first.on_trial_result(0, [], trial, {"epoch": 1, "valid_loss": 2.0})
        trial.update_last_result({"epoch": 1, "status": status})
        (first.on_trial_complete if status == "completed" else first.on_trial_error)(0, [], trial)
    assert first.sender.drain()

    def trial_runs():
        return {
            r.data.tags["trial_id"]: r
            for r in client.search_runs([experiment], "tags.kind = 'trial'")
        }

    runs = trial_runs()
    assert runs["retried"].info.status == "FAILED"

    second = driver()  # the resumed sweep: Tune completes both again
    time.sleep(0.01)
    for trial in (done, retried):
        trial.update_last_result({"epoch": 1, "status": "running"})
        second.on_trial_complete(0, [], trial)
    assert second.sender.drain()
    after = trial_runs()
    assert after["done"].info.end_time == runs["done"].info.end_time
    assert after["done"].data.tags["status"] == "completed"
    assert after["retried"].info.status == "FINISHED"
    assert after["retried"].info.end_time > runs["retried"].info.end_time


# -- a cell of one's own on a worker that cannot import it ---------------------------------
@pytest.mark.slow
@pytest.mark.services
def test_an_own_cell_trains_on_a_worker_that_cannot_import_it(tmp_path, data_dir, cluster):
    """A cell of one's own whose folder the worker node cannot see (an empty tmpfs over it,
    in the node's own mount namespace; it is on neither its PYTHONPATH nor its cwd), and a
    head with no CPU, so that the trials run on that worker: Ray ships the module
    (py_modules) and the own-cell trial trains there, to a finite loss, through `sweep run
    --address` (a module file) and through `sweep submit` (a package and a module file, one
    job)."""
    import lab_services
    from conftest import MINIMAL_RNN, OWN_CELL

    lab, storage = tmp_path / "lab", tmp_path / "storage"
    (lab / "labpkg").mkdir(parents=True)
    (lab / "labcells.py").write_text(MINIMAL_RNN)  # OWN_CELL: labcells:MinimalRNNCell
    # not byte-equal to labcells.py: Ray names a shipped folder by a hash of its files alone,
    # so two equal folders under different names would share one package (and one name)
    (lab / "labpkg" / "__init__.py").write_text(f'"""labpkg"""\n{MINIMAL_RNN}')
    cluster.head(cpus=0).worker(cpus=1, hide=[lab])
    worker = node_id(cluster.gcs, head=False)
    sees = subprocess.run(  # the worker's view of the lab: nothing there
        ["nsenter", "-t", str(raylet(cluster.gcs, head=False).pid), "-m", "ls", "-A", lab],
        capture_output=True,
        text=True,
    )
    assert sees.returncode == 0 and sees.stdout == "", sees
    driver_env = {
        **cluster.env,
        "PYTHONPATH": os.pathsep.join([str(lab), os.environ.get("PYTHONPATH", "")]),
    }

    def sweep(*archs: str) -> list:
        return [
            "--preset",
            "smoke",
            "--data-dir",
            data_dir,
            "--storage-path",
            storage,
            "--set",
            f"archs={json.dumps(archs)}",
            "--set",
            "depths=[1]",
            "--set",
            "samples=1",
            "--set",
            "fixed.epochs=2",
            "--set",
            "params.lr={loguniform: [0.1, 0.2]}",  # it trains (test_report's own-cell runs)
            "--set",
            "params.momentum={uniform: [0.8, 0.9]}",
            "--set",
            "params.init_scale={loguniform: [0.05, 0.1]}",
        ]

    def trained_on_the_worker(uri: str, name: str, arch: str):
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("jsb_optimization").experiment_id
        (run,) = client.search_runs(
            [experiment],
            f"tags.kind = 'trial' and tags.sweep = '{name}' and params.arch = '{arch}'",
        )
        assert run.data.tags["status"] == "completed"
        assert run.data.tags["node_id"] == worker
        loss = run.data.metrics["best_valid_loss"]
        assert math.isfinite(loss) and loss < 88 * math.log(2), loss  # below a coin per key

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rhnsearch_cli(
        "sweep",
        "run",
        JSB_SPACE,
        *sweep(OWN_CELL),
        "--address",
        cluster.gcs,
        "--tracking-uri",
        uri,
        "--name",
        "own-run",
        cwd=tmp_path,
        env=driver_env,
    )
    trained_on_the_worker(uri, "own-run", OWN_CELL)
    with lab_services.mlflow_server(f"sqlite:///{tmp_path / 'server.db'}", tmp_path) as url:

        def submit(*archs: str, name: str):
            return rhnsearch_cli(
                "sweep",
                "submit",
                "spaces/jsb_optimization.yaml",
                *sweep(*archs),
                "--address",
                cluster.dashboard,
                "--tracking-uri",
                url,
                "--name",
                name,
                "--follow",
                cwd=ROOT,
                timeout=400,
                env=driver_env,
                check=False,
            )

        # a package, and a module file (shipped to the job as a folder of its own), in one job
        proc = submit("labpkg:MinimalRNNCell", OWN_CELL, name="own-submit")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        for arch in ("labpkg:MinimalRNNCell", OWN_CELL):
            trained_on_the_worker(url, "own-submit", arch)
