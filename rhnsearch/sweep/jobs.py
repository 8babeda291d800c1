"""Submit a sweep to a Ray cluster as a Ray Job, and follow it.

The job runs `rhnsearch sweep run` on the cluster in a temporary copy of the project: its
results must go where they outlive the job (an MLflow server, shared storage), and its data
dir is the cluster's.
"""

import asyncio
import os
import shlex
import shutil
import tempfile
import time
from pathlib import Path

import yaml
from ray.exceptions import AuthenticationError

from ..cluster.connect import CELLS_SHIPPED_ENV, check_address, refused_token
from ..errors import UserError, first_line
from ..files import storage
from ..files.layout import STORAGE_ENV, default_name
from ..provenance import COMMIT_ENV, DIRTY_ENV, git_commit
from .checks import checked_space

RUNTIME_ENV = Path("jobs/runtime_env.yaml")


def shippable(path: str, folder: str) -> str:
    """A cell's module as Ray's Jobs API takes it, a folder: a package's own, or for a module
    file MODULE.py the folder FOLDER/MODULE holding it as its __init__.py (imported alike)."""
    if Path(path).is_dir():
        return path
    package = Path(folder) / Path(path).stem
    package.mkdir()
    shutil.copyfile(path, package / "__init__.py")
    return str(package)


def job_client(address: str):
    from ray.job_submission import JobSubmissionClient

    check_address(address)
    try:
        return JobSubmissionClient(address)
    except AuthenticationError:
        raise UserError(refused_token(address)) from None
    except Exception as exc:  # the client's own connection errors
        raise UserError(
            f"no Ray Jobs API at {address} ({first_line(exc, 160)}): "
            "pass the dashboard address, e.g. http://127.0.0.1:8265"
        ) from None


def sweep_args(
    space: str, name: str, uri: str, storage_path: str, options: dict, overrides=()
) -> list[str]:
    """The arguments of the `rhnsearch sweep run` a cluster runs; `options` are further flags
    (preset, search, ...), those that are None left out."""
    args = [space, "--name", name, "--tracking-uri", uri, "--storage-path", storage_path]
    for flag, value in options.items():
        if value is not None:
            args += [f"--{flag.replace('_', '-')}", str(value)]
    for override in overrides:
        args += ["--set", override]
    return args


def entrypoint(
    space: str, name: str, uri: str, storage_path: str, options: dict, overrides=()
) -> str:
    """The `rhnsearch sweep run` command a Ray Job runs on the cluster."""
    args = sweep_args(space, name, uri, storage_path, options, overrides)
    return shlex.join(["python", "-m", "rhnsearch.cli", "sweep", "run", *args, "--address", "auto"])


def runtime_env() -> dict:
    """jobs/runtime_env.yaml, with this checkout's git commit (the job's copy has no .git)."""
    if not RUNTIME_ENV.exists():
        raise UserError(
            f"{RUNTIME_ENV} not found: run `rhnsearch sweep submit` from the "
            "project directory (the job ships it as its working_dir)"
        )
    env = yaml.safe_load(RUNTIME_ENV.read_text())
    commit, dirty = git_commit()
    if commit:
        env.setdefault("env_vars", {}).update({COMMIT_ENV: commit, DIRTY_ENV: str(dirty).lower()})
    return env


def submit(
    address: str,
    space: str,
    tracking_uri: str | None,
    storage_path: str | None,
    preset: str | None = None,
    overrides=(),
    name: str | None = None,
    **options,
) -> str:
    """Validate here, then submit; returns the job id. `options`: search, scheduler,
    data_dir (a path on the cluster) and experiment, passed on as given."""
    loaded = checked_space(space, preset, overrides, options.get("search"))
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri or not uri.startswith(("http://", "https://")):
        raise UserError(
            "a submitted sweep runs in a temporary directory on the cluster, so "
            "its MLflow store must be a server: pass --tracking-uri "
            "http://MLFLOW_HOST:5000 (an `mlflow server` the cluster reaches)"
        )
    storage_path = storage_path or os.environ.get(STORAGE_ENV)
    if not storage_path or not (storage.is_uri(storage_path) or Path(storage_path).is_absolute()):
        raise UserError(
            "a submitted sweep keeps its state and checkpoints where every node "
            "of the cluster can read them: pass --storage-path with an absolute "
            "path of a shared directory or a bucket URI (s3://BUCKET/PATH)"
        )
    name = name or default_name(loaded.study, preset)
    client = job_client(address)
    command = entrypoint(space, name, uri, storage_path, {"preset": preset, **options}, overrides)
    env = runtime_env()
    with tempfile.TemporaryDirectory(prefix="rhnsearch-cells-") as folder:  # uploaded by then
        if loaded.cell_modules:  # cells of one's own reach the job's driver and its workers
            env["py_modules"] = [shippable(path, folder) for path in loaded.cell_modules]
            env.setdefault("env_vars", {})[CELLS_SHIPPED_ENV] = "1"  # its driver ships none again
        return submit_job(client, address, command, env, name)


def submit_job(client, address: str, command: str, env: dict, name: str) -> str:
    """Send the job, waiting up to 90 s for a cluster that has just started; its id."""
    deadline = time.monotonic() + 90
    while True:
        try:
            return client.submit_job(
                entrypoint=command, runtime_env=env, submission_id=f"rhnsearch-{name}"
            )
        except AuthenticationError:
            raise UserError(refused_token(address)) from None
        except RuntimeError as exc:  # the SDK's error for a failed request
            message = first_line(exc)
            if "try again later" not in message or time.monotonic() > deadline:
                raise UserError(
                    f"the Ray Jobs API at {address} refused the sweep: {message}"
                ) from None
            time.sleep(2)  # a cluster that just started has no job agent yet


def job_call(address: str, job_id: str, method: str):
    """Call a JobSubmissionClient method on a job; an unknown job is a one-line error."""
    try:
        return getattr(job_client(address), method)(job_id)
    except AuthenticationError:
        raise UserError(refused_token(address)) from None
    except RuntimeError as exc:  # the SDK's error for any failed request
        raise UserError(
            f"job {job_id} at {address}: {first_line(exc)} "
            f"(list jobs with `ray job list --address {address}`)"
        ) from None


def job_status(address: str, job_id: str) -> str:
    info = job_call(address, job_id, "get_job_info")
    return f"{job_id}: {info.status.value}" + (f" ({info.message})" if info.message else "")


def follow_logs(address: str, job_id: str, out) -> str:
    """Stream the job's logs to `out` until it ends; returns its final status."""
    client = job_client(address)

    async def tail():
        async for lines in client.tail_job_logs(job_id):
            out.write(lines)
            out.flush()

    job_call(address, job_id, "get_job_info")  # an unknown job fails here, in one line
    asyncio.run(tail())
    return client.get_job_status(job_id).value
