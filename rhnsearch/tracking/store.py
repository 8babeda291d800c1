"""Read a study's MLflow runs in bulk into pandas: one row per trial, or one per trial and epoch.

Runs come from a database store's run tables (SELECTs, `runs.database_runs`), else from
MlflowClient.search_runs, 50,000 a page; histories from `histories`: one SELECT
on a database store's `metrics` table, bulk REST calls to an MLflow server, get_metric_history
per run and metric on anything else; except on a database store, a finished sweep's runs come
from the table of their histories on its parent run while it is current (`snapshot`).
benchmarks/export_speed.py times them.
Columns follow mlflow.search_runs: ids and tags plain (with the provenance tags: git commit,
library versions, where each trial trained), then `params.*` and `metrics.*`.
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd
from mlflow.tracking import MlflowClient

from ..errors import UserError
from ..provenance import COMMIT_TAG, TAGS
from . import database, histories, schema, snapshot
from .runs import StoredRun, all_runs, matching
from .uris import existing_store

ID_COLUMNS = [
    "experiment",
    "sweep",
    "parent_run_id",
    "run_id",
    "run_name",
    "trial_id",
    "round",
    "status",
    "stopped_at_epoch",
    "run_status",
    "start_time",
    "end_time",
]
FIRST_PARAMS = ["study", "dataset", "preset", "arch", "depth", "width", "tied", "n_params"]
FIRST_METRICS = ["epoch", "train_loss", "valid_loss", "best_valid_loss", "test_loss", "best_epoch"]
NOT_SETTINGS = {"params.seed", "params.width", "params.n_params", "params.cell", "params.confirms"}
LOG_SPAN = 20  # a positive setting spanning more than this factor is read on a log scale
SQL_MAX_FLOAT = 1.7976931348623157e308  # how MLflow's SQL stores +-inf
# the tags that say what produced a run, as columns (rhnsearch.provenance)
PROVENANCE = {tag: "git_commit" if tag == COMMIT_TAG else tag for tag in TAGS}


@dataclass
class Experiment:
    """One MLflow experiment of a store, opened for reading."""

    name: str
    id: str
    tracking_uri: str
    client: MlflowClient


def open_experiment(name: str, tracking_uri: str | None = None) -> Experiment:
    """The experiment NAME of the store, or a one-line UserError if it is not there."""
    uri = existing_store(tracking_uri)
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        known = sorted(e.name for e in client.search_experiments() if e.name != "Default")
        raise UserError(
            f"no experiment {name!r} in {uri}: known experiments are "
            f"{', '.join(known) or 'none'} (pass one with --experiment)"
        )
    return Experiment(name, experiment.experiment_id, uri, client)


def search(exp: Experiment, filter_string: str) -> list:
    return all_runs(exp.client, exp.id, filter_string)


def sweeps(exp: Experiment) -> pd.DataFrame:
    """The experiment's sweeps (parent runs), oldest first."""
    rows = [
        {
            "sweep": r.data.tags.get(schema.SWEEP, r.info.run_name),
            "run_id": r.info.run_id,
            "study": r.data.tags.get("study"),
            "report": r.data.tags.get("report"),
            "quantity": r.data.tags.get("quantity", "best_valid_loss"),
            "preset": r.data.tags.get("preset"),
            "dataset": r.data.params.get("dataset"),
            "start_time": r.info.start_time,
            "run_status": r.info.status,
        }
        for r in search(exp, "tags.kind = 'sweep'")
    ]
    return (
        pd.DataFrame(
            rows,
            columns=[
                "sweep",
                "run_id",
                "study",
                "report",
                "quantity",
                "preset",
                "dataset",
                "start_time",
                "run_status",
            ],
        )
        .sort_values("start_time", kind="stable")
        .reset_index(drop=True)
    )


def pick_sweep(exp: Experiment, name: str | None = None) -> pd.Series:
    """The sweep NAME of the experiment, or its latest one."""
    table = sweeps(exp)
    if table.empty:
        raise UserError(
            f"experiment {exp.name!r} has no sweeps yet: run one with `rhnsearch sweep run`"
        )
    if name is None:
        return table.iloc[-1]
    chosen = table[table["sweep"] == name]
    if chosen.empty:
        raise UserError(
            f"no sweep {name!r} in experiment {exp.name!r}: its sweeps are "
            f"{', '.join(table['sweep'])}"
        )
    return chosen.iloc[-1]


