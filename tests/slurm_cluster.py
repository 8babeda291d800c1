"""A real single-node Slurm for the tests: Debian's munged, slurmctld and slurmd started as
root on 127.0.0.1 with their own ports, state, spool, munge key and socket
(`ProctrackType=proctrack/linuxproc`, `TaskPlugin=task/none`: they run in a container), the
node announcing its CPUs and four GPUs that are files (a GPU count for Slurm to allocate).
Clients (sbatch, scontrol, srun) find it through $SLURM_CONF in `Slurm.env`."""

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import tiers
from ports import free_port

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "srun")
NODE = "rhn1"
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


class Slurm:
    """The cluster, started in ROOT (a short path: munge's socket lives there)."""

    def __init__(self, root: Path, gpus: int = 4):
        missing = [d for d in DAEMONS if shutil.which(d) is None]
        if missing:
            tiers.missing(
                f"Slurm and munge ({', '.join(missing)})",
                "apt-get install -y slurmctld slurmd slurm-client munge",
            )
        self.root, self.procs = root, []
        for folder in ("munge", "state", "spool", "gpus"):
            (root / folder).mkdir(mode=0o700)
        key = root / "munge" / "munge.key"
        key.touch(mode=0o600)
        key.write_bytes(secrets.token_bytes(1024))
        socket_path = root / "munge" / "socket"
        self._daemon(
            [
                "munged",
                "--force",
                "--foreground",
                f"--socket={socket_path}",
                f"--key-file={key}",
                f"--pid-file={root / 'munge' / 'pid'}",
                f"--log-file={root / 'munge' / 'log'}",
                f"--seed-file={root / 'munge' / 'seed'}",
            ]
        )
        self._wait(lambda: socket_path.exists(), "munged's socket")
        for index in range(gpus):
            (root / "gpus" / f"gpu{index}").touch()
        conf = root / "slurm.conf"
        host = socket.gethostname()
        conf.write_text(
            "\n".join(
                [
                    "ClusterName=rhntest",
                    f"SlurmctldHost={host}(127.0.0.1)",
                    f"SlurmctldPort={free_port()}",
                    f"SlurmdPort={free_port()}",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={socket_path}",
                    f"StateSaveLocation={root / 'state'}",
                    f"SlurmdSpoolDir={root / 'spool'}",
                    f"SlurmctldPidFile={root / 'slurmctld.pid'}",
                    f"SlurmdPidFile={root / 'slurmd.pid'}",
                    f"SlurmctldLogFile={root / 'slurmctld.log'}",
                    f"SlurmdLogFile={root / 'slurmd.log'}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "SchedulerType=sched/backfill",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_CPU",
                    "ReturnToService=2",
                    "MpiDefault=none",
                    "JobCompType=jobcomp/none",
                    "AccountingStorageType=accounting_storage/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "GresTypes=gpu",
                    "KillWait=30",
                    "MinJobAge=600",
                    f"NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} "
                    f"RealMemory=4000 Gres=gpu:{gpus} State=UNKNOWN",
                    f"PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        (root / "gres.conf").write_text(
            f"NodeName={NODE} Name=gpu File={root / 'gpus'}/gpu[0-{gpus - 1}]\n"
        )
        self.env = {"SLURM_CONF": str(conf)}
        self._daemon(["slurmctld", "-D", "-f", str(conf)])
        self._wait(lambda: self._ok("scontrol", "ping"), "slurmctld")
        self._daemon(["slurmd", "-D", "-f", str(conf), "-N", NODE])
        self._wait(lambda: "idle" in self.scontrol("show", "node", NODE).lower(), "slurmd")

    def _daemon(self, cmd: list[str]):
        log = open(self.root / f"{cmd[0]}.out", "w")
        self.procs.append(
            subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **getattr(self, "env", {})},
                start_new_session=True,
            )
        )

    def _wait(self, ready, what: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                logs = {p.name: p.read_text()[-1500:] for p in self.root.glob("*.log")}
                raise RuntimeError(f"{what} did not start: {logs}")
            time.sleep(0.3)

    def _ok(self, *cmd: str) -> bool:
        return (
            subprocess.run(
                cmd, env={**os.environ, **self.env}, capture_output=True, timeout=30
            ).returncode
            == 0
        )

    def scontrol(self, *args: str) -> str:
        return subprocess.run(
            ["scontrol", *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout

    def job(self, job_id: str) -> dict:
        """The job's fields as `scontrol show job` gives them (JobState, ExitCode, ...)."""
        text = self.scontrol("show", "job", job_id, "--oneliner")
        return dict(word.split("=", 1) for word in text.split() if "=" in word)

    def wait(self, job_id: str, states: set, timeout: float) -> dict:
        """Wait until the job is in one of STATES; its fields."""
        deadline = time.monotonic() + timeout
        while True:
            fields = self.job(job_id)
            if fields.get("JobState") in states:
                return fields
            assert time.monotonic() < deadline, f"job {job_id} not {states}: {fields}"
            time.sleep(1)

    def wait_for_no_jobs(self, timeout: float):
        """Wait until every job submitted so far has ended."""
        deadline = time.monotonic() + timeout
        while True:
            states = re.findall(r"JobState=(\w+)", self.scontrol("show", "jobs", "--oneliner"))
            if all(state in ENDED for state in states):
                return
            assert time.monotonic() < deadline, f"jobs still queued or running: {states}"
            time.sleep(1)

    def release(self, job_id: str):
        """Start a requeued job now (Slurm holds one for two minutes, as an admin may not)."""
        self.scontrol("update", f"JobId={job_id}", "StartTime=now")

    def stop(self):
        subprocess.run(
            ["scancel", "--full", "--partition=debug"],
            env={**os.environ, **self.env},
            capture_output=True,
            timeout=30,
        )
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
