"""The `rhnsearch` command line: one subcommand group per module, errors as one line."""
import argparse
import json
import math
import sys

from .errors import UserError


def _json_default(value):
    return None if isinstance(value, float) and not math.isfinite(value) else str(value)


def print_json(obj):
    """Print one JSON line (non-finite floats become null, so the line is valid JSON)."""
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v
    print(json.dumps(clean(obj), default=_json_default), flush=True)


# -- train ---------------------------------------------------------------------------------
def add_train(sub):
    from dataclasses import fields
    from .train import TrialConfig

    p = sub.add_parser("train", help="train one configuration and print its metrics",
                       description="Train one configuration epoch by epoch; progress on "
                       "stderr, final metrics as JSON on the last stdout line with --json.")
    p.add_argument("--task", choices=["jsb", "ptb"], help="jsb, or ptb (= --dataset ptb)")
    p.add_argument("--data-dir", help="data dir (default: $RHNSEARCH_DATA_DIR or user cache)")
    p.add_argument("--checkpoint-dir", help="save the trainer here each epoch; resume from it")
    p.add_argument("--json", action="store_true", help="print final metrics as one JSON line")
    for f in fields(TrialConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.type in (bool, "bool"):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            kind = {"int": int, "float": float, "str": str}.get(getattr(f.type, "__name__",
                                                                       str(f.type)), str)
            p.add_argument(flag, type=kind, default=f.default, help=f"default {f.default}")
    p.set_defaults(run=run_train)


def run_train(args):
    from dataclasses import fields
    from pathlib import Path
    from .data import load_dataset
    from .train import Trainer, TrialConfig

    values = {f.name: getattr(args, f.name) for f in fields(TrialConfig)}
    if args.task and args.task != "jsb" and values["dataset"] == "jsb":
        values["dataset"] = args.task
    config = TrialConfig(**values).validate()
    trainer = Trainer(config, load_dataset(config.dataset, args.data_dir))
    ckpt = Path(args.checkpoint_dir) if args.checkpoint_dir else None
    if ckpt and (ckpt / "trainer.pt").exists():
        trainer.load(ckpt)
        print(f"resumed from {ckpt} at epoch {trainer.epoch}", file=sys.stderr)

    def progress(m):
        print(f"epoch {m['epoch']:>3}/{config.epochs}  train {m['train_loss']:.4f}  "
              f"valid {m['valid_loss']:.4f}  lr {m['lr']:.3g}  |g| {m['grad_norm']:.3g}  "
              f"{m['epoch_seconds']:.1f}s  {m['status']}", file=sys.stderr, flush=True)
        if ckpt:
            ckpt.mkdir(parents=True, exist_ok=True)
            trainer.save(ckpt)

    result = trainer.fit(progress)
    if args.json:
        print_json(result)
    else:
        print(" ".join(f"{k}={v}" for k, v in result.items()))


# -- budget --------------------------------------------------------------------------------
def add_budget(sub):
    p = sub.add_parser("budget", help="widths that fit a parameter budget, per depth",
                       description="Solve the width whose parameter count is nearest the "
                       "budget, for each depth.")
    p.add_argument("--task", choices=["jsb", "ptb"], required=True)
    p.add_argument("--arch", required=True, help="rhn, hsg, dtrnn, dtsrnn or lstm")
    p.add_argument("--depths", required=True, help="e.g. 1-10 or 1,2,4,6")
    p.add_argument("--params", required=True, help="budget, e.g. 32M or 250k")
    p.add_argument("--tied", action="store_true", help="tie softmax and embedding (ptb)")
    p.add_argument("--vocab", type=int, default=10000, help="vocabulary size (ptb)")
    p.add_argument("--json", action="store_true", help="print a JSON list as the last line")
    p.set_defaults(run=run_budget)


def run_budget(args):
    from .budget import count_params, parse_count, parse_depths, solve_width

    budget = parse_count(args.params)
    rows = []
    for depth in parse_depths(args.depths):
        width = solve_width(budget, args.task, args.arch, depth, args.tied, args.vocab)
        rows.append({"depth": depth, "width": width, "params": count_params(
            args.task, args.arch, depth, width, args.tied, args.vocab)})
    print(f"{'depth':>5} {'width':>6} {'params':>12}", file=sys.stderr if args.json else None)
    for r in rows:
        print(f"{r['depth']:>5} {r['width']:>6} {r['params']:>12,}",
              file=sys.stderr if args.json else None)
    if args.json:
        print_json(rows)


# -- data ----------------------------------------------------------------------------------
def add_data(sub):
    p = sub.add_parser("data", help="fetch and check datasets",
                       description="Download datasets from their public sources (sha256 "
                       "checked, written atomically).")
    dsub = p.add_subparsers(dest="data_command", required=True)
    f = dsub.add_parser("fetch", help="download a dataset into the data dir",
                        description="Download a dataset into the data dir and check it.")
    f.add_argument("dataset", choices=["jsb", "ptb", "ptb-sample"])
    f.add_argument("--data-dir", help="data dir (default: $RHNSEARCH_DATA_DIR or user cache)")
    f.set_defaults(run=run_fetch)


def run_fetch(args):
    from .data import data_dir, fetch

    for path in fetch(args.dataset, data_dir(args.data_dir)):
        print(path)


def add_ui(sub):
    p = sub.add_parser("ui", help="serve the MLflow UI on the results store",
                       description="Serve the MLflow UI on the default store (or "
                       "--tracking-uri), bound to 127.0.0.1 unless --host is given.")
    p.add_argument("--port", type=int, default=5000)
    p.add_argument("--host", default="127.0.0.1",
                   help="bind address; expose beyond loopback only behind a firewall/tunnel")
    p.add_argument("--tracking-uri", help="store to serve (default: sqlite:///results/"
                   "mlflow.db)")
    p.set_defaults(run=run_ui)


def run_ui(args):
    import socket
    import subprocess
    from .tracking_store import resolve_tracking_uri

    with socket.socket() as probe:
        if probe.connect_ex((args.host, args.port)) == 0:
            raise UserError(f"port {args.port} on {args.host} is already in use: pass "
                            "--port with a free one")
    uri = resolve_tracking_uri(args.tracking_uri)
    print(f"MLflow UI on http://{args.host}:{args.port} for {uri}", file=sys.stderr, flush=True)
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host",
           args.host, "--port", str(args.port), "--workers", "1"]
    return subprocess.call(cmd)


def _add_sweep(sub):
    from .search.cli import add_sweep
    add_sweep(sub)


def _add_analyze(sub):
    from .analysis.cli import add_analyze
    add_analyze(sub)


def _add_results(sub):
    from .results.cli import add_results
    add_results(sub)


COMMANDS = [add_train, add_budget, add_data, _add_sweep, _add_analyze, _add_results, add_ui]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rhnsearch", description="Hyperparameter search for Recurrent Highway Networks "
        "and deep-transition RNNs on Ray Tune, recorded in MLflow.")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv=None):
    import logging
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(levelname)s: %(message)s")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its retries are not news
    try:
        return args.run(args) or 0
    except UserError as exc:
        print(f"rhnsearch: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rhnsearch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
