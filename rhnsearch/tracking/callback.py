"""MLflow records for a sweep: one parent run per sweep, one nested child run per trial.

A Ray Tune callback (`MLflowTracker`) turns trial events into records: the trial's params when
it starts, that epoch's metrics (step = epoch) and where it ran when it reports, its status
tags and end when it ends. Each record goes to the sweep's journal (journal.py) and is sent to
MLflow by its sender (sender.py).
"""

import time
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from ray.tune import Callback

from ..files import versions
from ..files.parent_run import ParentRun
from ..search.trial import TrialSpec
from . import schema
from .journal import Record
from .sender import sender_for

SKIP_RESULT_KEYS = {
    "status",
    "epoch",
    "done",
    "training_iteration",
    "trial_id",
    "date",
    "timestamp",
    "pid",
    "hostname",
    "node_ip",
    "config",
    "time_since_restore",
    "iterations_since_restore",
    "checkpoint_dir_name",
    "should_checkpoint",
    "n_params",  # a param of the run (TrialSpec.mlflow_params)
}
PLACEMENT_KEYS = {
    "hostname": "host",
    "node_ip": "node_ip",
    "node_id": "node_id",
    "device": "device",
    "gpu_ids": "gpu_ids",
    "torch_version": "torch_version",
    "cpu": "cpu",
}  # result key -> run tag: where it trained


class MLflowTracker(Callback):
    """Ray Tune callback: the sweep's trial events as records for its sender (picklable: the
    sender is found again, or started, by `setup`)."""

    def __init__(self, run: ParentRun, cells: dict):
        self.run, self.cells = run, cells
        self._reset()

    def _reset(self):
        self.sender = None
        self.started: set[str] = set()  # trials whose params were recorded by this driver
        self.epoch: dict[str, int] = {}  # trial id -> last epoch recorded
        self.placement: dict[str, dict] = {}  # trial id -> where it ran last

    def __getstate__(self):
        return {**self.__dict__, "sender": None}

    def __setstate__(self, state: dict):
        self.__dict__.update(versions.tracker_state(state))

    def setup(self, **info):
        self._reset()
        self.sender = sender_for(self.run)

    def _record(
        self, trial_id: str, metrics=(), params=(), tags=(), end=None, name=None, dataset=None
    ):
        record = Record(
            trial_id,
            name,
            end,
            dataset,
            int(time.time() * 1000) if end else None,
            [[m.key, m.value, m.timestamp, m.step] for m in metrics],
            [[p.key, p.value] for p in params],
            [[t.key, t.value] for t in tags],
        )
        self.sender.put(self.sender.journal.append(record))

    def start_run(self, trial):
        """Record the trial's params (`TrialSpec.mlflow_params`) and dataset, and tag a
        confirmation trial's run round=confirm, once per trial and driver (again after a
        resume: the same values, which MLflow takes again without change)."""
        if trial.trial_id in self.started:
            return
        self.started.add(trial.trial_id)
        spec = TrialSpec.from_tune(trial.config, self.cells)
        self._record(
            trial.trial_id,
            name=f"{spec.config.arch}-d{spec.config.depth}-{trial.trial_id}",
            dataset=spec.config.dataset,
            params=[Param(k, v) for k, v in spec.mlflow_params().items()],
            tags=[RunTag(schema.ROUND, schema.CONFIRM)] if spec.confirms else [],
        )

    def on_trial_start(self, iteration, trials, trial, **info):
        self.start_run(trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.start_run(trial)
        epoch = int(result.get("epoch", result.get("training_iteration", 0)))
        if epoch <= self.epoch.get(trial.trial_id, 0):
            return  # reported again after a restore: recorded already
        self.epoch[trial.trial_id] = epoch
        now = int(time.time() * 1000)
        metrics = [
            Metric(k, float(v), now, epoch)
            for k, v in result.items()
            if k not in SKIP_RESULT_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
        metrics.append(Metric("epoch", float(epoch), now, epoch))
        placement = {tag: str(result[key]) for key, tag in PLACEMENT_KEYS.items() if key in result}
        changed = placement != self.placement.get(trial.trial_id)
        self.placement[trial.trial_id] = placement
        self._record(
            trial.trial_id,
            metrics=metrics,
            tags=[RunTag(k, v) for k, v in placement.items()] if changed else [],
        )

    def on_trial_complete(self, iteration, trials, trial, **info):
        result = trial.last_result or {}
        status = result.get("status", schema.RUNNING)
        tags = [RunTag(schema.STATUS, status if status != schema.RUNNING else schema.STOPPED)]
        if status == schema.RUNNING:
            tags.append(RunTag(schema.STOPPED_AT_EPOCH, str(result.get("epoch", 0))))
        self.start_run(trial)
        self._record(trial.trial_id, tags=tags, end="FINISHED")

    def on_trial_error(self, iteration, trials, trial, **info):
        self.start_run(trial)
        self._record(
            trial.trial_id,
            tags=[RunTag(schema.STATUS, schema.FAILED), RunTag(schema.ERROR, error_line(trial))],
            end="FAILED",
        )


def error_line(trial) -> str:
    """The last line of the error Ray recorded for a failed trial (the exception's own
    message, e.g. "RuntimeError: ..."), from the error file Tune writes beside the trial."""
    path = getattr(trial, "error_file", None)
    lines = Path(path).read_text().strip().splitlines() if path and Path(path).exists() else []
    return (lines[-1].strip() if lines else "the trial's worker failed")[:500]
