"""A finished sweep's trial histories as one Parquet table on its parent run
(`histories.parquet`: run_id, key, step, value in logging order, as `histories.read` gives
them), so that reading them back from an MLflow server is one download instead of a call per
100 runs and metric.

The table is a copy made when the sweep finished. A run's rows in it are used only while they
still end in the run's latest value of every metric they hold (MLflow keeps those with the
run); a run logged to since, or one the table does not hold, is read from the store itself.
"""

import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from . import schema

SCHEMA = pa.schema(
    [("run_id", pa.string()), ("key", pa.string()), ("step", pa.int64()), ("value", pa.float64())]
)
EMPTY = SCHEMA.empty_table().to_pandas()


def log_histories(client, parent_run_id: str, long: pd.DataFrame):
    """Log LONG (histories.read's rows of the sweep's trials) as the parent run's table."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / schema.HISTORIES_ARTIFACT
        pq.write_table(
            pa.Table.from_pandas(long[SCHEMA.names], schema=SCHEMA, preserve_index=False), path
        )
        client.log_artifact(parent_run_id, str(path))


def current_rows(client, runs: pd.DataFrame, unclip) -> pd.DataFrame:
    """The tables' rows of the RUNS (store.trials' frame) whose rows are still current, in
    logging order; UNCLIP maps stored values to the frame's (a SQL store keeps +-inf as
    +-max float)."""
    tables = [
        table
        for parent in runs["parent_run_id"].unique()
        if (table := _download(client, parent)) is not None
    ]
    if not tables:
        return EMPTY
    long = pd.concat(tables, ignore_index=True)
    long = long[long["run_id"].isin(runs["run_id"])]
    # each (run, key)'s latest value: the last logged at its highest step
    last = long.loc[
        long.groupby(["run_id", "key"], sort=False)["step"].transform("max") == long["step"]
    ].drop_duplicates(["run_id", "key"], keep="last")
    latest = (
        runs.set_index("run_id")
        .filter(like="metrics.")
        .rename(columns=lambda c: c.removeprefix("metrics."))
        .stack(future_stack=True)
    )
    kept = latest.reindex(pd.MultiIndex.from_frame(last[["run_id", "key"]]))
    value = unclip(last["value"]).to_numpy()
    same = (kept.to_numpy() == value) | (
        kept.isna().to_numpy() & pd.isna(value) & kept.index.isin(latest.index)
    )
    stale = set(last["run_id"][~same])
    return long[~long["run_id"].isin(stale)].reset_index(drop=True)


def _download(client, parent_run_id: str) -> pd.DataFrame | None:
    """The parent run's table, or None where it has none (or it cannot be read)."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(parent_run_id, schema.HISTORIES_ARTIFACT, tmp)
            return pq.read_table(path, schema=SCHEMA).to_pandas()
        except Exception:  # noqa: BLE001 - no table, or a broken one: read the store instead
            return None
