"""`results export --history` from `mlflow server` on PostgreSQL (and from the PostgreSQL
database itself) gives the same rows as from a sqlite store of the same runs: the runs logged
the same way into both, with log_batch, including a run logged by plain MLflow code, a history
longer than one bulk call returns, and NaN and +-inf values."""

import math
import time

import pandas as pd
import pytest
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from rhnsearch.compat import mlflow as mlflow_compat
from rhnsearch.tracking import histories, runs, snapshot, store

from conftest import rhnsearch_main

EXPERIMENT = "server_export"
KEYS = ["train_loss", "valid_loss", "best_valid_loss"]


def log_runs(uri: str):
    """A sweep of 30 trials (4 epochs, some with NaN or +-inf, one re-logged epoch), a
    trial with a history longer than one bulk call returns, and a run that plain MLflow code
    logged under the sweep (its own metric names, step 0 and a re-logged value)."""
    client = MlflowClient(uri)
    exp = client.create_experiment(EXPERIMENT)
    parent = client.create_run(exp, run_name="sweep", tags={"kind": "sweep", "sweep": "s"})
    parent_id, t0 = parent.info.run_id, 1_700_000_000_000

    def child(name: str, trial_id: str, metrics: list, **tags):
        run = client.create_run(
            exp,
            run_name=name,
            tags={
                "mlflow.parentRunId": parent_id,
                "kind": "trial",
                "sweep": "s",
                "trial_id": trial_id,
                **tags,
            },
        )
        for i in range(0, len(metrics), 1000):  # log_batch takes 1,000 metrics a call
            client.log_batch(
                run.info.run_id,
                metrics=metrics[i : i + 1000],
                params=[] if i else [Param("arch", "rhn"), Param("depth", "2")],
                tags=[RunTag("status", "completed")],
            )
        client.set_terminated(run.info.run_id)

    for n in range(30):
        values = {
            "train_loss": [1.0 / (n + e) for e in range(1, 5)],
            "valid_loss": [2.0 + n, math.nan if n % 7 == 3 else 1.5, math.inf, -math.inf]
            if n % 5 == 0
            else [2.0, 1.9, 1.8, math.nan if n % 3 else 1.7],
            "best_valid_loss": [2.0, 1.9, 1.8, 1.7],
        }
        metrics = [
            Metric(k, v[e - 1], t0 + 10 * e, e) for k, v in values.items() for e in range(1, 5)
        ] + [Metric("epoch", float(e), t0 + 10 * e, e) for e in range(1, 5)]
        metrics.append(Metric("valid_loss", 0.5, t0 + 100, 2))  # epoch 2 logged again, later
        metrics.append(Metric("test_loss", 3.0 + n, t0 + 40, 4))
        child(f"trial-{n:02d}", f"{n:05d}", metrics)
    steps = histories.BULK_MAX_RESULTS + 100
    child(
        "long",
        "long",
        [Metric("train_loss", 1.0 / s, t0 + s, s) for s in range(1, steps + 1)]
        + [Metric("valid_loss", 2.0, t0 + steps, steps)],
    )
    run = client.create_run(exp, run_name="plain-mlflow", tags={"mlflow.parentRunId": parent_id})
    client.log_metric(run.info.run_id, "accuracy", 0.3, timestamp=t0, step=0)
    for step in range(1, 6):
        client.log_metric(
            run.info.run_id, "accuracy", 0.5 + step / 10, timestamp=t0 + step, step=step
        )
    client.log_metric(run.info.run_id, "accuracy", 0.99, timestamp=t0 + 50, step=3)
    client.log_metric(run.info.run_id, "loss", math.inf, timestamp=t0 + 60, step=5)
    client.set_terminated(parent_id)


@pytest.fixture(scope="module")
def stores(mlflow_pg_server, postgres_uri, tmp_path_factory):  # noqa: F811
    """The same runs in a sqlite store and in the PostgreSQL-backed server."""
    sqlite = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'mlflow.db'}"
    for uri in (sqlite, mlflow_pg_server):
        log_runs(uri)
    return {"sqlite": sqlite, "server": mlflow_pg_server, "postgresql": postgres_uri}


def exported(uri: str, tmp_path, name: str) -> pd.DataFrame:
    out = tmp_path / f"{name}.parquet"
    start = time.perf_counter()
    rhnsearch_main(
        "results",
        "export",
        "--experiment",
        EXPERIMENT,
        "--history",
        "--out",
        out,
        "--tracking-uri",
        uri,
        cwd=tmp_path,
    )
    print(f"{name}: export --history in {time.perf_counter() - start:.2f}s")
    frame = pd.read_parquet(out)
    return frame.drop(columns=["run_id", "parent_run_id", "start_time", "end_time"])


