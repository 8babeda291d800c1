"""Where a sweep's trials are recorded in MLflow: its parent run, which the MLflow callback and
sender write under (tracking/) and the sweep's record names (record.py)."""

from dataclasses import dataclass

from .layout import SweepPaths


@dataclass(frozen=True)
class ParentRun:
    """Where a sweep's trials are recorded: the MLflow store at TRACKING_URI, its experiment and
    the sweep's parent run (RUN_ID), under which each trial is a child run; PATHS: the sweep's
    (its name tags the trials' runs; its local folder holds the records on their way)."""

    tracking_uri: str
    experiment_id: str
    run_id: str
    paths: SweepPaths

    @property
    def sweep(self) -> str:
        return self.paths.name
