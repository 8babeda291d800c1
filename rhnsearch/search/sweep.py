"""Run a search space on Ray Tune: trials sampled at random or by Optuna, stopped early by the
space's scheduler, recorded in MLflow; an interrupted sweep resumes by name, a finished one
is extended by name.

Where a sweep keeps its state: Tune's experiment of each round (its state and every trial's
checkpoints; a round of `sweep extend` in NAME/extend-N), the sweep's own state file and the
Optuna studies live in the sweep's *storage*, `STORAGE/NAME`: results/sweeps by default, a
shared directory or a bucket URI on a cluster. The MLflow records waiting to be sent are
journaled beside them when the storage is a directory, else in results/sweeps/NAME on the
driver's machine with a copy in the bucket while they wait (tracking.Journal).
"""

import errno
import json
import logging
import os
import tempfile
import time
from datetime import datetime
from pathlib import Path

from mlflow.entities import Metric
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from ray import tune
from ray.tune.schedulers import FIFOScheduler

from ..compat import ray as ray_compat
from ..data import data_dir as default_data_dir
from ..data import load_dataset
from ..data.recorded import dataset_input
from ..errors import UserError, first_line
from ..provenance import provenance_tags
from ..results import histories, snapshot
from ..tracking_store import check_store, open_store
from . import storage
from .checkpoints import (
    KeepNewestCheckpoint,
    check_saved_state,
    repair_checkpoint_names,
    saved_trial_ids,
)
from .cluster import check_address, check_gpus, start_ray, trial_slots
from .plan import load_plan, planned_hours
from .scheduler import CellASHAScheduler
from .searchers import METRIC, MODE, build_searcher, round_slots
from .space import Space, load_space
from .tracking import MLflowTracker, get_experiment, sender_for
from .trainable import run_trial
from .trial import tune_constants

log = logging.getLogger(__name__)
STATE_FILE = "rhnsearch_sweep.json"
HOURS = ("cpu_hours", "gpu_hours")  # device-hours the trials held, from their *_seconds
STORAGE_ENV = "RHNSEARCH_STORAGE"
# In a folder: Tune's restore copies the top folder's *.json and *.pkl to its staging dir and
# uploads them back at each sync, over the scheduler's newer state.
SCHEDULER_STATE_FILE = "scheduler/state.json"


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
    return str(storage.LOCAL_SWEEPS.resolve())


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
        return FIFOScheduler()
    s = space.scheduler
    return CellASHAScheduler(
        max_t=space.epochs,
        grace_period=s.grace_period,
        reduction_factor=s.reduction_factor,
        per_cell=name == "cell_asha",
        state_file=state_file,
        time_attr="epoch",
    )


def check_writable(directory: Path):
    """Fail in one line unless a file can be written where `directory` is (or would be
    made): a read-only or full disk must stop a sweep before it starts, not days later."""
    existing = next(p for p in (directory, *directory.parents) if p.exists())
    try:
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a directory")
        with tempfile.TemporaryFile(dir=existing) as probe:  # removed when closed
            probe.write(bytes(65536))
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        raise UserError(
            f"results directory {directory.parent} is not writable ({existing}: "
            f"{exc.strerror or exc}): free some space, make it writable, or run "
            "from a directory you can write (results/ is made in the current "
            "directory)"
        ) from None


def check_storage(root: str):
    """Fail in one line unless the storage answers and takes a write (a bucket that is
    unreachable, missing or not ours), before Ray starts."""
    try:
        storage.check_reachable(root)
    except (OSError, ValueError) as exc:  # pyarrow's errors are OSError, a bad URI ValueError
        raise UserError(
            f"storage {root} cannot be used ({first_line(exc)}): check the bucket, "
            "its endpoint (AWS_ENDPOINT_URL) and credentials (AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY)"
        ) from None


def write_state(experiment: str, state: dict):
    try:
        storage.write_text(storage.join(experiment, STATE_FILE), json.dumps(state, indent=1))
    except OSError as exc:
        raise UserError(
            f"cannot write the sweep's state to {experiment} "
            f"({first_line(exc)}): check the storage path and "
            "its credentials"
        ) from None


