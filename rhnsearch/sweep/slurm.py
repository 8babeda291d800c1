"""Sweeps on Slurm: a batch script that starts a Ray cluster inside the allocation and runs
the sweep on it, resumable across time limits, requeues and preemption.

`sweep submit --slurm` writes the batch script into the sweep's job directory and submits it
with sbatch. In the job (`job`, the script's one command), on the first node: a Ray head,
workers on the other nodes through srun (`node`), each node's CPUs and GPUs from Slurm's
variables and its ports from a range of the job's own; Ray's token authentication on, the
token in a directory only the job's user reads (`.job-ID/`, removed at the end); then the
sweep, as `sweep run --resume`: a rerun of the script (requeue, preemption, a time limit)
resumes the same sweep. Slurm's warning signal (`--signal=B:TERM@SECONDS`) reaches this
process: the sweep is stopped as Ctrl-C stops it (Tune saves its state, the trials stop) and,
if the job is still running (a time limit, not a requeue or scancel), the job requeues itself.
`sweep confirm --slurm` does the same for a finished sweep's confirmation round (`sweep confirm
--resume` in the job: a rerun resumes the round).
"""

import logging
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError, first_line
from ..files.layout import (
    CONFIRM_SBATCH_FILE,
    JOB_HEAD_FILE,
    JOB_PRIVATE_DIR,
    JOB_TOKEN_FILE,
    SBATCH_FILE,
    SLURM_OUTPUT,
    SweepPaths,
    default_name,
    sweep_storage,
)
from ..tracking.uris import resolve_tracking_uri
from .checks import checked_space

COMMANDS = {"run": "submit", "confirm": "confirm"}  # what a job runs: the command writing it
PORT_BASE, PORT_SLOTS, SLOT_SIZE = 20000, 400, 100  # ports 20000-59999, 100 to a slot
SERVICES = 8  # a slot's first ports: Ray's services on a node; the rest: its workers
NODE_TIMEOUT = 300  # seconds for the workers' nodes to join the head
AUTH = "RAY_AUTH_MODE"


@dataclass
class Request:
    """What the job asks Slurm for (each becomes an #SBATCH line; None: not asked)."""

    nodes: int = 1
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    cpus_per_node: int | None = None
    gpus_per_node: int | None = None
    gres: str | None = None
    signal_seconds: int = 300
    extra: list[str] = field(default_factory=list)  # further #SBATCH lines, as given


def check_request(request: Request):
    """A one-line UserError for a request Slurm would refuse."""
    if request.nodes < 1 or request.signal_seconds < 1:
        raise UserError("--nodes and --signal-seconds must be positive")


def sbatch_lines(request: Request, name: str, output: Path) -> list[str]:
    """The #SBATCH lines of the batch script."""
    asked = {
        "job-name": f"rhnsearch-{name}",
        "nodes": request.nodes,
        "ntasks-per-node": 1,
        "cpus-per-task": request.cpus_per_node,
        "gpus-per-node": request.gpus_per_node,
        "gres": request.gres,
        "time": request.time,
        "partition": request.partition,
        "account": request.account,
        "signal": f"B:TERM@{request.signal_seconds}",
        "output": output,
    }
    lines = [f"#SBATCH --{key}={value}" for key, value in asked.items() if value is not None]
    lines += ["#SBATCH --requeue", "#SBATCH --open-mode=append"]
    return lines + [
        line if line.startswith("#SBATCH") else f"#SBATCH {line}" for line in request.extra
    ]


def batch_script(
    request: Request, name: str, job_dir: Path, sweep_args: list[str], command: str = "run"
) -> str:
    """The batch script: the job's resources, then one command, run again from the top after
    a requeue (the sweep, or with COMMAND "confirm" its confirmation round, resumes). Holds no
    secret: the token is made in the job."""
    job = [sys.executable, "-m", "rhnsearch.cli", "sweep", "slurm-job", str(job_dir)]
    job += [*(["--command", command] if command != "run" else []), "--", *sweep_args, "--resume"]
    what = "its confirmation round" if command == "confirm" else "the sweep"
    return "\n".join(
        [
            "#!/bin/bash",
            *sbatch_lines(request, name, job_dir / SLURM_OUTPUT),
            f"# Sweep {name}, written by `rhnsearch sweep {COMMANDS[command]} --slurm`. Slurm "
            "runs it again",
            f"# from the top after a requeue or a time limit: {what} resumes where it stopped.",
            f"cd {shlex.quote(os.getcwd())}",
            "exec " + shlex.join(job),
            "",
        ]
    )


