"""A database store (sqlite://, postgresql://, mysql://) read directly and read-only, by
SELECTs on MLflow's tables (compat/mlflow.py): many times faster than MlflowClient, which
builds an object per run, metric value, param and tag. And a sqlite store's statistics,
gathered for SQLite's query planner (`analyze`)."""

import sqlite3
from contextlib import closing, contextmanager

import sqlalchemy as sa

from .uris import sqlite_path

SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
CHUNK = 500  # runs bound to one SELECT


def is_database(uri: str) -> bool:
    """Whether URI is a database store, which is read here directly."""
    return uri.partition(":")[0].partition("+")[0] in SCHEMES


@contextmanager
def connect(uri: str):
    """A connection to the store's database (a sqlite file opened read-only, by a file: URI
    with its path percent-encoded), closed afterwards."""
    if path := sqlite_path(uri):
        path = path.resolve()
        engine = sa.create_engine(
            "sqlite://",
            poolclass=sa.pool.NullPool,
            creator=lambda: sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True),
        )
    else:
        engine = sa.create_engine(uri, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as db:
            yield db
    finally:
        engine.dispose()


def analyze(uri: str) -> bool:
    """Gather the statistics of a sqlite store's tables for SQLite's query planner, which has
    none until asked: without them MLflow's own queries (its server's and UI's history calls)
    pick plans that slow down as the store grows (docs/scale-history.md, "A sqlite store's
    statistics"). Whether it was a sqlite store: other databases gather
    their own (PostgreSQL's autovacuum)."""
    path = sqlite_path(uri)
    if path is None:
        return False
    with closing(sqlite3.connect(path.resolve(), timeout=30)) as db:
        db.execute("ANALYZE")
    return True


def select(db, query, ids: list[str], **bound) -> list[tuple]:
    """QUERY's rows for IDS bound to `ids`, CHUNK of them a SELECT, as the driver's plain
    tuples (3x faster than Row objects)."""
    return [
        row
        for i in range(0, len(ids), CHUNK)
        for row in db.execute(query, {"ids": ids[i : i + CHUNK], **bound}).cursor.fetchall()
    ]
