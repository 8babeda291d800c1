"""Run a search space on Ray Tune: trials sampled at random or by Optuna, stopped early by the
space's scheduler, recorded in MLflow; an interrupted sweep resumes by name, a finished one
is extended, or its best settings confirmed with new seeds, by name.

A sweep is its record (record.SweepRecord), saved in its folder of the storage, `STORAGE/NAME`
(results/sweeps by default, a shared directory or a bucket URI on a cluster), beside Tune's
experiment of each round and the searcher's and scheduler's state: layout.py names every file
and docs/architecture.md draws a sweep's life over them. The checks before Ray starts are in
checks.py, the Tuner of each round is built or restored in tuner.py.
"""

import gc
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from mlflow.entities import Metric
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from ray import tune

from ..cluster.connect import check_gpus, start_ray
from ..compat import ray as ray_compat
from ..errors import UserError, first_line
from ..files import storage
from ..files.layout import sweep_storage
from ..files.versions import read_moved_modules
from ..provenance import provenance_tags
from ..search.plan import planned_hours, planned_rounds
from ..search.space import Space
from ..tracking import schema, store
from ..tracking.datasets import dataset_input
from ..tracking.sender import drain_seconds, sender_for
from ..tracking.uris import check_store, get_experiment, open_store
from .checkpoints import (
    align_search_states,
    move_search_state,
    read_saved_round,
    repair_checkpoint_names,
)
from .checks import check_going_on, checked_sweep
from .close import close_sweep
from .confirm import confirmation
from .ended_index import keep_live_trials
from .record import Confirmation, SweepRecord, read_record, write_record
from .trainable import run_trial
from .tuner import build_scheduler as build_scheduler  # imported from here by tests/
from .tuner import build_tuner, restored_round

log = logging.getLogger(__name__)

# What each trial's worker imports as it starts, a few workers a node at a time
# (cluster/worker_start.py): torch, Tune and the trainable.
WORKER_IMPORTS = [run_trial.__module__]

OnStart = Callable[[SweepRecord], None]  # called with a sweep's record as its trials start


def run_sweep(
    space_path,
    *,
    preset: str | None = None,
    overrides=(),
    address: str | None = None,
    search: str | None = None,
    scheduler: str | None = None,
    data_dir=None,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    name: str | None = None,
    storage_path: str | None = None,
    resume: bool = False,
    plan=None,
    on_start: OnStart | None = None,
) -> dict:
    """Validate, record the sweep's parent run, run the trials; returns the summary (`finish`).

    Args:
        space_path: The search space's YAML file.
        preset: A preset of the space (e.g. ``smoke``, ``cpu``, ``paper``); None: its base.
        overrides: ``KEY=VALUE`` settings over the space, as ``--set`` takes them.
        address: The Ray cluster's address; None: a local Ray.
        search: ``random`` or ``optuna``; None: the space's.
        scheduler: ``cell_asha``, ``asha`` or ``fifo``; None: the space's.
        data_dir: Where the dataset is (fetched there on first use); None:
            ``$RHNSEARCH_DATA_DIR``, else the user cache dir.
        tracking_uri: The MLflow store; None: ``$MLFLOW_TRACKING_URI``, else
            ``sqlite:///results/mlflow.db``.
        experiment: The MLflow experiment; None: the space's study.
        name: The sweep's name; None: ``STUDY-PRESET-TIME``.
        storage_path: The storage root, a directory or bucket URI every node reads; None:
            ``$RHNSEARCH_STORAGE``, else results/sweeps (a local Ray only).
        resume: If a sweep ``name`` exists, resume it instead (`resume_sweep`).
        plan: A plan file of ``sweep plan --json``, recorded with the sweep to hold what it
            spends against.
        on_start: Called with the sweep's record as its trials start (where a display
            begins to follow it: `progress.Follower`).
    """
    if resume and not name:
        raise UserError("--resume resumes the sweep --name: pass --name")
    draft = checked_sweep(
        space_path,
        preset=preset,
        overrides=overrides,
        address=address,
        search=search,
        scheduler=scheduler,
        data_dir=data_dir,
        tracking_uri=tracking_uri,
        name=name,
        storage_path=storage_path,
        plan=plan,
    )
    name, paths, space = draft.name, draft.paths, draft.space
    if resume and storage.exists(paths.state):
        return resume_sweep(name, address=address, storage_path=storage_path, on_start=on_start)
    if storage.exists(paths.state):
        raise UserError(
            f"sweep {name} already exists in {paths.sweep}: resume it with "
            f"`rhnsearch sweep resume {name}` or pick another --name"
        )
    # an unreachable or refusing cluster fails here
    start_ray(address, space.cell_modules, WORKER_IMPORTS)
    if address:
        check_gpus(space.resources.gpu, local=False)
    record = recorded_sweep(draft, experiment or space.study)
    return finish(build_tuner(space, record), record, on_start)


