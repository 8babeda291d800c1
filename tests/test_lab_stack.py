"""MLflow as labs deploy it: `mlflow server` on PostgreSQL with its artifacts proxied to a
bucket, the sweep's storage in the same bucket (a real S3-compatible server on 127.0.0.1).
The sweep logs through the server, its model, plots and report land in the bucket, and every
results command works from the server alone, in a fresh directory."""
import json

import pytest
from mlflow.tracking import MlflowClient

from conftest import JSB_SPACE, json_summary, rhnsearch_cli, rhnsearch_main
from lab_services import mlflow_server, postgres_database

pytestmark = pytest.mark.slow


def test_sweep_through_a_postgresql_server_with_artifacts_in_a_bucket(s3_server, tmp_path,
                                                                      data_dir):
    bucket = s3_server.bucket()
    server_env = {**s3_server.env, "MLFLOW_S3_ENDPOINT_URL": s3_server.endpoint}
    with postgres_database() as database, mlflow_server(
            database, tmp_path, artifacts=f"s3://{bucket}/artifacts", env=server_env) as url:
        driver, fresh = tmp_path / "driver", tmp_path / "fresh"
        driver.mkdir(), fresh.mkdir()
        proc = rhnsearch_cli("sweep", "run", JSB_SPACE, "--preset", "smoke", "--data-dir",
                             data_dir, "--name", "lab", "--tracking-uri", url, "--storage-path",
                             s3_server.uri(bucket), "--set", "archs=[rhn]", "--set",
                             "depths=[1,2]", "--json", cwd=driver)
        summary = json_summary(proc)
        assert summary["complete"] and summary["trials"] == 4, proc.stderr[-3000:]
        artifacts = s3_server.keys(bucket, "artifacts/")
        for name in ("report/report.html", "swarm.png", "MLmodel", "model.pt"):
            assert any(key.endswith(name) for key in artifacts), (name, artifacts)
        assert not (driver / "results" / "mlflow.db").exists()

        def results(*args):
            return rhnsearch_main(*args, "--tracking-uri", url, cwd=fresh)
        results("results", "report", "--experiment", "jsb_optimization", "--out",
                fresh / "report.html")
        results("results", "export", "--experiment", "jsb_optimization", "--out",
                fresh / "history.csv", "--history")
        results("results", "plot", "swarm", "--experiment", "jsb_optimization", "--out",
                fresh / "swarm.png")
        table = results("results", "table", "--study", "jsb_optimization").stdout
        analysis = results("analyze", "gates", "--best", "--experiment", "jsb_optimization",
                           "--data-dir", data_dir, "--json")
        assert (fresh / "report.html").stat().st_size > 10_000
        assert (fresh / "swarm.png").stat().st_size > 10_000
        assert "| RHN | 1 |" in table and "| RHN | 2 |" in table
        best = MlflowClient(url).get_run(json.loads(analysis.stdout.splitlines()[-1])["run_id"])
        assert best.data.tags["sweep"] == "lab"
    assert not list(fresh.rglob("mlflow.db")), "a local store was made"
