"""What a sweep will cost, before it runs: each cell's seconds per epoch, timed here (a few
training and validation batches of the cell's model on this machine's device), times the
trial-epochs the cell runs: every epoch of every trial under FIFO, and under ASHA the epochs
its rungs are expected to keep, found by replaying the scheduler's own rule on simulated
trials; and those of a confirmation round (`sweep confirm`), every epoch of each of its
trials."""

import dataclasses
import heapq
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from ray.tune.schedulers import TrialScheduler

from ..data import SIZED, load_dataset
from ..errors import UserError
from ..tasks import get_task
from ..train import Trainer, TrialConfig
from .scheduler import CellASHAScheduler
from .space import Space

TIMED_BATCHES = 20  # batches of each split timed per cell, after the same ones to warm up
# How well a trial's loss at one rung predicts its rank at the next: the JSB cpu study's
# best-valid losses are rank-correlated 0.83-0.92 between its rungs (epochs 2, 6, 18, 40).
RUNG_CORRELATION = 0.85


@dataclasses.dataclass
class CellPlan:
    cell: str
    params: int
    epoch_seconds: float
    fifo_epochs: int  # trial-epochs of the cell's trials run to the end
    expected_epochs: float  # trial-epochs under the space's scheduler
    trials: int  # the confirmation round's too
    confirm_epochs: int = 0  # trial-epochs of a confirmation round (`sweep confirm`)

    @property
    def seconds(self) -> float:
        return self.epoch_seconds * (self.expected_epochs + self.confirm_epochs)


def typical(distribution) -> object:
    """A value of a sampled setting to time with: the middle of a range, a choice's first."""
    kind = distribution.kind
    low_high = getattr(distribution, kind)
    if kind == "choice":
        return low_high[0]
    if kind == "loguniform":
        return math.sqrt(low_high[0] * low_high[1])
    middle = (low_high[0] + low_high[1]) / 2
    return round(middle) if kind == "randint" else middle


def kept_fractions(
    trials: int, milestones: list[float], reduction_factor: float, draws: int = 400, seed: int = 0
) -> list[float]:
    """The expected share of a cell's TRIALS that go on past each rung under ASHA: the
    scheduler's own rule replayed on trials that reach every rung in the order they started,
    each with a loss whose rank carries from rung to rung with correlation RUNG_CORRELATION."""
    judge = CellASHAScheduler(max_t=2, reduction_factor=reduction_factor, mode="min").judge
    rng = np.random.default_rng(seed)
    noise = math.sqrt(1 - RUNG_CORRELATION**2)
    kept = np.zeros(len(milestones))
    for _ in range(draws):
        quality, alive = rng.standard_normal(trials), range(trials)
        for k in range(len(milestones)):
            loss = RUNG_CORRELATION * quality + noise * rng.standard_normal(trials)
            recorded, going_on = [], []
            for trial in alive:
                if judge(recorded, loss[trial]) != TrialScheduler.STOP:
                    going_on.append(trial)
                recorded.append(loss[trial])
            alive = going_on
            kept[k] += len(alive)
    return list(kept / draws / trials)


def expected_epochs(space: Space, scheduler: str, trials: int) -> float:
    """Trial-epochs that TRIALS trials compared together run under SCHEDULER."""
    epochs = space.epochs
    if scheduler == "fifo":
        return float(trials * epochs)
    s = space.scheduler
    milestones = CellASHAScheduler(
        max_t=epochs, grace_period=s.grace_period, reduction_factor=s.reduction_factor
    ).milestones
    ends = [*milestones[1:], epochs]
    kept = kept_fractions(trials, milestones, s.reduction_factor)
    return trials * (
        milestones[0] + sum(f * (end - m) for f, m, end in zip(kept, milestones, ends))
    )


def leading(data, train: float, valid: float):
    """DATA with its training and validation splits cut to their leading shares TRAIN and
    VALID."""

    def cut(split, share):
        return split[: max(1, math.ceil(len(split) * min(1.0, share)))]

    return dataclasses.replace(data, train=cut(data.train, train), valid=cut(data.valid, valid))


def epoch_seconds(config: TrialConfig, data) -> float:
    """Seconds of one epoch of CONFIG (training, then validation) on its device, from a few
    timed batches of each split scaled to the epoch's batch counts."""

    def batches(data, split):
        return sum(
            1
            for _ in get_task(config.task).batches(
                data.split(split), config.batch_size, config.bptt, None, "cpu"
            )
        )

    epoch = leading(data, config.train_fraction, 1.0)  # what a trial trains and validates on
    counts = {split: batches(epoch, split) for split in ("train", "valid")}
    timed = leading(
        epoch, *((TIMED_BATCHES + 1) / max(1, counts[split]) for split in ("train", "valid"))
    )
    trainer = Trainer(dataclasses.replace(config, train_fraction=1.0), timed)
    trainer.train_epoch()  # warm-up (allocations, kernels), not timed
    start = time.perf_counter()
    steps = trainer.train_epoch()[2]  # fewer than its batches where the loss diverged
    train = (time.perf_counter() - start) / max(1, steps)
    trainer.evaluate("valid")
    start = time.perf_counter()
    trainer.evaluate("valid")
    valid = (time.perf_counter() - start) / max(1, batches(timed, "valid"))
    return train * counts["train"] + valid * counts["valid"]


def timing_data(space: Space, data_dir=None) -> tuple[object, str]:
    """The data SPACE's cells are timed on, and its name: the space's dataset, or, where its
    text cannot be had here, random data of its size (data.SIZED: PTB's)."""
    try:
        return load_dataset(space.dataset, data_dir=data_dir), space.dataset
    except UserError:
        if space.dataset not in SIZED:
            raise
        return SIZED[space.dataset](), f"random tokens of {space.dataset.upper()}'s size"


