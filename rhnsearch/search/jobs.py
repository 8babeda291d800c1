"""Submit a sweep to a Ray cluster as a Ray Job, and follow it."""
import asyncio
import shlex
import sys
import time
from datetime import datetime
from pathlib import Path

import yaml

from ..data import data_dir as default_data_dir
from ..errors import UserError
from ..tracking_store import resolve_tracking_uri
from .space import load_space
from .sweep import check_address

RUNTIME_ENV = Path("jobs/runtime_env.yaml")


def job_client(address: str):
    from ray.job_submission import JobSubmissionClient
    check_address(address)
    try:
        return JobSubmissionClient(address)
    except Exception as exc:  # the client's own connection errors
        raise UserError(f"no Ray Jobs API at {address} ({str(exc).splitlines()[0][:160]}): "
                        "pass the dashboard address, e.g. http://127.0.0.1:8265") from None


def entrypoint(args, name: str, uri: str, data: str) -> str:
    """The `rhnsearch sweep run` command the job runs on the head node."""
    cmd = ["python", "-m", "rhnsearch.cli", "sweep", "run", args.space, "--address", "auto",
           "--name", name, "--tracking-uri", uri, "--data-dir", data]
    for flag in ("preset", "search", "scheduler", "experiment"):
        if getattr(args, flag):
            cmd += [f"--{flag}", getattr(args, flag)]
    for override in args.overrides:
        cmd += ["--set", override]
    return shlex.join(cmd)


def runtime_env() -> dict:
    if not RUNTIME_ENV.exists():
        raise UserError(f"{RUNTIME_ENV} not found: run `rhnsearch sweep submit` from the "
                        "project directory (the job ships it as its working_dir)")
    return yaml.safe_load(RUNTIME_ENV.read_text())


def submit(args) -> str:
    """Validate locally, then submit; returns the job id."""
    space = load_space(args.space, args.preset, args.overrides)
    name = args.name or f"{space.study}-{args.preset or 'base'}-{datetime.now():%Y%m%d-%H%M%S}"
    client = job_client(args.address)
    uri = resolve_tracking_uri(args.tracking_uri)
    if uri.startswith("sqlite"):
        print(f"note: results go to {uri} on the cluster's head node; on a remote cluster "
              "pass --tracking-uri http://MLFLOW_HOST:5000", file=sys.stderr)
    data = str(default_data_dir(args.data_dir).resolve())
    deadline = time.monotonic() + 90
    while True:
        try:
            return client.submit_job(entrypoint=entrypoint(args, name, uri, data),
                                     runtime_env=runtime_env(),
                                     submission_id=f"rhnsearch-{name}")
        except RuntimeError as exc:  # the SDK's error for a failed request
            message = str(exc).splitlines()[0][:200]
            if "try again later" not in message or time.monotonic() > deadline:
                raise UserError(f"the Ray Jobs API at {args.address} refused the sweep: "
                                f"{message}") from None
            time.sleep(2)  # a cluster that just started has no job agent yet


def job_call(address: str, job_id: str, method: str):
    """Call a JobSubmissionClient method on a job; an unknown job is a one-line error."""
    try:
        return getattr(job_client(address), method)(job_id)
    except RuntimeError as exc:  # the SDK's error for any failed request
        raise UserError(f"job {job_id} at {address}: {str(exc).splitlines()[0][:200]} "
                        f"(list jobs with `ray job list --address {address}`)") from None


def job_status(address: str, job_id: str) -> str:
    info = job_call(address, job_id, "get_job_info")
    return f"{job_id}: {info.status.value}" + (f" ({info.message})" if info.message else "")


def follow_logs(address: str, job_id: str, out) -> int:
    """Stream the job's logs until it ends; exit code 0 if it succeeded."""
    client = job_client(address)

    async def tail():
        async for lines in client.tail_job_logs(job_id):
            out.write(lines)
            out.flush()

    job_call(address, job_id, "get_job_info")  # an unknown job fails here, in one line
    asyncio.run(tail())
    status = client.get_job_status(job_id).value
    print(f"{job_id}: {status}", file=sys.stderr)
    return 0 if status == "SUCCEEDED" else 1
