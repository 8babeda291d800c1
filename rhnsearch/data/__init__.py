"""Datasets by name: `load_dataset("jsb" | "ptb" | "ptb-sample", data_dir=...)`."""

from ..errors import UserError
from . import sources
from .jsb import JSBData, batches, load_jsb
from .ptb import PTBData, batchify, load_ptb, load_ptb_sample, ptb_sized, windows
from .sources import SOURCES, data_dir, ensure, fetch

DATASETS = {"jsb": "jsb", "ptb": "ptb", "ptb-sample": "ptb"}  # dataset -> its task
LOADERS = {
    "jsb": lambda root: load_jsb(root / SOURCES["jsb"][0].path),
    "ptb": load_ptb,
    "ptb-sample": load_ptb_sample,
}
# Random data of a dataset's size and vocabulary, to time models on where its text is absent.
SIZED = {"ptb": ptb_sized}

__all__ = [
    "DATASETS",
    "JSBData",
    "PTBData",
    "SIZED",
    "SOURCES",
    "batches",
    "batchify",
    "data_dir",
    "ensure",
    "fetch",
    "load_dataset",
    "windows",
]


def load_dataset(name: str, *, data_dir=None, allow_fetch: bool = True):
    """Load a dataset from the data dir, fetching missing files on first use.

    Args:
        name: "jsb", "ptb" or "ptb-sample".
        data_dir: the data dir; default $RHNSEARCH_DATA_DIR, else the user's cache dir.
        allow_fetch: fetch the files the data dir lacks; if False, a missing file is a
            one-line UserError that says how to fetch it.
    """
    if name not in DATASETS:
        raise UserError(f"unknown dataset {name!r}: use one of {', '.join(DATASETS)}")
    root = sources.data_dir(data_dir)
    ensure(name, root, allow_fetch)
    return LOADERS[name](root)
