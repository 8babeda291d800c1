"""A dataset as MLflow records it on a run: its name, where it comes from, the digest of the
files read (each checked against its published sha256 when loaded) and how its splits are
used, as a dataset input with context `training` (the runs table's Dataset column)."""

import hashlib
import json
import os

from mlflow.entities import Dataset, DatasetInput

from ..compat import mlflow as mlflow_compat
from ..data.sources import SOURCES

SPLIT_USE = {
    "jsb": "train: train, validation: valid, test: test (of jsb-chorales-quarter.json)",
    "ptb": "train: ptb.train.txt, validation: ptb.valid.txt, test: ptb.test.txt",
    "ptb-sample": "train: the first 90% of the lines of ptb.valid.txt, validation: the "
    "rest, test: ptb.test.txt (not PTB numbers)",
}


def dataset_entity(name: str) -> Dataset:
    """The MLflow dataset `name` (jsb, ptb, ptb-sample): its public URL (the folder of its
    files' URLs when it has several) as the source, and 16 hex digits of the sha256 of its
    files' sha256s as the digest; the files and the split use are its profile."""
    files = SOURCES[name]
    urls = [f.url for f in files]
    url = urls[0] if len(urls) == 1 else os.path.commonprefix(urls).rpartition("/")[0] + "/"
    digest = hashlib.sha256(" ".join(f.sha256 for f in files).encode()).hexdigest()[:16]
    profile = {
        "splits": SPLIT_USE[name],
        "files": [{"path": f.path, "url": f.url, "sha256": f.sha256} for f in files],
    }
    return Dataset(
        name=name,
        digest=digest,
        source_type="http",
        source=json.dumps({"url": url}),
        profile=json.dumps(profile),
    )


def dataset_input(name: str) -> DatasetInput:
    """The dataset `name` as a run's training input."""
    return DatasetInput(dataset_entity(name), mlflow_compat.dataset_input_tags("training"))
