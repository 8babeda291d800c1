"""Closing a sweep: the one step after its trials, which reads what MLflow stored of them and
writes the sweep's results onto its parent run (summary metrics, the best model, histories,
plots and report). The sweep's life (lifecycle.py) calls it; the search never imports the
results or the analysis."""

import logging
import sqlite3
import tempfile
import time
from pathlib import Path

from mlflow.entities import Metric
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from ..errors import UserError, first_line
from ..tracking import database, histories, schema, snapshot, store
from ..tracking.runs import StoredRun, matching
from . import ended_index
from .checkpoints import saved_trial_ids
from .record import ParentRun, SweepRecord

log = logging.getLogger(__name__)
HOURS = ("cpu_hours", "gpu_hours")  # device-hours the trials held, from their *_seconds


def close_sweep(
    record: SweepRecord, checkpoints: dict, *, trials_seconds: float, started: float
) -> dict:
    """Close the sweep once Tune is done and MLflow has every record: drop the runs a killed
    driver lost, read the summary back from MLflow and, when every trial has ended, keep the
    best model and log the totals, the histories, the plots and the report on the parent run,
    then end it FINISHED. Returns the summary.

    Args:
        record: The sweep.
        checkpoints: Each trial's latest Tune Checkpoint (or None) by trial id: the best
            trial's is read.
        trials_seconds: How long the trials took.
        started: `time.monotonic()` when the trials started (for the wall time).
    """
    client = MlflowClient(record.tracking_uri)
    try:
        runs = drop_lost_runs(client, record.parent_run)
        long = histories.read(
            record.tracking_uri,
            client,
            [r.run_id for r in runs],
            sorted({k for r in runs for k in r.metrics} - {"epoch"}),
        )
        summary = summarize(runs, long, record.name)
    except MlflowException as exc:
        raise UserError(
            f"sweep {record.name}: every trial ended but MLflow at "
            f"{record.tracking_uri} is not answering "
            f"({first_line(exc, 160)}): when it is back, `rhnsearch "
            f"sweep resume {record.name}` closes the sweep"
        ) from None
    summary["trials_seconds"] = round(trials_seconds, 1)
    summary["wall_seconds"] = round(time.monotonic() - started, 1)
    summary["complete"] = summary["running"] == 0 and summary["trials"] == record.trials
    if summary["complete"]:
        parent = record.parent_run_id
        if summary["best"]:
            if record.space.keep_model == "best":
                keep_best_model(client, checkpoints, summary["best"], record)
            client.set_tag(parent, schema.BEST_RUN, summary["best"]["run_id"])
        now, step = int(time.time() * 1000), len(record.rounds) - 1  # a step a round
        per_cell = [
            Metric(f"{unit}/{cell}", value, now, step)
            for cell, hours in summary["spent"].items()
            for unit, value in hours.items()
        ]
        client.log_batch(
            parent,
            metrics=[
                Metric(k, float(v), now, step)
                for k, v in summary.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            ]
            + per_cell,
        )
        snapshot.log_histories(client, parent, long)
        log_results(client, record, runs)  # the runs read once, not listed again
        client.set_terminated(parent, "FINISHED")
        gather_statistics(record.tracking_uri)
    return summary


def log_results(client: MlflowClient, record: SweepRecord, runs: list[StoredRun]):
    """The study's figures (plots/, PNG) and report page (report/report.html) of the sweep,
    made by results/ from its trial RUNS, logged on its parent run. Never raises: one that
    cannot be made is a warning that names the command that makes it, not a failed sweep."""
    from ..results import plots, report  # matplotlib: only once a sweep closes

    name = client.get_experiment(record.experiment_id).name
    exp = store.Experiment(name, record.experiment_id, record.tracking_uri, client)

    def figures(out: Path):
        for kind, fig in plots.sweep_figures(exp, record.name, runs=runs).items():
            plots.save(fig, out / f"{kind}.png")

    def page(out: Path):
        (out / "report.html").write_text(report.render(exp, record.name, runs=runs), "utf-8")

    for what, write, folder, command in (
        ("plots", figures, schema.PLOTS_DIR, "results plot"),
        ("report", page, schema.REPORT_DIR, "results report"),
    ):
        try:
            with tempfile.TemporaryDirectory() as tmp:
                write(Path(tmp))
                client.log_artifacts(record.parent_run_id, tmp, folder)
        except Exception as exc:  # noqa: BLE001 - a courtesy: the sweep has succeeded
            log.warning(
                "could not log the sweep's %s to MLflow run %s (%s: %s); make it with "
                "`rhnsearch %s`",
                what,
                record.parent_run_id,
                type(exc).__name__,
                first_line(exc),
                command,
            )


