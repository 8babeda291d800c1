"""Export speed: 1,000 trial runs with 50-epoch histories in a sqlite MLflow store.

Builds the store once (a parent sweep run and RUNS nested child runs shaped like the tracker's:
tags, 31 params, 10 metrics per epoch), then times, interleaved over ROUNDS:
  runs        rhnsearch.results.store.trials (MlflowClient.search_runs, paged)
  history/sql store.history on the sqlite store (one SELECT per 500 runs)
  history/api the fallback used for MLflow servers (get_metric_history per run and metric),
              on the same sqlite store, over the first --api-runs runs, scaled to RUNS
and, once each, the whole `rhnsearch results export` command in a fresh process (imports
included) to .parquet, with and without --history. With --http, the fallback is also timed
against `mlflow server` on the store (over --api-runs runs, scaled). Prints a table, then one
JSON line of median seconds.

    python benchmarks/export_speed.py [--runs 1000] [--epochs 50] [--store DIR] [--http]
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from rhnsearch.results import store

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = "export_bench"
METRICS = ["train_loss", "valid_loss", "best_valid_loss", "lr", "grad_norm", "epoch_seconds",
           "steps_per_sec", "time_this_iter_s", "time_total_s", "epoch"]
PARAMS = {"arch": "rhn", "depth": "4", "width": "128", "tied": "False", "dataset": "jsb",
          "n_params": "250000", "lr": "0.1", "momentum": "0.5", "init_scale": "0.04",
          "t_bias": "-2.0", "clip": "10.0", "seed": "0", "epochs": "50", "batch_size": "16",
          "bptt": "35", "optimizer": "sgd", "nesterov": "False", "weight_decay": "0.0",
          "lr_decay": "1.0", "lr_decay_start": "0", "hsg_bias": "-2.5", "drop_x": "0.0",
          "drop_i": "0.0", "drop_o": "0.0", "drop_h": "0.0", "train_fraction": "1.0",
          "max_loss": "0.0", "threads": "1", "device": "auto", "preset": "bench",
          "study": "jsb_optimization"}


def build(uri: str, runs: int, epochs: int):
    """The store: one sweep, RUNS trials with EPOCHS epochs of metrics each (test_loss and
    best_epoch on the last one), some diverged."""
    client = MlflowClient(uri)
    exp = client.create_experiment(EXPERIMENT)
    parent = client.create_run(exp, run_name="bench", tags={"kind": "sweep", "sweep": "bench",
                                                             "study": "jsb_optimization",
                                                             "preset": "bench"})
    rng = np.random.default_rng(0)
    for i in range(runs):
        status = "diverged" if i % 10 == 9 else "completed"
        run = client.create_run(exp, run_name=f"rhn-d4-{i:05d}", tags={
            "mlflow.parentRunId": parent.info.run_id, "trial_id": f"{i:05d}",
            "sweep": "bench", "status": status})
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(step if k == "epoch" else rng.random()), now + step, step)
                   for step in range(1, epochs + 1) for k in METRICS]
        if status == "diverged":
            metrics.append(Metric("valid_loss", float("nan"), now + epochs + 1, epochs))
        else:
            metrics += [Metric("test_loss", 10.0, now + epochs, epochs),
                        Metric("best_epoch", float(epochs), now + epochs, epochs)]
        client.log_batch(run.info.run_id, metrics=metrics,
                         params=[Param(k, v) for k, v in {**PARAMS, "seed": str(i)}.items()],
                         tags=[RunTag("built", "1")])
        client.set_terminated(run.info.run_id)
    client.set_terminated(parent.info.run_id)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def cli_export(uri: str, out: Path, *extra) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rhnsearch.cli", "results", "export", "--experiment",
                    EXPERIMENT, "--tracking-uri", uri, "--out", str(out), "--force", *extra],
                   check=True, capture_output=True)
    return time.perf_counter() - start


def serve(uri: str):
    """`mlflow server` on the store, on a free loopback port: (process, url)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                             uri, "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{url}/health", timeout=5).close()
            return proc, url
        except OSError:
            time.sleep(1)
    os.killpg(proc.pid, signal.SIGTERM)
    raise SystemExit("mlflow server did not start")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--api-runs", type=int, default=100,
                   help="runs timed through get_metric_history (scaled to --runs)")
    p.add_argument("--store", help="directory of the store (kept; built if missing)")
    p.add_argument("--http", action="store_true", help="also time the fallback over HTTP")
    args = p.parse_args()
    directory = Path(args.store or tempfile.mkdtemp(prefix="export_bench_"))
    directory.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{directory.resolve() / 'mlflow.db'}"
    if not (directory / "mlflow.db").exists():
        seconds, _ = timed(lambda: build(uri, args.runs, args.epochs))
        print(f"built {args.runs} runs x {args.epochs} epochs in {seconds:.0f}s: {uri}",
              file=sys.stderr)
    exp = store.open_experiment(EXPERIMENT, uri)
    scale = args.runs / args.api_runs
    times = {"runs": [], "history/sql": [], "history/api": []}
    for _ in range(args.rounds):
        seconds, trials = timed(lambda: store.trials(exp))
        times["runs"].append(seconds)
        seconds, history = timed(lambda: store.history(exp, trials))
        times["history/sql"].append(seconds)
        seconds, _ = timed(lambda: store._history_client(exp, trials.head(args.api_runs)))
        times["history/api"].append(seconds * scale)
    assert len(trials) == args.runs and len(history) == args.runs * args.epochs, len(history)
    with tempfile.TemporaryDirectory() as out:
        times["cli export (trials)"] = [cli_export(uri, Path(out) / "t.parquet")]
        times["cli export --history"] = [cli_export(uri, Path(out) / "h.parquet",
                                                    "--history")]
    if args.http:
        proc, url = serve(uri)
        try:
            http = store.open_experiment(EXPERIMENT, url)
            seconds, trials = timed(lambda: store.trials(http))
            times["runs over http"] = [seconds]
            seconds, _ = timed(lambda: store.history(http, trials.head(args.api_runs)))
            times["history over http (api)"] = [seconds * scale]
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
    medians = {k: round(statistics.median(v), 2) for k, v in times.items()}
    print(f"{args.runs} runs x {args.epochs} epochs ({args.runs * args.epochs * 10:,} metric "
          "values), median seconds:")
    for key, value in medians.items():
        print(f"  {key:<26} {value:8.2f}")
    print(json.dumps({"runs": args.runs, "epochs": args.epochs, "seconds": medians}))


if __name__ == "__main__":
    main()