def run_sweep(
    space_path,
    preset=None,
    overrides=(),
    address=None,
    search=None,
    scheduler=None,
    data_dir=None,
    tracking_uri=None,
    experiment=None,
    name=None,
    storage_path=None,
    resume=False,
    plan=None,
) -> dict:
    """Validate, record the sweep's parent run, run the trials; returns the summary. With
    RESUME, a sweep NAME that exists is resumed instead (`resume_sweep`). PLAN: a plan file of
    `sweep plan --json`, recorded with the sweep to hold what it spends against."""
    if resume and not name:
        raise UserError("--resume resumes the sweep --name: pass --name")
    space = load_space(space_path, preset=preset, overrides=overrides)
    # Absolute paths first: in a Ray Job, joining the cluster may replace the working dir.
    space_path = Path(space_path).resolve()
    if address:
        check_address(address)
    else:
        check_gpus(space.resources.gpu, local=True)
    root = sweep_storage(storage_path, address)
    check_writable(storage.LOCAL_SWEEPS.resolve() if storage.is_uri(root) else Path(root))
    check_storage(root)
    search = search or space.search
    if search != "random" and space.seeds > 1:
        raise UserError(
            f"seeds ({space.seeds}) repeats each setting of a random search: drop "
            "--search optuna, or run with seeds 1"
        )
    scheduler = scheduler or space.scheduler.name
    data_root = default_data_dir(data_dir).resolve()
    # fetched on first use, before Ray starts
    data = load_dataset(space.dataset, data_dir=data_root)
    uri = open_store(tracking_uri)  # makes the sqlite store: after every check of the input
    cells = space.cells_for(data)
    planned = load_plan(plan, cells) if plan else None
    name = name or f"{space.study}-{preset or 'base'}-{datetime.now():%Y%m%d-%H%M%S}"
    experiment_path = storage.join(root, name)
    if resume and storage.exists(storage.join(experiment_path, STATE_FILE)):
        return resume_sweep(name, address, storage_path)
    if storage.exists(storage.join(experiment_path, STATE_FILE)):
        raise UserError(
            f"sweep {name} already exists in {experiment_path}: resume it with "
            f"`rhnsearch sweep resume {name}` or pick another --name"
        )
    start_ray(address, space.cell_modules)  # an unreachable cluster fails here, first
    if address:
        check_gpus(space.resources.gpu, local=False)
    client = MlflowClient(uri)
    experiment_id = get_experiment(client, uri, experiment or space.study)
    parent = client.create_run(
        experiment_id,
        run_name=name,
        tags={
            "sweep": name,
            "study": space.study,
            "report": space.report,
            "preset": preset or "base",
            "kind": "sweep",
            **provenance_tags(),
        },
    )
    state = {
        "name": name,
        "space_path": str(space_path),
        "preset": preset,
        "overrides": list(overrides),
        "search": search,
        "scheduler": scheduler,
        "tracking_uri": uri,
        "experiment_id": experiment_id,
        "parent_run_id": parent.info.run_id,
        "data_dir": str(data_root),
        "storage": root,
        "trials": space.num_trials,
        "cells": cells,
        "space": space.model_dump(mode="json"),
        "plan": planned,
    }
    write_state(experiment_path, state)
    log_sweep_params(client, state, space)
    return finish(build_tuner(space, state, experiment_path), state)


def log_sweep_params(client: MlflowClient, state: dict, space: Space):
    """The sweep's settings as params of its parent run, its dataset as the run's input, and
    the whole space as space.json."""
    run_id = state["parent_run_id"]
    client.log_inputs(run_id, [dataset_input(space.dataset)])
    for key, value in [
        ("space", Path(state["space_path"]).name),
        ("preset", state["preset"] or "base"),
        ("search", state["search"]),
        *([("sampler", space.sampler)] if state["search"] == "optuna" else []),
        ("scheduler", state["scheduler"]),
        ("trials", state["trials"]),
        ("dataset", space.dataset),
        ("seed", space.seed),
        ("overrides", " ".join(state["overrides"])),
        ("storage", state["storage"]),
    ]:
        client.log_param(run_id, key, value)
    client.log_dict(run_id, state["space"], "space.json")
    if state["plan"]:  # planned device-hours beside those the trials will log as spent
        client.log_dict(run_id, state["plan"], "plan.json")
        hours, now = planned_hours(state["plan"]), int(time.time() * 1000)
        client.log_batch(
            run_id,
            metrics=[
                Metric(f"planned_{hours['unit']}", hours["total"], now, 0),
                *(
                    Metric(f"planned_{hours['unit']}/{cell}", value, now, 0)
                    for cell, value in hours["cells"].items()
                ),
            ],
        )


def rounds(state: dict) -> list[dict]:
    """The sweep's rounds of trials: its first, then one per `sweep extend`, each bringing it
    to `samples` settings a cell run with `seeds` seeds each, where `done` (settings, seeds)
    had run before."""
    space = state["space"]
    return state.get("rounds") or [
        {"samples": space["samples"], "seeds": space["seeds"], "done": [0, 0]}
    ]


