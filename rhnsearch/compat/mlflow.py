"""What rhnsearch uses of MLflow beyond its public API: the tag that says how a run used a
dataset, the `metrics` table of a database store (read directly: one SELECT for the
histories of 500 runs) and its run tables (the runs, their tags, params and latest metrics),
and MLflow's own HTTP helper and credentials, for a server call that
MlflowClient does not offer (GetMetricHistoryBulkInterval) and for a search whose answer is read
as JSON (MlflowClient's parse of it into objects costs more than the reading).

The tag and the metrics table raise a one-line UserError with an MLflow outside SUPPORTED; the
run tables and the server calls are then not used (one warning line each): the runs are
searched through MlflowClient, and the histories read run by run.
"""

from . import require, tested

SUPPORTED = ">=3.17,<3.19"


def require_logging():
    """Raise a one-line UserError unless the internals a sweep logs its trials with (the
    dataset context tag) are in SUPPORTED: checked before a sweep starts Ray, where the
    sender would otherwise meet it with every trial's first record."""
    require("mlflow", SUPPORTED, "MLflow's dataset context tag")


def dataset_input_tags(context: str) -> list:
    """The tags of a run's dataset input that say the run used it for `context` (the runs
    table's Dataset column shows it), as mlflow.log_input(..., context=...) writes them."""
    from mlflow.entities import InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    require_logging()
    return [InputTag(MLFLOW_DATASET_CONTEXT, context)]


def metric_histories_sql():
    """One SELECT on a database store's `metrics` table: (run_uuid, key, step, value,
    is_nan) of the runs bound to `ids` (a list, expanded), every key but `epoch`, steps >= 1,
    in logging order. A value stored as NaN is 0 with is_nan true; +-inf are +-max float."""
    import sqlalchemy as sa

    require("mlflow", SUPPORTED, "the metrics table of MLflow's database stores")
    m = _table("metrics", "run_uuid", "key", "step", "value", "is_nan", "timestamp")
    return (
        sa.select(m.c.run_uuid, m.c.key, m.c.step, m.c.value, m.c.is_nan)
        .where(_of_runs(m), m.c.key != "epoch", m.c.step >= 1)
        .order_by(m.c.timestamp)
    )


def run_tables_sql() -> dict | None:
    """SELECTs on a database store's run tables, or None where this MLflow is not one they
    were tested on (one warning line: the runs are then searched through MlflowClient):
    `runs(tags)`, the active runs of the experiment bound to `experiment_id` (run_uuid, name,
    status, start_time, end_time) whose TAGS have the values given (None: any value but none
    or ''), in MlflowClient.search_runs' order; `tags`, `params` and `latest_metrics`
    (run_uuid, key, value; the metrics also is_nan) of the runs bound to `ids` (a list,
    expanded)."""
    import sqlalchemy as sa

    what = "the run tables of MLflow's database stores"
    if not tested("mlflow", SUPPORTED, what, "searching the runs through MlflowClient"):
        return None
    info = ("run_uuid", "name", "status", "start_time", "end_time")
    runs = _table("runs", *info, "experiment_id", "lifecycle_stage")
    tags = _table("tags", "run_uuid", "key", "value")

    def tagged(key: str, value: str | None):
        return sa.exists().where(
            tags.c.run_uuid == runs.c.run_uuid,
            tags.c.key == key,
            tags.c.value != "" if value is None else tags.c.value == value,
        )

    def runs_of(wanted: dict[str, str | None]) -> sa.Select:
        return (
            sa.select(*(runs.c[name] for name in info))
            .where(
                runs.c.experiment_id == sa.bindparam("experiment_id"),
                runs.c.lifecycle_stage == "active",
                *(tagged(key, value) for key, value in wanted.items()),
            )
            .order_by(runs.c.start_time.desc(), runs.c.run_uuid)
        )

    def of_runs(name: str, *extra: str) -> sa.Select:
        table = _table(name, "run_uuid", "key", "value", *extra)
        return sa.select(*table.c).where(_of_runs(table))

    return {
        "runs": runs_of,
        "tags": of_runs("tags"),
        "params": of_runs("params"),
        "latest_metrics": of_runs("latest_metrics", "is_nan"),
    }


def _table(name: str, *columns: str):
    """MLflow's table NAME with COLUMNS, for SQLAlchemy to quote as each database needs (MySQL
    reserves `key`)."""
    import sqlalchemy as sa

    return sa.table(name, *(sa.column(c) for c in columns))


def _of_runs(table):
    """TABLE's rows of the runs bound to `ids` (a list, expanded)."""
    import sqlalchemy as sa

    return table.c.run_uuid.in_(sa.bindparam("ids", expanding=True))


def server_request(uri: str, endpoint: str, method: str = "GET", *, instead: str):
    """A function sending a query (a dict: GET's parameters, POST's JSON body) to `endpoint` of
    the MLflow server at `uri`, with MLflow's credentials and TLS settings, and returning its
    JSON answer, or None on a 404; None itself where this MLflow is not one the helpers were
    tested on or lacks them (one warning line says that `instead`, the public way, is taken)."""
    if not tested("mlflow", SUPPORTED, "MLflow's HTTP helpers", instead):
        return None
    try:
        from mlflow.utils.credentials import get_default_host_creds
        from mlflow.utils.rest_utils import http_request, verify_rest_response
    except ImportError:
        return None
    creds = get_default_host_creds(uri)
    sent = "params" if method == "GET" else "json"

    def request(query: dict) -> dict | None:
        response = http_request(creds, endpoint, method, **{sent: query})
        if response.status_code == 404:
            return None
        return verify_rest_response(response, endpoint).json()

    return request
