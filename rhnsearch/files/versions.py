"""Every older format of what a sweep keeps, made current in one place: its record, its
scheduler's state, and the objects Tune pickled for it (tuner.pkl, the searcher's state).

The record and the scheduler's state carry `version`; a file without one is version 1, as
rhnsearch wrote them up to 0.2.x (82b0eeb), including the sweeps of dd9c428 from before the
storage layout of issue 33 (tests/data/old_layout_*.tar.gz: both resume and extend):

- version 1: the record without `plan` before `sweep run --plan` existed, without `rounds`
  while a sweep had one round, a round without `done` before `sweep extend --seeds`; the
  scheduler's state without `settings` before replicates were judged by their setting.
- version 2: every key written, and `version`.
- version 3: the scheduler's changes appended to a log beside its state file (its first entry
  says the version); a sweep's state file of version 1 or 2 is read first, and kept. The
  record of a sweep resumed since is written again at version 3: a round's ended trials may
  be in its `ended_trials` index rather than in Tune's state, which an older rhnsearch would
  take for trials Tune never saved (and delete their MLflow runs at the close).

A file of a newer version than this code's is refused in one line: an older rhnsearch would
drop what it does not know when it writes the file back.
"""

import importlib
import sys

from ..errors import UserError
from .layout import SweepPaths
from .parent_run import ParentRun

RECORD_VERSION = 3
SCHEDULER_VERSION = 3


def current_record(data: dict, where: str) -> dict:
    """The record's JSON DATA (read from WHERE) as this version writes it."""
    version = checked(data, RECORD_VERSION, where)
    if version == 1:
        space = data["space"]
        rounds = data.get("rounds") or [{"samples": space["samples"], "seeds": space["seeds"]}]
        rounds = [{"done": [0, 0], **r} for r in rounds]
        data = {"plan": None, **data, "rounds": rounds}
    return {**data, "version": RECORD_VERSION}


def current_scheduler_state(data: dict, where: str) -> dict:
    """The scheduler's saved state DATA (read from WHERE) as this version writes it."""
    checked(data, SCHEDULER_VERSION, where)
    return {**data, **{k: data.get(k, {}) for k in ("rungs", "settings", "stopped")}}


def checked(data: dict, newest: int, where: str) -> int:
    version = data.get("version", 1)
    if not isinstance(version, int) or not 1 <= version <= newest:
        raise UserError(
            f"{where} is of format version {version!r}, and this rhnsearch reads versions 1 to "
            f"{newest}: run it with the rhnsearch that wrote it (or a newer one)"
        )
    return version


# Tune's saved state pickles rhnsearch's objects (the searcher, scheduler and MLflow callback)
# under their module's name at the time. The modules that moved (those of rhnsearch 0.2, and
# the sweep's files and submission since), and where they are now:
MOVED_MODULES = {
    "rhnsearch.search.sweep": "rhnsearch.sweep.lifecycle",
    "rhnsearch.search.status": "rhnsearch.sweep.status",
    "rhnsearch.search.trainable": "rhnsearch.sweep.trainable",
    "rhnsearch.search.checkpoints": "rhnsearch.sweep.checkpoints",
    "rhnsearch.search.cluster": "rhnsearch.cluster.connect",
    "rhnsearch.search.jobs": "rhnsearch.sweep.jobs",
    "rhnsearch.search.slurm": "rhnsearch.sweep.slurm",
    "rhnsearch.search.storage": "rhnsearch.files.storage",
    "rhnsearch.search.tracking": "rhnsearch.tracking.callback",
    "rhnsearch.tracking_store": "rhnsearch.tracking.uris",
    "rhnsearch.results.histories": "rhnsearch.tracking.histories",
    "rhnsearch.results.snapshot": "rhnsearch.tracking.snapshot",
    "rhnsearch.results.store": "rhnsearch.tracking.store",
    "rhnsearch.data.recorded": "rhnsearch.tracking.datasets",
    "rhnsearch.cluster.jobs": "rhnsearch.sweep.jobs",
    "rhnsearch.cluster.slurm": "rhnsearch.sweep.slurm",
    "rhnsearch.cluster.storage": "rhnsearch.files.storage",
    "rhnsearch.sweep.layout": "rhnsearch.files.layout",
}


def read_moved_modules():
    """Let a Tuner pickled before the modules moved be read: their old names point at the new
    (imported here, at a resume: the sweep's whole package is loaded by then)."""
    for old, new in MOVED_MODULES.items():
        sys.modules.setdefault(old, importlib.import_module(new))


# What an object Tune pickled holds, as its class's __setstate__ takes it now:


def searcher_state(state: dict) -> dict:
    """searchers.CellStudies: pickled by rhnsearch 0.2 with `experiment`, its sweep's folder."""
    if "experiment" in state:
        state = {**state, "sweep_dir": state["experiment"]}
        del state["experiment"]
    return {"journal": None, **state}


def fifo_state(state: dict) -> dict:
    """scheduler.LiveFIFOScheduler: pickled before it kept the order trials were added in."""
    return {"_added": {}, "_adds": 0, **state}


def tracker_state(state: dict) -> dict:
    """callback.MLflowTracker: pickled before the sweep's record with the parent run's fields
    apart (`tracking_uri`, `experiment_id`, `parent_run_id`, and the sweep's `experiment`
    folder and `sweep` name)."""
    if "run" in state:
        return state
    state = dict(state)
    paths = SweepPaths.of_folder(state.pop("experiment"), state.pop("sweep"))
    state["run"] = ParentRun(
        state.pop("tracking_uri"), state.pop("experiment_id"), state.pop("parent_run_id"), paths
    )
    return state
