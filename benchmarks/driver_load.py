"""Driver load: many concurrent trials that only report (no training) through the real Tune loop,
rhnsearch's scheduler and MLflow sender, and the same trials with plain Tune and Ray's own
MLflowLoggerCallback, side by side in one run, both into one `mlflow server` on PostgreSQL.

Each trial is a Ray actor that reports an epoch's metrics (those a real trial reports) every
--interval seconds, --reports times. rhnsearch's side is the sweep's own Tuner (build_tuner:
random search, per-cell ASHA whose only rung no trial fails, MLflowTracker, checkpoint
pruning) over one JSB cell of --trials settings; plain Tune's side is a Tuner of as many
trials with MLflowLoggerCallback. Both drivers run in a fresh process each, one after the
other, with Tune's file loggers off (rhnsearch's default: MLflow holds the records).

Per side, from what MLflow holds: results per second sustained (over the middle 80% of the
results, by the time the driver took each: its timestamp in MLflow) and at the peak (the most
in 10 s); how long after a trial reported a result the driver took it (median and 99th
percentile: a driver that keeps up takes each at once); records lost (results missing from
MLflow). And per driver process: CPU seconds per result (user + system, all its threads, from
the Tuner's start to the last record in MLflow), the sender's largest backlog (records
journaled but not yet in MLflow) and the seconds MLflow needed after the last result. Last
line: JSON.

    python benchmarks/driver_load.py [--trials 50] [--interval 0.5] [--reports 40]

`--backlog TRIALS` instead times the sender's drain of a backlog (what a driver whose server
fell behind leaves in its journal): TRIALS trials' records of --reports epochs each, sent with
one trial's requests in flight and with `sender.SERVER_THREADS`, twice each, alternating, into
one `mlflow server` of `lab_services.LAB_WORKERS` workers; runs a second and the ratio, and
what MLflow holds afterwards (every run ended, every epoch there).

    python benchmarks/driver_load.py --backlog 200 --reports 10
"""

import argparse
import bisect
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
SPACE = ROOT / "spaces" / "jsb_optimization.yaml"
WINDOW = 10.0  # seconds: the peak rate's window


