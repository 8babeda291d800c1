"""Tune's saved state checked before a resume, and the repair of one that names a checkpoint
Tune had already deleted.

With num_to_keep=1, Tune deletes the superseded checkpoint when it registers a new one, and
saves its experiment state naming the new one only afterwards: a driver killed in between
leaves a state naming a deleted checkpoint, and Tune's resume fails that trial
(ray-project/ray#27790). Before resuming, each such trial gets the checkpoint Tune registered
in place of the deleted one: the first complete one after it. Tune registers a checkpoint only
after it has logged its result, so the trial goes on from an epoch that MLflow has (a later
checkpoint may hold an epoch whose result the killed driver never saw).

This reads Tune's saved state, whose layout is Tune's own: if it is not what is expected here,
a warning says so and the resume goes on without the repair.
"""
import json
import logging
import re

from ray import cloudpickle

from ..errors import UserError
from ..train import CHECKPOINT_FILE
from . import storage

log = logging.getLogger("rhnsearch")


# What Tune reads on resume: the newest file of each kind, and how it reads it.
EXPERIMENT_STATE = r"experiment_state-.*\.json"
SAVED_STATE = {EXPERIMENT_STATE: json.loads,
               r"(basic-variant-state|search_gen_state)-.*\.json": cloudpickle.loads}


def newest(names: list[str], pattern: str) -> str | None:
    """The newest of the saved-state files named `pattern` (their names sort by time)."""
    return max((name for name in names if re.fullmatch(pattern, name)), default=None)


def check_saved_state(experiment: str):
    """Refuse, in one line, a resume whose saved Tune state cannot be read (a file cut short):
    Tune would log the error and start the whole experiment again, with empty configs."""
    names = storage.listdir(experiment)
    for pattern, load in SAVED_STATE.items():
        name = newest(names, pattern)
        if name is None:
            continue
        try:
            load(storage.read_bytes(storage.join(experiment, name)))
        except Exception as exc:  # whatever the loader raises, the file cannot be read
            raise UserError(f"Tune's saved state {name} in {experiment} cannot be read "
                            f"({type(exc).__name__}: {str(exc)[:80] or 'empty file'}): this "
                            "sweep cannot be resumed; start it again with `rhnsearch sweep "
                            "run` under another --name") from None


def stale_checkpoints(experiment: str) -> list[tuple[str, str]]:
    """(trial dir, checkpoint name) of each trial whose latest checkpoint in the saved Tune
    state is no longer in the storage."""
    state = newest(storage.listdir(experiment), EXPERIMENT_STATE)
    if state is None:
        return []
    stale = []
    text = storage.read_text(storage.join(experiment, state))
    for trial in json.loads(text)["trial_data"]:
        info, run = (json.loads(part) if isinstance(part, str) else part for part in trial)
        manager = run.get("checkpoint_manager") or {}
        saved = (bytes.fromhex(manager["value"]).decode("latin-1")  # its pickle, not loaded
                 if manager.get("_type") == "CLOUDPICKLE_FALLBACK" else json.dumps(manager))
        named = re.findall(r"checkpoint_\d{6}", saved)
        trial_dir = storage.join(experiment, info["relative_logdir"])
        if named and max(named) not in storage.listdir(trial_dir):
            stale.append((trial_dir, max(named)))
    return stale


def repair_checkpoint_names(experiment: str):
    """Give each stale trial the first complete checkpoint after the one its state names."""
    try:
        stale = stale_checkpoints(experiment)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        log.warning("Tune's saved state in %s is not laid out as this version of rhnsearch "
                    "expects (%s: %s); resuming without checking its checkpoint names",
                    experiment, type(exc).__name__, exc)
        return
    for trial_dir, name in stale:
        newer = [c for c in storage.listdir(trial_dir)
                 if re.fullmatch(r"checkpoint_\d{6}", c) and c > name
                 and storage.is_zip(storage.join(trial_dir, c, CHECKPOINT_FILE))]
        if newer:  # (one cut short by the kill is not a zip yet)
            storage.move(storage.join(trial_dir, newer[0]), storage.join(trial_dir, name))
            log.info("%s: resuming from %s (Tune's state named %s, which it had deleted)",
                     trial_dir.rsplit("/", 1)[-1], newer[0], name)
