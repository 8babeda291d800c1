"""Export speed: 1,000 trial runs with 50-epoch histories, from a sqlite MLflow store and from
`mlflow server` on PostgreSQL, side by side.

Builds the sqlite store once (a parent sweep run and RUNS nested child runs shaped like the
tracker's: tags, 31 params, 10 metrics per epoch), starts `mlflow server` on a fresh
PostgreSQL database of its own (tests/lab_services.py), copies the store's rows into it (the
rows MLflow wrote, without logging them all again) and logs the sweep's history table
(rhnsearch.tracking.snapshot) on the server's parent run, as a finished sweep does. Then times,
the stores in turn in each of ROUNDS:
  runs              rhnsearch.tracking.store.trials: a database store's run tables read
                    directly (runs.database_runs), a server's runs searched
  runs/searched     the same through MlflowClient.search_runs, paged, on every store
  history           store.history: one SELECT per 500 runs on a database store
                    (sqlite, postgresql://), the sweep's history table from the server
  history/no table  histories.read, what the server gives without the table:
                    GetMetricHistoryBulkInterval calls
  history/per-run   the last-resort fallback (get_metric_history per run and metric) over the
                    first --api-runs runs, scaled to RUNS
and, once each, the whole `rhnsearch results export` command in a fresh process (imports
included) to .parquet, with and without --history. Prints a table, then one JSON line of
median seconds. The README (Performance) has a run's numbers.

    python benchmarks/export_speed.py [--runs 1000] [--epochs 50] [--store DIR]
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import sqlalchemy as sa
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient
from sqlalchemy.dialects import postgresql

from rhnsearch.compat import mlflow as mlflow_compat
from rhnsearch.tracking import histories, snapshot, store

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from lab_services import mlflow_server, postgres_database  # noqa: E402

# the tables a sweep's runs live in, parents before children
COPIED = ["experiments", "experiment_tags", "runs", "tags", "params", "metrics", "latest_metrics"]
EXPERIMENT = "export_bench"
METRICS = [
    "train_loss",
    "valid_loss",
    "best_valid_loss",
    "lr",
    "grad_norm",
    "epoch_seconds",
    "steps_per_sec",
    "time_this_iter_s",
    "time_total_s",
    "epoch",
]
PARAMS = {
    "arch": "rhn",
    "depth": "4",
    "width": "128",
    "tied": "False",
    "dataset": "jsb",
    "n_params": "250000",
    "lr": "0.1",
    "momentum": "0.5",
    "init_scale": "0.04",
    "t_bias": "-2.0",
    "clip": "10.0",
    "seed": "0",
    "epochs": "50",
    "batch_size": "16",
    "bptt": "35",
    "optimizer": "sgd",
    "nesterov": "False",
    "weight_decay": "0.0",
    "lr_decay": "1.0",
    "lr_decay_start": "0",
    "hsg_bias": "-2.5",
    "drop_x": "0.0",
    "drop_i": "0.0",
    "drop_o": "0.0",
    "drop_h": "0.0",
    "train_fraction": "1.0",
    "max_loss": "0.0",
    "threads": "1",
    "device": "auto",
    "preset": "bench",
    "study": "jsb_optimization",
}


def build(uri: str, runs: int, epochs: int, artifacts: Path):
    """The store: one sweep, RUNS trials with EPOCHS epochs of metrics each (test_loss and
    best_epoch on the last one), some diverged; its artifacts in ARTIFACTS (beside the store,
    not in the working directory's mlruns/)."""
    client = MlflowClient(uri)
    exp = client.create_experiment(EXPERIMENT, artifact_location=artifacts.resolve().as_uri())
    parent = client.create_run(
        exp,
        run_name="bench",
        tags={"kind": "sweep", "sweep": "bench", "study": "jsb_optimization", "preset": "bench"},
    )
    rng = np.random.default_rng(0)
    for i in range(runs):
        status = "diverged" if i % 10 == 9 else "completed"
        run = client.create_run(
            exp,
            run_name=f"rhn-d4-{i:05d}",
            tags={
                "mlflow.parentRunId": parent.info.run_id,
                "trial_id": f"{i:05d}",
                "sweep": "bench",
                "status": status,
            },
        )
        now = int(time.time() * 1000)
        metrics = [
            Metric(k, float(step if k == "epoch" else rng.random()), now + step, step)
            for step in range(1, epochs + 1)
            for k in METRICS
        ]
        if status == "diverged":
            metrics.append(Metric("valid_loss", float("nan"), now + epochs + 1, epochs))
        else:
            metrics += [
                Metric("test_loss", 10.0, now + epochs, epochs),
                Metric("best_epoch", float(epochs), now + epochs, epochs),
            ]
        client.log_batch(
            run.info.run_id,
            metrics=metrics,
            params=[Param(k, v) for k, v in {**PARAMS, "seed": str(i)}.items()],
            tags=[RunTag("built", "1")],
        )
        client.set_terminated(run.info.run_id)
    client.set_terminated(parent.info.run_id)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def cli_export(uri: str, out: Path, *extra) -> float:
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "rhnsearch.cli",
            "results",
            "export",
            "--experiment",
            EXPERIMENT,
            "--tracking-uri",
            uri,
            "--out",
            str(out),
            "--force",
            *extra,
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def copy_store(sqlite_uri: str, pg_uri: str):
    """Copy the sqlite store's experiments and runs into the PostgreSQL database (whose schema
    `mlflow server` made): the same rows, booleans typed for PostgreSQL."""
    source, target = sa.create_engine(sqlite_uri), sa.create_engine(pg_uri)
    tables = sa.MetaData()
    tables.reflect(target, only=COPIED)
    with source.connect() as src, target.begin() as dst:
        for name in COPIED:
            table = tables.tables[name]
            flags = [c.name for c in table.columns if isinstance(c.type, sa.Boolean)]
            rows = [dict(r._mapping) for r in src.execute(sa.text(f"SELECT * FROM {name}"))]
            for row in rows:
                row.update({f: bool(row[f]) for f in flags})
            if rows:
                dst.execute(postgresql.insert(table).on_conflict_do_nothing(), rows)
    source.dispose()
    target.dispose()


def log_table(sqlite_uri: str, server_uri: str):
    """The sweep's history table on its parent run (on the server: artifacts are not
    copied), as a finished sweep logs it."""
    exp = store.open_experiment(EXPERIMENT, sqlite_uri)
    trials = store.trials(exp)
    long = histories.read(
        sqlite_uri,
        exp.client,
        list(trials["run_id"]),
        sorted(
            {c.removeprefix("metrics.") for c in trials.columns if c.startswith("metrics.")}
            - {"epoch"}
        ),
    )
    snapshot.log_histories(MlflowClient(server_uri), trials["parent_run_id"].iloc[0], long)


def time_store(label: str, exp: store.Experiment, args, times: dict) -> pd.DataFrame:
    """One round of trials, history and the per-run fallback on one store."""
    seconds, trials = timed(lambda: store.trials(exp))
    times.setdefault(f"{label} runs", []).append(seconds)
    run_tables, mlflow_compat.run_tables_sql = mlflow_compat.run_tables_sql, lambda: None
    try:
        seconds, searched = timed(lambda: store.trials(exp))
    finally:
        mlflow_compat.run_tables_sql = run_tables
    times.setdefault(f"{label} runs/searched", []).append(seconds)
    pd.testing.assert_frame_equal(searched, trials)
    seconds, history = timed(lambda: store.history(exp, trials))
    times.setdefault(f"{label} history", []).append(seconds)
    keys = [
        c.removeprefix("metrics.")
        for c in trials.columns
        if c.startswith("metrics.") and c != "metrics.epoch"
    ]
    seconds, _ = timed(
        lambda: histories.read(exp.tracking_uri, exp.client, list(trials["run_id"]), keys)
    )
    times.setdefault(f"{label} history/no table", []).append(seconds)
    pairs = [(r, k) for r in trials["run_id"].head(args.api_runs) for k in keys]
    seconds, _ = timed(lambda: histories._per_run(exp.client, pairs))
    times.setdefault(f"{label} history/per-run", []).append(seconds * args.runs / args.api_runs)
    assert len(trials) == args.runs and len(history) == args.runs * args.epochs, len(history)
    return history


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--api-runs",
        type=int,
        default=50,
        help="runs timed through get_metric_history (scaled to --runs)",
    )
    p.add_argument("--store", help="directory of the sqlite store (kept; built if missing)")
    args = p.parse_args()
    directory = Path(args.store or tempfile.mkdtemp(prefix="export_bench_"))
    directory.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{directory.resolve() / 'mlflow.db'}"
    if not (directory / "mlflow.db").exists():
        seconds, _ = timed(lambda: build(uri, args.runs, args.epochs, directory / "artifacts"))
        print(
            f"built {args.runs} runs x {args.epochs} epochs in {seconds:.0f}s: {uri}",
            file=sys.stderr,
        )
    times = {}
    with postgres_database() as pg, tempfile.TemporaryDirectory() as work:
        with mlflow_server(pg, Path(work)) as url:
            seconds, _ = timed(lambda: copy_store(uri, pg))
            print(f"copied into PostgreSQL in {seconds:.0f}s", file=sys.stderr)
            seconds, _ = timed(lambda: log_table(uri, url))
            print(f"logged the sweep's history table in {seconds:.0f}s", file=sys.stderr)
            stores = {"sqlite": uri, "postgresql://": pg, "pg server": url}
            opened = {
                label: store.open_experiment(EXPERIMENT, where) for label, where in stores.items()
            }
            for _ in range(args.rounds):
                frames = {
                    label: time_store(label, exp, args, times) for label, exp in opened.items()
                }
                for frame in frames.values():
                    pd.testing.assert_frame_equal(frame, frames["sqlite"])
            for label, where in stores.items():
                times[f"{label} cli export"] = [cli_export(where, Path(work) / "t.parquet")]
                times[f"{label} cli export --history"] = [
                    cli_export(where, Path(work) / "h.parquet", "--history")
                ]
    medians = {k: round(statistics.median(v), 2) for k, v in times.items()}
    print(
        f"{args.runs} runs x {args.epochs} epochs ({args.runs * args.epochs * 10:,} metric "
        "values), median seconds:"
    )
    print(f"  {'':<26} " + " ".join(f"{label:>14}" for label in stores))
    for what in (
        "runs",
        "runs/searched",
        "history",
        "history/no table",
        "history/per-run",
        "cli export",
        "cli export --history",
    ):
        print(
            f"  {what:<26} " + " ".join(f"{medians[f'{label} {what}']:14.2f}" for label in stores)
        )
    print(json.dumps({"runs": args.runs, "epochs": args.epochs, "seconds": medians}))


if __name__ == "__main__":
    main()
