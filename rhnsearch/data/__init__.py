"""Datasets by name: `load_dataset("jsb" | "ptb" | "ptb-sample", data_dir)`."""
from .jsb import JSBData, batches, load_jsb
from .ptb import PTBData, batchify, load_ptb, load_ptb_sample, windows
from .sources import SOURCES, data_dir, ensure, fetch

DATASETS = {"jsb": "jsb", "ptb": "ptb", "ptb-sample": "ptb"}  # dataset -> task

__all__ = ["DATASETS", "JSBData", "PTBData", "SOURCES", "batches", "batchify", "data_dir",
           "ensure", "fetch", "load_dataset", "windows"]


def load_dataset(name: str, root=None, allow_fetch: bool = True):
    """Load a dataset from the data dir, fetching missing files on first use."""
    from ..errors import UserError
    if name not in DATASETS:
        raise UserError(f"unknown dataset {name!r}: use one of {', '.join(DATASETS)}")
    root = data_dir(root)
    ensure(name, root, allow_fetch)
    if name == "jsb":
        return load_jsb(root / SOURCES["jsb"][0].path)
    return load_ptb(root) if name == "ptb" else load_ptb_sample(root)