def test_server_export_equals_sqlite_export(stores, tmp_path):
    expected = exported(stores["sqlite"], tmp_path, "sqlite")
    assert len(expected) == 30 * 4 + histories.BULK_MAX_RESULTS + 100 + 5
    long = expected[expected["trial_id"] == "long"]
    assert list(long["epoch"]) == list(range(1, histories.BULK_MAX_RESULTS + 101))
    assert long["metrics.train_loss"].tolist() == [1.0 / s for s in long["epoch"]]
    plain = expected[expected["run_name"] == "plain-mlflow"]
    assert plain["metrics.accuracy"].tolist() == pytest.approx([0.6, 0.7, 0.99, 0.9, 1.0])
    assert plain["metrics.loss"].isna().tolist() == [True] * 4 + [False]
    assert plain["metrics.loss"].iloc[-1] == math.inf
    trial = expected[expected["trial_id"] == "00000"]
    assert trial["metrics.valid_loss"].tolist() == [2.0, 0.5, math.inf, -math.inf]
    assert expected[expected["trial_id"] == "00001"]["metrics.valid_loss"].isna().tolist() == [
        False
    ] * 3 + [True]
    for name in ("server", "postgresql"):
        pd.testing.assert_frame_equal(exported(stores[name], tmp_path, name), expected)


def test_server_runs_read_as_json_are_mlflow_clients_runs(stores):
    """The runs through the server read from its JSON answer are MlflowClient's: the same
    info, tags, params and latest metrics (NaN and +-inf, which a SQL store keeps as +-max
    float, among them), in the same order, in one page or in many; a deleted run is not."""
    client = MlflowClient(stores["server"])
    experiment = client.get_experiment_by_name(EXPERIMENT).experiment_id
    parent = client.search_runs([experiment], "tags.kind = 'sweep'")[0].info.run_id
    deleted = client.create_run(experiment, tags={"mlflow.parentRunId": parent}).info.run_id
    client.delete_run(deleted)
    query = "tags.mlflow.parentRunId != ''"
    expected = [repr(runs.StoredRun.of(r)) for r in runs.all_runs(client, experiment, query)]
    assert len(expected) == 32 and not any(deleted in r for r in expected)
    assert any("nan" in r for r in expected) and any(
        "-1.7976931348623157e+308" in r for r in expected
    )
    read = runs.matching(stores["server"], client, experiment, {"mlflow.parentRunId": None})
    assert [repr(r) for r in read] == expected
    for parts in (1, 3, 40):
        paged = runs.server_runs(stores["server"], experiment, query, page=7, parts=parts)
        assert [repr(r) for r in paged] == expected, parts


def test_history_longer_than_a_bulk_call_is_read_whole(stores):
    """The server samples a history longer than BULK_MAX_RESULTS: such a run is read again."""
    client = MlflowClient(stores["server"])
    run = client.search_runs(
        [client.get_experiment_by_name(EXPERIMENT).experiment_id], "tags.trial_id = 'long'"
    )[0]
    # the bulk call is there, and samples
    request = mlflow_compat.server_request(stores["server"], histories.BULK_ENDPOINT, instead="x")
    answer = request(
        {
            "run_ids": [run.info.run_id],
            "metric_key": "train_loss",
            "max_results": histories.BULK_MAX_RESULTS,
        }
    )
    assert len(answer["metrics"]) == histories.BULK_MAX_RESULTS
    long = histories.read(stores["server"], client, [run.info.run_id], ["train_loss"])
    assert long["step"].tolist() == list(range(1, histories.BULK_MAX_RESULTS + 101))


def test_a_sweeps_history_table_is_read_while_it_is_current(stores, tmp_path):
    """The table a finished sweep logs on its parent run gives the server's export, and a run
    logged to after it was written is read from the server instead."""
    client = MlflowClient(stores["server"])
    exp = store.open_experiment(EXPERIMENT, stores["server"])
    runs = store.trials(exp)
    ids = list(runs["run_id"])
    long = histories.read(stores["server"], client, ids, KEYS + ["test_loss", "accuracy", "loss"])
    snapshot.log_histories(client, runs["parent_run_id"].iloc[0], long)
    assert set(snapshot.current_rows(client, runs, store.unclipped)["run_id"]) == set(ids)
    pd.testing.assert_frame_equal(
        exported(stores["server"], tmp_path, "table"),
        exported(stores["sqlite"], tmp_path, "sqlite"),
    )

    later = runs[runs["trial_id"] == "00002"]["run_id"].item()
    for uri in (stores["server"], stores["sqlite"]):  # an epoch more on one trial, both stores
        run_id = (
            later
            if uri == stores["server"]
            else store.trials(store.open_experiment(EXPERIMENT, uri))
            .set_index("trial_id")
            .loc["00002", "run_id"]
        )
        MlflowClient(uri).log_metric(
            run_id, "valid_loss", 0.25, timestamp=1_800_000_000_000, step=5
        )
    current = snapshot.current_rows(client, store.trials(exp), store.unclipped)
    assert set(current["run_id"]) == set(ids) - {later}
    server = exported(stores["server"], tmp_path, "table-after")
    assert server[server["trial_id"] == "00002"]["metrics.valid_loss"].iloc[-1] == 0.25
    pd.testing.assert_frame_equal(server, exported(stores["sqlite"], tmp_path, "sqlite-after"))
