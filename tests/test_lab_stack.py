"""MLflow as labs deploy it: `mlflow server` on PostgreSQL behind MLflow's basic-auth login,
its artifacts proxied to a bucket, the sweep's storage in the same bucket (a real
S3-compatible server on 127.0.0.1). The sweep logs through the server with the user's
credentials from the environment; a wrong password is one line before Ray starts; the model,
plots and report land in the bucket; every results command works from the server alone, in a
fresh directory; and the password is nowhere the sweep wrote."""

import json
import secrets

import matplotlib.image
import numpy
import pytest
from mlflow.tracking import MlflowClient
from test_report import Page

from conftest import JSB_SPACE, ROOT, json_summary, rhnsearch_cli, rhnsearch_main
from lab_services import LAB_WORKERS, mlflow_server, postgres_database


@pytest.mark.cluster
@pytest.mark.slow
def test_sweep_through_a_postgresql_server_with_a_login_and_a_bucket(
    s3_server, tmp_path, data_dir, monkeypatch
):
    bucket, password = s3_server.bucket(), secrets.token_hex(12)
    login = {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": password}
    server_env = {
        **s3_server.env,
        "MLFLOW_S3_ENDPOINT_URL": s3_server.endpoint,
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(8),
        "MLFLOW_AUTH_ADMIN_USERNAME": "admin",
        "MLFLOW_AUTH_ADMIN_PASSWORD": password,
    }
    driver, fresh, server_dir = tmp_path / "driver", tmp_path / "fresh", tmp_path / "server"
    for directory in (driver, fresh, server_dir):
        directory.mkdir()
    with (
        postgres_database() as database,
        mlflow_server(
            database,
            server_dir,
            artifacts=f"s3://{bucket}/artifacts",
            env=server_env,
            login=True,
            workers=LAB_WORKERS,
        ) as url,
    ):
        run = [
            "sweep",
            "run",
            JSB_SPACE,
            "--preset",
            "smoke",
            "--data-dir",
            data_dir,
            "--tracking-uri",
            url,
            "--storage-path",
            s3_server.uri(bucket),
        ]
        for user, word in (("admin", "wrong"), ("nobody", password)):
            refused = rhnsearch_main(
                *run,
                cwd=driver,
                check=False,
                env={"MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": word},
            )
            assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
            assert f"refused the login of user {user!r}" in refused.stderr
        # Nothing stored before the refusal (the bucket's check leaves pyarrow's empty marker
        # of the storage's folder, no object of the sweep).
        assert [key for key in s3_server.keys(bucket) if not key.endswith("/")] == []

        proc = rhnsearch_cli(
            *run,
            "--name",
            "lab",
            "--set",
            "archs=[rhn]",
            "--set",
            "depths=[1,2]",
            "--set",
            "fixed.epochs=3",  # each epoch a checkpoint in the bucket: 3 show what 9 would
            "--json",
            cwd=driver,
            env=login,
        )
        summary = json_summary(proc)
        assert summary["complete"] and summary["trials"] == 4, proc.stderr[-3000:]
        artifacts = s3_server.keys(bucket, "artifacts/")
        for name in ("report/report.html", "swarm.png", "MLmodel", "model.pt", "histories.parquet"):
            assert any(key.endswith(name) for key in artifacts), (name, artifacts)
        assert not (driver / "results" / "mlflow.db").exists()

        def results(*args):
            return rhnsearch_main(*args, "--tracking-uri", url, cwd=fresh, env=login)

        results(
            "results", "report", "--experiment", "jsb_optimization", "--out", fresh / "report.html"
        )
        results(
            "results",
            "export",
            "--experiment",
            "jsb_optimization",
            "--out",
            fresh / "history.csv",
            "--history",
        )
        results(
            "results",
            "plot",
            "swarm",
            "--experiment",
            "jsb_optimization",
            "--out",
            fresh / "swarm.png",
        )
        table = results("results", "table", "--study", "jsb_optimization").stdout
        analysis = results(
            "analyze",
            "gates",
            "--best",
            "--experiment",
            "jsb_optimization",
            "--data-dir",
            data_dir,
            "--json",
        )
        page = Page((fresh / "report.html").read_text())  # the sweep's study, table and figure
        assert {r["field"]: r["value"] for r in page.table_rows("header-facts")}["study"] == (
            "jsb_optimization"
        )
        rows = page.table_rows("study-table")
        assert sorted((r["arch"], r["depth"]) for r in rows) == [("RHN", "1"), ("RHN", "2")]
        assert sum(int(r["settings"]) for r in rows) == 4
        assert all(page.images.get(s) for s in ("figure", "curves", "parallel"))
        rhnsearch_main(
            "results",
            "export",
            "--experiment",
            "jsb_optimization",
            "--out",
            fresh / "history-db.csv",
            "--history",
            "--tracking-uri",
            database,
            cwd=fresh,
        )  # the histories from the database itself, as the table has them
        assert (fresh / "history.csv").read_text() == (fresh / "history-db.csv").read_text()
        swarm = matplotlib.image.imread(fresh / "swarm.png")  # a PNG that shows something
        assert swarm.shape[0] > 200 and swarm.shape[1] > 200
        assert len(numpy.unique(swarm.reshape(-1, swarm.shape[-1]), axis=0)) > 10
        assert "| RHN | 1 |" in table and "| RHN | 2 |" in table
        best = json.loads(analysis.stdout.splitlines()[-1])["run_id"]
        for key, value in login.items():  # this process reads the server too
            monkeypatch.setenv(key, value)
        client = MlflowClient(url)
        assert client.get_run(best).data.tags["sweep"] == "lab"

        # The password: not in any output, tag, param, artifact, bucket object or local file.
        experiment = client.get_experiment_by_name("jsb_optimization").experiment_id
        recorded = [proc.stdout, proc.stderr, analysis.stdout, analysis.stderr]
        recorded += [
            json.dumps([run.data.tags, run.data.params]) for run in client.search_runs([experiment])
        ]
        s3 = s3_server.client()
        recorded += [
            s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode("latin-1")
            for key in s3_server.keys(bucket)
        ]
        recorded += [
            path.read_bytes().decode("latin-1")
            for directory in (driver, fresh)
            for path in directory.rglob("*")
            if path.is_file()
        ]
        assert not [text[:200] for text in recorded if password in text]
    assert not list(fresh.rglob("mlflow.db")), "a local store was made"


def test_the_lab_server_is_started_as_jobs_readme_says():
    """The test above starts the lab's server with the workers jobs/README.md tells a lab."""
    readme = (ROOT / "jobs" / "README.md").read_text()
    assert (
        f"mlflow server --app-name basic-auth --host 127.0.0.1 --port 5000 --workers {LAB_WORKERS} "
        in readme
    )
