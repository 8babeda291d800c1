"""A sweep round's Tuner: built from its record (trainable, searcher, scheduler, MLflow callback
and storage), or restored from Tune's saved state, where a Tuner pickled before rhnsearch's
modules moved is read under their new names.
"""

from ray import tune

from ..cluster.connect import trial_slots
from ..compat import ray as ray_compat
from ..files import storage
from ..files.layout import round_name
from ..search.scheduler import CellASHAScheduler, LiveFIFOScheduler
from ..search.searchers import (
    METRIC,
    MODE,
    CellStudies,
    ConfirmSearcher,
    build_searcher,
    round_slots,
)
from ..search.space import Space
from ..search.trial import tune_constants
from ..tracking.callback import MLflowTracker
from .checkpoints import KeepNewestCheckpoint
from .ended_trials import ForgetEndedTrialsMetrics
from .record import SweepRecord
from .trainable import run_trial


def trainable(space: Space, cells: dict, function=run_trial):
    """FUNCTION (`run_trial`) with the sweep's cells and the resources the space asks for
    each trial."""
    return tune.with_resources(
        tune.with_parameters(function, cells=cells),
        {"cpu": space.resources.cpu, "gpu": space.resources.gpu},
    )


def build_scheduler(space: Space, name: str, state_file: str):
    """fifo, or ASHA within each cell (cell_asha) or across all trials (asha) keeping its
    rungs and decisions in `state_file`, where the restored scheduler of `sweep resume`
    finds them."""
    if name == "fifo":
        return LiveFIFOScheduler()
    s = space.scheduler
    return CellASHAScheduler(
        max_t=space.epochs,
        grace_period=s.grace_period,
        reduction_factor=s.reduction_factor,
        per_cell=name == "cell_asha",
        state_file=state_file,
        time_attr="epoch",
    )


def build_tuner(space: Space, record: SweepRecord, function=run_trial) -> tune.Tuner:
    """The Tuner of the sweep's last round: its searcher, scheduler, MLflow callback and
    storage (a confirmation round: its settings and seeds, under FIFO); its trials run
    FUNCTION (`run_trial`; benchmarks/driver_load.py gives one that only reports)."""
    name, cells, paths = record.name, record.cells, record.paths
    constants = tune_constants(space, record.data_dir, record.preset)
    last = record.rounds[-1]
    if last.confirm:
        searcher = ConfirmSearcher(constants, last.confirm)
        count = len(searcher.configs)
    else:
        slots = round_slots(last.samples, last.seeds, last.done)
        searcher = build_searcher(space, cells, constants, slots, record.search, paths.sweep, name)
        count = len(slots) * len(cells)
    tracker = MLflowTracker(record.parent_run, cells)
    scheduler = build_scheduler(
        space, "fifo" if last.confirm else record.scheduler, paths.scheduler_state
    )
    filesystem, path = storage.split(record.storage)
    return tune.Tuner(
        trainable(space, cells, function),
        tune_config=tune.TuneConfig(
            metric=METRIC,
            mode=MODE,
            search_alg=searcher,
            scheduler=scheduler,
            num_samples=count,
            # a searcher of one's own gets one trial pending at a time from Tune: the slots
            # of the cluster are asked for instead
            max_concurrent_trials=space.max_concurrent
            or trial_slots(space.resources.cpu, space.resources.gpu),
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=round_name(name, len(record.rounds) - 1),
            storage_path=path,
            storage_filesystem=filesystem,
            callbacks=[tracker, KeepNewestCheckpoint(), ForgetEndedTrialsMetrics(METRIC)],
            failure_config=tune.FailureConfig(max_failures=2),
            verbose=1,
        ),
    )


def restored_round(path: str, filesystem, space: Space, record: SweepRecord) -> tune.Tuner:
    """The Tuner of the sweep's last round restored from Tune's state at PATH, what it unpickled
    pointed at the sweep's folder where RECORD was found: Tune pickled its searcher, scheduler
    and callbacks with the folder the sweep ran in, which may have moved since (another mount of
    its disk, `sweep resume --storage-path`), and its MLflow journal, ASHA's rungs and the
    cells' Optuna studies would be read and written there."""
    tuner = ray_compat.restored_tuner(
        path, trainable(space, record.cells), storage_filesystem=filesystem
    )
    for part in ray_compat.restored_parts(tuner):
        if isinstance(part, MLflowTracker):
            part.run, part.cells = record.parent_run, record.cells
        elif isinstance(part, CellASHAScheduler) and part.state_file:
            part.state_file = record.paths.scheduler_state
        elif isinstance(part, CellStudies):
            part.sweep_dir = record.paths.sweep
    return tuner