def sbatch(script: Path) -> str:
    """sbatch the script; returns the job id."""
    try:
        proc = subprocess.run(
            ["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=120
        )
    except FileNotFoundError:
        raise UserError(
            "sbatch not found: run `sweep submit --slurm` on a Slurm login node "
            "(or print the script with --dry-run)"
        ) from None
    if proc.returncode != 0:
        raise UserError(f"sbatch refused {script}: {first_line(proc.stderr or proc.stdout)}")
    return proc.stdout.strip().split(";")[0]


# -- in the job --------------------------------------------------------------------------
def scontrol(*args: str) -> str:
    return subprocess.run(
        ["scontrol", *args], capture_output=True, text=True, timeout=60, check=True
    ).stdout


def node_address(node: str) -> str:
    """The node's address as Slurm knows it (its NodeAddr)."""
    for word in scontrol("show", "node", node, "--oneliner").split():
        if word.startswith("NodeAddr="):
            return word.removeprefix("NodeAddr=")
    return socket.gethostbyname(node)


def free(address: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def port_slot(job_id: int, address: str) -> int:
    """The first port of this node's range for the job: the job's own slot of SLOT_SIZE
    ports (from its id), else the next whose ports are all free here."""
    for step in range(PORT_SLOTS):
        base = PORT_BASE + (job_id + step) % PORT_SLOTS * SLOT_SIZE
        if all(free(address, port) for port in range(base, base + SLOT_SIZE)):
            return base
    raise UserError(
        f"no free range of {SLOT_SIZE} ports on {address} between {PORT_BASE} "
        f"and {PORT_BASE + PORT_SLOTS * SLOT_SIZE}"
    )


def ray_start(join: str | None, address: str, base: int, temp_dir: str, env: dict) -> int:
    """`ray start` this node at ADDRESS on its ports (BASE..BASE+SLOT_SIZE) with Slurm's CPUs
    and GPUs: the head (JOIN None; its GCS port is BASE) or a worker joining the head at
    JOIN."""
    ports = dict(
        zip(
            [
                "--node-manager-port",
                "--object-manager-port",
                "--metrics-export-port",
                "--dashboard-agent-grpc-port",
                "--dashboard-agent-listen-port",
                "--runtime-env-agent-port",
                "--ray-client-server-port",
            ],
            range(base + 1, base + SERVICES),
        )
    )
    if join is not None:  # the client server is the head's
        ports.pop("--ray-client-server-port")
    args = [arg for flag, port in ports.items() for arg in (flag, str(port))]
    args += [
        "--min-worker-port",
        str(base + SERVICES),
        "--max-worker-port",
        str(base + SLOT_SIZE - 1),
        "--node-ip-address",
        address,
        "--temp-dir",
        temp_dir,
        "--num-cpus",
        os.environ.get("SLURM_CPUS_ON_NODE", "1"),
        "--num-gpus",
        os.environ.get("SLURM_GPUS_ON_NODE", "0"),
        "--disable-usage-stats",
    ]
    where = (
        ["--address", join]
        if join
        else ["--head", "--port", str(base), "--include-dashboard", "false"]
    )
    proc = subprocess.run(
        ["ray", "start", *where, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )
    if proc.returncode != 0:
        raise UserError(f"ray start on {address} failed: {first_line(proc.stderr[-2000:])}")
    return base


def stop_ray(temp_dir: str, token: Path):
    """Stop this node's Ray of the job alone, the processes that name its TEMP_DIR or read
    the job's TOKEN (Ray renames some, e.g. ray::DashboardAgent): `ray stop` would stop every
    Ray of the machine, other jobs' too."""
    import psutil

    me = psutil.Process()
    spared = {me.pid, *(p.pid for p in me.parents())}

    def ours(process: psutil.Process) -> bool:
        if process.pid in spared:
            return False
        if any(temp_dir in arg for arg in process.info["cmdline"] or []):
            return True
        try:
            return process.environ().get("RAY_AUTH_TOKEN_PATH") == str(token)
        except psutil.Error:  # gone, or another user's
            return False

    mine = [p for p in psutil.process_iter(["cmdline"]) if ours(p)]
    for process in mine:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(mine, timeout=15)
    for process in alive:
        process.kill()


@dataclass
class Job:
    """The running job, as Slurm's variables describe it."""

    job_dir: Path
    id: int = field(default_factory=lambda: int(os.environ["SLURM_JOB_ID"]))

    @property
    def private(self) -> Path:
        """The job's own directory (mode 700): Ray's token and the head's address."""
        return self.job_dir / JOB_PRIVATE_DIR.format(self.id)

    @property
    def token(self) -> Path:
        """Ray's token for the job's cluster, in its private directory."""
        return self.private / JOB_TOKEN_FILE

    @property
    def env(self) -> dict:
        """What every Ray process of the job reads: token auth, the token's file."""
        return {AUTH: "token", "RAY_AUTH_TOKEN_PATH": str(self.token)}

    def temp_dir(self, role: str) -> str:
        return f"/tmp/rhn-{self.id}-{role}"  # short: Ray's socket paths must fit 107 bytes


def log(text: str):
    """A line of the job's output (the command sets this logger to INFO)."""
    logging.getLogger(__name__).info(text)


def run_job(job_dir: str, sweep_args: list[str], command: str = "run") -> int:
    """The batch script's command: a Ray cluster over the allocation's nodes, `sweep COMMAND
    SWEEP_ARGS` on it, the cluster stopped; requeues the job when Slurm's warning signal came
    while it was running. Returns the sweep's exit code."""
    job = Job(Path(job_dir).resolve())
    restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
    nodes = scontrol("show", "hostnames", os.environ["SLURM_JOB_NODELIST"]).split()
    head = node_address(nodes[0])
    log(f"job {job.id} (restart {restarts}): head {nodes[0]} ({head}), {len(nodes)} node(s)")
    if job.private.exists():  # an earlier run of this job: a new cluster, a new token
        for path in job.private.iterdir():
            path.unlink()
    job.private.mkdir(mode=0o700, exist_ok=True)
    token = job.token
    token.touch(mode=0o600)
    token.write_text(secrets.token_hex(32))
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(time.time()))
    workers = None
    try:
        base = ray_start(None, head, port_slot(job.id, head), job.temp_dir("head"), job.env)
        log(f"node {nodes[0]}: ports {base}-{base + SLOT_SIZE - 1}")
        (job.private / JOB_HEAD_FILE).write_text(f"{head}:{base}")
        if len(nodes) > 1:
            workers = subprocess.Popen(
                [
                    "srun",
                    f"--nodes={len(nodes) - 1}",
                    f"--ntasks={len(nodes) - 1}",
                    "--ntasks-per-node=1",
                    f"--exclude={nodes[0]}",
                    "--kill-on-bad-exit=0",
                    sys.executable,
                    "-m",
                    "rhnsearch.cli",
                    "sweep",
                    "slurm-node",
                    str(job.job_dir),
                ],
                env={**os.environ, **job.env},
                start_new_session=True,
            )
        wait_for_nodes(f"{head}:{base}", len(nodes), job.env)
        args = [command, *sweep_args, "--address", f"{head}:{base}"]
        code = run_driver(args, job.env, stopping)
        if stopping and code != 0 and job_state(job.id) == "RUNNING":
            log(
                f"stopped by Slurm's warning signal at {time.strftime('%H:%M:%S')}: the "
                "sweep's state is saved; requeueing the job"
            )
            scontrol("requeue", str(job.id))
        return code
    finally:
        if workers is not None and workers.poll() is None:
            os.killpg(workers.pid, signal.SIGTERM)  # srun passes it on to each node's task
            workers.wait(timeout=60)
        stop_ray(job.temp_dir("head"), job.token)
        for path in job.private.iterdir():
            path.unlink()
        job.private.rmdir()


def wait_for_nodes(address: str, count: int, env: dict):
    """Wait until COUNT nodes are alive in the cluster at ADDRESS."""
    probe = (
        "import ray, sys; ray.init(address=sys.argv[1], logging_level=40); "
        "print(sum(n['Alive'] for n in ray.nodes()))"
    )
    deadline = time.monotonic() + NODE_TIMEOUT
    while True:
        proc = subprocess.run(
            [sys.executable, "-c", probe, address],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=120,
        )
        alive = int(proc.stdout.split()[-1]) if proc.returncode == 0 and proc.stdout else 0
        if alive >= count:
            return
        if time.monotonic() > deadline:
            raise UserError(
                f"only {alive} of the job's {count} nodes joined the Ray head at "
                f"{address} in {NODE_TIMEOUT} s: see the job's output"
            )
        time.sleep(2)


def run_driver(args: list[str], env: dict, stopping: list) -> int:
    """`rhnsearch sweep ARGS` (run or confirm) in a process of its own; Slurm's SIGTERM
    reaches it as SIGINT, which stops a sweep as Ctrl-C does (Tune saves its state, the trials
    stop)."""
    sweep = subprocess.Popen(
        [sys.executable, "-m", "rhnsearch.cli", "sweep", *args], env={**os.environ, **env}
    )
    signal.signal(
        signal.SIGTERM, lambda *_: (stopping.append(time.time()), sweep.send_signal(signal.SIGINT))
    )
    if stopping:  # the signal came while the cluster was starting
        sweep.send_signal(signal.SIGINT)
    return sweep.wait()


def job_state(job_id: int) -> str:
    for word in scontrol("show", "job", str(job_id), "--oneliner").split():
        if word.startswith("JobState="):
            return word.removeprefix("JobState=")
    return "UNKNOWN"


def run_node(job_dir: str) -> int:
    """A worker node of the job (run by srun on each node but the first): join the head
    once it has written its address, stay until Slurm stops this task."""
    job = Job(Path(job_dir).resolve())
    address = (
        node_address(socket.gethostname())
        if "SLURMD_NODENAME" not in os.environ
        else node_address(os.environ["SLURMD_NODENAME"])
    )
    head_file = job.private / JOB_HEAD_FILE
    deadline = time.monotonic() + NODE_TIMEOUT
    while not head_file.exists():
        if time.monotonic() > deadline:
            raise UserError(f"the job's head wrote no address in {NODE_TIMEOUT} s")
        time.sleep(1)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    temp_dir = job.temp_dir(f"node-{os.environ.get('SLURM_NODEID', '0')}")
    try:
        base = ray_start(
            head_file.read_text(), address, port_slot(job.id, address), temp_dir, job.env
        )
        log(
            f"node {os.environ.get('SLURMD_NODENAME', address)}: ports {base}-"
            f"{base + SLOT_SIZE - 1}"
        )
        while not stop:
            time.sleep(1)
    finally:
        stop_ray(temp_dir, job.token)
    return 0


def submit_sweep(
    space: str,
    request: Request,
    tracking_uri: str | None,
    storage_path: str | None,
    preset: str | None = None,
    overrides=(),
    name: str | None = None,
    dry_run: bool = False,
    **options,
) -> tuple[Path, str, str | None]:
    """Validate here, write the batch script into the sweep's job directory (STORAGE/NAME/
    slurm, or results/sweeps/NAME/slurm beside a bucket) and sbatch it; returns (the script's
    path, its text, the job id). With DRY_RUN nothing is written or submitted. Paths are made
    absolute: the job runs on another node of the shared filesystem. `options`: search,
    scheduler, data_dir (a path on the cluster) and experiment, passed on as given."""
    from .jobs import sweep_args

    loaded = checked_space(space, preset, overrides, options.get("search"))
    check_request(request)
    uri = resolve_tracking_uri(tracking_uri)
    root = sweep_storage(storage_path, None)  # the job's Ray is not there yet: no address
    name = name or default_name(loaded.study, preset)
    job_dir = SweepPaths(root, name).slurm_dir
    args = sweep_args(
        str(Path(space).resolve()), name, uri, root, {"preset": preset, **options}, overrides
    )
    text = batch_script(request, name, job_dir, args)
    return written(job_dir / SBATCH_FILE, text, dry_run)


def submit_confirm(
    name: str,
    request: Request,
    storage_path: str | None,
    *,
    top: int,
    seeds: int,
    dry_run: bool = False,
) -> tuple[Path, str, str | None]:
    """Write the batch script of the confirmation round of sweep NAME (`sweep confirm`, with
    TOP and SEEDS) into its job directory and sbatch it; returns (the script's path, its text,
    the job id). The round is checked here first (lifecycle.chosen_confirmation: bad input is
    one line before anything is submitted); with DRY_RUN nothing is written or submitted."""
    from .lifecycle import chosen_confirmation

    check_request(request)
    root = sweep_storage(storage_path, None)  # the job's Ray is not there yet: no address
    chosen_confirmation(name, top=top, seeds=seeds, address=None, storage_path=root)
    job_dir = SweepPaths(root, name).slurm_dir
    args = [name, "--top", str(top), "--seeds", str(seeds), "--storage-path", root]
    text = batch_script(request, name, job_dir, args, command="confirm")
    return written(job_dir / CONFIRM_SBATCH_FILE, text, dry_run)


def written(path: Path, text: str, dry_run: bool) -> tuple[Path, str, str | None]:
    """The batch script TEXT written to PATH and sbatched: (PATH, TEXT, the job id); with
    DRY_RUN nothing is written or submitted (no job id)."""
    if dry_run:
        return path, text, None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path, text, sbatch(path)
