"""The metric histories of many runs at once, as (run_id, key, step, value) rows in logging
order, epochs only: the `epoch` metric (it is the step) and step 0 (epochs start at 1; step 0
holds summaries such as analyses') are left out.

Three ways, fastest first, each giving the same rows:
- a database store (sqlite://, postgresql://, mysql://): one SELECT on its `metrics` table
  per 500 runs, read-only;
- an MLflow server (http://, https://): its REST call GetMetricHistoryBulkInterval, one metric
  of up to 100 runs a call, a few calls at once. It samples a history longer than
  max_results (2,500) values, so such a history (and, for servers that sample by step across
  the call's runs, every run of a call returning that many steps) is read again whole with
  get_metric_history; a server without the call gets the next way;
- anything else: get_metric_history per run and metric.
The table and MLflow's own HTTP helper and credentials (MLFLOW_TRACKING_TOKEN,
_USERNAME/_PASSWORD, TLS settings) are MLflow's internals (compat/mlflow.py): without the
helpers, the last way.
"""

from concurrent.futures import ThreadPoolExecutor

import pandas as pd
from mlflow.tracking import MlflowClient

from ..compat import mlflow as mlflow_compat
from . import database
from .uris import is_server

BULK_ENDPOINT = "/api/2.0/mlflow/metrics/get-history-bulk-interval"
BULK_RUNS = 100  # the server's limit of runs per call
BULK_MAX_RESULTS = 2500  # the server's limit of values per run and call
THREADS = 4  # calls in flight at once
COLUMNS = ["run_id", "key", "step", "value"]


def read(uri: str, client: MlflowClient, run_ids: list[str], keys: list[str]) -> pd.DataFrame:
    """(run_id, key, step, value) of the metrics KEYS of RUN_IDS (every metric they have but
    `epoch`: a database store reads them all), epochs only, in logging order; +-inf as MLflow's
    SQL stores keep them (+-max float), NaN as NaN."""
    if database.is_database(uri):
        return _sql(uri, run_ids)
    request = (
        mlflow_compat.server_request(uri, BULK_ENDPOINT, instead="reading histories run by run")
        if is_server(uri)
        else None
    )
    long = _bulk(request, client, run_ids, keys) if request is not None else None
    if long is None:
        long = _per_run(client, [(run_id, key) for run_id in run_ids for key in keys])
    long = long[long["step"] >= 1].sort_values("timestamp", kind="stable")
    return long[COLUMNS].reset_index(drop=True)


def _sql(uri: str, run_ids: list[str]) -> pd.DataFrame:
    """One SELECT per database.CHUNK runs on the store's database."""
    with database.connect(uri) as db:
        rows = database.select(db, mlflow_compat.metric_histories_sql(), run_ids)
    long = pd.DataFrame.from_records(rows, columns=["run_id", "key", "step", "value", "is_nan"])
    long["value"] = long["value"].astype("float64").where(~long["is_nan"].astype(bool))
    return long[COLUMNS]


def _bulk(
    request, client: MlflowClient, run_ids: list[str], keys: list[str]
) -> pd.DataFrame | None:
    """Through GetMetricHistoryBulkInterval, a metric of up to BULK_RUNS runs a call, THREADS
    calls at once; None where the server has no such call."""
    calls = [
        (key, run_ids[i : i + BULK_RUNS]) for key in keys for i in range(0, len(run_ids), BULK_RUNS)
    ]
    if not calls:
        return _frame([])
    first = _bulk_call(request, *calls[0])
    if first is None:
        return None
    with ThreadPoolExecutor(THREADS) as pool:
        answers = [first, *pool.map(lambda call: _bulk_call(request, *call), calls[1:])]
    frames, again = [], []
    for (key, ids), answer in zip(calls, answers):
        counts = answer["run_id"].value_counts()
        sampled = (
            set(ids)
            if answer["step"].nunique() >= BULK_MAX_RESULTS
            else set(counts.index[counts >= BULK_MAX_RESULTS])
        )
        frames.append(answer[~answer["run_id"].isin(sampled)])
        again += [(run_id, key) for run_id in sampled]
    return pd.concat([*frames, _per_run(client, again)], ignore_index=True)


def _bulk_call(request, key: str, run_ids: list[str]) -> pd.DataFrame | None:
    """One call's values (all steps: a sampled answer is told by its length); None where
    the server has no such call."""
    answer = request({"run_ids": run_ids, "metric_key": key, "max_results": BULK_MAX_RESULTS})
    if answer is None:
        return None
    # proto3 JSON leaves out zeros; NaN and +-inf come as "NaN", "Infinity", "-Infinity"
    return _frame(
        [
            (
                m["run_id"],
                key,
                int(m.get("step", 0)),
                float(m.get("value", 0.0)),
                int(m.get("timestamp", 0)),
            )
            for m in answer.get("metrics", [])
        ]
    )


def _per_run(client: MlflowClient, pairs: list[tuple[str, str]]) -> pd.DataFrame:
    """get_metric_history per (run_id, key), THREADS at once."""

    def one(pair):
        run_id, key = pair
        return [
            (run_id, key, m.step, m.value, m.timestamp)
            for m in client.get_metric_history(run_id, key)
        ]

    with ThreadPoolExecutor(THREADS) as pool:
        return _frame([row for rows in pool.map(one, pairs) for row in rows])


def _frame(rows: list[tuple]) -> pd.DataFrame:
    """(run_id, key, step, value, timestamp) rows, typed."""
    return pd.DataFrame(rows, columns=[*COLUMNS, "timestamp"]).astype(
        {"step": "int64", "value": "float64", "timestamp": "int64"}
    )
