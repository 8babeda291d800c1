"""Sweeps on object storage, for real: a bucket on an S3-compatible server (moto) on 127.0.0.1,
named in pyarrow's query form. Everything of the sweep lives in the bucket, in few requests
(counted at the server), and a bad bucket is one line before Ray starts."""

import hashlib
import importlib.util
import json
import re

import pytest
from mlflow.tracking import MlflowClient
from test_faults import assert_full_histories, child_runs
from test_sweep import check_child_runs

from rhnsearch.files import storage
from rhnsearch.search.searchers import load_study, study_names

import tiers
from conftest import JSB_SPACE, json_summary, rhnsearch_cli, rhnsearch_main, wait_until
from ports import free_port

MAX_REQUESTS_PER_TRIAL_EPOCH = 10


def trial_epochs(uri: str) -> int:
    return sum(int(run.data.metrics["epoch"]) for run in child_runs(uri))


@pytest.mark.cluster
@pytest.mark.slow
def test_a_sweep_on_a_bucket_keeps_everything_there_in_few_requests(s3_server, tmp_path, data_dir):
    """The smoke sweep's RHN cells on a bucket: Tune's state, one checkpoint per trial, the
    scheduler's state and the sweep's state are in the bucket, no trial file is on the local
    disk, Tune's file loggers wrote nothing, and the server answered at most 10 requests per
    trial-epoch, listing a trial's folder only to delete an older checkpoint."""
    bucket = s3_server.bucket()
    before = len(s3_server.requests())
    proc = rhnsearch_cli(
        "sweep",
        "run",
        JSB_SPACE,
        "--preset",
        "smoke",
        "--data-dir",
        data_dir,
        "--name",
        "on-s3",
        "--storage-path",
        s3_server.uri(bucket),
        "--json",
        "--set",
        "archs=[rhn]",
        cwd=tmp_path,
    )
    summary = json_summary(proc)
    assert summary["complete"] and summary["trials"] == 8, proc.stderr[-3000:]
    requests = s3_server.requests()[before:]
    epochs = trial_epochs(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    assert len(requests) <= MAX_REQUESTS_PER_TRIAL_EPOCH * epochs, (len(requests), epochs)
    # a trial's folder is not listed (a checkpoint's is, to delete it), nor are the result
    # files that Tune's file loggers (off) would have written looked for
    listed = [p for m, p in requests if m == "GET" and "list-type=2" in p and "run_trial" in p]
    assert not [p for p in listed if re.search(r"prefix=[^&]*/run_trial[^/&]*/(&|$)", p)]
    assert listed and not [p for _, p in requests if re.search(r"result\.json|progress\.csv", p)]

    keys = [k.removeprefix("sweeps/on-s3/") for k in s3_server.keys(bucket, "sweeps/on-s3/")]
    for name in ("rhnsearch_sweep.json", "scheduler/decisions/000000000.json", "tuner.pkl"):
        assert name in keys, keys
    assert any(re.fullmatch(r"experiment_state-.*\.json", k) for k in keys), keys
    checkpoints = [k for k in keys if k.endswith("/trainer.pt")]
    trials = {k.split("/")[0] for k in checkpoints}
    assert len(trials) == 8 and len(checkpoints) == 8, checkpoints  # the newest one each
    assert not [k for k in keys if re.search(r"result\.json|progress\.csv|events\.out", k)]
    local = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not [p for p in local if "checkpoint" in str(p) or "run_trial" in str(p)], local
    # followed from the bucket and the store (no Ray): a line a trial, then its status
    watched = rhnsearch_main(
        *("sweep", "status", "on-s3", "--watch", "--storage-path", s3_server.uri(bucket)),
        cwd=tmp_path,
    )
    numbers = [line.split("]")[0] for line in watched.stderr.splitlines() if line[:1] == "["]
    assert numbers == [f"[{k}/8" for k in range(1, 9)], watched.stderr
    assert "sweep on-s3: 8 trials (" in watched.stdout


@pytest.mark.parametrize("case", ["unreachable", "no bucket", "bad option"])
def test_a_bucket_that_cannot_be_used_is_one_line_before_ray(case, s3_server, tmp_path, data_dir):
    """An endpoint that does not answer, a bucket that does not exist, an option pyarrow does
    not know: one line naming the storage, exit 2, and nothing recorded."""
    uri = {
        "unreachable": "s3://sweeps/x?endpoint_override=127.0.0.1:9&scheme=http",
        "no bucket": s3_server.uri("no-such-bucket"),
        "bad option": s3_server.uri(s3_server.bucket()) + "&colour=blue",
    }[case]
    proc = rhnsearch_main(
        "sweep",
        "run",
        JSB_SPACE,
        "--preset",
        "smoke",
        "--data-dir",
        data_dir,
        "--storage-path",
        uri,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"storage {uri} cannot be used" in proc.stderr
    assert not (tmp_path / "results" / "mlflow.db").exists()


# what reading a sweep takes of a bucket: HEAD and GET of its objects, a listing
READ_ONLY = ["s3:GetObject", "s3:ListBucket"]


def iam_keys(server, policies: dict[str, list[str]]) -> dict[str, dict[str, str]]:
    """Users of SERVER's IAM, each allowed the S3 actions POLICIES gives it, then IAM enforced
    on SERVER: from here on a request must be signed with one of their keys and is allowed
    by that user's policy alone (moto's authorization, turned on the way its
    `set_initial_no_auth_action_count` does in server mode). Returns each user's key as
    the AWS variables."""
    import boto3
    import requests

    iam = boto3.client("iam", endpoint_url=server.endpoint, **client_keys(server.env))
    keys = {}
    for user, actions in policies.items():
        iam.create_user(UserName=user)
        statement = {"Effect": "Allow", "Action": actions, "Resource": "*"}
        iam.put_user_policy(
            UserName=user,
            PolicyName=f"{user}-s3",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [statement]}),
        )
        key = iam.create_access_key(UserName=user)["AccessKey"]
        keys[user] = {
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    on = requests.post(f"{server.endpoint}/moto-api/reset-auth", data=b"0", timeout=10)
    assert on.json()["status"] == "ok", on.text
    return keys


def client_keys(env: dict[str, str]) -> dict[str, str]:
    """boto3's arguments for the credentials in ENV (AWS variables)."""
    return {
        "region_name": env["AWS_DEFAULT_REGION"],
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
    }


@pytest.mark.services
def test_a_sweep_on_a_read_only_bucket_is_refused_before_ray_and_left_as_it_was(
    jsb_smoke, tmp_path
):
    """The finished smoke sweep copied into a bucket, and read with the key of a user whose
    policy only reads (an archive's bucket, a key handed out to look): `sweep resume`,
    `extend` and `confirm` each refuse in one line naming the bucket's folder, exit 2,
    before Ray starts, and leave the bucket's objects, the MLflow store and the directory
    they ran from as they were. The bucket's server enforces IAM (its own, not the
    session's S3 server, which takes any key)."""
    import boto3
    import ray

    from s3_server import S3Server

    if importlib.util.find_spec("moto") is None:
        tiers.missing("moto's S3 server", "pip install -e '.[test]'")
    (tmp_path / "s3").mkdir()
    server = S3Server(tmp_path / "s3", free_port())
    try:
        bucket = server.bucket()
        keys = iam_keys(server, {"writer": ["s3:*"], "reader": READ_ONLY})
        writer = boto3.client("s3", endpoint_url=server.endpoint, **client_keys(keys["writer"]))
        folder = jsb_smoke.cwd / "results" / "sweeps" / jsb_smoke.name
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            key = f"sweeps/{jsb_smoke.name}/{path.relative_to(folder).as_posix()}"
            writer.upload_file(str(path), bucket, key)

        def objects():
            pages = writer.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            return sorted((o["Key"], o["ETag"]) for page in pages for o in page.get("Contents", []))

        uri = server.uri(bucket)
        store = jsb_smoke.cwd / "results" / "mlflow.db"
        elsewhere = tmp_path / "elsewhere"  # not the sweep's directory: its results/ is there
        elsewhere.mkdir()
        before, stored = objects(), hashlib.sha256(store.read_bytes()).hexdigest()
        assert f"sweeps/{jsb_smoke.name}/rhnsearch_sweep.json" in dict(before)
        for command, *args in (
            ("resume",),
            ("extend", "--samples", "4"),
            ("confirm", "--top", "1", "--seeds", "2"),
        ):
            proc = rhnsearch_main(
                *("sweep", command, jsb_smoke.name, *args, "--storage-path", uri),
                cwd=elsewhere,
                env=keys["reader"],
                check=False,
            )
            assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
            sweep_folder = storage.join(uri, jsb_smoke.name)
            assert f"sweep {jsb_smoke.name}: its folder {sweep_folder} cannot be written" in (
                proc.stderr
            )
            assert "ACCESS_DENIED during PutObject" in proc.stderr  # the bucket said no
            assert f"`sweep {command}` writes its state" in proc.stderr
            assert not ray.is_initialized()
        assert objects() == before
        assert hashlib.sha256(store.read_bytes()).hexdigest() == stored
        assert not list(elsewhere.iterdir())
    finally:
        server.stop()


def test_the_optuna_journal_in_a_bucket_costs_the_same_at_every_append(s3_server):
    """An Optuna journal in a bucket (ObjectJournal): its 60th append costs the server as
    many requests as its 6th (it asks for the objects after the last it read, by number, and
    never lists the journal's prefix); a fresh reader, as a resumed driver is, reads every log
    in order, from the objects named as rhnsearch always named them."""
    from rhnsearch.search.searchers import ObjectJournal

    location = storage.join(s3_server.uri(s3_server.bucket()), "sweep/optuna_journal")
    journal, first = ObjectJournal(location), len(s3_server.requests())
    cost = []
    for number in range(60):
        before = len(s3_server.requests())
        journal.append_logs([{"op_code": 0, "n": number}])
        cost.append(len(s3_server.requests()) - before)
    assert cost[59] == cost[5] <= 3, cost  # is there a 1st? no (2 requests); write it (1)
    listings = [
        r for r in s3_server.requests()[first:] if re.search(r"prefix=\S*journal/(&|$)", r[1])
    ]
    assert not listings, listings[:2]
    assert storage.listdir(location) == [f"{n:09d}.json" for n in range(60)]
    logs = ObjectJournal(location).read_logs(0)
    assert [log["n"] for log in logs] == list(range(60))
    assert ObjectJournal(location).read_logs(58) == logs[58:]


def test_a_large_file_in_a_bucket_is_read_in_one_request(s3_server):
    """A file read whole from a bucket is one GET, whatever its size. A resume reads Tune's
    experiment state whole (some 11.5 kB a saved trial); read as a stream, it was a ranged GET
    every 256 kB, some 640 at 14,000 trials, and moto reads the whole object for each."""
    location = storage.join(s3_server.uri(s3_server.bucket()), "sweep/state.json")
    data = bytes(range(256)) * (8 * 2**20 // 256)
    storage.write_bytes(location, data)
    before = len(s3_server.requests())
    assert storage.read_bytes(location) == data
    gets = [r for r in s3_server.requests()[before:] if r[0] == "GET"]
    assert len(gets) == 1, f"{len(gets)} GETs of one 8 MB file"


EPOCHS = 4  # a trial's epochs in the killed sweep: each a checkpoint in the bucket


def test_killed_driver_resumes_from_another_directory(s3_server, tmp_path, data_dir, sweeps):
    """An Optuna sweep on a bucket, its driver SIGKILLed once trials have ended; `sweep
    resume NAME --storage-path s3://...` from another directory finishes it: the Optuna
    journal and Tune's state come from the bucket, every trial has every epoch once in
    MLflow, and no trial file is on either local disk."""
    bucket = s3_server.bucket()
    uri = s3_server.uri(bucket)
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep = sweeps(
        first,
        "optuna-s3",
        data_dir,
        "--search",
        "optuna",
        "--set",
        "archs=[rhn]",
        "--set",
        "depths=[1,2]",
        "--set",
        "samples=3",
        "--set",
        f"fixed.epochs={EPOCHS}",
        "--set",
        "scheduler.name=fifo",
        "--tracking-uri",
        store,
        storage=uri,
    )

    def ended():  # once the driver has made the store (it writes the sweep's state after)
        return (
            "sweeps/optuna-s3/rhnsearch_sweep.json" in s3_server.keys(bucket)
            and sum(r.info.end_time is not None for r in child_runs(store)) >= 2
        )

    wait_until(ended, "two trials ended")
    sweep.stop()
    assert any(
        k.startswith("sweeps/optuna-s3/optuna_journal/")
        for k in s3_server.keys(bucket, "sweeps/optuna-s3/")
    )
    sent = len(s3_server.requests())
    proc = rhnsearch_cli(
        "sweep", "resume", "optuna-s3", "--storage-path", uri, "--json", cwd=second, timeout=300
    )
    summary = json_summary(proc)
    assert summary["complete"] and summary["completed"] == 6, proc.stderr[-3000:]
    # the round's folder (a folder a trial in it: a page every 1,000) listed once for the
    # resume's checks and Tune's restore (8 listings when each check listed it, 5 when Tune's
    # restore listed it twice more), the others at the fit's end and the close
    listings = [
        path
        for method, path in s3_server.requests()[sent:]
        if method == "GET"
        and "max-keys=1000" in path
        and "continuation-token" not in path
        and re.search(r"prefix=sweeps/optuna-s3/(&|$)", path)
    ]
    assert len(listings) <= 3, listings
    # Tune's saved search state read once for the resume's checks (`SavedRound`: it was read
    # three times), once more by Tune's restore
    search_reads = [
        path
        for method, path in s3_server.requests()[sent:]
        if method == "GET" and "/search_gen_state-" in path
    ]
    assert len(search_reads) <= 2, search_reads
    client = MlflowClient(store)
    runs = child_runs(store)
    check_child_runs(client, runs, 6)
    for run in runs:
        assert_full_histories(client, run, EPOCHS)
    for directory in (first, second):
        local = [p for p in directory.rglob("*") if p.is_file()]
        assert not [p for p in local if "checkpoint" in str(p) or "run_trial" in str(p)], local
    state = json.loads(
        s3_server.client()
        .get_object(Bucket=bucket, Key="sweeps/optuna-s3/rhnsearch_sweep.json")["Body"]
        .read()
    )
    assert state["search"] == "optuna" and state["storage"] == uri

    # extended from a third directory: a setting more a cell, its round's Tune state in the
    # bucket beside the first's, each cell's study gone on in the bucket's journal (its
    # trials before as they were, none run twice), under the same parent run
    studies = storage.join(uri, "optuna-s3")
    before = {name: load_study(studies, name).trials for name in study_names(studies)}
    third = tmp_path / "third"
    third.mkdir()
    proc = rhnsearch_cli(
        "sweep",
        "extend",
        "optuna-s3",
        "--samples",
        "4",
        "--storage-path",
        uri,
        "--json",
        cwd=third,
        timeout=300,
    )
    summary = json_summary(proc)
    assert summary["complete"] and summary["completed"] == 8, proc.stderr[-3000:]
    runs = child_runs(store)
    check_child_runs(client, runs, 8)
    assert sorted(r.data.params["cell"] for r in runs).count("rhn d1 w19") == 4
    keys = s3_server.keys(bucket, "sweeps/optuna-s3/extend-1/")
    assert any("experiment_state" in k for k in keys), keys
    assert not [p for p in third.rglob("*") if p.is_file() and "run_trial" in str(p)]
    for name in study_names(studies):
        trials = load_study(studies, name).trials
        assert [t.params for t in trials[: len(before[name])]] == [t.params for t in before[name]]
        finished = [t for t in trials if t.state.is_finished()]
        assert len(finished) == sum(t.state.is_finished() for t in before[name]) + 1, name
        done = [t for t in trials if t.state.name == "COMPLETE"]  # (the kill may cut an ask)
        assert len(done) >= 4 and len({t.params["lr"] for t in done}) == len(done)
    (parent,) = client.search_runs(
        [runs[0].info.experiment_id], "tags.kind = 'sweep' and tags.sweep = 'optuna-s3'"
    )
    assert parent.info.status == "FINISHED" and parent.data.params["search"] == "optuna"
    assert parent.data.tags["extended_1"].startswith("3 -> 4 settings a cell")
    assert {r.data.tags["mlflow.parentRunId"] for r in runs} == {parent.info.run_id}
