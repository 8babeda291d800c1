"""A trial's checkpoints in the storage: the newest one kept, Tune's saved state checked
before a resume, and the repair of a state that names a checkpoint already deleted.

Each trial keeps its newest checkpoint only (KeepNewestCheckpoint). Tune's own num_to_keep
would do the same, but it also saves and uploads the whole experiment state at every
checkpoint of every trial (two requests a trial-epoch on a bucket); here the state is saved on
Tune's own period, so a driver killed between two saves leaves a state naming a checkpoint
already deleted, and Tune's resume would fail that trial (as ray-project/ray#27790 does with
num_to_keep). Before resuming, each such trial gets the checkpoint registered in place of the
deleted one: the first complete one after it. Tune registers a checkpoint only after it has
logged its result, so the trial goes on from an epoch that MLflow has (a later checkpoint may
hold an epoch whose result the killed driver never saw); from its last epoch's, it reports that
epoch again and ends (train.epoch_reports).

Tune saves its experiment state and the searcher's states together, but the storage takes them
file by file (and refuses an experiment state cut short), so a driver killed in between can
leave the searcher's counting trials the experiment state lacks: the resume would not ask for
them again, and the round would end short of them. Before resuming, the searcher's states are
made to count the experiment state's trials (`align_search_states`).

Tune's saved search state also names the folder its experiment ran in, where a resumed search
makes its new trials: a sweep whose storage moved (another mount, `sweep resume
--storage-path`) has it pointed at the folder it is in now (`move_search_state`).

This reads Tune's saved state, whose layout is Tune's own (compat/ray.py): if it is not what is
expected here, a warning says so and the resume goes on without the repair.
"""

import logging
from dataclasses import dataclass, field

import pyarrow.fs as pafs
from ray.tune import Callback

from ..compat import ray as ray_compat
from ..errors import UserError
from ..files import storage
from ..search.searchers import saved_for
from ..train import CHECKPOINT_FILE
from .ended_index import indexed

log = logging.getLogger(__name__)


class KeepNewestCheckpoint(Callback):
    """Tune callback: once a trial has registered a checkpoint, its older ones are deleted from
    the storage, by the storage's thread (after a resume, the first new checkpoint of a trial
    clears whatever the earlier driver left: a listing of its folder, which a trial's very
    first checkpoint needs not), and Tune's checkpoint manager holds the newest alone."""

    def __init__(self):
        self.newest: dict[str, str | None] = {}  # trial id -> its newest checkpoint's folder

    def __getstate__(self):
        return {"newest": {}}

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        folder, name = checkpoint.path.rstrip("/").rsplit("/", 1)
        older = self.newest.get(trial.trial_id)
        self.newest[trial.trial_id] = name
        ray_compat.forget_checkpoints(trial)  # (Tune registers this one after its callbacks)
        if older is None and ray_compat.is_first_checkpoint(name):
            return  # nothing older to delete
        storage.LATER.put(
            f"prune {folder}/{older or '*'}",
            lambda: prune(checkpoint.filesystem, folder, [older] if older else None, keep=name),
        )


def prune(filesystem, folder: str, names: list[str] | None, keep: str):
    """Delete the checkpoints `names` of a trial's folder (None: every one older than `keep`;
    a newer one may be there already, written but not yet registered)."""
    if names is None:
        names = [
            info.base_name
            for info in filesystem.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
            if ray_compat.is_checkpoint(info.base_name)
        ]
    for name in names:
        if name < keep:
            filesystem.delete_dir(f"{folder}/{name}")


def saved_state(round_dir: str) -> dict | None:
    """Tune's newest saved experiment state, parsed (None without one)."""
    name = ray_compat.newest_experiment_state(storage.listdir(round_dir))
    if name is None:
        return None
    return ray_compat.load_experiment_state(storage.read_bytes(storage.join(round_dir, name)))


def saved_trial_ids(round_dir: str) -> set[str] | None:
    """The trials Tune saved of the round in ROUND_DIR: those in its newest saved experiment
    state and those a resume took out of it (`ended_index`); None where there is no such
    state or it is not laid out as expected (a Ray release that renames or changes it):
    nothing can be concluded from it then."""
    try:
        state = saved_state(round_dir)
        return None if state is None else round_trial_ids(round_dir, state)
    except (KeyError, TypeError, ValueError):  # (a file cut short: json's ValueError)
        return None


def round_trial_ids(round_dir: str, state: dict) -> set[str]:
    """The trials of Tune's saved experiment state STATE (parsed) of the round in ROUND_DIR,
    and those a resume took out of it (`ended_index`)."""
    return ray_compat.saved_trial_ids(state) | indexed(round_dir).keys()