def round_name(state: dict, index: int) -> str:
    """The Tune experiment of round INDEX: the sweep's own, then NAME/extend-INDEX inside it."""
    return state["name"] if index == 0 else f"{state['name']}/extend-{index}"


def round_paths(root: str, state: dict) -> list[str]:
    return [storage.join(root, round_name(state, i)) for i in range(len(rounds(state)))]


def build_tuner(space: Space, state: dict, sweep_path: str, function=run_trial) -> tune.Tuner:
    """The Tuner of the sweep's last round: its searcher, scheduler, MLflow callback and
    storage; its trials run FUNCTION (`run_trial`; benchmarks/driver_load.py gives one that
    only reports)."""
    name, cells = state["name"], state["cells"]
    constants = tune_constants(space, state["data_dir"], state["preset"])
    last = rounds(state)[-1]
    slots = round_slots(last["samples"], last["seeds"], tuple(last["done"]))
    searcher = build_searcher(space, cells, constants, slots, state["search"], sweep_path, name)
    tracker = MLflowTracker(
        state["tracking_uri"],
        state["experiment_id"],
        state["parent_run_id"],
        name,
        sweep_path,
        cells,
    )
    scheduler = build_scheduler(
        space, state["scheduler"], storage.join(sweep_path, SCHEDULER_STATE_FILE)
    )
    filesystem, path = storage.split(state["storage"])
    return tune.Tuner(
        trainable(space, cells, function),
        tune_config=tune.TuneConfig(
            metric=METRIC,
            mode=MODE,
            search_alg=searcher,
            scheduler=scheduler,
            num_samples=len(slots) * len(cells),
            # a searcher of one's own gets one trial pending at a time from Tune: the slots
            # of the cluster are asked for instead
            max_concurrent_trials=space.max_concurrent
            or trial_slots(space.resources.cpu, space.resources.gpu),
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=round_name(state, len(rounds(state)) - 1),
            storage_path=path,
            storage_filesystem=filesystem,
            callbacks=[tracker, KeepNewestCheckpoint()],
            failure_config=tune.FailureConfig(max_failures=2),
            verbose=1,
        ),
    )


def load_state(name: str, storage_path: str | None = None, address: str | None = None) -> dict:
    """The state of the sweep NAME in its storage (`sweep_storage`), or a one-line error
    naming the sweeps that are there."""
    root = sweep_storage(storage_path, address)
    text = storage.read_text(storage.join(root, name, STATE_FILE))
    if text is None:
        known = [
            n for n in storage.listdir(root) if storage.exists(storage.join(root, n, STATE_FILE))
        ]
        raise UserError(
            f"no sweep named {name!r} in {root}: known sweeps are "
            f"{', '.join(known) or 'none'} (pass --storage-path where it ran)"
        )
    return {"plan": None, **json.loads(text)}


def resume_sweep(name: str, address: str | None = None, storage_path: str | None = None) -> dict:
    """Continue an interrupted sweep: finished trials are kept, unfinished ones resume from
    their last checkpoint, the same MLflow parent run is reused. A sweep stopped before Tune
    saved its state starts its trials again, under the same parent run."""
    state = load_state(name, storage_path, address)
    root = sweep_storage(storage_path, address)
    sweep_path, experiment_path = storage.join(root, name), round_paths(root, state)[-1]
    check_store(state["tracking_uri"])
    filesystem, path = storage.split(experiment_path)
    space = Space.model_validate(state["space"])
    if not tune.Tuner.can_restore(path, storage_filesystem=filesystem):
        start_ray(address, space.cell_modules)
        return finish(build_tuner(space, state, sweep_path), state)
    check_saved_state(experiment_path)
    storage.remove_leftovers(experiment_path)
    start_ray(address, space.cell_modules)
    repair_checkpoint_names(experiment_path)
    tuner = tune.Tuner.restore(
        path,
        trainable(space, state["cells"]),
        resume_unfinished=True,
        resume_errored=True,
        storage_filesystem=filesystem,
    )
    MlflowClient(state["tracking_uri"]).set_tag(
        state["parent_run_id"], "resumed", datetime.now().isoformat(timespec="seconds")
    )
    return finish(tuner, state)


