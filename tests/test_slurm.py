"""Sweeps on Slurm: `sweep submit --slurm` writes and submits a batch script that starts a Ray
cluster in the allocation and runs the sweep there, resumable across requeues and time limits.
End to end on a real single-node Slurm (slurm_cluster.py, the session's `slurm` fixture)."""

import json
import re
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from mlflow.tracking import MlflowClient
from test_faults import assert_full_histories, assert_went_on_from_a_checkpoint
from test_sweep import check_child_runs

from conftest import JSB_SPACE, rhnsearch_cli, rhnsearch_main
from slurm_cluster import ENDED


def test_dry_run_prints_the_batch_script_and_writes_nothing(tmp_path):
    """The script for 2 nodes of 4 GPUs: the request as #SBATCH lines (and the extra one
    given), requeue on, Slurm's warning 300 s before the limit, output appended to one file
    per job; one command, with absolute paths and --resume; no secret in it."""
    proc = rhnsearch_main(
        "sweep",
        "submit",
        JSB_SPACE,
        "--preset",
        "paper",
        "--slurm",
        "--nodes",
        "2",
        "--gpus-per-node",
        "4",
        "--time",
        "24:00:00",
        "--partition",
        "gpu",
        "--account",
        "lab",
        "--sbatch=--qos=high",
        "--tracking-uri",
        "http://127.0.0.1:5000",
        "--storage-path",
        tmp_path / "sweeps",
        "--data-dir",
        "/shared/data",
        "--name",
        "jsb",
        "--dry-run",
        cwd=tmp_path,
    )
    lines = proc.stdout.splitlines()
    job_dir = tmp_path / "sweeps" / "jsb" / "slurm"
    assert lines[0] == "#!/bin/bash"
    assert [line for line in lines if line.startswith("#SBATCH")] == [
        "#SBATCH --job-name=rhnsearch-jsb",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --time=24:00:00",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=lab",
        "#SBATCH --signal=B:TERM@300",
        f"#SBATCH --output={job_dir}/slurm-%j.out",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        "#SBATCH --qos=high",
    ]
    command = lines[-1].split()
    assert command[0] == "exec" and command[3:9] == [
        "rhnsearch.cli",
        "sweep",
        "slurm-job",
        str(job_dir),
        "--",
        str(JSB_SPACE),
    ]
    assert command[-1] == "--resume" and "/shared/data" in command
    assert "TOKEN" not in proc.stdout.upper() and list(tmp_path.iterdir()) == []


def submit(slurm, cwd: Path, name: str, data_dir: Path, *args: str, env=None) -> str:
    """`sweep submit --slurm` of a small JSB smoke sweep (RHN only, one CPU a job); the job
    id."""
    proc = rhnsearch_cli(
        "sweep",
        "submit",
        JSB_SPACE,
        "--preset",
        "smoke",
        "--slurm",
        "--cpus-per-node",
        "1",
        "--data-dir",
        data_dir,
        "--name",
        name,
        "--tracking-uri",
        f"sqlite:///{cwd / 'mlflow.db'}",
        "--storage-path",
        cwd / "sweeps",
        "--set",
        "archs=[rhn]",
        *args,
        cwd=cwd,
        env={**slurm.env, **(env or {})},
    )
    job_id = proc.stdout.strip()
    assert job_id.isdigit(), proc.stdout + proc.stderr
    return job_id


def read_token(private: Path, timeout: float = 120) -> str:
    """The job's Ray token, read (as root) from its private directory while it runs."""
    deadline = time.monotonic() + timeout
    while not ((private / "token").exists() and (private / "token").read_text()):
        assert time.monotonic() < deadline, "the job made no token"
        time.sleep(0.5)
    assert private.stat().st_mode & 0o077 == 0  # the job's user alone
    return (private / "token").read_text()


def when(fields: dict, key: str) -> datetime:
    return datetime.fromisoformat(fields[key])