def typed(values: pd.Series) -> pd.Series:
    """MLflow params are strings: each column gets the narrowest type all its values fit
    (Int64, float64, boolean, else str); missing values stay missing."""
    present = values.dropna()
    if present.empty:
        return values.astype("str")
    if present.isin(["True", "False"]).all():
        return values.map({"True": True, "False": False}).astype("boolean")
    numbers = pd.to_numeric(present, errors="coerce")
    if numbers.notna().all():
        if present.str.fullmatch(r"[+-]?\d+").all():
            return pd.to_numeric(values).astype("Int64")
        return pd.to_numeric(values).astype("float64")
    return values.astype("str")


def unclipped(values: pd.Series) -> pd.Series:
    """MLflow's SQL stores keep +-inf as +-max float: turn them back into +-inf."""
    return values.where(values.abs() < SQL_MAX_FLOAT, np.sign(values) * np.inf)


def _ordered(names, first) -> list:
    return [n for n in first if n in names] + sorted(set(names) - set(first))


def trial_runs(exp: Experiment, sweep: str | None = None) -> list[StoredRun]:
    """The trial (child) runs of the experiment, or of one sweep, newest first."""
    tags = {schema.PARENT_RUN: None} | ({} if sweep is None else {schema.SWEEP: sweep})
    return matching(exp.tracking_uri, exp.client, exp.id, tags)


def trials(exp: Experiment, sweep: str | None = None) -> pd.DataFrame:
    """One row per trial (child run) of the experiment, or of one sweep: ids, its round
    (search, or confirm for a confirmation trial), status tags, typed params and the final
    value of every metric."""
    return trials_frame(exp, trial_runs(exp, sweep), sweep)


def trials_frame(exp: Experiment, runs: list[StoredRun], sweep: str | None = None) -> pd.DataFrame:
    """`trials` of RUNS, the trial runs already read (of SWEEP, where given)."""
    if not runs:
        where = f"sweep {sweep!r} of experiment" if sweep else "experiment"
        raise UserError(
            f"{where} {exp.name!r} has no trial runs: run a sweep into it "
            "first (`rhnsearch sweep run SPACE --experiment NAME`)"
        )
    ids, params, metrics = [], [], []
    for run in runs:
        tags = run.tags
        ids.append(
            {
                "experiment": exp.name,
                "sweep": tags.get(schema.SWEEP),
                "parent_run_id": tags.get(schema.PARENT_RUN),
                "run_id": run.run_id,
                "run_name": run.run_name,
                "trial_id": tags.get(schema.TRIAL_ID),
                "round": tags.get(schema.ROUND, schema.SEARCH),
                "status": tags.get(schema.STATUS, schema.RUNNING),
                "stopped_at_epoch": tags.get(schema.STOPPED_AT_EPOCH),
                "run_status": run.status,
                "start_time": run.start_time,
                "end_time": run.end_time,
                **{column: tags.get(tag) for tag, column in PROVENANCE.items()},
            }
        )
        params.append(run.params)
        metrics.append(run.metrics)
    frame = pd.DataFrame(ids, columns=ID_COLUMNS + list(PROVENANCE.values()))
    for column in (
        "experiment",
        "sweep",
        "parent_run_id",
        "run_id",
        "run_name",
        "trial_id",
        "round",
        "status",
        "run_status",
        *PROVENANCE.values(),
    ):
        frame[column] = frame[column].astype("str")
    frame["stopped_at_epoch"] = pd.to_numeric(frame["stopped_at_epoch"]).astype("Int64")
    for column in ("start_time", "end_time"):
        frame[column] = pd.to_datetime(frame[column], unit="ms", utc=True)
    params = pd.DataFrame(params)
    params = params[_ordered(params.columns, FIRST_PARAMS)].apply(typed)
    metrics = pd.DataFrame(metrics, dtype="float64").apply(unclipped)
    metrics = metrics[_ordered(metrics.columns, FIRST_METRICS)]
    frame = pd.concat([frame, params.add_prefix("params."), metrics.add_prefix("metrics.")], axis=1)
    return frame.sort_values(["sweep", "trial_id"], kind="stable").reset_index(drop=True)