def gather_statistics(uri: str):
    """A sqlite store's statistics gathered for MLflow's later queries (`database.analyze`);
    one that cannot be is a warning, not a failed sweep."""
    try:
        database.analyze(uri)
    except sqlite3.Error as exc:
        log.warning(
            "could not gather the statistics of the sqlite store %s (%s): MLflow's queries "
            "on it (its UI's) may be slow; `sqlite3 FILE ANALYZE` gathers them",
            uri,
            first_line(exc),
        )


def drop_lost_runs(client: MlflowClient, parent: ParentRun) -> list[StoredRun]:
    """Delete the runs of trials that a killed driver had started but Tune had not saved yet:
    the resumed sweep does not know them, and runs their settings again as new trials. Only
    on the strength of Tune's saved state of every round, read: where one is missing or
    unreadable, every run is kept, and a warning says so. Returns the runs kept."""
    runs = child_runs(client, parent)
    paths = parent.paths.round_dirs
    saved = [saved_trial_ids(path) for path in paths]
    if None in saved:
        log.warning(
            "Tune's saved experiment state was not found in %s or could not be read: every "
            "MLflow run of the sweep is kept (a trial a killed driver had started before "
            "Tune saved it may have a second run)",
            paths[saved.index(None)],
        )
        return runs
    trials = set().union(*saved)
    lost = [run for run in runs if run.tags.get(schema.TRIAL_ID) not in trials]
    for run in lost:
        client.delete_run(run.run_id)
    if lost:
        log.warning(
            "deleted %d MLflow run(s) of trials the killed driver had started before "
            "Tune saved them; the resumed sweep ran them again",
            len(lost),
        )
    return [run for run in runs if run.tags.get(schema.TRIAL_ID) in trials]


def child_runs(client: MlflowClient, parent: ParentRun) -> list[StoredRun]:
    return matching(
        parent.tracking_uri, client, parent.experiment_id, {schema.PARENT_RUN: parent.run_id}
    )


def spent(runs: list) -> dict:
    """The CPU- and GPU-hours the RUNS' trials held (their last cpu_seconds, gpu_seconds), in
    all and per cell: {"cpu_hours", "gpu_hours", "cells": {label: {...}}}."""
    cells = {}
    for run in runs:
        cell = cells.setdefault(run.params.get("cell", "?"), dict.fromkeys(HOURS, 0.0))
        for unit in HOURS:
            cell[unit] += run.metrics.get(unit.replace("hours", "seconds"), 0.0) / 3600
    return {**{unit: sum(c[unit] for c in cells.values()) for unit in HOURS}, "cells": cells}


def summarize(runs: list, long, name: str) -> dict:
    """Counts by status and the best trial of the sweep's MLflow RUNS, the training time in
    their histories LONG (histories.read's rows), the device-hours they held and the epochs
    they trained."""
    counts = dict.fromkeys(schema.STATUSES, 0)
    train_seconds = float(long.loc[long["key"] == "epoch_seconds", "value"].sum())
    held = spent(runs)
    best = None
    for run in runs:
        status = run.tags.get(schema.STATUS, schema.RUNNING)
        counts[status] = counts.get(status, 0) + 1
        loss = run.metrics.get("best_valid_loss")
        if (
            status in schema.FINISHED
            and loss is not None
            and loss == loss
            and (best is None or loss < best["best_valid_loss"])
        ):
            best = {
                "run_id": run.run_id,
                "trial_id": run.tags.get(schema.TRIAL_ID),
                "best_valid_loss": loss,
                "params": run.params,
            }
    return {
        "name": name,
        "trials": len(runs),
        **counts,
        "train_seconds": round(train_seconds, 1),
        "cpu_hours": held["cpu_hours"],
        "gpu_hours": held["gpu_hours"],
        "trial_epochs": sum(int(run.metrics.get("epoch", 0)) for run in runs),
        "spent": held["cells"],
        "best": best,
    }


def keep_best_model(client: MlflowClient, checkpoints: dict, best: dict, record: SweepRecord):
    """Log the best trial's config and best-valid weights (from its latest checkpoint, in
    CHECKPOINTS by trial id, or in the round's index of the trials that had ended when it was
    resumed) as the MLflow model of its run, and register it as a new version of the space's
    register_model, if it names one."""
    from ..analysis.mlflow_model import keep_model
    from ..train import Trainer

    checkpoint = checkpoints.get(best["trial_id"]) or ended_index.checkpoint(
        record.paths.round_dirs[-1], best["trial_id"]
    )
    if checkpoint is None:
        return
    with checkpoint.as_directory() as ckpt:
        config, weights = Trainer.best_weights(ckpt)
    keep_model(
        client,
        best["run_id"],
        config,
        weights,
        record.data_dir,
        record.space.register_model,
        {schema.STUDY: record.space.study, schema.SWEEP: record.name},
    )
