"""Datasets by name: `load_dataset("jsb" | "ptb" | "ptb-sample", data_dir)`."""

from ..errors import UserError
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


def load_dataset(name: str, root=None, allow_fetch: bool = True):
    """Load a dataset from the data dir, fetching missing files on first use."""
    if name not in DATASETS:
        raise UserError(f"unknown dataset {name!r}: use one of {', '.join(DATASETS)}")
    root = data_dir(root)
    ensure(name, root, allow_fetch)
    return LOADERS[name](root)
