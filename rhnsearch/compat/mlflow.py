"""What rhnsearch uses of MLflow beyond its public API: the tag that says how a run used a
dataset, the `metrics` table of a database store (read directly: one SELECT for the
histories of 500 runs), and MLflow's own HTTP helper and credentials, for a server call that
MlflowClient does not offer (GetMetricHistoryBulkInterval).

The tag and the table raise a one-line UserError with an MLflow outside SUPPORTED; the server
call is then not made (one warning line), and the histories are read run by run.
"""

from . import require, tested

SUPPORTED = ">=3.17,<3.18"


def dataset_input_tags(context: str) -> list:
    """The tags of a run's dataset input that say the run used it for `context` (the runs
    table's Dataset column shows it), as mlflow.log_input(..., context=...) writes them."""
    from mlflow.entities import InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    require("mlflow", SUPPORTED, "MLflow's dataset context tag")
    return [InputTag(MLFLOW_DATASET_CONTEXT, context)]


def metric_histories_sql():
    """One SELECT on a database store's `metrics` table: (run_uuid, key, step, value,
    is_nan) of the runs bound to `ids` (a list, expanded), every key but `epoch`, steps >= 1,
    in logging order. A value stored as NaN is 0 with is_nan true; +-inf are +-max float."""
    import sqlalchemy as sa

    require("mlflow", SUPPORTED, "the metrics table of MLflow's database stores")
    return sa.text(
        "SELECT run_uuid, key, step, value, is_nan FROM metrics WHERE run_uuid IN :ids "
        "AND key != 'epoch' AND step >= 1 ORDER BY timestamp"
    ).bindparams(sa.bindparam("ids", expanding=True))


def server_request(uri: str, endpoint: str):
    """A function sending a GET query (a dict) to `endpoint` of the MLflow server at `uri`,
    with MLflow's credentials and TLS settings, and returning its JSON answer, or None on a
    404; None itself where this MLflow is not one the helpers were tested on or lacks them."""
    if not tested("mlflow", SUPPORTED, "MLflow's HTTP helpers", "reading histories run by run"):
        return None
    try:
        from mlflow.utils.credentials import get_default_host_creds
        from mlflow.utils.rest_utils import http_request, verify_rest_response
    except ImportError:
        return None
    creds = get_default_host_creds(uri)

    def request(params: dict) -> dict | None:
        response = http_request(creds, endpoint, "GET", params=params)
        if response.status_code == 404:
            return None
        return verify_rest_response(response, endpoint).json()

    return request