def test_two_sweeps_at_once_complete_on_ports_of_their_own(slurm, tmp_path, data_dir):
    """Two jobs on the one node at once, each its Ray cluster and sweep: both complete, exit 0,
    their runs in MLflow; their ports are disjoint ranges; each job's Ray token is in no
    output, script, MLflow record or storage file, and its private directory is gone. Then one
    sweep's confirmation round as a job of its own (`confirm_on_slurm`)."""
    slurm.wait_for_no_jobs(900)  # the node's CPUs for these two (RequeuedSweep's may run)
    jobs, tokens = {}, {}
    for name in ("left", "right"):
        (tmp_path / name).mkdir()
        jobs[name] = submit(slurm, tmp_path / name, name, data_dir, "--set", "depths=[1]")
    for name, job_id in jobs.items():
        tokens[name] = read_token(tmp_path / name / "sweeps" / name / "slurm" / f".job-{job_id}")
    fields = {name: slurm.wait(job_id, ENDED, 600) for name, job_id in jobs.items()}
    ranges = []
    for name, job_id in jobs.items():
        job_dir = tmp_path / name / "sweeps" / name / "slurm"
        output = (job_dir / f"slurm-{job_id}.out").read_text()
        assert fields[name]["JobState"] == "COMPLETED", output[-3000:]
        assert fields[name]["ExitCode"] == "0:0"
        assert f"sweep {name}: 2 trials" in output
        (found,) = re.findall(r"ports (\d+)-(\d+)", output)
        ranges.append(range(int(found[0]), int(found[1]) + 1))
        client = MlflowClient(f"sqlite:///{tmp_path / name / 'mlflow.db'}")
        experiment = client.get_experiment_by_name("jsb_optimization").experiment_id
        runs = client.search_runs([experiment], "tags.kind = 'trial'")
        check_child_runs(client, runs, 2)
        written = [
            output,
            (job_dir / "sweep.sbatch").read_text(),
            json.dumps(
                [
                    [r.data.tags, r.data.params, r.data.metrics]
                    for r in client.search_runs([experiment])
                ]
            ),
        ]
        written += [
            p.read_bytes().decode("latin-1")
            for p in (tmp_path / name).rglob("*")
            if p.is_file() and p.suffix != ".db"
        ]
        assert not [text[:100] for text in written if tokens[name] in text]
        assert not list(job_dir.glob(".job-*"))
    assert not set(ranges[0]) & set(ranges[1])
    starts = [when(f, "StartTime") for f in fields.values()]
    ends = [when(f, "EndTime") for f in fields.values()]
    assert max(starts) < min(ends)  # at once
    confirm_on_slurm(slurm, tmp_path / "left", "left")


def confirm_on_slurm(slurm, cwd: Path, name: str):
    """`sweep confirm NAME --slurm` on the finished sweep: its batch script (confirm.sbatch,
    the sweep's own script kept) runs `sweep confirm --resume` in a job of its own, whose
    round trains the cell's best setting with 2 new seeds to its end under the same parent."""
    job_dir = cwd / "sweeps" / name / "slurm"
    script = (job_dir / "sweep.sbatch").read_text()
    confirm = ("sweep", "confirm", name, "--top", "1", "--seeds", "2", "--slurm")
    where = ("--cpus-per-node", "1", "--storage-path", cwd / "sweeps")
    dry = rhnsearch_main(*confirm, *where, "--dry-run", cwd=cwd, env=slurm.env)
    command = dry.stdout.splitlines()[-1].split()
    assert command[4:9] == ["sweep", "slurm-job", str(job_dir), "--command", "confirm"]
    assert command[9:14] == ["--", name, "--top", "1", "--seeds"] and command[-1] == "--resume"
    assert not (job_dir / "confirm.sbatch").exists()
    job_id = rhnsearch_cli(*confirm, *where, cwd=cwd, env=slurm.env).stdout.strip()
    assert job_id.isdigit()
    fields = slurm.wait(job_id, ENDED, 600)
    output = (job_dir / f"slurm-{job_id}.out").read_text()
    assert fields["JobState"] == "COMPLETED", output[-3000:]
    assert f"sweep {name}: 4 trials" in output
    assert (job_dir / "sweep.sbatch").read_text() == script
    assert (job_dir / "confirm.sbatch").read_text() == dry.stdout
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("jsb_optimization").experiment_id
    runs = client.search_runs([experiment], "tags.kind = 'trial'")
    confirmed = [r for r in runs if r.data.tags.get("round") == "confirm"]
    assert len(confirmed) == 2 and len({r.data.params["seed"] for r in confirmed}) == 2
    for run in confirmed:
        assert run.data.tags["status"] == "completed" and run.info.status == "FINISHED"
        history = client.get_metric_history(run.info.run_id, "valid_loss")
        assert len(history) == int(run.data.params["epochs"])
    (parent,) = client.search_runs([experiment], "tags.kind = 'sweep'")
    assert parent.info.status == "FINISHED" and "confirmed_1" in parent.data.tags


