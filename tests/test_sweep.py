"""Sweeps end to end on a real local Ray, a real MLflow store and server, a real two-node
Ray cluster, and a driver killed mid-sweep."""

import hashlib
import json
import math
import os
import re
import secrets
import shlex
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from ray.tune.experiment import Trial

from rhnsearch.compat import ray as ray_compat
from rhnsearch.files.layout import STATE_FILE
from rhnsearch.provenance import cpu_name
from rhnsearch.search.scheduler import CellASHAScheduler, read_state
from rhnsearch.search.searchers import load_study, study_names
from rhnsearch.sweep import jobs
from rhnsearch.sweep.checkpoints import saved_state
from rhnsearch.sweep.ended_index import indexed

import lab_services
from conftest import (
    JSB_SPACE,
    ROOT,
    json_summary,
    rhnsearch_cli,
    rhnsearch_main,
    wait_until,
)

STATUSES = {"completed", "stopped", "diverged", "failed"}
PARAMS = {
    "arch",
    "depth",
    "width",
    "n_params",
    "lr",
    "momentum",
    "init_scale",
    "clip",
    "seed",
    "preset",
    "dataset",
    "epochs",
    "batch_size",
    "optimizer",
}


def check_child_runs(client: MlflowClient, runs, expected: int):
    """Every trial has one nested run with params, per-epoch metrics and a final status."""
    assert len(runs) == expected
    assert len({r.data.tags["trial_id"] for r in runs}) == expected
    for run in runs:
        tags, params = run.data.tags, run.data.params
        assert tags["status"] in STATUSES, tags
        assert PARAMS <= set(params), PARAMS - set(params)
        # a setting the arch does not read is neither sampled nor logged
        assert ("t_bias" in params) == (params["arch"] in ("rhn", "hsg")), params["arch"]
        assert ("hsg_bias" in params) == (params["arch"] == "hsg"), params["arch"]
        assert params["preset"] == "smoke" and params["dataset"] == "jsb"
        history = client.get_metric_history(run.info.run_id, "valid_loss")
        steps = sorted(m.step for m in history)
        assert steps == list(range(1, len(steps) + 1)), steps  # no gaps, no duplicates
        if tags["status"] == "stopped":
            assert int(tags["stopped_at_epoch"]) == len(steps) < int(params["epochs"])
        if tags["status"] == "completed":
            assert len(steps) == int(params["epochs"])
            assert math.isfinite(run.data.metrics["test_loss"])
        assert run.info.status == "FINISHED"


def check_dataset_input(run, data_dir: Path):
    """The run names its data as an MLflow dataset input: JSB from its public URL, for
    training, with the sha256 of the very file in the data dir."""
    (only,) = run.inputs.dataset_inputs
    dataset = only.dataset
    assert (dataset.name, dataset.source_type) == ("jsb", "http") and len(dataset.digest) == 16
    assert json.loads(dataset.source)["url"].endswith("/jsb-chorales-quarter.json")
    assert {t.key: t.value for t in only.tags} == {"mlflow.data.context": "training"}
    (file,) = json.loads(dataset.profile)["files"]
    assert file["sha256"] == hashlib.sha256((data_dir / file["path"]).read_bytes()).hexdigest()


