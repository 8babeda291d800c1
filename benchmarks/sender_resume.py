"""What a resumed driver's MLflow sender costs before it has caught up, side by side in one run:
on a sqlite store already holding N trial runs under the sweep's parent, the seconds to learn
which runs MLflow has (MlflowClient.search_runs page after page, as it did, against the store's
tables, as it does now on a database store); and, for a journal that a killed driver left with
R records unsent (an epoch's 24 metrics each), the seconds to read it a batch of 500 at a time
and mark each batch sent, as the journal did before (the whole file parsed for each batch, and
rewritten with what is left at every batch once past 4 MB) and as it does now (the sent lines
skipped unparsed; rewritten only once 2 MB of it has been sent).

    python benchmarks/sender_resume.py [--runs 1000 5000] [--records 20000]
"""

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from mlflow.tracking import MlflowClient
from sender_lookup import store_with_runs

from rhnsearch.tracking import journal as journals
from rhnsearch.tracking.runs import StoredRun, all_runs, matching
from rhnsearch.tracking.sender import BATCH

METRICS = 24  # what a trial reports each epoch


def known_runs(run, client_side: bool) -> dict[str, str]:
    """trial id -> run id of the sweep's runs, as the sender learns them."""
    tags, client = {"mlflow.parentRunId": run.run_id}, MlflowClient(run.tracking_uri)
    if client_side:
        query = f"tags.mlflow.parentRunId = '{run.run_id}'"
        found = [StoredRun.of(r) for r in all_runs(client, run.experiment_id, query)]
    else:
        found = matching(run.tracking_uri, client, run.experiment_id, tags)
    return {r.tags["trial_id"]: r.run_id for r in found}


def left_journal(folder: Path, records: int) -> journals.Journal:
    """A journal of RECORDS records none of which MLflow has."""
    journal = journals.Journal(folder)
    for n in range(records):
        journal.append(
            {
                "trial_id": f"t{n % 1000}",
                "name": f"t{n % 1000}",
                "end": None,
                "end_time": None,
                "metrics": [
                    [f"m{k}", 1.0 / (n + 1), 1795800000000 + n, n // 1000] for k in range(METRICS)
                ],
                "params": [],
                "tags": [],
            }
        )
    return journal


def read_before(journal: journals.Journal) -> int:
    """The batches read and acked as the journal did before: the file parsed whole for each
    batch, and rewritten with the records left at every batch once past COMPACT_BYTES."""
    batches = 0
    while journal.sent() < journal.last:
        found = journals.parse(journal.path.read_text())
        batch = [r for r in found if r["seq"] > journal.sent()][:BATCH]
        seq = batch[-1]["seq"]
        journal.sent_path.write_text(str(seq))
        if seq == journal.last:
            journal.path.unlink()
        elif journal.path.stat().st_size > journals.COMPACT_BYTES:
            left = [r for r in journals.parse(journal.path.read_text()) if r["seq"] > seq]
            with open(journal.path.with_suffix(".tmp"), "w") as out:
                out.write(journals.lines(left))
                out.flush()
                os.fsync(out.fileno())
            os.replace(journal.path.with_suffix(".tmp"), journal.path)
        batches += 1
    return batches


def read_now(journal: journals.Journal) -> int:
    """The batches read and acked as the sender does now."""
    batches = 0
    while journal.sent() < journal.last:
        journal.ack(journal.records(journal.sent(), BATCH)[-1]["seq"])
        batches += 1
    return batches


def timed(action, *args) -> tuple[float, object]:
    start = time.perf_counter()
    answer = action(*args)
    return time.perf_counter() - start, answer


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--records", type=int, default=20000)
    args = parser.parse_args()
    print(f"{'runs in the sweep':>18} {'search_runs (s)':>16} {'tables (s)':>11} {'ratio':>6}")
    for runs in args.runs:
        with tempfile.TemporaryDirectory() as folder:
            run = store_with_runs(Path(folder), runs)
            old, before = timed(known_runs, run, True)
            now, after = timed(known_runs, run, False)
            assert before == after and len(after) == runs
        print(f"{runs:>18} {old:>16.2f} {now:>11.2f} {old / now:>6.1f}")
    with tempfile.TemporaryDirectory() as folder:
        left_journal(Path(folder) / "before", args.records)
        shutil.copytree(Path(folder) / "before", Path(folder) / "now")
        size = (Path(folder) / "now" / journals.PENDING_FILE).stat().st_size
        old, batches = timed(lambda: read_before(journals.Journal(Path(folder) / "before")))
        now, same = timed(lambda: read_now(journals.Journal(Path(folder) / "now")))
        assert batches == same
    print(
        f"a journal of {args.records} unsent records ({size / 1e6:.1f} MB), {batches} batches:"
        f" before {old:.2f} s, now {now:.2f} s, ratio {old / now:.1f}"
    )


if __name__ == "__main__":
    main()
