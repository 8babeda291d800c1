"""Ray for a sweep: a local Ray on loopback, or the cluster at an address, and the resources
the space asks for checked against it before anything is recorded."""

import logging
import os
import socket
import sys
import tempfile
from contextlib import contextmanager
from urllib.parse import urlparse

import ray
from ray.exceptions import AuthenticationError

from ..compat import ray as ray_compat
from ..errors import UserError, first_line
from . import worker_start
from .malloc import limit_malloc_arenas

ALLOW_CPU_FALLBACK = "RHNSEARCH_ALLOW_CPU_FALLBACK"  # =1: a GPU trial may train on the CPU

# Set in a Ray Job whose runtime env ships the sweep's own cells (jobs.submit): its
# driver joins with them already there, and Ray refuses a second py_modules for the job.
CELLS_SHIPPED_ENV = "RHNSEARCH_CELLS_SHIPPED"

log = logging.getLogger(__name__)


def check_address(address: str):
    """Fail fast, in one line, when a Ray address does not answer (a TCP connect)."""
    if address in ("auto", "local"):
        return
    url = urlparse(address if "://" in address else f"ray://{address}")
    host, port = url.hostname, url.port
    if not host or not port:
        raise UserError(
            f"cannot read Ray address {address!r}: write HOST:PORT (e.g. 127.0.0.1:6379) or auto"
        )
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as exc:
        raise UserError(
            f"Ray at {address} is not reachable ({exc.strerror or exc}): start it "
            "with `ray start --head` or check the address"
        ) from None


def start_ray(address: str | None, modules: list[str] = (), preload: list[str] = ()):
    """A local Ray started here by default; with an address, join that cluster. MODULES (files or
    package folders: cells of one's own) are shipped to every worker; each worker imports PRELOAD
    (module names) as it starts, a few workers a node at a time, and on a local Ray starts at
    niceness 15 (worker_start.py). The driver's malloc arenas and Tune's settings for a sweep's
    driver are set even where Ray is already up (its threads made then keep their arenas)."""
    limit_malloc_arenas()
    # Checkpointing every epoch is the point (resume, retries): don't warn about it.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # MLflow holds every result: Tune's file loggers (result.json, progress.csv, TensorBoard)
    # would upload each trial's files again at every sync of the storage. Set it to 0 to
    # have them back.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    # Tune keeps every checkpoint a trial registered (its own num_to_keep is off: see
    # sweep/checkpoints.py) with that epoch's metrics, in the driver's memory and in each
    # trial's saved state: keep the checkpoint alone (the newest keeps its metrics).
    os.environ.setdefault("TUNE_ONLY_STORE_CHECKPOINT_SCORE_ATTRIBUTE", "1")
    if ray.is_initialized():
        return
    # The driver's opt-out goes to its trials' workers (see trainable.assigned_gpus).
    env = {k: os.environ[k] for k in (ALLOW_CPU_FALLBACK,) if k in os.environ}
    runtime_env = {"env_vars": env} if env else {}
    if preload:
        # (ray.init joins the cluster at $RAY_ADDRESS, if set, whose nodes have their Python)
        local = not (address or os.environ.get("RAY_ADDRESS"))
        warm = worker_start.runtime_env(preload, local=local)
        runtime_env = {**warm, "env_vars": {**env, **warm["env_vars"]}}
    if modules and os.environ.get(CELLS_SHIPPED_ENV) != "1":
        runtime_env["py_modules"] = list(modules)
    runtime_env = runtime_env or None
    if address:
        check_address(address)
        with held_stderr() as held:
            if (
                address not in ("auto", "local")
                and "://" not in address
                and ray_compat.refuses_token(address)
            ):
                raise UserError(refused_token(address))
            try:
                ray.init(address=address, logging_level=logging.WARNING, runtime_env=runtime_env)
            except AuthenticationError:
                raise UserError(refused_token(address)) from None
            except (ConnectionError, RuntimeError) as exc:
                if "Unauthenticated" in held():  # Ray's C++ client saw the refusal
                    raise UserError(refused_token(address)) from None
                raise UserError(
                    f"could not join the Ray cluster at {address}: {first_line(exc)}"
                ) from None
    else:
        ray_compat.init_on_loopback(
            include_dashboard=False, logging_level=logging.WARNING, runtime_env=runtime_env
        )


@contextmanager
def held_stderr():
    """Hold what is written to this process's stderr (fd 2) meanwhile: Ray's C++ client logs
    its retries there, past Python's logging. Yields a function that reads it; it is written
    out at the end unless an error (said in one line instead) ends the block."""
    sys.stderr.flush()
    saved, file = os.dup(2), tempfile.TemporaryFile()
    os.dup2(file.fileno(), 2)

    def held() -> str:
        file.seek(0)
        return file.read().decode(errors="replace")

    ended = False
    try:
        yield held
        ended = True
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        if ended:
            sys.stderr.write(held())
        file.close()


def refused_token(address: str) -> str:
    """The one line for a cluster that refused this client's Ray token (or its lack of one)."""
    where = os.environ.get("RAY_AUTH_TOKEN_PATH") or (
        "RAY_AUTH_TOKEN" if os.environ.get("RAY_AUTH_TOKEN") else "~/.ray/auth_token"
    )
    mode = os.environ.get("RAY_AUTH_MODE", "unset")
    return (
        f"the Ray cluster at {address} refused this client's token (RAY_AUTH_MODE={mode}, "
        f"token from {where}): set RAY_AUTH_MODE=token and the cluster's token in "
        "RAY_AUTH_TOKEN or ~/.ray/auth_token"
    )


def check_gpus(gpu: float, local: bool):
    """A trial asking for a GPU that Ray does not have would wait forever. A local Ray (not
    started yet) has the GPUs torch sees; a cluster may autoscale GPU nodes (a warning)."""
    import torch

    if gpu > 0 and not (torch.cuda.is_available() if local else ray.cluster_resources().get("GPU")):
        message = (
            f"the space asks for {gpu} GPU per trial but Ray has no GPU: pass --set "
            "resources.gpu=0 to train on CPUs"
        )
        if local:
            raise UserError(message)
        log.warning("%s (unless the cluster autoscales GPU nodes)", message)


def trial_slots(cpu: float, gpu: float) -> int:
    """How many trials of CPU and GPU each the Ray cluster holds at once, as it is now (at
    least one: an autoscaling cluster grows for the trials waiting)."""
    total = ray.cluster_resources()
    held = [int(total.get(kind, 0) // ask) for kind, ask in (("CPU", cpu), ("GPU", gpu)) if ask]
    return max(1, min(held, default=1))