@dataclass
class SavedRound:
    """Tune's saved state of a round as a resume finds it, each file read once
    (`read_saved_round`).

    Attributes:
        folder: The round's folder.
        names: What the folder holds, listed once: a folder a trial is there, a page of a
            bucket's listing every 1,000 trials.
        state: Tune's newest saved experiment state, parsed; None without one.
        files: The newest of Tune's other saved states (its search generator's, the
            searcher's) by name, as stored: `write` keeps them so.
    """

    folder: str
    names: list[str]
    state: dict | None = None
    files: dict[str, bytes] = field(default_factory=dict)

    def write(self, name: str, data: bytes):
        storage.write_bytes(storage.join(self.folder, name), data)
        self.files[name] = data


def read_saved_round(round_dir: str) -> SavedRound:
    """Tune's saved state of the round in ROUND_DIR, each file read and loaded as Tune's
    resume loads it; a one-line refusal where one cannot be (a file cut short): Tune would log
    the error and start the whole round again, with empty configs."""
    saved = SavedRound(round_dir, storage.listdir(round_dir))
    experiment = ray_compat.newest_experiment_state(saved.names)
    for name, load in ray_compat.newest_saved_states(saved.names):
        try:
            data = storage.read_bytes(storage.join(round_dir, name))
            loaded = load(data)
        except Exception as exc:  # whatever the loader raises, the file cannot be read
            raise UserError(
                f"Tune's saved state {name} in {round_dir} cannot be read "
                f"({type(exc).__name__}: {str(exc)[:80] or 'empty file'}): this "
                "sweep cannot be resumed; start it again with `rhnsearch sweep "
                "run` under another --name"
            ) from None
        if name == experiment:
            saved.state = loaded  # (its bytes not kept: some 11.5 kB a trial)
        else:
            saved.files[name] = data
    return saved


def stale_checkpoints(round_dir: str, state: dict | None) -> list[tuple[str, str]]:
    """(trial dir, checkpoint name) of each trial a resume runs again whose latest checkpoint
    in Tune's saved experiment state (`saved_state`) is no longer in the storage."""
    stale = []
    for folder, named in ray_compat.resumable_checkpoints(state) if state is not None else []:
        trial_dir = storage.join(round_dir, folder)
        if named and named not in storage.listdir(trial_dir):
            stale.append((trial_dir, named))
    return stale


def repair_checkpoint_names(round_dir: str, state: dict | None):
    """Give each stale trial the first complete checkpoint after the one Tune's saved
    experiment state (`saved_state`) names."""
    try:
        stale = stale_checkpoints(round_dir, state)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        log.warning(
            "Tune's saved state in %s is not laid out as this version of rhnsearch "
            "expects (%s: %s); resuming without checking its checkpoint names",
            round_dir,
            type(exc).__name__,
            exc,
        )
        return
    for trial_dir, name in stale:
        newer = [
            c
            for c in storage.listdir(trial_dir)
            if ray_compat.is_checkpoint(c)
            and c > name
            and storage.is_zip(storage.join(trial_dir, c, CHECKPOINT_FILE))
        ]
        if newer:  # (one cut short by the kill is not a zip yet)
            storage.move(storage.join(trial_dir, newer[0]), storage.join(trial_dir, name))
            log.info(
                "%s: resuming from %s (Tune's state named %s, which it had deleted)",
                trial_dir.rsplit("/", 1)[-1],
                newer[0],
                name,
            )


def align_search_states(saved: SavedRound):
    """Make Tune's saved search state and the searcher's count the trials of Tune's saved
    experiment state (`SavedRound.state`), no more and no fewer: the slots after them are asked
    for again."""
    if saved.state is None:
        return
    search, searcher = ray_compat.newest_search_states(saved.names)
    try:
        trial_ids = round_trial_ids(saved.folder, saved.state)
        for name, align in [(search, ray_compat.search_state_for), (searcher, saved_for)]:
            if name is None:
                continue
            aligned = align(saved.files[name], trial_ids)
            if aligned is not None:
                saved.write(name, aligned)
                log.warning(
                    "%s counted other trials than Tune's saved experiment state (%d): "
                    "made to count those, so that the resume asks for the rest",
                    name,
                    len(trial_ids),
                )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        log.warning(
            "Tune's saved search state in %s is not laid out as this version of rhnsearch "
            "expects (%s: %s); resuming without checking it",
            saved.folder,
            type(exc).__name__,
            exc,
        )


def move_search_state(saved: SavedRound):
    """Point Tune's newest saved search state at the round's folder, where the resumed search
    makes its new trials (`ray_compat.search_state_at`)."""
    search, _ = ray_compat.newest_search_states(saved.names)
    if search is None:
        return
    try:
        moved = ray_compat.search_state_at(saved.files[search], *storage.split(saved.folder))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        log.warning(
            "Tune's saved search state in %s is not laid out as this version of rhnsearch "
            "expects (%s: %s); resuming without checking where it makes new trials",
            saved.folder,
            type(exc).__name__,
            exc,
        )
        return
    if moved is not None:
        saved.write(search, moved)
        log.info("Tune's saved search state pointed at %s, where the sweep is now", saved.folder)
