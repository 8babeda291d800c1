"""The test tiers: what a test needs, as markers, and the checks that keep them honest.

- `slow`: a real sweep, or more than ~10 s of training;
- `cluster`: starts Ray (a local Ray, `ray start` nodes, Slurm's);
- `services`: PostgreSQL, an MLflow server, the S3 server, a browser or Slurm.

The markers come from the fixtures a test uses (conftest.FIXTURE_TIERS); the helpers that
start Ray or a service call `needs`, which fails a test that lacks the marker, so that no
test lands in the fast tier (`-m "not slow and not cluster and not services"`) by mistake.
A tool the machine lacks skips a test outside CI, naming what to install, and fails it in CI
(CI=true), where every tier must run.
"""

import os
import shutil

import pytest

TIERS = {
    "slow": "a real sweep, or more than ~10 s of training",
    "cluster": "starts Ray (a local Ray, `ray start` nodes or Slurm's)",
    "services": "PostgreSQL, an MLflow server, the S3 server, a browser or Slurm",
}
RUNNING = {}  # "item": the test being run (set by conftest's autouse fixture)


def needs(tier: str, what: str):
    """Fail the running test unless it carries the marker TIER (WHAT: what it starts)."""
    item = RUNNING.get("item")
    if item is not None and item.get_closest_marker(tier) is None:
        pytest.fail(
            f"{item.nodeid} {what}: mark it `{tier}` (use a fixture that does, see "
            "conftest.FIXTURE_TIERS, or @pytest.mark." + tier + ")",
            pytrace=False,
        )


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing(what: str, install: str):
    """A tool this machine lacks: a failure in CI, else a skip that says how to install it."""
    message = f"needs {what}: {install}"
    if in_ci():
        pytest.fail(f"{message} (CI=true: every tier runs in CI)", pytrace=False)
    pytest.skip(message)


HEADLESS_CHROMIUM = (  # how the browser tests and benchmarks/scale.py start it
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def chromium() -> str:
    """Debian's headless Chromium, for the browser tests."""
    needs("services", "starts a browser")
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        missing("Debian's chromium", "apt-get install -y chromium")
    return path
