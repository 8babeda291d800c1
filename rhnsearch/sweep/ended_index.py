"""The trials of a round that had ended when its sweep was resumed, kept apart from Tune's
saved state: Tune's restore rebuilds every trial of its state (some 3 ms a trial on the driver
before its first new trial starts: a minute at 20,000), though an ended trial runs no more.
Before a resume, the ended trials of Tune's newest experiment state are appended to an index
in the round's folder (`layout.ENDED_TRIALS`: each one's id, folder and newest checkpoint) and
taken out of the state, so that Tune restores the live trials alone; what needs every trial of
the round (the trials Tune saved, counted by the searchers' states and by the close, the best
trial's checkpoint) reads the state and the index together.

A driver killed between the two writes leaves the trials in both: the index is written first,
and a trial in both is one trial."""

import logging

from ray import tune

from ..compat import ray as ray_compat
from ..files import storage
from ..files.append_log import AppendLog
from ..files.layout import ENDED_TRIALS

log = logging.getLogger(__name__)


def indexed(round_dir: str) -> dict[str, dict]:
    """The index of the round in ROUND_DIR: each ended trial taken out of Tune's state, by
    id (its folder and newest checkpoint's name)."""
    return {entry["trial_id"]: entry for entry in AppendLog(_index(round_dir)).read()}


def _index(round_dir: str) -> str:
    return storage.join(round_dir, ENDED_TRIALS)


def keep_live_trials(round_dir: str, state: dict, names: list[str]):
    """Move the ended trials of Tune's newest saved experiment state STATE (parsed, read from
    ROUND_DIR, which holds NAMES) to the round's index, then write the state back without
    them."""
    ended = ray_compat.ended_trials(state)
    if not ended:
        return
    entries = AppendLog(_index(round_dir))
    known = {entry["trial_id"] for entry in entries.read()}
    if new := [entry for entry in ended if entry["trial_id"] not in known]:
        entries.append(new)
    name = ray_compat.newest_experiment_state(names)
    moved = {entry["trial_id"] for entry in ended}
    storage.write_bytes(storage.join(round_dir, name), ray_compat.without_trials(state, moved))
    log.info(
        "%d ended trials kept in %s, out of Tune's state: Tune restores %d",
        len(moved),
        entries.location,
        len(ray_compat.saved_trial_ids(state) - moved) or 1,
    )


def checkpoint(round_dir: str, trial_id: str) -> tune.Checkpoint | None:
    """The newest checkpoint of a trial of the round's index, or None (not there, or it has
    none)."""
    entry = indexed(round_dir).get(trial_id)
    if entry is None or entry["checkpoint"] is None:
        return None
    filesystem, path = storage.split(storage.join(round_dir, entry["folder"], entry["checkpoint"]))
    return tune.Checkpoint(path, filesystem=filesystem)