def load_trials(
    experiment: str, *, tracking_uri: str | None = None, sweep: str | None = None
) -> pd.DataFrame:
    """One row per trial of an experiment (or of one of its sweeps), read from the MLflow store.

    Args:
        experiment: the MLflow experiment.
        tracking_uri: the MLflow store; default $MLFLOW_TRACKING_URI, else
            sqlite:///results/mlflow.db.
        sweep: only this sweep's trials.
    """
    return trials(open_experiment(experiment, tracking_uri), sweep)


def history(exp: Experiment, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per trial and epoch (step) for the trials in RUNS: their ids and params, then
    the metrics logged at that epoch (NaN where a metric was not logged at that epoch)."""
    keys = [
        c.removeprefix("metrics.")
        for c in runs.columns
        if c.startswith("metrics.") and c != "metrics.epoch"
    ]
    cached = (
        snapshot.EMPTY
        if database.is_database(exp.tracking_uri)
        else snapshot.current_rows(exp.client, runs, unclipped)
    )  # a database is read faster directly
    rest = runs["run_id"][~runs["run_id"].isin(cached["run_id"])]
    long = pd.concat(
        [cached, histories.read(exp.tracking_uri, exp.client, list(rest), keys)], ignore_index=True
    )
    long["value"] = unclipped(long["value"])
    wide = long.drop_duplicates(["run_id", "step", "key"], keep="last").pivot(
        index=["run_id", "step"], columns="key", values="value"
    )
    wide = wide[_ordered(wide.columns, FIRST_METRICS)].add_prefix("metrics.").reset_index()
    wide = wide.rename(columns={"step": "epoch"}).astype({"epoch": "Int64"})
    wide.columns.name = None
    fixed = [c for c in runs.columns if not c.startswith("metrics.")]
    out = runs[fixed].merge(wide, on="run_id", how="inner", validate="one_to_many")
    return out.sort_values(["sweep", "trial_id", "epoch"], kind="stable").reset_index(drop=True)


def search_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """TRIALS but the confirmation trials (`sweep confirm`): the search's, one per setting and
    seed, which the tables, plots and findings compare."""
    kept = trials[trials["round"] != schema.CONFIRM].reset_index(drop=True)
    return kept.drop(columns="params.confirms", errors="ignore")


def sweep_trials(
    exp: Experiment, sweep: str | None = None, *, runs: list[StoredRun] | None = None
) -> tuple[pd.Series, pd.DataFrame]:
    """The sweep NAME (default: the latest) of the experiment and its search trials
    (`search_trials`).

    Args:
        runs: the sweep's trial runs, where already read (a closing sweep's): not read again.
    """
    chosen = pick_sweep(exp, sweep)
    if runs is None:
        runs = trial_runs(exp, chosen["sweep"])
    return chosen, search_trials(trials_frame(exp, runs, chosen["sweep"]))


def hyperparameters(trials: pd.DataFrame) -> list[str]:
    """The `params.*` columns that vary among TRIALS, in column order: the sampled settings
    and the cell's arch, depth and tied; not the seed (random, not a setting), nor the width
    and parameter count (solved from the cell's budget, not chosen), nor the cell's label."""
    return [
        c
        for c in trials.columns
        if c.startswith("params.") and c not in NOT_SETTINGS and trials[c].nunique(dropna=True) > 1
    ]


def log_scaled(values: pd.Series) -> bool:
    """Whether a setting's values are read on a log scale: numbers, all positive, spanning
    more than LOG_SPAN (learning rates, init scales, clip norms)."""
    present = values.dropna()
    if (
        present.empty
        or pd.api.types.is_bool_dtype(values)
        or not pd.api.types.is_numeric_dtype(values)
    ):
        return False
    return bool(present.min() > 0 and present.max() / present.min() > LOG_SPAN)
