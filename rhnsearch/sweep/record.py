"""A sweep's record: what `sweep run` settled (the space, search, scheduler, cells and plan),
where the sweep is recorded (its MLflow parent run) and stored, and its rounds of trials. One
frozen value; a change (`sweep extend`, `sweep confirm`) makes a new one. Saved as the sweep's
state file (layout.STATE_FILE), which resume, extend, confirm and status read back.
"""

import json
from dataclasses import asdict, dataclass, fields, replace

from ..errors import UserError, first_line
from ..files import storage
from ..files.layout import SweepPaths
from ..files.parent_run import ParentRun
from ..files.versions import RECORD_VERSION, current_record
from ..search.space import Cell, Space, validated


@dataclass(frozen=True)
class Confirmed:
    """A setting a confirmation round runs again: its search trial's id (TRIAL_ID), its cell's
    label and the hyperparameters that trial sampled (SETTING, its seed not among them)."""

    cell: str
    trial_id: str
    setting: dict


@dataclass(frozen=True)
class Confirmation:
    """What `sweep confirm` runs: each of SETTINGS (the best of each cell) with each of SEEDS
    (new to the sweep), for the space's full EPOCHS, without early stopping."""

    settings: tuple[Confirmed, ...]
    seeds: tuple[int, ...]
    epochs: int

    @classmethod
    def from_json(cls, data: dict) -> "Confirmation":
        return cls(
            tuple(Confirmed(**s) for s in data["settings"]), tuple(data["seeds"]), data["epochs"]
        )

    @property
    def trials(self) -> int:
        return len(self.settings) * len(self.seeds)


@dataclass(frozen=True)
class Round:
    """A round of a sweep's trials (its first, then one per `sweep extend` or `sweep
    confirm`): it brings the sweep to SAMPLES settings a cell, each run with SEEDS seeds, where
    DONE (settings, seeds) had run in the rounds before; a confirmation round (CONFIRM) runs
    settings of the search again instead, and leaves SAMPLES and SEEDS as they were."""

    samples: int
    seeds: int
    done: tuple[int, int] = (0, 0)
    confirm: Confirmation | None = None

    @classmethod
    def from_json(cls, data: dict) -> "Round":
        confirm = data.get("confirm")  # a confirmation round's only
        return cls(
            data["samples"],
            data["seeds"],
            tuple(data["done"]),
            confirm and Confirmation.from_json(confirm),
        )

    def to_json(self) -> dict:
        """The round's JSON (`confirm` only in a confirmation round)."""
        data = {**asdict(self), "done": list(self.done)}
        if self.confirm is None:
            del data["confirm"]
        return data


@dataclass(frozen=True)
class SweepRecord:
    """A sweep, as its state file holds it (`to_json`, with its format's `version`; the files
    of earlier versions are read through `versions.current_record`)."""

    name: str
    space_path: str  # the space file, absolute
    preset: str | None
    overrides: tuple[str, ...]  # --set KEY=VALUE, as given
    search: str  # random | optuna
    scheduler: str  # fifo | asha | cell_asha
    tracking_uri: str
    experiment_id: str  # the MLflow experiment of the parent run
    parent_run_id: str
    data_dir: str  # absolute: the trials read their dataset there
    storage: str  # the storage root; the sweep's folder is STORAGE/NAME
    trials: int  # in all rounds
    cells: dict[str, Cell]  # by label ('rhn d4 w96')
    space: Space  # of the last round
    plan: dict | None  # the plan of `sweep plan --json` given with --plan
    rounds: tuple[Round, ...]  # the first, then one per extend or confirm

    @classmethod
    def from_json(cls, data: dict, where: str = "the sweep's record") -> "SweepRecord":
        """The record of a state file's JSON (read from WHERE), of any version."""
        data = current_record(data, where)
        del data["version"]
        return cls(
            **{
                **data,
                "space": validated(data["space"], f"{where}: space", stored=True),
                "cells": {label: Cell(**cell) for label, cell in data["cells"].items()},
                "overrides": tuple(data["overrides"]),
                "rounds": tuple(Round.from_json(r) for r in data["rounds"]),
            }
        )

    def to_json(self) -> dict:
        """The state file's JSON, of this version (`versions.RECORD_VERSION`)."""
        data = {"version": RECORD_VERSION}
        data |= {f.name: getattr(self, f.name) for f in fields(self)}
        data["space"] = self.space.model_dump(mode="json")
        data["cells"] = {label: asdict(cell) for label, cell in self.cells.items()}
        data["overrides"] = list(self.overrides)
        data["rounds"] = [r.to_json() for r in self.rounds]
        return data

    @property
    def paths(self) -> SweepPaths:
        return SweepPaths(self.storage, self.name, len(self.rounds))

    @property
    def parent_run(self) -> ParentRun:
        return ParentRun(self.tracking_uri, self.experiment_id, self.parent_run_id, self.paths)

    def extended(self, space: Space, trials: int) -> "SweepRecord":
        """The record with a new round: SPACE (its samples and seeds raised) and TRIALS in
        all, the earlier rounds' settings and seeds done."""
        last = Round(space.samples, space.seeds, (self.space.samples, self.space.seeds))
        return replace(self, space=space, trials=trials, rounds=(*self.rounds, last))

    def confirmed(self, confirm: Confirmation) -> "SweepRecord":
        """The record with a confirmation round of CONFIRM's trials; the space as it was."""
        done = (self.space.samples, self.space.seeds)
        last = Round(*done, done, confirm)
        return replace(self, trials=self.trials + confirm.trials, rounds=(*self.rounds, last))


def read_record(root: str, name: str) -> SweepRecord:
    """The record of the sweep NAME in the storage ROOT, or a one-line error naming the sweeps
    that are there."""
    text = storage.read_text(SweepPaths(root, name).state)
    if text is None:
        known = [n for n in storage.listdir(root) if storage.exists(SweepPaths(root, n).state)]
        raise UserError(
            f"no sweep named {name!r} in {root}: known sweeps are "
            f"{', '.join(known) or 'none'} (pass --storage-path where it ran)"
        )
    return SweepRecord.from_json(json.loads(text), SweepPaths(root, name).state)


def write_record(record: SweepRecord):
    """Save the record as the sweep's state file, whole."""
    try:
        storage.write_text(record.paths.state, json.dumps(record.to_json(), indent=1))
    except OSError as exc:
        raise UserError(
            f"cannot write the sweep's state to {record.paths.sweep} "
            f"({first_line(exc)}): check the storage path and "
            "its credentials"
        ) from None
