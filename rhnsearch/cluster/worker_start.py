"""A trial worker's imports taken a few workers at a time on each node.

Tune starts an actor for each trial slot at once, and each actor's worker imports torch, Tune
and the trainable (some 1.5 s of CPU) as it starts. Where a node holds more slots than cores
(fractional trials on a laptop, the scale benchmark's simulated slots), those imports share the
cores and all end together, late: 64 on two cores put the first trial some 80 s after the
start. Ray runs `preload` in each of the sweep's workers as it starts (runtime_env's
worker_process_setup_hook): it imports the modules named in its env var while it holds one of
the node's turns, a file lock a core, so the first workers are ready in seconds and the rest
follow in turn; where a node has a core a worker, nobody waits.

Ray starts a worker at its own niceness (0) and lowers it to 15 only once the worker has
connected: 64 starting on two cores would take the cores from those importing in their turn
(the first trial of a resume some 25 s after the resume's start). On a Ray started here the
workers start at 15 (`ray_compat.workers_started_nice`); a cluster's nodes start theirs as the
cluster says.
"""

import fcntl
import importlib
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager

from ..compat import ray as ray_compat

PRELOAD_ENV = "RHNSEARCH_WORKER_PRELOAD"  # the modules, comma-separated
POLL_SECONDS = 0.05
NICENESS = 15  # a worker's, as Ray sets it: the driver and Ray's own processes come first


def runtime_env(modules, *, local: bool = False) -> dict:
    """The runtime_env fields that have each worker import MODULES (names) in its turn.

    Args:
        local: The workers run on this machine's Python (a Ray started here): they start at
            NICENESS, not at Ray's own niceness until they connect.
    """
    fields = {
        "worker_process_setup_hook": f"{__name__}.preload",
        "env_vars": {PRELOAD_ENV: ",".join(modules)},
    }
    if local and shutil.which("nice"):
        nice = ray_compat.workers_started_nice(NICENESS, sys.executable)
        fields |= {**nice, "env_vars": fields["env_vars"] | nice["env_vars"]}
    return fields


def preload():
    """Ray's setup hook: import $RHNSEARCH_WORKER_PRELOAD's modules in one of the node's turns.
    A module that fails to import is left to the trial that needs it, which says why (a hook
    that raises would end the worker instead)."""
    names = [n for n in os.environ.get(PRELOAD_ENV, "").split(",") if n]
    with node_turn():
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the trial's own import reports it
                continue


@contextmanager
def node_turn(turns: int | None = None, folder: str | None = None):
    """Hold one of TURNS (this process's cores) file locks in FOLDER (one a user in the
    temporary directory) while the block runs: at most TURNS processes of this node at once."""
    turns = turns or cores()
    folder = folder or os.path.join(tempfile.gettempdir(), f"rhnsearch-workers-{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    paths = [os.path.join(folder, str(i)) for i in range(turns)]
    files = [os.open(path, os.O_CREAT | os.O_RDWR, 0o600) for path in paths]
    try:
        while not any(taken(fd) for fd in files):
            time.sleep(POLL_SECONDS)
        yield
    finally:
        for fd in files:
            os.close(fd)  # (a lock goes with its last descriptor, or with the process)


def cores() -> int:
    """The cores this process may run on (all of the machine's where the OS does not say)."""
    if hasattr(os, "sched_getaffinity"):  # (Linux)
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def taken(fd: int) -> bool:
    """Whether this process got the lock on FD without waiting."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