def recorded_sweep(draft: SweepRecord, experiment: str) -> SweepRecord:
    """The record DRAFT (`checks.checked_sweep`) with its MLflow parent run made in EXPERIMENT
    (a sqlite store made first), saved as the sweep's state, its settings logged to the run
    (`log_sweep_params`)."""
    uri, space = draft.tracking_uri, draft.space
    open_store(uri)  # a sqlite store is made once every check has passed and Ray took us
    client = MlflowClient(uri)
    experiment_id = get_experiment(client, uri, experiment)
    parent = client.create_run(
        experiment_id,
        run_name=draft.name,
        tags={
            schema.SWEEP: draft.name,
            schema.STUDY: space.study,
            schema.REPORT: space.report,
            schema.QUANTITY: space.quantity,
            schema.PRESET: draft.preset or "base",
            schema.KIND: "sweep",
            **provenance_tags(),
        },
    )
    record = replace(draft, experiment_id=experiment_id, parent_run_id=parent.info.run_id)
    write_record(record)
    log_sweep_params(client, record)
    return record


def log_sweep_params(client: MlflowClient, record: SweepRecord):
    """The sweep's settings as params of its parent run, its dataset as the run's input, and
    the whole space as space.json."""
    run_id, space = record.parent_run_id, record.space
    client.log_inputs(run_id, [dataset_input(space.dataset)])
    for key, value in [
        ("space", Path(record.space_path).name),
        ("preset", record.preset or "base"),
        ("search", record.search),
        *([("sampler", space.sampler)] if record.search == "optuna" else []),
        ("scheduler", record.scheduler),
        ("trials", record.trials),
        ("dataset", space.dataset),
        ("seed", space.seed),
        ("overrides", " ".join(record.overrides)),
        ("storage", record.storage),
    ]:
        client.log_param(run_id, key, value)
    client.log_dict(run_id, record.space.model_dump(mode="json"), schema.SPACE_ARTIFACT)
    if record.plan:  # planned device-hours beside those the trials will log as spent
        client.log_dict(run_id, record.plan, schema.PLAN_ARTIFACT)
        hours, now = planned_hours(record.plan), int(time.time() * 1000)
        client.log_batch(
            run_id,
            metrics=[
                Metric(f"planned_{hours['unit']}", hours["total"], now, 0),
                *(  # the search's and a confirmation round's apart (`tracking.phases`)
                    Metric(f"planned_{phase}_{key}", value, now, 0)
                    for phase, planned in planned_rounds(record.plan).items()
                    for key, value in planned.items()
                ),
                *(
                    Metric(f"planned_{hours['unit']}/{cell}", value, now, 0)
                    for cell, value in hours["cells"].items()
                ),
            ],
        )


def load_record(name: str, storage_path: str | None, address: str | None) -> SweepRecord:
    """The record of the sweep NAME in the storage root (`sweep_storage`), its storage that
    root: where the sweep was found (the root it ran in, unless its storage moved)."""
    root = sweep_storage(storage_path, address)
    return replace(read_record(root, name), storage=root)


def resume_sweep(
    name: str,
    *,
    address: str | None = None,
    storage_path: str | None = None,
    on_start: OnStart | None = None,
) -> dict:
    """Continue an interrupted sweep: finished trials are kept, unfinished ones resume from
    their last checkpoint, the same MLflow parent run is reused. A sweep stopped before Tune
    saved its state starts its trials again, under the same parent run. Returns the summary
    (`finish`).

    Args:
        name: The sweep's name.
        address: The Ray cluster's address; None: a local Ray.
        storage_path: The storage root the sweep ran in; None: ``$RHNSEARCH_STORAGE``, else
            results/sweeps.
        on_start: Called with the sweep's record as its trials start (where a display
            begins to follow it: `progress.Follower`).
    """
    record = load_record(name, storage_path, address)
    check_going_on(record, "resume")
    round_dir = record.paths.round_dirs[-1]
    check_store(record.tracking_uri)
    filesystem, path = storage.split(round_dir)
    space = record.space
    if not tune.Tuner.can_restore(path, storage_filesystem=filesystem):
        start_ray(address, space.cell_modules, WORKER_IMPORTS)
        return finish(build_tuner(space, record), record, on_start)
    read_moved_modules()
    saved = read_saved_round(round_dir)
    storage.remove_leftovers(round_dir)
    start_ray(address, space.cell_modules, WORKER_IMPORTS)
    repair_checkpoint_names(round_dir, saved.state)
    align_search_states(saved)
    move_search_state(saved)
    write_record(record)  # of this version: an older rhnsearch would not read the index
    keep_live_trials(round_dir, saved.state, saved.names)
    saved.state = None  # tens of MB at thousands of trials: not held through the sweep
    mark_resumed(record)
    # the Tuner passed, not kept: finish lets it go before the close
    with ray_compat.restore_listed(path, saved.names):
        return finish(restored_round(path, filesystem, space, record), record, on_start)


