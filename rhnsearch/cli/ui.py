"""`rhnsearch ui`: the MLflow UI on the results store, bound to loopback by default."""

import os
import signal
import socket
import subprocess
import sys
import time

from ..errors import UserError

# MLflow's job runner (GenAI scorers, trace archival) serves nothing a sweep logs, and costs
# processes, memory and CPU at start (docs/scale-history.md, "MLflow's job runner").
JOB_RUNNER = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"


def add_ui(sub):
    p = sub.add_parser(
        "ui",
        help="serve the MLflow UI on the results store",
        description="Serve the MLflow UI on the default store (or "
        "--tracking-uri), bound to 127.0.0.1 unless --host is given, and "
        "print the link to each study's table of runs. MLflow's job runner (GenAI "
        f"scorers, trace archival) is off unless {JOB_RUNNER}=true is set.",
    )
    p.add_argument("--port", type=int, default=5000)
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="bind address; expose beyond loopback only behind a firewall/tunnel",
    )
    p.add_argument(
        "--tracking-uri",
        help="store to serve (default: $MLFLOW_TRACKING_URI, else sqlite:///results/mlflow.db)",
    )
    p.set_defaults(run=run_ui)


def runs_table_url(base: str, experiment_id: str) -> str:
    """The experiment's runs table in MLflow's model-training view (the UI opens an
    experiment on its GenAI traces otherwise, which a sweep has none of)."""
    return f"{base}/#/experiments/{experiment_id}?workflowType=machine_learning"


def run_ui(args):
    from mlflow.tracking import MlflowClient

    from ..tracking.uris import open_store

    with socket.socket() as probe:
        if probe.connect_ex((args.host, args.port)) == 0:
            raise UserError(
                f"port {args.port} on {args.host} is already in use: pass --port with a free one"
            )
    uri = open_store(args.tracking_uri)
    base = f"http://{args.host}:{args.port}"
    print(f"MLflow UI on {base} for {uri}", file=sys.stderr)
    for experiment in MlflowClient(uri).search_experiments():
        if experiment.name != "Default":
            print(
                f"  {experiment.name}: {runs_table_url(base, experiment.experiment_id)}",
                file=sys.stderr,
            )
    sys.stderr.flush()
    return serve(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            uri,
            "--host",
            args.host,
            "--port",
            str(args.port),
            "--workers",
            "1",
        ],
        server_env(os.environ),
    )


def server_env(environ) -> dict[str, str]:
    """ENVIRON with MLflow's job runner off, unless ENVIRON says otherwise."""
    return {JOB_RUNNER: "false", **environ}


def serve(command: list[str], env: dict[str, str] | None = None) -> int:
    """Run the MLflow server in a process group of its own until it exits, or until this
    process gets SIGTERM or SIGINT; then stop the whole group (the server's uvicorn worker,
    job runner and huey consumers, which outlive a server signalled alone) and wait for it.
    Returns the server's exit code, or 128 + the signal's number."""
    server = subprocess.Popen(command, start_new_session=True, env=env)
    received = []

    def on_signal(signum, frame):
        received.append(signum)
        signal_group(server.pid, signal.SIGTERM)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = server.wait()
    finally:
        stop_group(server.pid)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 + received[0] if received else code


def signal_group(group: int, signum: int) -> bool:
    """Send `signum` to a process group; False if no process is left in it."""
    try:
        os.killpg(group, signum)
        return True
    except ProcessLookupError:
        return False


def stop_group(group: int, grace: float = 30.0):
    """SIGTERM the group, SIGKILL what is left of it after `grace` seconds; return when it is
    empty (or 5 s after the SIGKILL)."""
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        deadline = time.monotonic() + wait
        if not signal_group(group, signum):
            return
        while time.monotonic() < deadline:
            if not signal_group(group, 0):
                return
            time.sleep(0.2)
