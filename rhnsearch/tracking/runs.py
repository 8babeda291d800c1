"""Every run of an experiment, as plain records: from a database store, by SELECTs on its run
tables (`database`); from an MLflow server, its search's JSON answer read as it is
(MlflowClient's parse of the same answer into objects costs its client several times the
CPU); from anything else, MlflowClient.search_runs.
Page after page: MLflow answers a search with one page of at most 50,000 runs, so a single
call cuts a larger sweep short without a word."""

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from mlflow.tracking import MlflowClient

from ..compat import mlflow as mlflow_compat
from . import database
from .uris import is_server

PAGE = 50_000  # the largest page MLflow's stores and server give
PARTS = 4  # spans of start times a server lists at once
SEARCH_ENDPOINT = "/api/2.0/mlflow/runs/search"


@dataclass(frozen=True)
class StoredRun:
    """A run as the store holds it: its info, tags, params and each metric's latest value
    (NaN as NaN; a SQL store's +-inf as +-max float)."""

    run_id: str
    run_name: str
    status: str
    start_time: int | None  # ms since the epoch
    end_time: int | None
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]

    @classmethod
    def of(cls, run) -> "StoredRun":
        """The record of an mlflow.entities.Run."""
        info, data = run.info, run.data
        return cls(
            info.run_id,
            info.run_name,
            info.status,
            info.start_time,
            info.end_time,
            data.tags,
            data.params,
            data.metrics,
        )

    @classmethod
    def of_json(cls, run: dict) -> "StoredRun":
        """The record of a run in a server's JSON answer (NaN and +-inf as "NaN", "Infinity",
        "-Infinity"; a field left out is its default)."""
        info, data = run["info"], run.get("data", {})

        def pairs(kind: str) -> dict[str, str]:
            return {x["key"]: x.get("value", "") for x in data.get(kind, [])}

        return cls(
            info["run_id"],
            info.get("run_name", ""),
            info["status"],
            info.get("start_time"),
            info.get("end_time"),
            pairs("tags"),
            pairs("params"),
            {m["key"]: float(m.get("value", 0.0)) for m in data.get("metrics", [])},
        )


def matching(
    uri: str, client: MlflowClient, experiment_id: str, tags: dict[str, str | None]
) -> list[StoredRun]:
    """The active runs of EXPERIMENT_ID whose TAGS have the values given (None: any value but
    none or ''), newest first."""
    if database.is_database(uri):
        found = database_runs(uri, experiment_id, tags)
        if found is not None:
            return found
    query = " and ".join(
        f"tags.{key} != ''" if value is None else f"tags.{key} = '{value}'"
        for key, value in tags.items()
    )
    if is_server(uri):
        found = server_runs(uri, experiment_id, query)
        if found is not None:
            return found
    return [StoredRun.of(run) for run in all_runs(client, experiment_id, query)]


def server_runs(
    uri: str, experiment_id: str, filter_string: str, *, page: int = PAGE, parts: int = PARTS
) -> list[StoredRun] | None:
    """The active runs of EXPERIMENT_ID matching FILTER_STRING, from the MLflow server at URI
    (its SearchRuns, every page of PAGE runs read), in search_runs' order; None where MLflow's
    HTTP helpers are not known here. The runs' start times are cut into PARTS spans, listed at
    once: a server of several workers lists them side by side (one worker, one by one)."""
    search = mlflow_compat.server_request(
        uri, SEARCH_ENDPOINT, "POST", instead="searching the runs through MlflowClient"
    )
    if search is None:
        return None
    query = {"experiment_ids": [experiment_id], "filter": filter_string}

    def listed(span: str) -> list[StoredRun]:
        runs, token = [], None
        spanned = " and ".join(f for f in (filter_string, span) if f)
        while True:  # the view: active runs, by default
            found = search({**query, "filter": spanned, "max_results": page, "page_token": token})
            runs += [StoredRun.of_json(run) for run in found.get("runs", [])]
            token = found.get("next_page_token")
            if not token:
                return runs

    def started(order: str) -> int | None:
        found = search({**query, "max_results": 1, "order_by": [f"attributes.start_time {order}"]})
        return int(found["runs"][0]["info"]["start_time"]) if found.get("runs") else None

    first, last = started("ASC"), started("DESC")
    if first is None:
        return []
    cuts = sorted({first + (last - first) * i // parts for i in range(1, parts)} - {first})
    bounds = [None, *cuts, None]
    spans = [  # newest first: search_runs' order is start_time descending
        " and ".join(
            [f"attributes.start_time >= {lo}"] * (lo is not None)
            + [f"attributes.start_time < {hi}"] * (hi is not None)
        )
        for lo, hi in reversed(list(zip(bounds, bounds[1:])))
    ]
    with ThreadPoolExecutor(len(spans)) as pool:
        return [run for runs in pool.map(listed, spans) for run in runs]


def all_runs(client: MlflowClient, experiment_id: str, filter_string: str, *, page: int = PAGE):
    """The runs of EXPERIMENT_ID matching FILTER_STRING, every page of PAGE runs read."""
    runs, token = [], None
    while True:
        found = client.search_runs(
            [experiment_id], filter_string, max_results=page, page_token=token
        )
        runs.extend(found)
        token = found.token
        if not token:
            return runs


def database_runs(
    uri: str, experiment_id: str, tags: dict[str, str | None]
) -> list[StoredRun] | None:
    """The active runs of EXPERIMENT_ID in the database store URI whose TAGS have the values
    given (None: any but none or ''), in search_runs' order (newest first); None where this
    MLflow's run tables are not known here."""
    queries = mlflow_compat.run_tables_sql()
    if queries is None:
        return None
    with database.connect(uri) as db:
        query = queries["runs"](tags)
        infos = db.execute(query, {"experiment_id": experiment_id}).cursor.fetchall()
        ids = [info[0] for info in infos]
        tagged, params, metrics = defaultdict(dict), defaultdict(dict), defaultdict(dict)
        for run_id, key, value in database.select(db, queries["tags"], ids):
            tagged[run_id][key] = value
        for run_id, key, value in database.select(db, queries["params"], ids):
            params[run_id][key] = value
        for run_id, key, value, is_nan in database.select(db, queries["latest_metrics"], ids):
            metrics[run_id][key] = float("nan") if is_nan else float(value)
    return [
        StoredRun(run_id, name, status, start, end, tagged[run_id], params[run_id], metrics[run_id])
        for run_id, name, status, start, end in infos
    ]