def plan(
    space: Space,
    data,
    scheduler: str | None = None,
    on_progress=None,
    confirmed: int = 0,
) -> list[CellPlan]:
    """The cost of each cell of SPACE (its scheduler, or SCHEDULER) timed on DATA, with that
    of a confirmation round of CONFIRMED trials a cell (`confirm_trials`), each run for every
    epoch; ON_PROGRESS(cell) is called as each cell is timed."""
    scheduler = scheduler or space.scheduler.name
    per_cell = space.samples * space.seeds
    cells = space.cells_for(data)
    # ASHA compares settings, and a setting's seeds share its fate: epochs a trial, expected
    compared = space.samples * (1 if scheduler == "cell_asha" else len(cells))
    share = expected_epochs(space, scheduler, compared) / compared
    constants = {
        **space.fixed,
        **{k: typical(d) for k, d in space.params.items()},
        "dataset": space.dataset,
        "threads": space.threads,
    }
    rows = []
    for label, cell in cells.items():
        if on_progress:
            on_progress(label)
        config = TrialConfig.from_dict({**constants, **cell.model})
        rows.append(
            CellPlan(
                label,
                cell.params,
                epoch_seconds(config, data),
                per_cell * space.epochs,
                per_cell * share,
                per_cell + confirmed,
                confirmed * space.epochs,
            )
        )
    return rows


def confirm_trials(space: Space, confirm: tuple[int, int] | None) -> int:
    """The trials a cell of a confirmation round CONFIRM = (top, seeds) of a sweep of SPACE:
    its top settings, each run with that many new seeds (0 without one); a one-line UserError
    where `sweep confirm` would refuse them."""
    if confirm is None:
        return 0
    top, seeds = confirm
    if not 1 <= top <= space.samples or seeds < 2:
        raise UserError(
            f"--confirm {top} {seeds}: confirm 1 to {space.samples} setting(s) a cell (the "
            "space's samples), with at least 2 seeds each"
        )
    return top * seeds


def timed_on(space: Space) -> str:
    """The device the plan times SPACE's cells on, in words."""
    if torch.cuda.is_available():
        return f"cuda ({torch.cuda.get_device_name()})"
    return f"cpu ({torch.get_num_threads()} threads available, {space.threads} a trial)"


def totals(rows: list[CellPlan], per_trial: float, devices: float) -> dict:
    """The sweep's trial-seconds, device-hours (PER_TRIAL devices a trial) and wall seconds on
    DEVICES devices."""
    seconds = sum(row.seconds for row in rows)
    return {
        "trial_seconds": seconds,
        "device_hours": seconds * per_trial / 3600,
        "wall_seconds": wall_seconds(rows, int(devices // per_trial)),
    }


def wall_seconds(rows: list[CellPlan], slots: int) -> float:
    """The sweep's wall time with SLOTS trials at once: its trials, in the order the searcher
    gives them (a setting of each cell in turn), each taking its expected time, given to the
    first free slot."""
    free = [0.0] * max(1, slots)
    for trial in range(max(row.trials for row in rows)):
        for row in rows:
            if trial < row.trials:
                heapq.heappush(free, heapq.heappop(free) + row.seconds / row.trials)
    return max(free)


def load_plan(path, cells: dict) -> dict:
    """A plan `sweep plan --json` printed, read from PATH for a sweep of CELLS: one line
    where it is not such a plan, or one of other cells."""
    try:
        plan = json.loads(Path(path).read_text())
        planned = (
            [row["cell"] for row in plan["cells"]] if {"unit", "per_trial"} <= set(plan) else None
        )
    except FileNotFoundError:
        raise UserError(
            f"plan {path} not found: write one with `rhnsearch sweep plan SPACE --json > plan.json`"
        ) from None
    except (ValueError, KeyError, TypeError):
        planned = None
    if planned is None:
        raise UserError(f"{path} is not a plan `rhnsearch sweep plan --json` printed")
    if sorted(planned) != sorted(cells):
        raise UserError(
            f"plan {path} is of cells {', '.join(planned)}, not this sweep's "
            f"{', '.join(cells)}: plan the same space, preset and overrides"
        )
    return plan


def planned_hours(plan: dict) -> dict:
    """A plan's device-hours per cell and in all, in its unit: {"unit": "gpu_hours" or
    "cpu_hours", "cells": {label: hours}, "total": hours}."""
    cells = {row["cell"]: row["seconds"] * plan["per_trial"] / 3600 for row in plan["cells"]}
    return {"unit": f"{plan['unit'].lower()}_hours", "cells": cells, "total": sum(cells.values())}


def planned_rounds(plan: dict) -> dict:
    """A plan's device-hours and trial-epochs of the search and, where it was made with
    --confirm, of the confirmation round: {"search": {UNIT, "trial_epochs"}, "confirm": ...}
    (its cells' rows hold the epochs of each and one epoch's seconds)."""
    unit, per_hour = f"{plan['unit'].lower()}_hours", plan["per_trial"] / 3600
    rounds = {}
    if not all("epoch_seconds" in row for row in plan["cells"]):
        return rounds  # a plan that does not say: its total alone (`planned_hours`)
    for name, epochs in (("search", "expected_epochs"), ("confirm", "confirm_epochs")):
        trial_epochs = sum(row.get(epochs, 0) for row in plan["cells"])
        if trial_epochs:
            rounds[name] = {
                unit: sum(r["epoch_seconds"] * r.get(epochs, 0) for r in plan["cells"]) * per_hour,
                "trial_epochs": trial_epochs,
            }
    return rounds
