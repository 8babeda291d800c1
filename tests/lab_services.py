"""Real lab services for tests and benchmarks: a PostgreSQL database of one's own on the
machine's Debian cluster (started if it is down), and an `mlflow server` backed by it.

PostgreSQL must be installed (Debian's `postgresql`; `.ci/run` installs it): where it is
missing, a test skips naming the package (fails in CI); where it cannot be started, the
fixtures fail with the reason."""

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from rhnsearch.cli.ui import server_env

import tiers
from ports import free_port


class ServiceError(RuntimeError):
    """A lab service could not be started."""


def _run(cmd: list[str], what: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise ServiceError(f"{what} failed ({' '.join(cmd)}): {proc.stderr.strip()[-1000:]}")
    return proc.stdout


def postgres_cluster() -> int:
    """The port of the machine's PostgreSQL cluster (the first pg_lsclusters lists), started
    with pg_ctlcluster if it is down."""
    if shutil.which("pg_lsclusters") is None:
        tiers.missing(
            "Debian's PostgreSQL (no pg_lsclusters)",
            "apt-get install -y postgresql, as .ci/run does",
        )
    lines = _run(["pg_lsclusters", "--no-header"], "listing PostgreSQL clusters").splitlines()
    if not lines:
        raise ServiceError("no PostgreSQL cluster: create one (pg_createcluster 15 main)")
    version, name, port, status = lines[0].split()[:4]
    if status != "online":
        try:
            _run(["pg_ctlcluster", version, name, "start"], f"starting PostgreSQL {version}/{name}")
        except ServiceError:  # another test process may have started it meanwhile
            if "online" not in _run(["pg_lsclusters", "--no-header", version, name], "listing"):
                raise
    return int(port)


def psql(port: int, sql: str) -> str:
    """Run SQL as the `postgres` superuser (peer authentication, so as root)."""
    return _run(
        [
            "runuser",
            "-u",
            "postgres",
            "--",
            "psql",
            "-p",
            str(port),
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-Atc",
            sql,
        ],
        "psql",
    )


@contextmanager
def postgres_database():
    """A fresh role and database of their own, with a password: yields their
    postgresql://user:password@127.0.0.1:PORT/db URI; both are dropped afterwards."""
    port = postgres_cluster()
    tiers.needs("services", "uses PostgreSQL")
    name, password = f"rhn_{secrets.token_hex(6)}", secrets.token_hex(16)
    psql(port, f"CREATE ROLE {name} LOGIN PASSWORD '{password}'")
    try:
        psql(port, f"CREATE DATABASE {name} OWNER {name}")
        yield f"postgresql://{name}:{password}@127.0.0.1:{port}/{name}"
    finally:
        psql(port, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        psql(port, f"DROP ROLE IF EXISTS {name}")


LAB_WORKERS = 4  # the lab's server in jobs/README.md: MLflow's default, listings side by side


@contextmanager
def mlflow_server(
    backend_uri: str,
    workdir: Path,
    timeout: float = 180,
    artifacts: str | None = None,
    env: dict | None = None,
    login: bool = False,
    workers: int = 1,
):
    """`mlflow server` on BACKEND_URI (WORKERS processes, on a free loopback port, artifacts proxied
    to ARTIFACTS, by default WORKDIR/artifacts, its log in WORKDIR/mlflow-server.log, with
    ENV added to its environment; with LOGIN, behind MLflow's basic-auth app, whose admin is
    named in ENV and whose users are kept in WORKDIR): yields its URL once /health answers;
    its process group is killed afterwards. MLflow's job runner (eight processes and some
    1.9 GB for GenAI jobs no test uses) is off, as `rhnsearch ui` has it, unless ENV says."""
    tiers.needs("services", "starts an MLflow server")
    port, log = free_port(), open(workdir / "mlflow-server.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            backend_uri,
            "--artifacts-destination",
            artifacts or str(workdir / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
            *(["--app-name", "basic-auth"] if login else []),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=workdir,
        env={**server_env(os.environ), **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = (workdir / "mlflow-server.log").read_text()[-2000:]
                    raise ServiceError(
                        f"mlflow server on {backend_uri.split('@')[-1]} did "
                        f"not start (exit {proc.poll()}):\n{tail}"
                    ) from None
                time.sleep(0.5)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()


@pytest.fixture(scope="session")
def postgres_uri():
    """The session's own PostgreSQL database."""
    with postgres_database() as uri:
        yield uri


@pytest.fixture(scope="session")
def mlflow_pg_server(postgres_uri, tmp_path_factory):
    """An `mlflow server` backed by the session's PostgreSQL database: its URL."""
    with mlflow_server(postgres_uri, tmp_path_factory.mktemp("mlflow_pg")) as url:
        yield url