def extend_sweep(
    name: str,
    samples: int | None = None,
    seeds: int | None = None,
    address: str | None = None,
    storage_path: str | None = None,
) -> dict:
    """Add settings (SAMPLES a cell in all) or seeds (SEEDS a setting in all) to every cell of
    a finished sweep, as a new round under the same parent run: the random stream or the
    cells' Optuna studies go on where they stopped, the scheduler's rungs are kept, the old
    runs are untouched, and the summary, plots and report cover every trial."""
    state = load_state(name, storage_path, address)
    sweep_path = storage.join(sweep_storage(storage_path, address), name)
    space = Space.model_validate(state["space"])
    samples, seeds = samples or space.samples, seeds or space.seeds
    grows = samples > space.samples or seeds > space.seeds
    if samples < space.samples or seeds < space.seeds or not grows:
        raise UserError(
            f"sweep {name} has {space.samples} setting(s) a cell, each run with "
            f"{space.seeds} seed(s): extend it to more, e.g. --samples {2 * space.samples}"
        )
    if seeds > space.seeds and (state["search"] != "random" or "seed" in space.params):
        raise UserError(
            f"sweep {name} cannot run its settings with more seeds: "
            + (
                "an Optuna search runs each setting once"
                if state["search"] != "random"
                else "it samples each setting's seed (params.seed)"
            )
            + "; extend it with --samples instead"
        )
    check_store(state["tracking_uri"])
    client = MlflowClient(state["tracking_uri"])
    parent = state["parent_run_id"]
    if client.get_run(parent).info.status != "FINISHED":
        raise UserError(
            f"sweep {name} has not finished: `rhnsearch sweep resume {name}` finishes it, "
            "then extend it"
        )
    extended = Space.model_validate({**state["space"], "samples": samples, "seeds": seeds})
    start_ray(address, extended.cell_modules)
    state["rounds"] = [
        *rounds(state),
        {"samples": samples, "seeds": seeds, "done": [space.samples, space.seeds]},
    ]
    state["space"], state["trials"] = extended.model_dump(mode="json"), extended.num_trials
    write_state(sweep_path, state)
    client.update_run(parent, status="RUNNING")
    client.set_tag(
        parent,
        f"extended_{len(state['rounds']) - 1}",
        f"{space.samples} -> {samples} settings a cell, {space.seeds} -> {seeds} seeds a "
        f"setting ({datetime.now().isoformat(timespec='seconds')})",
    )
    client.log_dict(parent, state["space"], "space.json")
    return finish(build_tuner(extended, state, sweep_path), state)


def finish(tuner, state: dict) -> dict:
    """Run the Tuner; then wait for the MLflow records and, when every trial has ended, keep
    the best model and close the parent run. The summary is read back from MLflow."""
    start = time.monotonic()
    ray_compat.quiet_result_grid()  # Tune's file loggers are off (start_ray)
    results = tuner.fit()
    storage.LATER.wait()  # the scheduler's state and the checkpoints' pruning
    trials_seconds = time.monotonic() - start
    experiment_path = storage.join(state["storage"], state["name"])
    sender = sender_for(
        experiment_path,
        state["tracking_uri"],
        state["experiment_id"],
        state["parent_run_id"],
        state["name"],
    )
    if not sender.drain():
        kept = sender.journal.mirror or sender.journal.path
        raise UserError(
            f"sweep {state['name']}: every trial ended but MLflow at "
            f"{state['tracking_uri']} is not answering: its records are saved in "
            f"{kept}; when it is back, `rhnsearch sweep resume {state['name']}` "
            "sends them and closes the sweep"
        )
    client = MlflowClient(state["tracking_uri"])
    try:
        drop_lost_runs(client, state)
        runs = child_runs(client, state)
        long = histories.read(
            state["tracking_uri"],
            client,
            [r.info.run_id for r in runs],
            sorted({k for r in runs for k in r.data.metrics} - {"epoch"}),
        )
        summary = summarize(runs, long, state)
    except MlflowException as exc:
        raise UserError(
            f"sweep {state['name']}: every trial ended but MLflow at "
            f"{state['tracking_uri']} is not answering "
            f"({first_line(exc, 160)}): when it is back, `rhnsearch "
            f"sweep resume {state['name']}` closes the sweep"
        ) from None
    summary["trials_seconds"] = round(trials_seconds, 1)
    summary["wall_seconds"] = round(time.monotonic() - start, 1)
    summary["complete"] = summary["running"] == 0 and summary["trials"] == state["trials"]
    if summary["complete"]:
        parent = state["parent_run_id"]
        if summary["best"]:
            if state["space"].get("keep_model") == "best":
                keep_best_model(client, results, summary["best"], state)
            client.set_tag(parent, "best_run_id", summary["best"]["run_id"])
        now = int(time.time() * 1000)
        per_cell = [
            Metric(f"{unit}/{cell}", value, now, 0)
            for cell, hours in summary["spent"].items()
            for unit, value in hours.items()
        ]
        client.log_batch(
            parent,
            metrics=[
                Metric(k, float(v), now, 0)
                for k, v in summary.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            ]
            + per_cell,
        )
        from ..results.plots import log_sweep_plots
        from ..results.report import log_sweep_report

        snapshot.log_histories(client, parent, long)
        log_sweep_plots(client, state["experiment_id"], parent)
        log_sweep_report(client, state["experiment_id"], parent)
        client.set_terminated(parent, "FINISHED")
    return summary


