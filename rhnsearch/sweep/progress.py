"""How far a sweep has got, read from its record and its MLflow store (no Ray connection): what
`sweep run`'s live display and `sweep status --watch` show. Only read, so any process can
follow a sweep that another runs, on this machine, a cluster or a Slurm job."""

import math
import time
from dataclasses import dataclass

from mlflow.tracking import MlflowClient

from ..files.layout import sweep_storage
from ..search.plan import planned_hours
from ..tracking.schema import RUNNING, STATUS
from ..tracking.uris import existing_store
from .close import child_runs, spent
from .record import SweepRecord, read_record


@dataclass(frozen=True)
class Trial:
    """One trial run: its cell, status (`RUNNING` until it ends), last epoch and best loss."""

    run_id: str
    cell: str
    status: str
    epoch: int
    best: float | None  # its best_valid_loss; None before its first epoch, or non-finite
    ended_at: int | None  # ms since the epoch; None while it runs


@dataclass(frozen=True)
class Progress:
    """A sweep's trials as its store holds them now, against what the sweep plans."""

    name: str
    planned: int  # trials, in every round
    cells: tuple[str, ...]
    trials: tuple[Trial, ...]
    elapsed: float  # seconds since the follower's start
    fraction: float  # of the sweep's work done: plan-hours spent, else trials ended
    baseline: float  # the fraction done when the follower started
    finished: bool  # the sweep's parent run has ended (FINISHED, or failed or killed)

    @property
    def ended(self) -> tuple[Trial, ...]:
        return tuple(t for t in self.trials if t.status != RUNNING)

    @property
    def running(self) -> tuple[Trial, ...]:
        return tuple(t for t in self.trials if t.status == RUNNING)

    def statuses(self) -> dict[str, int]:
        """Trials by status, the ended first in the order they are named, then running."""
        counts = {}
        for trial in sorted(self.trials, key=lambda t: t.status == RUNNING):
            counts[trial.status] = counts.get(trial.status, 0) + 1
        return counts

    def best(self) -> dict[str, float | None]:
        """Each cell's best loss so far (None: none yet), in the sweep's order of cells."""
        found = dict.fromkeys(self.cells)
        for trial in self.trials:
            if trial.best is not None and (found.get(trial.cell) or math.inf) > trial.best:
                found[trial.cell] = trial.best
        return found

    def left(self) -> float | None:
        """Seconds left at the pace since the follower started (the fraction done since, over
        the time elapsed), None before anything is done; 0 once finished."""
        if self.finished:
            return 0.0
        done = self.fraction - self.baseline
        if done <= 0:
            return None
        return self.elapsed * (1 - min(self.fraction, 1.0)) / done


def done_fraction(record: SweepRecord, runs: list, trials: tuple[Trial, ...]) -> float:
    """The share of the sweep done: the plan's device-hours its trials have held, where it was
    run with --plan and has one round (the plan's estimate corrected by what is spent); else
    its trials ended, and of each running one the share of the most epochs a trial may run
    that it has."""
    if record.plan and len(record.rounds) == 1:
        plan = planned_hours(record.plan)
        if plan["total"] > 0:
            return min(spent(runs)[plan["unit"]] / plan["total"], 1.0)
    if not record.trials:
        return 1.0
    epochs = max(record.space.epochs, 1)
    running = sum(min(t.epoch, epochs) / epochs for t in trials if t.status == RUNNING)
    return (sum(t.status != RUNNING for t in trials) + running) / record.trials


def trial(run) -> Trial:
    best = run.metrics.get("best_valid_loss")
    return Trial(
        run.run_id,
        run.params.get("cell", "?"),
        run.tags.get(STATUS, RUNNING),
        int(run.metrics.get("epoch", 0)),
        best if best is not None and math.isfinite(best) else None,
        run.end_time,
    )


class Follower:
    """Reads a sweep's `Progress` again and again from its store.

    Args:
        record: The sweep's record (`Follower.of` reads it by name).
        start: The epoch second its elapsed time and pace count from (the command's start,
            where it runs the sweep's round); None: its parent run's start, the pace over
            all of its rounds.
    """

    def __init__(self, record: SweepRecord, *, start: float | None = None):
        self.record = record
        self.client = MlflowClient(existing_store(record.tracking_uri))
        self.start = start
        self.baseline: float | None = None if start is not None else 0.0

    @classmethod
    def of(cls, name: str, storage_path: str | None = None) -> "Follower":
        """The follower of the sweep NAME in the storage root STORAGE_PATH (None:
        ``$RHNSEARCH_STORAGE``, else results/sweeps), from its parent run's start."""
        return cls(read_record(sweep_storage(storage_path, None), name))

    def read(self) -> Progress:
        record = self.record
        parent = self.client.get_run(record.parent_run_id).info
        runs = child_runs(self.client, record.parent_run)
        trials = tuple(trial(run) for run in runs)
        start = self.start if self.start is not None else parent.start_time / 1000
        fraction = done_fraction(record, runs, trials)
        if self.baseline is None:
            self.baseline = fraction
        return Progress(
            record.name,
            record.trials,
            tuple(record.cells),
            trials,
            max(time.time() - start, 0.0),
            fraction,
            self.baseline,
            parent.status != "RUNNING",
        )
