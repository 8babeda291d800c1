"""The results commands through an MLflow server, beside plain MLflow's own reads of the same
runs through the same server: how much of their time is MLflow's.

On the store that `scale.py --keep` kept (its sqlite file, artifacts and sweep folder), and on
a copy of it in a fresh PostgreSQL database (MLflow's own migrations make the schema, then
every row is copied table by table), `mlflow server` (one worker, as scale.py's) is started
and, one after the other, timed:
- plain MLflow: `MlflowClient.search_runs` of the sweep's trial runs, every page (what a
  user's own script or `mlflow.search_runs` reads), and the same search's answer read as JSON
  (`runs.server_runs`, what rhnsearch reads), and of all the experiment's runs; and of
  the trial runs in pages of 1,000, one after the other and with the next page asked for
  while the last one is read (does the client's share overlap the server's?);
- rhnsearch: `results table`, `results export --history` and `results report`, with
  --tracking-uri the server (`sweep status` reads the store its sweep's record names).
With the sqlite file and the PostgreSQL database read directly too (no server: what a reader
with the database's login gets), for the REST path's share.

    python benchmarks/server_reads.py KEEP/random-sqlite-dir-10000 [--stores file sqlite postgres]
        [--analyze]

`postgres` needs Debian's PostgreSQL and root (tests/lab_services.py).
"""

import argparse
import json
import queue
import sqlite3
import sys
import threading
import time
from contextlib import ExitStack, closing
from pathlib import Path

from mlflow.tracking import MlflowClient
from scale import EXPERIMENT, NAME, ROOT, timed

from rhnsearch.tracking.runs import all_runs, server_runs

sys.path.insert(0, str(ROOT / "tests"))
from lab_services import mlflow_server, postgres_database  # noqa: E402


def copy_to_postgres(sqlite_file: Path, uri: str, analyze: bool = False):
    """Every row of the sqlite store's tables into the same tables of the (migrated) database
    URI, parents before children; the rows the migrations made (the Default experiment) are
    replaced. ANALYZE: then gather the tables' statistics, as autovacuum does in its time."""
    import psycopg

    source = sqlite3.connect(sqlite_file)
    with closing(source), psycopg.connect(uri) as target:
        tables = [
            t
            for (t,) in source.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if t != "alembic_version" and not t.startswith("sqlite_")  # sqlite's own: ANALYZE's
        ]
        order = parents_first(source, tables)
        for table in reversed(order):
            target.execute(f'DELETE FROM "{table}"')
        for table in order:
            columns = [c[1] for c in source.execute(f'PRAGMA table_info("{table}")')]
            names = ", ".join(f'"{c}"' for c in columns)
            cursor = target.cursor()
            with cursor.copy(f'COPY "{table}" ({names}) FROM STDIN') as copy:
                for row in source.execute(f'SELECT {names} FROM "{table}"'):
                    copy.write_row(row)
        if analyze:
            target.execute("ANALYZE")


def parents_first(db: sqlite3.Connection, tables: list[str]) -> list[str]:
    """TABLES ordered so that each comes after the tables its foreign keys name."""
    parents = {
        t: {row[2] for row in db.execute(f'PRAGMA foreign_key_list("{t}")')} - {t} for t in tables
    }
    order: list[str] = []
    while len(order) < len(tables):
        ready = sorted(t for t in tables if t not in order and parents[t] <= set(order))
        if not ready:
            sys.exit(f"foreign keys in a cycle among {sorted(set(tables) - set(order))}")
        order += ready
    return order


def prefetched(client: MlflowClient, experiment: str, query: str, page: int) -> list:
    """Every run matching QUERY, pages of PAGE, a thread asking for the next page while this
    one takes the last (an error of the thread's is raised here)."""
    pages: queue.Queue = queue.Queue(maxsize=2)

    def fetch():
        token = None
        try:
            while True:
                found = client.search_runs([experiment], query, max_results=page, page_token=token)
                pages.put(found)
                token = found.token
                if not token:
                    break
        except Exception as exc:  # noqa: BLE001 - handed to the reader
            pages.put(exc)
        pages.put(None)

    threading.Thread(target=fetch, daemon=True).start()
    runs = []
    while (found := pages.get()) is not None:
        if isinstance(found, Exception):
            raise found
        runs.extend(found)
    return runs


def plain_reads(url: str) -> dict:
    """Seconds of plain MLflow's search_runs of the sweep's trials (in one page, in pages of
    1,000, and those prefetched; and its answer read as JSON) and of every run."""
    client = MlflowClient(url)
    experiment = client.get_experiment_by_name(EXPERIMENT).experiment_id
    trials = f"tags.mlflow.parentRunId != '' and tags.sweep = '{NAME}'"
    seconds = {}
    for name, read in (
        ("search_trials", lambda: all_runs(client, experiment, trials)),
        ("search_trials_as_json", lambda: server_runs(url, experiment, trials)),
        ("search_all", lambda: all_runs(client, experiment, "")),
        ("search_trials_pages_of_1000", lambda: all_runs(client, experiment, trials, page=1000)),
        ("search_trials_prefetched", lambda: prefetched(client, experiment, trials, 1000)),
    ):
        start, cpu = time.monotonic(), time.process_time()
        runs = read()
        seconds[name] = {
            "wall": time.monotonic() - start,
            "client_cpu": time.process_time() - cpu,
            "runs": len(runs),
        }
    return seconds


def ours(work: Path, uri: str, name: str) -> dict:
    """Seconds of the results commands through URI (their files, rewritten at each run:
    WORK/server-NAME-*)."""
    store = ["--experiment", EXPERIMENT, "--sweep", NAME, "--tracking-uri", uri]
    return {
        "table": timed(["results", "table", *store], work, None),
        "export": timed(
            [
                "results",
                "export",
                *store,
                "--history",
                "--force",
                "--out",
                f"server-{name}-history.parquet",
            ],
            work,
            None,
        ),
        "report": timed(
            ["results", "report", *store, "--force", "--out", f"server-{name}-report.html"],
            work,
            None,
        ),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path, help="a folder scale.py --keep kept")
    p.add_argument(
        "--stores",
        nargs="+",
        choices=["file", "sqlite", "postgres"],
        default=["file", "sqlite", "postgres"],
    )
    p.add_argument(
        "--analyze",
        action="store_true",
        help="ANALYZE the PostgreSQL copy before the reads (its planner's statistics)",
    )
    args = p.parse_args()
    work, db = args.work.resolve(), args.work.resolve() / "mlflow.db"
    for store in args.stores:
        with ExitStack() as services:
            if store == "file":
                url, plain = f"sqlite:///{db}", {}
            else:
                backend = f"sqlite:///{db}"
                if store == "postgres":
                    backend = services.enter_context(postgres_database())
                url = services.enter_context(mlflow_server(backend, work))
                if store == "postgres":
                    start = time.monotonic()
                    copy_to_postgres(db, backend, args.analyze)
                    print(
                        f"copied into PostgreSQL in {time.monotonic() - start:.0f} s",
                        file=sys.stderr,
                    )
                plain = plain_reads(url)
            row = {"store": store, **plain, **ours(work, url, store)}
            print(json.dumps(row), flush=True)
            if store == "postgres":  # the same database read directly, as a reader with its login
                row = {"store": "postgres-direct", **ours(work, backend, "postgres-direct")}
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