def drop_lost_runs(client: MlflowClient, state: dict):
    """Delete the runs of trials that a killed driver had started but Tune had not saved yet:
    the resumed sweep does not know them, and runs their settings again as new trials. Only
    on the strength of Tune's saved state of every round, read: where one is missing or
    unreadable, every run is kept, and a warning says so."""
    paths = round_paths(state["storage"], state)
    saved = [saved_trial_ids(path) for path in paths]
    if None in saved:
        log.warning(
            "Tune's saved experiment state was not found in %s or could not be read: every "
            "MLflow run of the sweep is kept (a trial a killed driver had started before "
            "Tune saved it may have a second run)",
            paths[saved.index(None)],
        )
        return
    trials = set().union(*saved)
    lost = [run for run in child_runs(client, state) if run.data.tags.get("trial_id") not in trials]
    for run in lost:
        client.delete_run(run.info.run_id)
    if lost:
        log.warning(
            "deleted %d MLflow run(s) of trials the killed driver had started before "
            "Tune saved them; the resumed sweep ran them again",
            len(lost),
        )


def child_runs(client: MlflowClient, state: dict) -> list:
    return client.search_runs(
        [state["experiment_id"]],
        f"tags.mlflow.parentRunId = '{state['parent_run_id']}'",
        max_results=50000,
    )


def spent(runs: list) -> dict:
    """The CPU- and GPU-hours the RUNS' trials held (their last cpu_seconds, gpu_seconds), in
    all and per cell: {"cpu_hours", "gpu_hours", "cells": {label: {...}}}."""
    cells = {}
    for run in runs:
        cell = cells.setdefault(run.data.params.get("cell", "?"), dict.fromkeys(HOURS, 0.0))
        for unit in HOURS:
            cell[unit] += run.data.metrics.get(unit.replace("hours", "seconds"), 0.0) / 3600
    return {**{unit: sum(c[unit] for c in cells.values()) for unit in HOURS}, "cells": cells}


def summarize(runs: list, long, state: dict) -> dict:
    """Counts by status and the best trial of the sweep's MLflow RUNS, the training time in
    their histories LONG (histories.read's rows) and the device-hours they held."""
    counts = {s: 0 for s in ("completed", "stopped", "diverged", "failed", "running")}
    train_seconds = float(long.loc[long["key"] == "epoch_seconds", "value"].sum())
    held = spent(runs)
    best = None
    for run in runs:
        status = run.data.tags.get("status", "running")
        counts[status] = counts.get(status, 0) + 1
        loss = run.data.metrics.get("best_valid_loss")
        if (
            status in ("completed", "stopped")
            and loss is not None
            and loss == loss
            and (best is None or loss < best["best_valid_loss"])
        ):
            best = {
                "run_id": run.info.run_id,
                "trial_id": run.data.tags.get("trial_id"),
                "best_valid_loss": loss,
                "params": run.data.params,
            }
    return {
        "name": state["name"],
        "trials": len(runs),
        **counts,
        "train_seconds": round(train_seconds, 1),
        "cpu_hours": held["cpu_hours"],
        "gpu_hours": held["gpu_hours"],
        "spent": held["cells"],
        "best": best,
    }


def keep_best_model(client: MlflowClient, results, best: dict, state: dict):
    """Log the best trial's config and best-valid weights as the MLflow model of its run, and
    register it as a new version of the space's register_model, if it names one."""
    import torch

    from ..analysis.mlflow_model import keep_model
    from ..train import CHECKPOINT_FILE

    for result in results:
        if result.metrics.get("trial_id") != best["trial_id"] or result.checkpoint is None:
            continue
        with result.checkpoint.as_directory() as ckpt:
            saved = torch.load(Path(ckpt) / CHECKPOINT_FILE, weights_only=True)
        keep_model(
            client,
            best["run_id"],
            saved["config"],
            saved["best_state"] or saved["model"],
            state["data_dir"],
            state["space"].get("register_model"),
            {"study": state["space"]["study"], "sweep": state["name"]},
        )
        return
