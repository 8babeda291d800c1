"""Shared fixtures: the real data in ../shared/data (or $RHNSEARCH_TEST_DATA)."""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("RHNSEARCH_TEST_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (SHARED_DATA / "jsb_chorales" / "jsb-chorales-quarter.json").exists():
        pytest.fail(f"test data not found in {SHARED_DATA}: set RHNSEARCH_TEST_DATA")
    return SHARED_DATA


@pytest.fixture(scope="session")
def jsb(data_dir):
    from rhnsearch.data import load_dataset
    return load_dataset("jsb", data_dir, allow_fetch=False)


@pytest.fixture(scope="session")
def ptb_sample(data_dir):
    from rhnsearch.data import load_dataset
    return load_dataset("ptb-sample", data_dir, allow_fetch=False)
