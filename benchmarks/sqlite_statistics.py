"""MLflow's own history queries on a sqlite store before and after its statistics are gathered
(`database.analyze`, which a sweep's close runs), side by side on copies of one store: SQLite
has no statistics until asked, and its planner's choices without them slow down as the store
grows. Timed, on each copy: MLflow's SqlAlchemyStore (what `mlflow server` and its UI run)
answering GetMetricHistoryBulkInterval (100 runs a call, as the UI's charts and rhnsearch's
reads through a server ask) and get_metric_history of 100 runs.

    python benchmarks/sqlite_statistics.py KEEP/random-sqlite-dir-2000 [--calls 5]
"""

import argparse
import shutil
import sqlite3
import tempfile
import time
import warnings
from contextlib import closing
from pathlib import Path

from rhnsearch.tracking import database

RUNS = 100  # the bulk call's limit of runs


def timings(path: Path, calls: int) -> dict:
    """Seconds a call of MLflow's store on the sqlite file PATH takes (the best of CALLS)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        ids = [r for (r,) in db.execute("SELECT run_uuid FROM runs LIMIT ?", (RUNS,))]
    store = SqlAlchemyStore(f"sqlite:///{path}", str(path.parent / "artifacts"))

    def best(work) -> float:
        seconds = []
        for _ in range(calls):
            start = time.perf_counter()
            work()
            seconds.append(time.perf_counter() - start)
        return min(seconds)

    return {
        "bulk interval call": best(
            lambda: store.get_metric_history_bulk_interval(ids, "train_loss", 2500, None, None)
        ),
        "get_metric_history x100": best(
            lambda: [store.get_metric_history(run, "train_loss") for run in ids]
        ),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path, help="a folder scale.py --keep kept (its mlflow.db)")
    p.add_argument("--calls", type=int, default=5, help="calls timed, the best kept")
    args = p.parse_args()
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        copies = {name: Path(tmp) / name / "mlflow.db" for name in ("without", "with")}
        for copy in copies.values():
            copy.parent.mkdir()
            shutil.copyfile(args.work / "mlflow.db", copy)
        start = time.perf_counter()
        database.analyze(f"sqlite:///{copies['with']}")
        print(f"statistics gathered in {time.perf_counter() - start:.2f} s")
        without, with_ = (timings(copy, args.calls) for copy in copies.values())
    print(f"{'MLflow query':>24} {'without s':>10} {'with s':>8} {'ratio':>6}")
    for name, before in without.items():
        after = with_[name]
        print(f"{name:>24} {before:>10.3f} {after:>8.3f} {before / after:>6.1f}")


if __name__ == "__main__":
    main()
