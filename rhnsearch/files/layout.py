"""Where a sweep keeps its files: every file and folder name rhnsearch writes for a sweep, who
writes it and why, and the paths of one sweep (`SweepPaths`). Tune's own files in a round's
folder (its experiment state, the trials' checkpoint folders) are Tune's to name.
docs/architecture.md draws a sweep's life over this layout.
"""

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..errors import UserError
from . import storage

# The storage root, STORAGE: --storage-path, else this variable, else LOCAL_SWEEPS.
STORAGE_ENV = "RHNSEARCH_STORAGE"
# The storage root of a sweep on a local Ray, under the driver's working directory; beside a
# bucket, where the driver keeps what must be on its own disk (journal, Slurm job directory).
LOCAL_SWEEPS = Path("results/sweeps")

# In the sweep's folder, STORAGE/NAME:
# sweep.run_sweep and extend_sweep: the sweep's record (record.SweepRecord), which resume,
# extend and status read.
STATE_FILE = "rhnsearch_sweep.json"
# sweep.extend_sweep: Tune's experiment of round N (N >= 1); round 0's is the sweep's folder.
EXTEND_DIR = "extend-{}"
# scheduler.CellASHAScheduler: its rungs and decisions, which a resumed or extended sweep's
# scheduler goes on from: the whole state as rhnsearch wrote it before version 3, and beside it
# the log of changes (scheduler.decisions_log). In a folder: Tune's restore copies the top
# folder's *.json and *.pkl to its staging dir and uploads them back at each sync, over newer.
SCHEDULER_STATE_FILE = "scheduler/state.json"
# searchers.CellStudies: the cells' Optuna studies (OPTUNA_JOURNAL.log, a journal file, in a
# directory; numbered objects under OPTUNA_JOURNAL/ in a bucket), which resumes and extends
# go on with.
OPTUNA_JOURNAL = "optuna_journal"
# sweep.ended_index: in each round's Tune experiment, the trials that had ended when a resume
# began (ENDED_TRIALS.jsonl, numbered objects under ENDED_TRIALS/ in a bucket), which the resume
# takes out of Tune's saved state so that Tune restores the live trials only.
ENDED_TRIALS = "ended_trials"
# tracking.Journal: the MLflow records not sent yet (a killed driver loses none), in the
# sweep's local folder (`SweepPaths.local`); in a bucket sweep also the copy of those
# waiting, which a resume on another machine sends.
PENDING_FILE = "mlflow_pending.jsonl"
# tracking.Journal: the number of the last record MLflow has taken, beside PENDING_FILE.
SENT_FILE = "mlflow_sent"
# cli.display.Watching: what Tune and Ray print on the driver as a round runs (Tune's status
# tables and a box a trial, the trials' forwarded output), appended to by each command that runs
# a round, in the sweep's local folder (`SweepPaths.local`).
DRIVER_LOG = "driver.log"
# slurm.submit_sweep: the Slurm job's directory in the sweep's local folder (`SweepPaths.local`),
# holding the batch script, which every rerun of the job (a requeue) runs again...
SLURM_DIR = "slurm"
SBATCH_FILE = "sweep.sbatch"
CONFIRM_SBATCH_FILE = "confirm.sbatch"  # `sweep confirm --slurm`'s
# ...the job's output, appended to by every rerun (Slurm writes it, %j the job id)...
SLURM_OUTPUT = "slurm-%j.out"
# ...and, while a run of the job lasts, its private folder (mode 700, removed at the end): the
# Ray token of the job's cluster, and the head's address for the worker nodes to join.
JOB_PRIVATE_DIR = ".job-{}"
JOB_TOKEN_FILE = "token"
JOB_HEAD_FILE = "head"

# In each trial checkpoint (Tune's checkpoint folders of a round):
# train.Trainer.save: the trial's full training state, which a restored trial resumes from
# and the sweep's best model is read from (also what `rhnsearch train --checkpoint-dir` keeps).
CHECKPOINT_FILE = "trainer.pt"
# trainable.run_trial: the wall seconds the trial has held its resources, summed over its
# retries and resumes.
HELD_FILE = "held.json"


def sweep_storage(location: str | None, address: str | None) -> str:
    """The storage root: --storage-path, else $RHNSEARCH_STORAGE, else results/sweeps (for a
    local Ray only: a cluster's nodes do not see the driver's disk)."""
    location = location or os.environ.get(STORAGE_ENV)
    if location:
        return storage.normalize(location)
    if address:
        raise UserError(
            "a sweep on a cluster keeps its state and checkpoints where every "
            "node can read them: pass --storage-path with a shared directory or "
            f"a bucket URI (s3://BUCKET/PATH), or set {STORAGE_ENV}"
        )
    return str(LOCAL_SWEEPS.resolve())


def round_name(name: str, index: int) -> str:
    """Tune's experiment name of round INDEX of the sweep NAME: the sweep's own, then
    NAME/extend-INDEX inside it."""
    return name if index == 0 else f"{name}/{EXTEND_DIR.format(index)}"


def default_name(study: str, preset: str | None) -> str:
    """A sweep's name where none is given: its study, preset and start, to the second."""
    return f"{study}-{preset or 'base'}-{datetime.now():%Y%m%d-%H%M%S}"


@dataclass(frozen=True)
class SweepPaths:
    """The paths of the sweep NAME in the storage ROOT, which has ROUNDS rounds of trials."""

    root: str
    name: str
    rounds: int = 1

    @classmethod
    def of_folder(cls, folder: str, name: str) -> "SweepPaths":
        """The paths of the sweep NAME whose folder is FOLDER (STORAGE/NAME)."""
        path, _, query = folder.partition("?")
        return cls(path.removesuffix(f"/{name}") + (f"?{query}" if query else ""), name)

    @property
    def sweep(self) -> str:
        """The sweep's folder, STORAGE/NAME."""
        return storage.join(self.root, self.name)

    @property
    def state(self) -> str:
        return storage.join(self.sweep, STATE_FILE)

    @property
    def scheduler_state(self) -> str:
        return storage.join(self.sweep, SCHEDULER_STATE_FILE)

    @property
    def round_dirs(self) -> list[str]:
        """Tune's experiment folder of each round, the first first."""
        return [storage.join(self.root, round_name(self.name, i)) for i in range(self.rounds)]

    @property
    def local(self) -> Path:
        """The sweep's folder on the driver's disk, where its MLflow records wait (PENDING_FILE,
        SENT_FILE) and its Slurm job directory is: its folder, or results/sweeps/NAME under the
        working directory when the storage is a bucket."""
        if storage.is_uri(self.root):
            return LOCAL_SWEEPS.resolve() / self.name
        return Path(self.sweep)

    @property
    def journal_mirror(self) -> str | None:
        """The copy of the waiting records in the bucket, or None for a directory storage."""
        return storage.join(self.sweep, PENDING_FILE) if storage.is_uri(self.root) else None

    @property
    def driver_log(self) -> Path:
        return self.local / DRIVER_LOG

    @property
    def slurm_dir(self) -> Path:
        return self.local / SLURM_DIR