def test_smoke_sweep_records_every_trial_in_mlflow(jsb_smoke):
    client = jsb_smoke.client()
    experiment = client.get_experiment_by_name("jsb_optimization")
    (parent,) = client.search_runs([experiment.experiment_id], "tags.kind = 'sweep'")
    assert parent.info.status == "FINISHED" and parent.data.tags["sweep"] == "smoke-jsb"
    runs = client.search_runs(
        [experiment.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    cells = {(r.data.params["arch"], r.data.params["depth"]) for r in runs}
    assert cells == {(a, d) for a in ("rhn", "dtrnn", "dtsrnn") for d in ("1", "2", "4", "6")}
    check_child_runs(client, runs, 24)
    # 48 random bits a trial, not Tune's 32, which two trials of a 20,000-trial sweep share
    # with a chance of 1 in 22 (ray_compat.longer_trial_ids)
    trial_ids = {r.data.tags["trial_id"] for r in runs}
    assert len(trial_ids) == 24 and all(re.fullmatch("[0-9a-f]{12}", t) for t in trial_ids)
    # the CPU each trained on: the same seed gives the same numbers on the same CPU only
    assert {r.data.tags["cpu"] for r in runs} == {cpu_name()} and "(" in cpu_name()
    statuses = [r.data.tags["status"] for r in runs]
    assert statuses.count("stopped") > 0, "ASHA stopped no trial"
    summary = jsb_smoke.summary
    assert summary["complete"] and summary["trials"] == 24
    assert summary["stopped"] == statuses.count("stopped")
    best = summary["best"]
    assert parent.data.tags["best_run_id"] == best["run_id"]
    assert best["best_valid_loss"] == min(
        r.data.metrics["best_valid_loss"]
        for r in runs
        if r.data.tags["status"] in ("completed", "stopped")
    )
    for run in [parent, *runs]:
        check_dataset_input(client.get_run(run.info.run_id), jsb_smoke.data_dir)
    kept = client.search_logged_models(  # the first: test_analysis.py may log more
        [experiment.experiment_id],
        f"source_run_id = '{best['run_id']}'",
        order_by=[{"field_name": "creation_timestamp", "ascending": True}],
    )[0]
    assert kept.name == "model" and kept.status == "READY"  # test_analysis.py loads it
    (line,) = [x for x in jsb_smoke.stderr.splitlines() if x.startswith("sweep smoke-jsb:")]
    assert (
        f"24 trials: {summary['completed']} completed, {summary['stopped']} stopped early"
    ) in line
    # the close gathered the sqlite store's statistics for MLflow's own queries (its UI's)
    store = sqlite3.connect(jsb_smoke.tracking_uri.removeprefix("sqlite:///"))
    with closing(store):
        tables = {t for (t,) in store.execute("SELECT tbl FROM sqlite_stat1")}
    assert {"runs", "metrics", "params", "tags"} <= tables


def test_same_space_and_seed_gives_the_same_trials(jsb_smoke, tmp_path, data_dir):
    """What a seed fixes: rerun the space and get the same trials, each with the same
    settings and the same curve as far as both ran. What timing may change: which trials
    early stopping stops, since ASHA decides as trials reach a rung, in the order they happen
    to arrive. With --deterministic (the rerun here) one trial runs at a time, so trials
    arrive in the searcher's order: its stops are those of the scheduler fed the curves
    trial by trial in that order. The rerun holds 4 of the 12 cells: a cell's settings are
    drawn from a stream of its own, whatever other cells the sweep holds. (It trains 4
    epochs, not 9: the epochs change no setting, and its ASHA rungs are the same, at epochs
    1 and 3.)"""
    archs, depths = ("rhn", "dtsrnn"), (1, 6)  # cells where ASHA stops a setting
    rhnsearch_cli(
        "sweep",
        "run",
        JSB_SPACE,
        "--preset",
        "smoke",
        "--data-dir",
        data_dir,
        "--name",
        "again",
        "--deterministic",
        "--set",
        "fixed.epochs=4",
        "--set",
        f"archs=[{','.join(archs)}]",
        "--set",
        f"depths={list(depths)}",
        cwd=tmp_path,
    )
    again = MlflowClient(f"sqlite:///{tmp_path / 'results/mlflow.db'}")
    exp = again.get_experiment_by_name("jsb_optimization")

    def key(run):
        return tuple(run.data.params[k] for k in ("arch", "depth", "seed", "lr"))

    def curve(client, run):
        return [m.value for m in client.get_metric_history(run.info.run_id, "valid_loss")]

    first = {key(r): r for r in jsb_smoke.child_runs()}
    assert len(first) == 24
    first = {k: r for k, r in first.items() if k[0] in archs and int(k[1]) in depths}
    rerun = {key(r): r for r in again.search_runs([exp.experiment_id], "tags.kind = 'trial'")}
    assert set(rerun) == set(first) and len(first) == 8
    for k, run in rerun.items():
        a, b = curve(again, run), curve(jsb_smoke.client(), first[k])
        n = min(len(a), len(b))  # ASHA may stop a trial at another rung
        assert n >= 1 and a[:n] == b[:n]

    replay = CellASHAScheduler(max_t=4, grace_period=1, reduction_factor=3)  # rungs 1, 3
    assert replay.set_search_properties("valid_loss", "min")
    expected = {}
    for run in sorted(rerun.values(), key=lambda r: r.info.start_time):  # one at a time
        p = run.data.params
        trial = Trial(
            "run_trial",
            trial_id=run.data.tags["trial_id"],
            stub=True,
            # its params tell its setting apart (ASHA judges settings)
            config={**p, "cell": {"arch": p["arch"], "depth": int(p["depth"]), "tied": False}},
        )
        for epoch, loss in enumerate(curve(again, run), 1):
            if (
                replay.on_trial_result(None, trial, {"epoch": epoch, "valid_loss": loss})
                == CellASHAScheduler.STOP
                and epoch < 4
            ):
                expected[trial.trial_id] = epoch
                break
    stopped = {
        r.data.tags["trial_id"]: int(r.data.tags["stopped_at_epoch"])
        for r in rerun.values()
        if r.data.tags["status"] == "stopped"
    }
    assert stopped == expected and stopped


def test_driver_killed_then_resume_finishes_without_rerunning(tmp_path, data_dir, sweeps):
    """SIGKILL the driver of a per-cell ASHA sweep once some trials ended, and move its
    storage (a disk mounted elsewhere): the resume from there keeps the finished trials' runs
    as they were, stops again every trial the scheduler had stopped (its rungs are in the
    storage), writes nothing where the sweep was and closes the same parent run."""
    name, trials = "killed", 6 * 4  # 6 cells (3 archs at depths 1 and 2), 4 settings each
    # Tune's own save period: at every step, its save rewrites the file that the previous
    # step's upload may still be copying, and a kill then can leave it empty in the storage
    sweep = sweeps(
        tmp_path,
        name,
        data_dir,
        "--set",
        "depths=[1,2]",
        "--set",
        "fixed.epochs=5",  # not 9: ASHA's rungs at epochs 1 and 3 are all the test reads
        "--set",
        # 4 settings a cell: the trials run setting by setting and ASHA stops none of a cell's
        # first, so the kill comes once a second setting's trial stopped and Tune saved (every
        # 10 s); with 3, a CI run's sweep had ended by then, and with 2 it always would
        "samples=4",
        env={"TUNE_GLOBAL_CHECKPOINT_S": "auto"},
    )
    uri = f"sqlite:///{tmp_path / 'results/mlflow.db'}"
    ran_in = tmp_path / "results" / "sweeps"
    scheduler_state = ran_in / name / "scheduler" / "state.json"
    finished = {}

    def some_trials_ended():
        nonlocal finished
        try:
            client = MlflowClient(uri)
            exp = client.get_experiment_by_name("jsb_optimization")
            # ended: its status tag and its end (two requests, the tag first) both sent
            finished = {
                r.data.tags["trial_id"]: r
                for r in client.search_runs([exp.experiment_id], "tags.kind = 'trial'")
                if r.data.tags["status"] in ("completed", "stopped") and r.info.end_time is not None
            }
        except Exception:  # noqa: BLE001 - the store is being made
            return False
        stopped = read_state(str(scheduler_state))[0]["stopped"]
        if not (len(finished) >= 3 and any(t in finished for t in stopped)):
            return False
        try:  # and Tune has saved one as ended, which the resume takes out of its state
            return bool(ray_compat.ended_trials(saved_state(str(ran_in / name))))
        except (TypeError, ValueError):  # none saved yet, or its file being written
            return False

    wait_until(some_trials_ended, "3 trials ended, one of them stopped by ASHA", 300)
    sweep.stop()
    stopped = read_state(str(scheduler_state))[0]["stopped"]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("jsb_optimization")
    before = {
        t: (r.info.run_id, len(client.get_metric_history(r.info.run_id, "valid_loss")))
        for t, r in finished.items()
    }
    (parent,) = client.search_runs([exp.experiment_id], "tags.kind = 'sweep'")
    assert parent.info.status == "RUNNING"
    ended = client.search_runs([exp.experiment_id], "tags.status != 'running'")
    assert len(ended) < trials, "every trial had ended before the kill"

    moved = tmp_path / "disk" / "sweeps"
    moved.parent.mkdir()
    ran_in.rename(moved)
    proc = rhnsearch_cli(
        "sweep", "resume", name, "--storage-path", str(moved), "--json", cwd=tmp_path
    )
    summary = json_summary(proc)
    assert summary["complete"] and summary["trials"] == trials
    assert not ran_in.exists(), sorted(ran_in.rglob("*"))  # journal, rungs: in the moved folder
    rungs, _ = read_state(str(moved / name / "scheduler" / "state.json"))
    assert stopped.items() <= rungs["stopped"].items()
    runs = client.search_runs([exp.experiment_id], "tags.kind = 'trial'")
    check_child_runs(client, runs, trials)
    for run in runs:
        trial = run.data.tags["trial_id"]
        if trial in stopped:  # stopped before the kill: stopped at the same epoch after it
            assert run.data.tags["status"] == "stopped"
            assert int(run.data.tags["stopped_at_epoch"]) == stopped[trial]
        if trial in before:  # finished before the kill: same run, history untouched
            assert (
                run.info.run_id,
                len(client.get_metric_history(run.info.run_id, "valid_loss")),
            ) == before[trial]
            assert run.info.end_time == finished[trial].info.end_time
    (parent_after,) = client.search_runs([exp.experiment_id], "tags.kind = 'sweep'")
    assert parent_after.info.run_id == parent.info.run_id
    assert parent_after.info.status == "FINISHED" and "resumed" in parent_after.data.tags
    # the trials Tune had saved as ended were taken out of its state before its restore (into
    # the round's index: none ran again, above), and the close counted them as saved
    index, final = indexed(str(moved / name)), saved_state(str(moved / name))
    assert index and not index.keys() & ray_compat.saved_trial_ids(final), index
    assert index.keys() | ray_compat.saved_trial_ids(final) == {
        r.data.tags["trial_id"] for r in runs
    }
    # written again at format version 3: rhnsearch of version 2, which reads no index, refuses
    # it rather than take the indexed trials for ones Tune never saved (and delete their runs)
    assert json.loads((moved / name / STATE_FILE).read_text())["version"] == 3
    best = parent_after.data.tags["best_run_id"]
    (model,) = client.search_logged_models([exp.experiment_id], f"source_run_id = '{best}'")
    assert model.status == "READY"


@pytest.mark.slow
@pytest.mark.services
def test_submit_to_a_two_node_cluster_behind_a_login(tmp_path, data_dir, cluster):
    """A sweep submitted as a Ray Job to a two-node cluster, logging to an MLflow server behind
    its basic-auth login: the credentials are in the cluster's environment (where `ray start`
    ran), which the job's driver inherits; rhnsearch puts them in no runtime env, log or
    state."""
    password = secrets.token_hex(12)
    login = {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": password}
    server_env = {
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(8),
        "MLFLOW_AUTH_ADMIN_USERNAME": "admin",
        "MLFLOW_AUTH_ADMIN_PASSWORD": password,
    }
    storage = tmp_path / "storage"
    with lab_services.mlflow_server(
        f"sqlite:///{tmp_path / 'server.db'}", tmp_path, env=server_env, login=True
    ) as uri:
        cluster.env.update(login)
        cluster.head().worker()
        env, dashboard = cluster.env, cluster.dashboard
        proc = rhnsearch_cli(
            "sweep",
            "submit",
            "spaces/jsb_optimization.yaml",
            "--preset",
            "smoke",
            "--address",
            dashboard,
            "--data-dir",
            data_dir,
            "--tracking-uri",
            uri,
            "--storage-path",
            storage,
            "--set",
            "archs=[rhn]",
            "--set",
            "depths=[1]",
            "--set",
            "fixed.epochs=3",
            "--name",
            "on-cluster",
            "--follow",
            cwd=ROOT,
            timeout=400,
            env=env,
        )
        job_id = proc.stdout.strip().splitlines()[0]
        assert job_id == "rhnsearch-on-cluster"
        status = rhnsearch_cli("sweep", "status", job_id, "--address", dashboard, cwd=ROOT, env=env)
        assert "SUCCEEDED" in status.stdout
        logs = rhnsearch_cli(
            "sweep", "logs", job_id, "--address", dashboard, cwd=ROOT, env=env
        ).stdout
        assert "sweep on-cluster: 2 trials" in logs
        stored = subprocess.run(  # the job's runtime env as the cluster keeps it
            [
                sys.executable,
                "-c",
                "import json, sys; from ray.job_submission import "
                "JobSubmissionClient as C; print(json.dumps(C(sys.argv[1]).get_job_info("
                "sys.argv[2]).runtime_env))",
                dashboard,
                job_id,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **env},
            check=True,
        ).stdout
        assert "working_dir" in stored
        # A job whose driver has a wrong password: refused in one line before its Tune starts
        wrong = {
            **jobs.runtime_env(),
            "env_vars": {"MLFLOW_TRACKING_PASSWORD": secrets.token_hex(12)},
        }
        subprocess.run(
            [
                str(Path(sys.executable).with_name("ray")),
                "job",
                "submit",
                "--address",
                dashboard,
                "--submission-id",
                "rhnsearch-refused",
                "--runtime-env-json",
                json.dumps(wrong),
                "--",
                *shlex.split(
                    jobs.entrypoint(
                        "spaces/jsb_optimization.yaml",
                        "refused",
                        uri,
                        str(storage),
                        {"preset": "smoke", "data_dir": data_dir},
                    )
                ),
            ],
            cwd=ROOT,
            env={**os.environ, **env},
            capture_output=True,
            timeout=300,
        )
        assert (
            "FAILED"
            in rhnsearch_cli(
                "sweep", "status", "rhnsearch-refused", "--address", dashboard, cwd=ROOT, env=env
            ).stdout
        )
        refused = rhnsearch_cli(
            "sweep", "logs", "rhnsearch-refused", "--address", dashboard, cwd=ROOT, env=env
        ).stdout
        errors = [line for line in refused.splitlines() if "error" in line.lower()]
        assert len(errors) == 1 and "refused the login of user 'admin'" in errors[0], refused
        assert "Traceback" not in refused and not (storage / "refused").exists()
        # (its token refusals: tests/test_cluster_tokens.py)
        os.environ.update(login)  # this process reads the server too
        try:
            client = MlflowClient(uri)
            exp = client.get_experiment_by_name("jsb_optimization")
            runs = client.search_runs([exp.experiment_id])
            check_child_runs(client, [r for r in runs if r.data.tags["kind"] == "trial"], 2)
        finally:
            for key in login:
                os.environ.pop(key)
    state = json.loads((storage / "on-cluster" / "rhnsearch_sweep.json").read_text())
    assert state["storage"] == str(storage)
    assert state["data_dir"] == str(Path(data_dir).resolve())  # resolved on the cluster
    written = [
        proc.stdout,
        proc.stderr,
        logs,
        stored,
        json.dumps([[r.data.tags, r.data.params] for r in runs]),
    ]
    written += [p.read_bytes().decode("latin-1") for p in storage.rglob("*") if p.is_file()]
    assert not [text[:200] for text in written if password in text]


BAD_SPACES = {
    "unknown arch": ("archs: [rhn, gru]", "archs: unknown arch 'gru'"),
    "bad range": ("params: {lr: {uniform: [1.0, 0.1]}}", "params.lr: uniform range"),
    "unknown key": ("sampels: 3", "sampels: unknown key"),
    "small budget": ("budget: 300", "bad.yaml: budget 300 is too small"),
    "bad depth": ("depths: [0, 2]", "depths: depths must be positive"),
}


@pytest.mark.parametrize("case", list(BAD_SPACES))
def test_bad_space_is_one_line_before_ray_starts(case, tmp_path, data_dir):
    line, expected = BAD_SPACES[case]
    base = JSB_SPACE.read_text()
    key = line.split(":")[0]
    kept = [ln for ln in base.splitlines() if not ln.startswith(f"{key}:")]
    space = tmp_path / "bad.yaml"
    space.write_text("\n".join(kept) + "\n" + line + "\n")
    proc = rhnsearch_main("sweep", "run", space, "--data-dir", data_dir, cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and expected in proc.stderr, proc.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "flag,value,expected",
    [
        ("--address", "127.0.0.1:9", "Ray at 127.0.0.1:9 is not reachable"),
        (
            "--tracking-uri",
            "http://127.0.0.1:9",
            "MLflow tracking store http://127.0.0.1:9 is not reachable",
        ),
    ],
)
def test_unreachable_addresses_are_one_line(flag, value, expected, tmp_path, data_dir):
    proc = rhnsearch_main(
        "sweep",
        "run",
        JSB_SPACE,
        "--preset",
        "smoke",
        "--data-dir",
        data_dir,
        flag,
        value,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and expected in proc.stderr, proc.stderr
    assert not (tmp_path / "results" / "sweeps").exists()


def test_submit_to_unreachable_dashboard_is_one_line(tmp_path):
    proc = rhnsearch_cli(
        "sweep",
        "submit",
        JSB_SPACE,
        "--preset",
        "smoke",
        "--address",
        "http://127.0.0.1:9",
        "--tracking-uri",
        "http://127.0.0.1:9",
        "--storage-path",
        tmp_path,
        cwd=ROOT,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "not reachable" in proc.stderr


@pytest.mark.parametrize(
    "args,expected",
    [
        ([], "its MLflow store must be a server: pass --tracking-uri"),
        (["--tracking-uri", "sqlite:///results/mlflow.db"], "must be a server"),
        (["--tracking-uri", "http://127.0.0.1:9"], "pass --storage-path"),
        (
            ["--tracking-uri", "http://127.0.0.1:9", "--storage-path", "results/sweeps"],
            "an absolute path of a shared directory",
        ),
    ],
)
def test_submit_without_a_server_or_storage_is_refused_in_one_line(args, expected, tmp_path):
    """A job's working directory is temporary: its results must go to a server and storage
    that outlive it. Refused before any cluster is contacted (the address is unreachable)."""
    env = {"MLFLOW_TRACKING_URI": "", "RHNSEARCH_STORAGE": ""}
    proc = rhnsearch_main(
        "sweep",
        "submit",
        JSB_SPACE,
        "--preset",
        "smoke",
        "--address",
        "http://127.0.0.1:9",
        *args,
        cwd=ROOT,
        check=False,
        env=env,
    )
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert expected in proc.stderr, proc.stderr


def test_resume_unknown_sweep_names_the_known_ones(jsb_smoke):  # in a process of its own
    proc = rhnsearch_cli("sweep", "resume", "nope", cwd=jsb_smoke.cwd, check=False)
    assert proc.returncode == 2 and "known sweeps are" in proc.stderr
    assert "smoke-jsb" in proc.stderr


def test_every_command_has_help():
    for args in (
        ["--help"],
        ["sweep", "--help"],
        ["sweep", "run", "--help"],
        ["sweep", "resume", "--help"],
        ["sweep", "extend", "--help"],
        ["sweep", "confirm", "--help"],
        ["sweep", "submit", "--help"],
        ["sweep", "logs", "--help"],
        ["sweep", "status", "--help"],
        ["sweep", "check", "--help"],
        ["train", "--help"],
        ["budget", "--help"],
        ["data", "fetch", "--help"],
        ["ui", "--help"],
    ):
        proc = rhnsearch_main(*args, cwd=ROOT)
        assert "usage: rhnsearch" in proc.stdout


def max_at_once(runs) -> int:
    """The most of RUNS that were running at one moment (their MLflow start and end times)."""
    events = sorted([(r.info.start_time, 1) for r in runs] + [(r.info.end_time, -1) for r in runs])
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def finished_trials(experiment: Path) -> dict[str, list]:
    """Each Optuna study of the sweep at EXPERIMENT: its finished trials."""
    return {
        name: [t for t in load_study(str(experiment), name).trials if t.state.is_finished()]
        for name in study_names(str(experiment))
    }


def forget_newest_trial(round_dir: Path) -> str:
    """Store the experiment state Tune saved before it made its newest trial, beside the
    searcher's states that count that trial, as a driver killed between their uploads leaves
    them (the storage takes them file by file). Returns the trial's id."""
    path = max(round_dir.glob("experiment_state-*.json"))
    state = json.loads(path.read_text())
    info = state["trial_data"].pop()[0]
    path.write_text(json.dumps(state))
    return json.loads(info)["trial_id"]


def test_optuna_sweep_has_a_study_per_cell_and_resumes(tmp_path, data_dir, sweeps):
    """`--search optuna` gives each (arch, depth) cell its own study in the sweep's journal,
    SWEEP/CELL; a setting the cell's arch does not read is not sampled (no t_bias for
    DT-RNN); trials run as many at once as the slots allow (here 4: half a CPU each on 2).
    Killed after some trials, moved (a disk mounted elsewhere) and resumed from there, every
    study holds the trials of both halves (the first half's with the values they had); the
    resume runs every trial also where the experiment state stored is older than the
    searcher's states. (A study records a trial at once, Tune saves its state on its own
    period: a trial that ended after Tune's last save is in its study, and the resumed sweep,
    which does not know it, asks its study for a setting again.) `sweep extend` of an Optuna
    sweep: test_object_storage.py."""
    sweep = sweeps(
        tmp_path,
        "tpe",
        data_dir,
        "--search",
        "optuna",
        "--set",
        "archs=[rhn,dtrnn]",
        "--set",
        "depths=[1,2]",
        "--set",
        "samples=3",
        "--set",
        "scheduler.name=fifo",
        "--set",
        "fixed.epochs=3",
        "--set",
        "resources.cpu=0.5",
    )
    experiment = tmp_path / "results" / "sweeps" / "tpe"
    uri = f"sqlite:///{tmp_path / 'results/mlflow.db'}"

    def some_trials_finished():
        try:
            return sum(map(len, finished_trials(experiment).values())) >= 2
        except Exception:  # noqa: BLE001 - no journal yet
            return False

    wait_until(some_trials_finished, "2 trials of the studies finished")
    sweep.stop()
    before = finished_trials(experiment)
    assert sum(map(len, before.values())) < 12, "every trial had finished before the kill"
    forgotten = forget_newest_trial(experiment)
    ran_in, moved = tmp_path / "results" / "sweeps", tmp_path / "disk" / "sweeps"
    moved.parent.mkdir()
    ran_in.rename(moved)
    experiment = moved / "tpe"
    proc = rhnsearch_cli(
        "sweep", "resume", "tpe", "--storage-path", str(moved), "--json", cwd=tmp_path
    )
    assert json_summary(proc)["complete"]
    assert not ran_in.exists(), sorted(ran_in.rglob("*"))  # the studies: in the moved folder
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("jsb_optimization")
    runs = client.search_runs([exp.experiment_id], "tags.kind = 'trial'")
    check_child_runs(client, runs, 12)
    assert forgotten not in {r.data.tags["trial_id"] for r in runs}  # its slot asked again
    cells = {r.data.params["cell"] for r in runs}
    assert sorted(study_names(str(experiment))) == sorted(f"tpe/{c}" for c in cells)
    after = finished_trials(experiment)
    for name, trials in before.items():
        numbered = {t.number: t for t in after[name]}
        for trial in trials:
            assert numbered[trial.number].params == trial.params
            assert numbered[trial.number].value == trial.value
    for name, trials in after.items():
        assert len(trials) >= 3 and {t.state.name for t in trials} == {"COMPLETE"}
        assert ("t_bias" in trials[0].params) == ("/rhn" in name), name
    mine = [r for r in runs if r.data.params["cell"] == "rhn d2 w22"]
    assert {round(float(r.data.params["lr"]), 9) for r in mine} <= {
        round(t.params["lr"], 9) for t in after["tpe/rhn d2 w22"]
    }

    # (how many more than two: how fast two cores start the workers of sub-second trials)
    assert max_at_once(runs) > 1, "the trials ran one at a time on 4 slots"
    (parent,) = client.search_runs([exp.experiment_id], "tags.kind = 'sweep'")
    assert parent.data.params["search"] == "optuna" and parent.info.status == "FINISHED"
    assert parent.data.params["sampler"] == "tpe"


def test_gpu_space_on_a_cpu_only_local_ray_is_one_line(tmp_path, data_dir):
    proc = rhnsearch_main(
        "sweep",
        "run",
        JSB_SPACE,
        "--preset",
        "smoke",
        "--data-dir",
        data_dir,
        "--set",
        "resources.gpu=0.25",
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2 and "resources.gpu=0" in proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr


def test_check_solves_word_widths_for_the_datas_vocabulary(data_dir, tmp_path):
    """`sweep check` lists the widths the sweep will train: solved for the data's own
    vocabulary when the data is at hand, and says so when it is not."""
    from rhnsearch.data import load_dataset
    from rhnsearch.search.space import load_space

    space = ROOT / "spaces" / "ptb_budget.yaml"
    vocab = len(load_dataset("ptb-sample", data_dir=data_dir, allow_fetch=False).vocab)
    for where, size, lines in ((data_dir, vocab, 1), (tmp_path, 10000, 2)):
        proc = rhnsearch_main(
            "sweep", "check", space, "--preset", "cpu", "--data-dir", where, cwd=tmp_path
        )
        listed = proc.stdout.strip().splitlines()[lines:]
        expected = load_space(space, preset="cpu").cells(size).values()
        assert [int(line.split("width")[1].split()[0]) for line in listed] == [
            c.width for c in expected
        ]
        assert all(abs(c.params - 1.5e6) < 0.01 * 1.5e6 for c in expected)
    assert "not in the data dir" in proc.stdout and vocab != 10000


def jsb_runs(client: MlflowClient, exp) -> list:
    return client.search_runs(
        [exp.experiment_id], "tags.kind = 'trial' and tags.sweep = 'ext'", max_results=1000
    )


def run_fields(client: MlflowClient, run) -> tuple:
    """What a run recorded: params, tags but the run's own, and its valid_loss curve."""
    tags = {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")}
    history = [m.value for m in client.get_metric_history(run.info.run_id, "valid_loss")]
    return run.data.params, tags, history, run.info.status


@pytest.mark.slow
@pytest.mark.cluster
def test_extend_a_finished_sweep_with_settings_then_seeds(tmp_path, data_dir, sweeps):
    """`sweep extend NAME --samples 4` on the JSB smoke sweep at two archs and two depths (2
    settings a cell): two new settings in every cell, those the random stream draws next (no
    setting twice), the first 8 runs as they were, the rungs of early stopping kept, one
    parent run, and the study's finding and report made again over the 16 trials. `--seeds 3`
    on a sweep of one setting a cell runs each setting with the next seeds. Asking for less,
    or for seeds of a sweep that samples its seed, is one line before Ray starts. Then `sweep
    confirm ext --top 1 --seeds 2` (`check_confirm_round`)."""
    from rhnsearch import load_trials
    from rhnsearch.results.export import markdown
    from rhnsearch.results.studies import KINDS
    from rhnsearch.search.searchers import CellSearcher, round_slots
    from rhnsearch.sweep.record import read_record

    uri = f"sqlite:///{tmp_path / 'results/mlflow.db'}"
    run = ("sweep", "run", JSB_SPACE, "--preset", "smoke", "--data-dir", data_dir, "--json")
    # 5 epochs, not the preset's 9: the rungs at epochs 1 and 3 are all the test reads
    cells = ("--set", "archs=[rhn,dtrnn]", "--set", "depths=[1,2]", "--set", "fixed.epochs=5")
    assert json_summary(rhnsearch_cli(*run, *cells, "--name", "ext", cwd=tmp_path))["trials"] == 8
    for args, says in (
        (["--samples", "2"], "extend it to more, e.g. --samples 4"),
        (["--seeds", "2"], "it samples each setting's seed (params.seed)"),
        ([], "give --samples N"),
    ):
        proc = rhnsearch_main(
            "sweep",
            "extend",
            "ext",
            *args,
            "--storage-path",
            tmp_path / "results" / "sweeps",
            "--address",
            "127.0.0.1:1",  # unreachable: a regression cannot start the extension
            cwd=tmp_path,
            check=False,
        )
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert says in proc.stderr
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("jsb_optimization")
    first = {r.info.run_id: run_fields(client, r) for r in jsb_runs(client, exp)}
    trials = load_trials("jsb_optimization", tracking_uri=uri, sweep="ext")
    finding = markdown(KINDS["optimization"].measured(trials))
    state_file = tmp_path / "results/sweeps/ext/scheduler/state.json"
    rungs = read_state(str(state_file))[0]["rungs"]

    summary = json_summary(
        rhnsearch_cli("sweep", "extend", "ext", "--samples", "4", "--json", cwd=tmp_path)
    )
    assert summary["complete"] and summary["trials"] == 16
    runs = jsb_runs(client, exp)
    check_child_runs(client, runs, 16)
    assert {r.info.run_id: run_fields(client, r) for r in runs if r.info.run_id in first} == first
    new = [r for r in runs if r.info.run_id not in first]
    record = read_record(str(tmp_path / "results/sweeps"), "ext")
    drawn = CellSearcher(record.space, record.cells, {}, round_slots(4, 1, done=(2, 1)))
    expected = [drawn.suggest(str(i)) for i in range(8)]
    assert sorted((r.data.params["cell"], float(r.data.params["lr"])) for r in new) == sorted(
        (c["cell"], c["lr"]) for c in expected
    )
    assert len({r.data.params["lr"] for r in runs}) == 16
    after = read_state(str(state_file))[0]["rungs"]
    for cell, milestones in rungs.items():
        for milestone, recorded in milestones.items():
            assert recorded.items() <= after[cell][milestone].items()

    def recorded(rungs):
        return sum(len(r) for cell in rungs.values() for r in cell.values())

    assert recorded(after) > recorded(rungs)
    (parent,) = client.search_runs([exp.experiment_id], "tags.kind = 'sweep'")
    assert parent.info.status == "FINISHED" and parent.data.metrics["trials"] == 16
    trials = load_trials("jsb_optimization", tracking_uri=uri, sweep="ext")
    assert len(trials) == 16
    measured = markdown(KINDS["optimization"].measured(trials))
    assert measured != finding
    report = client.download_artifacts(parent.info.run_id, "report/report.html", str(tmp_path))
    assert "16 trials" in Path(report).read_text()
    check_confirm_round(client, exp, uri, tmp_path, sweeps)

    proc = rhnsearch_cli(
        *run,
        "--name",
        "seeds",
        "--set",
        "archs=[rhn]",
        "--set",
        "depths=[1,2]",
        "--set",
        "params={lr: {loguniform: [0.05, 0.5]}}",
        "--set",
        "fixed.epochs=2",
        "--set",
        "scheduler.name=fifo",
        "--set",
        "fixed.seed=7",
        "--set",
        "samples=1",
        cwd=tmp_path,
    )
    assert json_summary(proc)["trials"] == 2
    proc = rhnsearch_cli("sweep", "extend", "seeds", "--seeds", "3", "--json", cwd=tmp_path)
    assert json_summary(proc)["trials"] == 6
    (parent,) = client.search_runs(
        [exp.experiment_id], "tags.sweep = 'seeds' and tags.kind = 'sweep'"
    )
    runs = client.search_runs(
        [exp.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    by_cell = {}
    for r in runs:
        by_cell.setdefault(r.data.params["cell"], []).append(r.data.params)
    for params in by_cell.values():
        assert sorted(int(p["seed"]) for p in params) == [7, 8, 9]
        assert len({p["lr"] for p in params}) == 1


def check_phases(client: MlflowClient, parent: str, trials, page: str, tmp_path: Path):
    """The sweep `ext`'s search, its extension and its confirmation round apart: each round's
    wall time, CPU-hours and trial-epochs, in `sweep status` and the report's header; the
    rounds' trial-epochs add up to the epochs every trial trained, their hours to the total."""
    from rhnsearch.tracking.phases import phases

    rounds = phases(client, parent)
    assert [r.name for r in rounds] == ["search", "extension 1", "confirmation 2"]
    assert all(r.wall_seconds > 0 and r.hours["cpu_hours"] > 0 for r in rounds)
    assert sum(r.trial_epochs for r in rounds) == int(trials["metrics.epoch"].sum())
    total = client.get_run(parent).data.metrics["cpu_hours"]
    assert sum(r.hours["cpu_hours"] for r in rounds) == pytest.approx(total)
    status = rhnsearch_main("sweep", "status", "ext", "--json", cwd=tmp_path)
    shown = json.loads(status.stdout)["phases"]
    assert [p["name"] for p in shown] == [r.name for r in rounds]
    assert [p["trial_epochs"] for p in shown] == [r.trial_epochs for r in rounds]
    assert "<td>wall time</td><td>search " in page and "; confirmation 2 " in page


def check_confirm_round(client: MlflowClient, exp, uri: str, tmp_path: Path, sweeps):
    """`sweep confirm ext --top 1 --seeds 2` on the finished sweep `ext` of 16 trials in 4
    cells, its driver killed mid-round and the round resumed: each cell's best finished search
    setting trained again with 2 seeds the sweep never used, for the full epochs, none stopped,
    none lost or run twice, under the same parent run; the search's table and report
    unchanged, the confirmed table with its rows. Bad input is one line before Ray."""
    from rhnsearch import load_trials
    from rhnsearch.results.studies import table

    storage = tmp_path / "results" / "sweeps"
    parent = client.search_runs([exp.experiment_id], "tags.kind = 'sweep'")[0].info.run_id
    client.update_run(parent, status="RUNNING")  # as a sweep that has not finished
    for name, args, says in (
        ("ext", ["--top", "1", "--seeds", "2"], "sweep ext has not finished"),
        ("nope", ["--top", "1", "--seeds", "2"], "no sweep named 'nope'"),
        ("ext", ["--top", "1", "--seeds", "1"], "with at least 2 seeds each"),
        ("ext", ["--top", "0", "--seeds", "2"], "confirm at least 1 setting a cell"),
    ):
        proc = rhnsearch_main(
            "sweep",
            "confirm",
            name,
            *args,
            "--storage-path",
            storage,
            "--address",
            "127.0.0.1:1",  # unreachable: a regression cannot start the round
            cwd=tmp_path,
            check=False,
        )
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert says in proc.stderr, proc.stderr
    client.update_run(parent, status="FINISHED")
    proc = rhnsearch_main(
        "sweep",
        "confirm",
        "ext",
        "--top",
        "5",
        "--seeds",
        "2",
        "--storage-path",
        storage,
        "--address",
        "127.0.0.1:1",
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--top 5: cell " in proc.stderr and "confirm at most that many" in proc.stderr
    searched = table("jsb_optimization", uri, "ext")
    search = jsb_runs(client, exp)
    epochs = {r.data.params["epochs"] for r in search}

    # the round's driver SIGKILLed once a confirmation trial ended; `sweep resume` finishes it
    confirming = sweeps(
        tmp_path, "ext", None, command=("confirm", "ext", "--top", "1", "--seeds", "2")
    )
    ended = {}

    def a_confirmation_trial_ended():
        nonlocal ended
        ended = {
            r.info.run_id: len(client.get_metric_history(r.info.run_id, "valid_loss"))
            for r in jsb_runs(client, exp)
            if r.data.tags.get("round") == "confirm" and r.info.end_time is not None
        }
        return bool(ended)

    wait_until(a_confirmation_trial_ended, "a confirmation trial ended", 300)
    confirming.stop()
    assert len(ended) < 8, "the round had ended before the kill"
    summary = json_summary(rhnsearch_cli("sweep", "resume", "ext", "--json", cwd=tmp_path))
    assert summary["complete"] and summary["trials"] == 24
    confirm = [r for r in jsb_runs(client, exp) if r.data.tags.get("round") == "confirm"]
    assert len(confirm) == 4 * 1 * 2  # none lost, none twice (distinct settings and seeds below)
    for run in confirm:  # those ended before the kill, as they were
        if run.info.run_id in ended:
            history = client.get_metric_history(run.info.run_id, "valid_loss")
            assert len(history) == ended[run.info.run_id]
    by_trial = {r.data.tags["trial_id"]: r for r in search}
    used = {r.data.params["seed"] for r in search}
    finished = [
        r
        for r in search
        if r.data.tags["status"] in ("completed", "stopped")
        and math.isfinite(r.data.metrics["best_valid_loss"])
    ]
    best = {
        cell: min(
            (r for r in finished if r.data.params["cell"] == cell),
            key=lambda r: (r.data.metrics["best_valid_loss"], r.data.tags["trial_id"]),
        )
        for cell in {r.data.params["cell"] for r in search}
    }
    for run in confirm:
        params, tags = run.data.params, run.data.tags
        assert run.data.tags["mlflow.parentRunId"] == parent and run.info.status == "FINISHED"
        assert tags["status"] == "completed" and "stopped_at_epoch" not in tags
        history = client.get_metric_history(run.info.run_id, "valid_loss")
        assert {params["epochs"]} == epochs and len(history) == int(params["epochs"])
        confirmed = by_trial[params["confirms"]]
        assert confirmed.data.tags["trial_id"] == best[params["cell"]].data.tags["trial_id"]
        assert {k: v for k, v in params.items() if k not in ("seed", "confirms")} == {
            k: v for k, v in confirmed.data.params.items() if k != "seed"
        }
        assert params["seed"] not in used
    assert len({(r.data.params["confirms"], r.data.params["seed"]) for r in confirm}) == 8
    (after,) = client.search_runs([exp.experiment_id], "tags.kind = 'sweep'")
    assert after.info.run_id == parent and after.info.status == "FINISHED"
    assert table("jsb_optimization", uri, "ext") == searched
    report = client.download_artifacts(parent, "report/report.html", str(tmp_path / "results"))
    page = Path(report).read_text()
    assert (
        "16 trials" in page and 'id="confirmed-settings"' in page and 'id="confirmed-gaps"' in page
    )
    assert all(run.data.tags["trial_id"] in page for run in best.values())  # each cell's row
    assert 'id="confirmed-finding"' in page  # the paper's claims on them, and in words:
    assert "the mean over 2 seeds of each cell&#x27;s setting chosen on the search" in page
    # in the space's quantity, the training loss, and beside it on validation
    assert "In best_train_loss: RHN: the claim" in page
    assert 'id="confirmed-finding-valid"' in page and "In best_valid_loss: RHN: the claim" in page
    trials = load_trials("jsb_optimization", tracking_uri=uri, sweep="ext")
    assert trials["round"].value_counts().to_dict() == {"search": 16, "confirm": 8}
    check_phases(client, parent, trials, page, tmp_path)
    proc = rhnsearch_main(
        "results",
        "confirmed",
        "--experiment",
        "jsb_optimization",
        "--tracking-uri",
        uri,
        cwd=tmp_path,
    )
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert len(rows) == 2 * (2 + 4), proc.stdout  # two tables: header, rule, a row a cell
    for run in best.values():
        assert run.data.tags["trial_id"] in proc.stdout