def test_a_stop_signal_as_the_sweep_returns_leaves_the_summarys_exit_code():
    """Slurm's warning signal (SIGINT to the sweep) that comes once the sweep has returned
    stops nothing: the exit code stays the summary's 0, so the job does not requeue a finished
    sweep (it once did, and its next run found nothing left to do)."""
    script = """
import os, signal, sys, threading, time
from rhnsearch.cli.sweep import sweep_then_report

def sweep(on_start):  # a finished sweep; the signal comes as it returns
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
    return dict(name="late", trials=1, completed=1, stopped=0, diverged=0, failed=0,
                running=0, best=None, wall_seconds=1.0, train_seconds=1.0, complete=True)

code = sweep_then_report(sweep, False)
time.sleep(1)  # the rest of the process's exit, where the signal lands
sys.exit(code)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "sweep late: 1 trials: 1 completed" in proc.stderr


class RequeuedSweep:
    """The long job of `test_a_sweep_requeued_then_timed_out_goes_on_to_its_end`, a JSB sweep
    of 2 trials of EPOCHS epochs under a 3-minute time limit. conftest's `requeued_sweep`
    submits it when the session starts; a thread then drives it while the other tests run: it
    requeues the job once (as an admin or a preemption does) as soon as MLflow holds 2
    trial-epochs, and starts it again after each requeue (Slurm holds a requeued job for two
    minutes). Once the job has also requeued itself at its time limit, the thread raises the
    limit to 30 minutes, as an admin may, so that the next run trains the rest: a run of 3
    minutes trains for 10-45 s, too few epochs on a slow or loaded machine to finish the sweep
    in a bounded number of runs."""

    # Slurm sends the warning up to a minute early ("--signal" in sbatch's manual), so a run
    # of the job trains for 0-45 s before it, at most some 6 trial-epochs a second: up to 270
    # trial-epochs. 400 outlast any one run (240 did not: a run once trained them all).
    EPOCHS = 200
    TIMED_OUT = "stopped by Slurm's warning signal"

    def __init__(self, slurm, cwd: Path, data_dir: Path):
        self.slurm, self.cwd = slurm, cwd
        self.uri = f"sqlite:///{cwd / 'mlflow.db'}"
        self.job_id = submit(
            slurm,
            cwd,
            "long",
            data_dir,
            "--set",
            "depths=[2]",
            "--set",
            "scheduler.name=fifo",
            "--set",
            f"fixed.epochs={self.EPOCHS}",
            "--time",
            "3",
            "--signal-seconds",
            "120",
            env={"TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "0", "TUNE_GLOBAL_CHECKPOINT_S": "0"},
        )
        self.timeline = [("submitted", time.time())]
        self.requeued, self.fields, self.error = False, None, None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._drive, name="requeued-sweep", daemon=True)
        self.thread.start()

    def epochs_in_mlflow(self) -> int:
        try:
            client = MlflowClient(self.uri)
            experiment = client.get_experiment_by_name("jsb_optimization")
            runs = client.search_runs([experiment.experiment_id], "tags.kind = 'trial'")
        except Exception:  # noqa: BLE001 - the store is being made
            return 0
        return sum(int(r.data.metrics.get("epoch", 0)) for r in runs)

    def _drive(self):
        restarts, raised, deadline = 0, False, time.monotonic() + 1500
        try:
            while not self.stopping.is_set():
                fields = self.slurm.job(self.job_id)
                if fields["JobState"] in ENDED:
                    self.fields = fields
                    return
                if fields["JobState"] == "PENDING" and int(fields["Restarts"]) > restarts:
                    restarts = int(fields["Restarts"])
                    if not raised and self.requeued and self.TIMED_OUT in self.output():
                        self.slurm.scontrol("update", f"JobId={self.job_id}", "TimeLimit=30")
                        raised = True
                        self.timeline.append(("timed out; limit raised to 30 min", time.time()))
                    self.timeline.append(
                        (f"pending after restart {restarts}; released", time.time())
                    )
                    self.slurm.release(self.job_id)
                if (
                    not self.requeued
                    and fields["JobState"] == "RUNNING"
                    and self.epochs_in_mlflow() >= 2
                ):
                    before = self.epochs_in_mlflow()
                    self.slurm.scontrol("requeue", self.job_id)
                    self.requeued = True
                    self.timeline.append(
                        (f"requeued by the test at {before} trial-epochs", time.time())
                    )
                assert time.monotonic() < deadline, fields
                time.sleep(1)
        except BaseException as error:  # noqa: BLE001 - raised again in the test
            self.error = error

    def output(self) -> str:
        """What the job's runs have printed so far."""
        path = self.cwd / "sweeps" / "long" / "slurm" / f"slurm-{self.job_id}.out"
        return path.read_text() if path.exists() else ""

    def ended(self) -> dict:
        """The job's fields once it has ended (raises what went wrong in the thread)."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        assert self.fields is not None, "the session ended before the job"
        return self.fields

    def stop(self):
        """At the session's end: stop driving the job (the `slurm` fixture then cancels every
        job left and stops the cluster)."""
        self.stopping.set()
        self.thread.join()


def test_a_sweep_requeued_then_timed_out_goes_on_to_its_end(requeued_sweep):
    """A requeue (as an admin or a preemption does) mid-sweep, then Slurm's time limit: its
    warning signal stops the sweep (Tune's state saved, trials stopped) and the job requeues
    itself. The sweep finishes on the same parent run, in the job's third run or later, every
    trial's history complete and without duplicates; a trial that had a checkpoint went on
    from it. The job ran beside the tests before this one (`RequeuedSweep`)."""
    job, epochs = requeued_sweep, RequeuedSweep.EPOCHS
    fields = job.ended()
    output = job.output()
    assert fields["JobState"] == "COMPLETED" and fields["ExitCode"] == "0:0", output[-4000:]
    assert job.requeued, output[-4000:]
    runs_of_the_job = re.findall(r"job \d+ \(restart (\d+)\)", output)
    assert runs_of_the_job == [str(n) for n in range(len(runs_of_the_job))]
    assert len(runs_of_the_job) >= 3, output[-4000:]  # a requeue and a time limit at least
    assert output.count(RequeuedSweep.TIMED_OUT) >= 1, output[-4000:]
    client = MlflowClient(job.uri)
    experiment = client.get_experiment_by_name("jsb_optimization").experiment_id
    (parent,) = client.search_runs([experiment], "tags.kind = 'sweep'")
    assert parent.info.status == "FINISHED"
    runs = client.search_runs([experiment], "tags.kind = 'trial'")
    check_child_runs(client, runs, 2)
    for run in runs:
        assert_full_histories(client, run, epochs)
    storage = job.cwd / "sweeps" / "long"
    restored = 0
    for trial in storage.glob("run_trial_*"):
        rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
        if len({r["pid"] for r in rows}) > 1:  # it ran in more than one of the job's runs
            assert_went_on_from_a_checkpoint(rows, epochs)
            restored += 1
    # 400 trial-epochs outlast a run of the job: some trial went on from its checkpoint
    assert restored >= 1, output[-4000:]
    print("\n".join(f"{t - job.timeline[0][1]:6.1f} s  {what}" for what, t in job.timeline))