def reporter(config: dict, cells=None):
    """A trial that only reports: an epoch's metrics every config['interval'] seconds."""
    import time

    from ray import tune

    reports, interval = config["reports"], config["interval"]
    start = time.monotonic()
    for epoch in range(1, reports + 1):
        time.sleep(max(0.0, start + epoch * interval - time.monotonic()))
        metrics = {
            "epoch": epoch,
            "train_loss": 10.0 / epoch,
            "valid_loss": 10.0 / epoch,
            "best_valid_loss": 10.0 / epoch,
            "lr": 0.1,
            "grad_norm": 1.0,
            "epoch_seconds": interval,
            "steps_per_sec": 100.0,
            "device": "cpu",
            "gpu_ids": "none",
            "node_id": "bench",
            "torch_version": "bench",
            "n_params": 1000,
            "reported_at": time.time(),
        }
        if epoch == reports:
            metrics.update(status="completed", test_loss=10.0 / epoch, best_epoch=epoch)
        tune.report(metrics)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_rhnsearch(args, work: Path) -> dict:
    """The sweep's own Tuner over reporting trials; CPU until MLflow has every record."""
    from mlflow.tracking import MlflowClient

    from rhnsearch.cluster.connect import start_ray
    from rhnsearch.search.space import load_space
    from rhnsearch.sweep.lifecycle import build_tuner
    from rhnsearch.sweep.record import Round, SweepRecord
    from rhnsearch.tracking.sender import sender_for
    from rhnsearch.tracking.uris import get_experiment

    grace = max(1, args.reports // 3)
    space = load_space(
        SPACE,
        preset="smoke",
        overrides=[
            "archs=[rhn]",
            "depths=[1]",
            f"samples={args.trials}",
            f"fixed.epochs={args.reports}",
            f"scheduler.grace_period={grace}",
            f"resources.cpu={1.9 / args.trials}",
        ],
    )
    name, root = "driver-load", str(work / "sweeps")
    cells = space.cells(10000)
    client = MlflowClient(args.url)
    experiment_id = get_experiment(client, args.url, "driver_load_rhnsearch")
    parent = client.create_run(experiment_id, run_name=name, tags={"sweep": name})
    record = SweepRecord(
        name=name,
        space_path=str(SPACE),
        preset="smoke",
        overrides=(),
        search=space.search,
        scheduler="cell_asha",
        tracking_uri=args.url,
        experiment_id=experiment_id,
        parent_run_id=parent.info.run_id,
        data_dir=str(work),
        storage=root,
        trials=space.num_trials,
        cells=cells,
        space=space,
        plan=None,
        rounds=(Round(space.samples, space.seeds),),
    )
    start_ray(None)
    tuner = build_tuner(space, record, function=tune_parameters(args))
    sender = sender_for(record.parent_run)
    backlog, stop = [0], threading.Event()

    def watch():
        while not stop.wait(0.05):
            backlog[0] = max(backlog[0], sender.journal.last - sender.delivered)

    threading.Thread(target=watch, daemon=True).start()
    cpu = cpu_seconds()
    tuner.fit()
    last_result = time.monotonic()
    assert sender.drain()
    drained = time.monotonic() - last_result
    cpu = cpu_seconds() - cpu
    stop.set()
    return {"cpu_seconds": cpu, "largest_backlog": backlog[0], "mlflow_after_s": drained}


def tune_parameters(args):
    """The reporting trial with the benchmark's interval and reports in its config."""

    def trial(config, cells=None):
        reporter({**config, "interval": args.interval, "reports": args.reports}, cells)

    return trial


def run_plain(args, work: Path) -> dict:
    """Plain Tune with MLflowLoggerCallback over as many reporting trials."""
    import ray
    from ray import tune
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    ray.init(include_dashboard=False, logging_level="WARNING")
    tuner = tune.Tuner(
        tune.with_resources(reporter, {"cpu": 1.9 / args.trials}),
        param_space={
            "interval": args.interval,
            "reports": args.reports,
            "lr": tune.loguniform(1e-3, 1.0),
        },
        tune_config=tune.TuneConfig(num_samples=args.trials),
        run_config=tune.RunConfig(
            name="driver-load",
            storage_path=str(work / "plain"),
            verbose=1,
            callbacks=[
                MLflowLoggerCallback(
                    tracking_uri=args.url, save_artifact=False, experiment_name="driver_load_plain"
                )
            ],
        ),
    )
    cpu = cpu_seconds()
    tuner.fit()
    return {"cpu_seconds": cpu_seconds() - cpu, "largest_backlog": None, "mlflow_after_s": 0.0}


def recorded(database: str, experiment: str) -> dict:
    """From MLflow: the results it holds, results per second (over the middle 80% of them,
    and the most in any WINDOW seconds) and how long after a trial reported it the driver
    took it (median, 99th percentile): each value's timestamp is when the driver took it, and
    `reported_at` when the trial reported it."""
    engine = sa.create_engine(database)
    with engine.connect() as db:
        rows = db.execute(
            sa.text(
                "SELECT m.timestamp, m.value FROM metrics m JOIN runs r ON m.run_uuid = "
                "r.run_uuid JOIN experiments e ON r.experiment_id = e.experiment_id WHERE "
                "e.name = :e AND m.key = 'reported_at'"
            ),
            {"e": experiment},
        ).fetchall()
    engine.dispose()
    taken = sorted(stamp / 1000 for stamp, _ in rows)
    lag = sorted(stamp / 1000 - reported for stamp, reported in rows)
    first, last = int(0.1 * len(taken)), int(0.9 * len(taken)) - 1
    peak = max(bisect.bisect_right(taken, t + WINDOW) - i for i, t in enumerate(taken))
    return {
        "results": len(rows),
        "results_per_s": (last - first) / max(taken[last] - taken[first], 1e-3),
        "peak_per_s": peak / WINDOW,
        "lag_median_s": lag[len(lag) // 2],
        "lag_p99_s": lag[int(0.99 * (len(lag) - 1))],
    }


def journaled(journal, trials: int, epochs: int):
    """Append the records the MLflow callback journals for TRIALS trials of EPOCHS epochs:
    a start (name, params), an epoch's metrics and placement tags, and an end."""
    from rhnsearch.tracking.journal import Record

    now = int(time.time() * 1000)
    for t in range(trials):
        trial_id = f"{t:012x}"
        setting = {"arch": "rhn", "depth": 2, "width": 100, "seed": t, "lr": 0.01, "epochs": epochs}
        params = [[k, str(v)] for k, v in setting.items()]
        journal.append(Record(trial_id, name=f"rhn-d2-{trial_id}", params=params))
        for epoch in range(1, epochs + 1):
            loss = 10 / epoch
            values = {"train_loss": loss, "valid_loss": loss, "best_valid_loss": loss, "lr": 0.01}
            values.update(grad_norm=1.0, epoch_seconds=1.0, n_params=1000, epoch=epoch)
            tags = [["device", "cpu"], ["node_id", "bench"]] if epoch == 1 else []
            metrics = [[k, float(v), now, epoch] for k, v in values.items()]
            journal.append(Record(trial_id, metrics=metrics, tags=tags))
        journal.append(
            Record(trial_id, end="FINISHED", end_time=now, tags=[["status", "completed"]])
        )


def drain_backlog(url: str, trials: int, epochs: int, threads: int, work: Path) -> dict:
    """Seconds for a Sender with THREADS trials in flight to put a journaled backlog of TRIALS
    trials into MLflow at URL (a fresh experiment), and the runs and epochs MLflow then holds."""
    from mlflow.tracking import MlflowClient

    from rhnsearch.files.layout import SweepPaths
    from rhnsearch.files.parent_run import ParentRun
    from rhnsearch.tracking import sender as senders
    from rhnsearch.tracking.journal import Journal
    from rhnsearch.tracking.uris import get_experiment, server_settings

    server_settings(url)  # MLflow's client quiet, as a sweep's
    client = MlflowClient(url)
    name = f"backlog-{threads}-{time.monotonic_ns()}"
    experiment_id = get_experiment(client, url, name)
    parent = client.create_run(experiment_id, run_name=name, tags={"sweep": name})
    folder = work / name
    journal = Journal(folder)
    journaled(journal, trials, epochs)
    senders.SERVER_THREADS = threads  # (read as a Sender starts)
    run = ParentRun(url, experiment_id, parent.info.run_id, SweepPaths(str(work), name))
    start, cpu = time.monotonic(), cpu_seconds()
    sender = senders.Sender(run, journal)
    assert sender.drain(timeout=60), "MLflow stopped answering"
    seconds, cpu = time.monotonic() - start, cpu_seconds() - cpu
    runs = client.search_runs([experiment_id], "tags.kind = 'trial'", max_results=50000)
    return {
        "threads": threads,
        "seconds": seconds,
        "runs_per_s": trials / seconds,
        "sender_cpu_s": cpu,
        "runs": len(runs),
        "ended": sum(r.info.status == "FINISHED" for r in runs),
        "epochs": sum(int(r.data.metrics.get("epoch", 0)) for r in runs),
    }


def backlog(args):
    """--backlog: the drain with one trial in flight and with SERVER_THREADS, alternating."""
    from rhnsearch.tracking.sender import SERVER_THREADS

    sys.path.insert(0, str(ROOT / "tests"))
    from lab_services import LAB_WORKERS, mlflow_server, postgres_database

    rows = []
    with postgres_database() as database, tempfile.TemporaryDirectory() as work:
        with mlflow_server(database, Path(work), workers=LAB_WORKERS) as url:
            for threads in (1, SERVER_THREADS) * 2:
                rows.append(drain_backlog(url, args.backlog, args.reports, threads, Path(work)))
                row = rows[-1]
                held = f"{row['runs']} runs, {row['ended']} ended, {row['epochs']} epochs"
                print(
                    f"  {threads} in flight: {row['seconds']:6.1f} s, "
                    f"{row['runs_per_s']:5.1f} runs/s, the sender's CPU "
                    f"{row['sender_cpu_s']:5.1f} s; MLflow holds {held}",
                    flush=True,
                )
    best = {t: min(r["seconds"] for r in rows if r["threads"] == t) for t in (1, SERVER_THREADS)}
    ratio = best[1] / best[SERVER_THREADS]
    print(
        f"{args.backlog} trials of {args.reports} epochs through a server of {LAB_WORKERS} "
        f"workers: {SERVER_THREADS} in flight drain {ratio:.2f}x as fast as one (best of two)"
    )
    result = {"backlog": args.backlog, "epochs": args.reports, "server_workers": LAB_WORKERS}
    print(json.dumps({**result, "rows": rows, "speedup": ratio}))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=50)
    p.add_argument("--interval", type=float, default=0.5, help="seconds between reports")
    p.add_argument("--reports", type=int, default=40, help="reports per trial")
    p.add_argument("--backlog", type=int, help="time the sender's drain of this many trials")
    p.add_argument("--side", choices=["rhnsearch", "plain"], help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.backlog:
        backlog(args)
        return
    if args.side:  # a driver, in a process of its own
        with tempfile.TemporaryDirectory() as work:
            run = run_rhnsearch if args.side == "rhnsearch" else run_plain
            Path(args.result).write_text(json.dumps(run(args, Path(work))))
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from lab_services import mlflow_server, postgres_database

    sides = {}
    with postgres_database() as database, tempfile.TemporaryDirectory() as work:
        with mlflow_server(database, Path(work)) as url:
            for side in ("rhnsearch", "plain"):
                result = Path(work) / f"{side}.json"
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--side",
                        side,
                        "--url",
                        url,
                        "--result",
                        str(result),
                        "--trials",
                        str(args.trials),
                        "--interval",
                        str(args.interval),
                        "--reports",
                        str(args.reports),
                    ],
                    capture_output=True,
                    text=True,
                    cwd=work,
                )
                if out.returncode:
                    sys.exit(f"{side} driver failed:\n{out.stderr[-3000:]}")
                sides[side] = json.loads(result.read_text())
        for side in sides:
            sides[side].update(recorded(database, f"driver_load_{side}"))
            sides[side].update(
                lost=args.trials * args.reports - sides[side]["results"],
                cpu_per_result=sides[side]["cpu_seconds"] / (args.trials * args.reports),
            )
    offered = args.trials / args.interval
    print(
        f"{args.trials} trials reporting every {args.interval} s ({offered:.0f} results/s "
        f"offered), {args.reports} reports each; driver per side:"
    )
    print(
        f"  {'':<10} {'results/s':>10} {'peak/s':>7} {'lag p50':>8} {'lag p99':>8} "
        f"{'CPU ms/result':>14} {'backlog':>8} {'MLflow after':>13} {'lost':>5}"
    )
    for side, m in sides.items():
        print(
            f"  {side:<10} {m['results_per_s']:10.1f} {m['peak_per_s']:7.1f} "
            f"{m['lag_median_s']:7.2f}s {m['lag_p99_s']:7.2f}s "
            f"{1000 * m['cpu_per_result']:14.2f} "
            f"{m['largest_backlog'] if m['largest_backlog'] is not None else '-':>8} "
            f"{m['mlflow_after_s']:12.1f}s {m['lost']:5d}"
        )
    ratio = sides["rhnsearch"]["cpu_per_result"] / sides["plain"]["cpu_per_result"]
    print(
        json.dumps(
            {
                "trials": args.trials,
                "interval": args.interval,
                "reports": args.reports,
                "offered_per_s": offered,
                **{
                    f"{side}_{k}": round(v, 4) if isinstance(v, float) else v
                    for side, m in sides.items()
                    for k, v in m.items()
                },
                "cpu_per_result_rhnsearch_over_plain": round(ratio, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
