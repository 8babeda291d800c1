"""Grow the sweep that `scale.py --keep` kept to N trial runs by copying its trial runs in its
sqlite store, for timing the results commands (`server_reads.py`) at a size the driver was not
run to: they read only the store.

Each copy is a new run of the same sweep and parent: its tags, params, latest metrics, metric
histories and dataset input copied, its run id new, its name and trial id suffixed `-cK`, its
seed moved by K, and its learning rate and best valid loss moved by 1% at random (as
`report_scale.py` does), so that no two settings or results are equal. The copies' artifacts
are the originals' (their artifact URI is copied; a store grown in a copy of the kept folder
has its artifact URIs moved to the copy first). The parent run's history table
(`histories.parquet`, tracking/snapshot.py) is made again over every trial run, as the sweep's
close makes it, so that the copies' histories are read as a real sweep's of that size would
be. Tune's state and the sweep folder are left as they were: `sweep status` still shows the
sweep the driver ran.

    python benchmarks/grow_store.py KEEP/random-sqlite-dir-2000 --trials 10000
"""

import argparse
import math
import sqlite3
import uuid
from contextlib import closing
from pathlib import Path

import numpy as np
from mlflow.tracking import MlflowClient
from scale import NAME

from rhnsearch.tracking import histories, snapshot

MOVED_PARAM, MOVED_METRIC = "lr", "best_valid_loss"


def trial_runs(db: sqlite3.Connection) -> list[str]:
    """The run ids of the kept sweep's trial runs, oldest first."""
    return [
        run
        for (run,) in db.execute(
            "SELECT r.run_uuid FROM runs r JOIN tags k ON k.run_uuid = r.run_uuid "
            "JOIN tags s ON s.run_uuid = r.run_uuid WHERE k.key = 'kind' AND k.value = 'trial' "
            "AND s.key = 'sweep' AND s.value = ? ORDER BY r.start_time",
            (NAME,),
        )
    ]


def rows(db: sqlite3.Connection, table: str, column: str, ids: list[str]) -> tuple[list, list]:
    """TABLE's column names and its rows whose COLUMN is one of IDS."""
    names = [c[1] for c in db.execute(f'PRAGMA table_info("{table}")')]
    found = []
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        found += db.execute(f'SELECT * FROM "{table}" WHERE "{column}" IN ({marks})', chunk)
    return names, found


def insert(db: sqlite3.Connection, table: str, names: list[str], values: list[tuple]):
    marks = ", ".join("?" * len(names))
    columns = ", ".join(f'"{n}"' for n in names)
    db.executemany(f'INSERT INTO "{table}" ({columns}) VALUES ({marks})', values)


def grow(db: sqlite3.Connection, trials: int, seed: int = 0) -> int:
    """Copies of the sweep's trial runs added until it holds TRIALS (the copies made)."""
    originals = trial_runs(db)
    copies = max(0, trials - len(originals))
    run_cols, run_rows = rows(db, "runs", "run_uuid", originals)
    by_run = {}
    for table in ("tags", "params", "latest_metrics", "metrics"):
        names, found = rows(db, table, "run_uuid", originals)
        by_run[table] = names, {}
        for row in found:
            by_run[table][1].setdefault(row[names.index("run_uuid")], []).append(row)
    input_cols, inputs = rows(db, "inputs", "destination_id", originals)
    input_tag_cols, input_tags = rows(db, "input_tags", "input_uuid", [i[0] for i in inputs])
    inputs_of = {i[input_cols.index("destination_id")]: i for i in inputs}
    tags_of_input = {t[0]: t for t in input_tags}
    rng = np.random.default_rng(seed)
    made = {table: [] for table in (*by_run, "runs", "inputs", "input_tags")}
    for n in range(copies):
        run = run_rows[n % len(run_rows)]
        k = n // len(run_rows) + 1
        old, new = run[0], uuid.uuid4().hex
        factor = math.exp(rng.normal(0, 0.01))
        made["runs"].append(
            tuple(
                new if c == "run_uuid" else f"{v}-c{k}" if c == "name" else v
                for c, v in zip(run_cols, run)
            )
        )
        for table, (names, of_run) in by_run.items():
            for row in of_run.get(old, []):
                record = dict(zip(names, row), run_uuid=new)
                key = record["key"]
                if table == "tags" and key in ("trial_id", "mlflow.runName"):
                    record["value"] = f"{record['value']}-c{k}"
                elif table == "params" and key == "seed":
                    record["value"] = str(int(record["value"]) + k)
                elif table == "params" and key == MOVED_PARAM:
                    record["value"] = repr(float(record["value"]) * factor)
                elif table in ("latest_metrics", "metrics") and key == MOVED_METRIC:
                    record["value"] = record["value"] * factor
                made[table].append(tuple(record[c] for c in names))
        if old in inputs_of:
            record = dict(zip(input_cols, inputs_of[old]), destination_id=new)
            record["input_uuid"], tag = uuid.uuid4().hex, tags_of_input[inputs_of[old][0]]
            made["inputs"].append(tuple(record[c] for c in input_cols))
            made["input_tags"].append((record["input_uuid"], *tag[1:]))
    for table, values in made.items():
        names = {"runs": run_cols, "inputs": input_cols, "input_tags": input_tag_cols}
        insert(db, table, names.get(table) or by_run[table][0], values)
    return copies


def rehome(db: sqlite3.Connection, work: Path):
    """Point the runs' and the experiments' artifact URIs at WORK where they name the folder
    this store was kept in (a copy of it writes its own artifacts, not the original's)."""
    (uri,) = db.execute(
        "SELECT artifact_location FROM experiments WHERE artifact_location LIKE '%/artifacts/%'"
    ).fetchone()
    old, new = uri.split("/artifacts/")[0], f"file://{work}"
    if old != new:
        db.execute("UPDATE runs SET artifact_uri = replace(artifact_uri, ?, ?)", (old, new))
        db.execute(
            "UPDATE experiments SET artifact_location = replace(artifact_location, ?, ?)",
            (old, new),
        )


def log_history_table(work: Path, runs: list[str], parent: str) -> int:
    """The parent run's history table made again over the trial RUNS, as the sweep's close
    makes it (sweep/close.py); returns its rows."""
    uri = f"sqlite:///{work / 'mlflow.db'}"
    client = MlflowClient(uri)
    long = histories.read(uri, client, runs, [])  # a database store: every metric
    snapshot.log_histories(client, parent, long)
    return len(long)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path, help="a folder scale.py --keep kept")
    p.add_argument("--trials", type=int, required=True, help="trial runs wanted in all")
    args = p.parse_args()
    work = args.work.resolve()
    with closing(sqlite3.connect(work / "mlflow.db")) as db, db:
        rehome(db, work)
        copies = grow(db, args.trials)
        runs = trial_runs(db)
        (parent,) = db.execute(
            "SELECT value FROM tags WHERE key = 'mlflow.parentRunId' AND run_uuid = ?", runs[:1]
        ).fetchone()
    rows = log_history_table(work, runs, parent)  # once the copies are committed
    print(f"{copies} copies made: the sweep holds {len(runs)} trial runs ({rows:,} history rows)")


if __name__ == "__main__":
    main()
