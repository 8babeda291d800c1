"""What a sweep writes to MLflow, named once: a parent run per sweep with a nested run per trial,
their tags, a trial's statuses and the parent's artifacts. The writers (sweep/lifecycle.py,
sweep/close.py, callback.py, sender.py) and the readers (store.py, phases.py, results/,
sweep/status.py, sweep/progress.py) take the names from here. A trial's params are its
`TrialSpec.mlflow_params` (search/trial.py), read back as the `params.*` columns of store.py.
"""

PARENT_RUN = "mlflow.parentRunId"  # MLflow's tag of a nested run: its parent run's id

# The parent run's tags (its name is the sweep's too).
SWEEP = "sweep"  # the sweep's name; on each trial's run too
STUDY = "study"
REPORT = "report"  # the study's kind of report (results/studies.py)
QUANTITY = "quantity"
PRESET = "preset"
KIND = "kind"  # "sweep"
BEST_RUN = "best_run_id"  # the best trial's run, once the sweep has closed
RESUMED = "resumed"  # when the sweep was last resumed


def extended_tag(round_index: int) -> str:
    """The parent's tag saying what `sweep extend` added as round ROUND_INDEX."""
    return f"extended_{round_index}"


def confirmed_tag(round_index: int) -> str:
    """The parent's tag saying what `sweep confirm` ran as round ROUND_INDEX."""
    return f"confirmed_{round_index}"


# A trial run's tags.
TRIAL_ID = "trial_id"  # Tune's trial id
STATUS = "status"  # one of STATUSES
ROUND = "round"  # CONFIRM on a confirmation round's trials, else absent ("search")
STOPPED_AT_EPOCH = "stopped_at_epoch"  # the scheduler stopped the trial after this epoch
ERROR = "error"  # a failed trial's error, one line

CONFIRM, SEARCH = "confirm", "search"  # a trial's round, as store.py's `round` column reads it

# A trial's status: the trainer's (running, completed, diverged: train.Trainer.status), or
# stopped by the scheduler, or failed with an error.
RUNNING, COMPLETED, STOPPED, DIVERGED, FAILED = (
    "running",
    "completed",
    "stopped",
    "diverged",
    "failed",
)
STATUSES = (COMPLETED, STOPPED, DIVERGED, FAILED, RUNNING)
FINISHED = (COMPLETED, STOPPED)  # a trial whose loss counts in the tables

# The parent run's artifacts.
SPACE_ARTIFACT = "space.json"  # the sweep's whole space, logged again as a round extends it
PLAN_ARTIFACT = "plan.json"  # `sweep run --plan`'s plan
HISTORIES_ARTIFACT = "histories.parquet"  # every trial's metric histories (snapshot.py)
PLOTS_DIR = "plots"  # the study's figures, PNG
REPORT_DIR = "report"  # report.html