def mark_resumed(record: SweepRecord):
    """Tag the sweep's parent run with when it was resumed. The tag only informs: where MLflow
    does not take it (down, or not yet answering), a warning says so and the sweep goes on, its
    records kept in the journal until MLflow answers."""
    when = datetime.now().isoformat(timespec="seconds")
    try:
        MlflowClient(record.tracking_uri).set_tag(record.parent_run_id, schema.RESUMED, when)
    except MlflowException as error:
        log.warning(
            "sweep %s: its parent run is not tagged resumed: %s", record.name, first_line(error)
        )


def finished_parent(record: SweepRecord, then: str) -> tuple[MlflowClient, str]:
    """The client of the sweep's store and its parent run's id; a one-line error, naming
    `sweep resume` and THEN (what to do next), where the sweep has not finished."""
    check_store(record.tracking_uri)
    client = MlflowClient(record.tracking_uri)
    if client.get_run(record.parent_run_id).info.status != "FINISHED":
        raise UserError(
            f"sweep {record.name} has not finished: `rhnsearch sweep resume {record.name}` "
            f"finishes it, then {then} it"
        )
    return client, record.parent_run_id


def extend_sweep(
    name: str,
    *,
    samples: int | None = None,
    seeds: int | None = None,
    address: str | None = None,
    storage_path: str | None = None,
    on_start: OnStart | None = None,
) -> dict:
    """Add settings or seeds to every cell of a finished sweep, as a new round under the same
    parent run: the random stream or the cells' Optuna studies go on where they stopped, the
    scheduler's rungs are kept, the old runs are untouched, and the summary, plots and report
    cover every trial. Returns the summary (`finish`).

    Args:
        name: The sweep's name.
        samples: Settings a cell in all, more than the sweep has; None: as many as it has.
        seeds: Seeds a setting in all (a random search whose seed is not sampled), more than
            the sweep has; None: as many as it has.
        address: The Ray cluster's address; None: a local Ray.
        storage_path: The storage root the sweep ran in; None: ``$RHNSEARCH_STORAGE``, else
            results/sweeps.
        on_start: Called with the sweep's record as its trials start (where a display
            begins to follow it: `progress.Follower`).
    """
    record = load_record(name, storage_path, address)
    space = record.space
    samples, seeds = samples or space.samples, seeds or space.seeds
    grows = samples > space.samples or seeds > space.seeds
    if samples < space.samples or seeds < space.seeds or not grows:
        raise UserError(
            f"sweep {name} has {space.samples} setting(s) a cell, each run with "
            f"{space.seeds} seed(s): extend it to more, e.g. --samples {2 * space.samples}"
        )
    if seeds > space.seeds and (record.search != "random" or "seed" in space.params):
        raise UserError(
            f"sweep {name} cannot run its settings with more seeds: "
            + (
                "an Optuna search runs each setting once"
                if record.search != "random"
                else "it samples each setting's seed (params.seed)"
            )
            + "; extend it with --samples instead"
        )
    client, parent = finished_parent(record, "extend")
    check_going_on(record, "extend")
    extended = Space.model_validate({**space.model_dump(), "samples": samples, "seeds": seeds})
    start_ray(address, extended.cell_modules, WORKER_IMPORTS)
    added = extended.num_trials - space.num_trials  # the trials before: those of any confirm too
    record = record.extended(extended, record.trials + added)
    write_record(record)
    client.update_run(parent, status="RUNNING")
    client.set_tag(
        parent,
        schema.extended_tag(len(record.rounds) - 1),
        f"{space.samples} -> {samples} settings a cell, {space.seeds} -> {seeds} seeds a "
        f"setting ({datetime.now().isoformat(timespec='seconds')})",
    )
    client.log_dict(parent, record.space.model_dump(mode="json"), schema.SPACE_ARTIFACT)
    return finish(build_tuner(extended, record), record, on_start)


