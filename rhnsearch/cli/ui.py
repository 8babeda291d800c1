"""`rhnsearch ui`: the MLflow UI on the results store, bound to loopback by default."""
import socket
import subprocess
import sys

from ..errors import UserError


def add_ui(sub):
    p = sub.add_parser("ui", help="serve the MLflow UI on the results store",
                       description="Serve the MLflow UI on the default store (or "
                       "--tracking-uri), bound to 127.0.0.1 unless --host is given, and "
                       "print the link to each study's table of runs.")
    p.add_argument("--port", type=int, default=5000)
    p.add_argument("--host", default="127.0.0.1",
                   help="bind address; expose beyond loopback only behind a firewall/tunnel")
    p.add_argument("--tracking-uri", help="store to serve (default: $MLFLOW_TRACKING_URI, "
                   "else sqlite:///results/mlflow.db)")
    p.set_defaults(run=run_ui)


def runs_table_url(base: str, experiment_id: str) -> str:
    """The experiment's runs table in MLflow's model-training view (the UI opens an
    experiment on its GenAI traces otherwise, which a sweep has none of)."""
    return f"{base}/#/experiments/{experiment_id}?workflowType=machine_learning"


def run_ui(args):
    from mlflow.tracking import MlflowClient

    from ..tracking_store import check_store, resolve_tracking_uri

    with socket.socket() as probe:
        if probe.connect_ex((args.host, args.port)) == 0:
            raise UserError(f"port {args.port} on {args.host} is already in use: pass "
                            "--port with a free one")
    uri = resolve_tracking_uri(args.tracking_uri)
    check_store(uri)
    base = f"http://{args.host}:{args.port}"
    print(f"MLflow UI on {base} for {uri}", file=sys.stderr)
    for experiment in MlflowClient(uri).search_experiments():
        if experiment.name != "Default":
            print(f"  {experiment.name}: {runs_table_url(base, experiment.experiment_id)}",
                  file=sys.stderr)
    sys.stderr.flush()
    return subprocess.call([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                            uri, "--host", args.host, "--port", str(args.port), "--workers",
                            "1"])
