"""What the MLflow sender's lookup of a new trial's run costs as a sweep grows: on a sqlite
store already holding N trial runs under the sweep's parent, the seconds the sender takes to
send the first record of 200 new trials, side by side in one run: as it does (a run known or
created; looked up by its trial-id tag only where a create of it failed) and with the lookup
before every create that it made before (a `search_runs` over the sweep's runs per new trial:
the old path, forced here by marking every new trial as one whose create failed).

    python benchmarks/sender_lookup.py [--runs 0 1000 3000] [--new 200]
"""

import argparse
import tempfile
import time
from pathlib import Path

from mlflow.entities import Metric, RunTag
from mlflow.tracking import MlflowClient

from rhnsearch.files.layout import SweepPaths
from rhnsearch.files.record import ParentRun
from rhnsearch.tracking.journal import Journal
from rhnsearch.tracking.sender import Sender


def store_with_runs(folder: Path, runs: int) -> ParentRun:
    """A sqlite store in FOLDER with a sweep's parent run and RUNS trial runs under it."""
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    experiment = client.create_experiment("lookup")
    parent = client.create_run(experiment, tags={"kind": "sweep"}).info.run_id
    for n in range(runs):
        run = client.create_run(
            experiment, tags={"mlflow.parentRunId": parent, "trial_id": f"old{n}"}
        )
        client.log_batch(
            run.info.run_id,
            metrics=[Metric("valid_loss", 1.0, 0, e) for e in range(1, 11)],
            tags=[RunTag("kind", "trial"), RunTag("sweep", "s")],
        )
    return ParentRun(client.tracking_uri, experiment, parent, SweepPaths(str(folder), "s"))


def send_new(run: ParentRun, new: int, lookup: bool, tag: str) -> float:
    """Seconds for a fresh sender to send one record of each of NEW new trials."""
    journal = Journal(Path(run.paths.local) / tag)
    sender = Sender(run, journal)

    def send(trial_id: str):
        record = {
            "trial_id": trial_id,
            "name": trial_id,
            "end": None,
            "end_time": None,
            "metrics": [["valid_loss", 2.0, 0, 1]],
            "params": [["lr", "0.1"]],
            "tags": [["status", "running"]],
        }
        sender.put(journal.append(record))

    send(f"{tag}-first")  # sent once the sender has loaded the sweep's runs
    assert sender.drain(600)
    ids = [f"{tag}{n}" for n in range(new)]
    if lookup:
        sender.unsure.update(ids)
    start = time.perf_counter()
    for trial_id in ids:
        send(trial_id)
    assert sender.drain(600)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[0, 1000, 3000])
    parser.add_argument("--new", type=int, default=200)
    args = parser.parse_args()
    print(f"{'runs in the sweep':>18} {'lookup each (s)':>16} {'as it does (s)':>15} {'ratio':>6}")
    for runs in args.runs:
        with tempfile.TemporaryDirectory() as folder:
            run = store_with_runs(Path(folder), runs)
            old = send_new(run, args.new, True, "a")
            now = send_new(run, args.new, False, "b")
        print(f"{runs:>18} {old:>16.2f} {now:>15.2f} {old / now:>6.2f}")


if __name__ == "__main__":
    main()