def confirm_sweep(
    name: str,
    *,
    top: int,
    seeds: int,
    address: str | None = None,
    storage_path: str | None = None,
    resume: bool = False,
    on_start: OnStart | None = None,
) -> dict:
    """Train the TOP best settings of every cell of a finished sweep again, each with SEEDS
    seeds the sweep has not used, for the space's full epochs and without early stopping, as a
    confirmation round under the same parent run: its runs are tagged round=confirm, with the
    search trial each repeats as their param `confirms` (results.confirmed makes their table).
    The settings and seeds are chosen from MLflow once and kept in the sweep's record, so a
    resume runs the same. Returns the summary (`finish`).

    Args:
        name: The sweep's name.
        top: Settings a cell, at least 1 and at most the cell's finished settings.
        seeds: Seeds a setting, at least 2 (an interval over seeds needs two).
        address: The Ray cluster's address; None: a local Ray.
        storage_path: The storage root the sweep ran in; None: ``$RHNSEARCH_STORAGE``, else
            results/sweeps.
        resume: Where the sweep's last round is a confirmation round that has not finished,
            resume it instead (one command for a job that may run again: a requeued Slurm job).
        on_start: Called with the sweep's record as its trials start (where a display
            begins to follow it: `progress.Follower`).
    """
    if resume and unfinished_confirmation(load_record(name, storage_path, address)):
        return resume_sweep(name, address=address, storage_path=storage_path, on_start=on_start)
    record, client, confirm = chosen_confirmation(
        name, top=top, seeds=seeds, address=address, storage_path=storage_path
    )
    space = record.space
    start_ray(address, space.cell_modules, WORKER_IMPORTS)
    record = record.confirmed(confirm)
    write_record(record)
    client.update_run(record.parent_run_id, status="RUNNING")
    client.set_tag(
        record.parent_run_id,
        schema.confirmed_tag(len(record.rounds) - 1),
        f"the {top} best setting(s) a cell with seeds {', '.join(map(str, confirm.seeds))}, "
        f"{confirm.epochs} epochs ({datetime.now().isoformat(timespec='seconds')})",
    )
    return finish(build_tuner(space, record), record, on_start)


def unfinished_confirmation(record: SweepRecord) -> bool:
    """Whether RECORD's last round is a confirmation round its parent run has not finished."""
    if record.rounds[-1].confirm is None:
        return False
    check_store(record.tracking_uri)
    status = MlflowClient(record.tracking_uri).get_run(record.parent_run_id).info.status
    return status != "FINISHED"


def chosen_confirmation(
    name: str, *, top: int, seeds: int, address: str | None, storage_path: str | None
) -> tuple[SweepRecord, MlflowClient, Confirmation]:
    """The record of the finished sweep NAME, its store's client and the confirmation round
    `confirm_sweep` runs, chosen from MLflow; nothing is written and Ray is not started, so
    that bad input (an unknown or unfinished sweep, --top above a cell's finished settings,
    --seeds below 2) is one line before anything runs, here or in a job."""
    if top < 1 or seeds < 2:
        raise UserError(
            f"sweep confirm: --top {top} --seeds {seeds}: confirm at least 1 setting a cell "
            "with at least 2 seeds each (an interval over seeds needs two)"
        )
    record = load_record(name, storage_path, address)
    space = record.space
    client, _ = finished_parent(record, "confirm")
    check_going_on(record, "confirm")
    experiment = client.get_experiment(record.experiment_id).name
    exp = store.Experiment(experiment, record.experiment_id, record.tracking_uri, client)
    confirm = confirmation(
        store.trials(exp, name),
        lambda run_id: client.get_run(run_id).data.params,
        space,
        list(record.cells),
        top=top,
        seeds=seeds,
    )
    return record, client, confirm


def finish(tuner, record: SweepRecord, on_start: OnStart | None = None) -> dict:
    """Run the Tuner, wait until MLflow has every record, then close the sweep (`close_sweep`);
    returns its summary, read back from MLflow. The Tuner is let go before the close (pass it
    without keeping it): it holds every trial Tune ran, which the close does not need and
    which, kept, the close's reading would add to (docs/scale-history.md)."""
    wait = drain_seconds()
    start = time.monotonic()
    ray_compat.longer_trial_ids()
    if on_start:
        on_start(record)
    with ray_compat.no_result_files():
        results = tuner.fit()
    checkpoints = {r.metrics["trial_id"]: r.checkpoint for r in results if r.metrics}
    del tuner, results
    gc.collect()  # Tune's trials hold cycles
    storage.LATER.wait()  # the scheduler's state and the checkpoints' pruning
    trials_seconds = time.monotonic() - start
    sender = sender_for(record.parent_run)
    if not sender.drain(wait):
        kept = sender.journal.mirror or sender.journal.path
        raise UserError(
            f"sweep {record.name}: every trial ended but MLflow at "
            f"{record.tracking_uri} is not answering: its records are saved in "
            f"{kept}; when it is back, `rhnsearch sweep resume {record.name}` "
            "sends them and closes the sweep"
        )
    return close_sweep(record, checkpoints, trials_seconds=trials_seconds, started=start)
