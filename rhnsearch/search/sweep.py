"""Run a search space on Ray Tune: trials sampled at random or by Optuna, stopped early by
ASHA within their cell, recorded in MLflow; interrupted sweeps resume by name."""
import errno
import json
import logging
import os
import re
import socket
import sys
import tempfile
import time
import zipfile
from datetime import datetime
from pathlib import Path
from urllib.parse import urlparse

import ray
from mlflow.entities import Metric
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from ray import tune
from ray.tune.schedulers import FIFOScheduler
from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter
from ray.tune.search.optuna import OptunaSearch

from ..data import data_dir as default_data_dir
from ..data import load_dataset
from ..errors import UserError
from ..tracking_store import check_store, resolve_tracking_uri
from .scheduler import CellASHAScheduler
from .space import Distribution, Space, load_space
from .tracking import MLflowTracker, get_experiment
from .trainable import run_trial

log = logging.getLogger("rhnsearch")
SWEEPS_DIR = Path("results/sweeps")
STATE_FILE = "rhnsearch_sweep.json"
# In a folder: Tune's restore copies the top folder's *.json and *.pkl to its staging dir and
# uploads them back at each sync, over the scheduler's newer state.
SCHEDULER_STATE_FILE = "scheduler/state.json"
METRIC, MODE = "valid_loss", "min"


# -- the search: Tune samplers for random search, a define-by-run function for Optuna --------
def tune_sampler(dist: Distribution):
    low_high = getattr(dist, dist.kind)
    return {"uniform": lambda: tune.uniform(*low_high),
            "loguniform": lambda: tune.loguniform(*low_high),
            "randint": lambda: tune.randint(low_high[0], low_high[1] + 1),
            "choice": lambda: tune.choice(low_high)}[dist.kind]()


class OptunaSpace:
    """Optuna define-by-run space: TPE samples the hyperparameters; cells go round-robin so
    every (arch, depth) cell gets the same number of trials."""

    def __init__(self, cells: list, params: dict, constants: dict):
        self.cells, self.params, self.constants, self.count = cells, params, constants, 0

    def __call__(self, trial):
        for name, dist in self.params.items():
            low_high = getattr(dist, dist.kind)
            if dist.kind == "choice":
                trial.suggest_categorical(name, low_high)
            elif dist.kind == "randint":
                trial.suggest_int(name, *low_high)
            else:
                trial.suggest_float(name, *low_high, log=dist.kind == "loguniform")
        cell = self.cells[self.count % len(self.cells)]
        self.count += 1
        return {**self.constants, "cell": cell}


def build_search(space: Space, cells: list, constants: dict, search: str):
    """(param_space, search_alg, num_samples) for the Tuner."""
    if search == "random":
        param_space = {**constants, "cell": tune.grid_search(cells),
                       **{k: tune_sampler(d) for k, d in space.params.items()}}
        return param_space, BasicVariantGenerator(random_state=space.seed), space.samples
    optuna = OptunaSearch(OptunaSpace(cells, space.params, constants), metric=METRIC,
                          mode=MODE, seed=space.seed)
    limit = space.max_concurrent or 2
    return None, ConcurrencyLimiter(optuna, max_concurrent=limit), len(cells) * space.samples


def build_scheduler(space: Space, name: str, state_file: str):
    """fifo, or ASHA within each cell (cell_asha) or across all trials (asha) keeping its
    rungs and decisions in `state_file`, where the restored scheduler of `sweep resume`
    finds them."""
    if name == "fifo":
        return FIFOScheduler()
    s = space.scheduler
    return CellASHAScheduler(max_t=space.epochs, grace_period=s.grace_period,
                             reduction_factor=s.reduction_factor, per_cell=name == "cell_asha",
                             state_file=state_file, time_attr="epoch")


# -- Ray -------------------------------------------------------------------------------------
def check_address(address: str):
    """Fail fast, in one line, when a Ray address does not answer (a TCP connect)."""
    if address in ("auto", "local"):
        return
    url = urlparse(address if "://" in address else f"ray://{address}")
    host, port = url.hostname, url.port
    if not host or not port:
        raise UserError(f"cannot read Ray address {address!r}: write HOST:PORT (e.g. "
                        "127.0.0.1:6379) or auto")
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as exc:
        raise UserError(f"Ray at {address} is not reachable ({exc.strerror or exc}): start it "
                        "with `ray start --head` or check the address") from None


def start_ray(address: str | None):
    """A local Ray started here by default; with an address, join that cluster."""
    if ray.is_initialized():
        return
    # Checkpointing every epoch is the point (resume, retries): don't warn about it.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    if address:
        check_address(address)
        try:
            ray.init(address=address, logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError) as exc:
            raise UserError(f"could not join the Ray cluster at {address}: "
                            f"{str(exc).splitlines()[0]}") from None
    else:
        ray.init(include_dashboard=False, logging_level=logging.WARNING,
                 _node_ip_address="127.0.0.1")  # a local Ray stays on loopback


def check_resources(space: Space, local: bool):
    """A trial asking for a GPU that Ray does not have would wait forever. A local Ray (not
    started yet) has the GPUs torch sees."""
    import torch
    if space.resources.gpu > 0 and not (torch.cuda.is_available() if local
                                        else ray.cluster_resources().get("GPU")):
        message = (f"the space asks for {space.resources.gpu} GPU per trial but Ray has no GPU:"
                   " pass --set resources.gpu=0 to train on CPUs")
        if local:
            raise UserError(message)
        log.warning("%s (unless the cluster autoscales GPU nodes)", message)


# -- sweeps ----------------------------------------------------------------------------------
def sweep_dir(name: str) -> Path:
    return (SWEEPS_DIR / name).resolve()


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
        raise UserError(f"results directory {directory.parent} is not writable ({existing}: "
                        f"{exc.strerror or exc}): free some space, make it writable, or run "
                        "from a directory you can write (results/ is made in the current "
                        "directory)") from None


def run_sweep(space_path, preset=None, overrides=(), address=None, search=None,
              scheduler=None, data_dir=None, tracking_uri=None, experiment=None,
              name=None) -> dict:
    """Validate, record the sweep's parent run, run the trials; returns the summary."""
    space = load_space(space_path, preset, overrides)
    # Absolute paths first: in a Ray Job, joining the cluster may replace the working dir.
    space_path, sweeps_root = Path(space_path).resolve(), SWEEPS_DIR.resolve()
    check_writable(sweeps_root)
    if address:
        check_address(address)
    else:
        check_resources(space, local=True)
    search = search or space.search
    scheduler = scheduler or space.scheduler.name
    root = default_data_dir(data_dir).resolve()
    data = load_dataset(space.dataset, root)  # fetched on first use, before Ray starts
    uri = resolve_tracking_uri(tracking_uri)  # makes the sqlite store: after every check
    check_store(uri)                          # of the user's input
    cells = space.cells(len(data.vocab) if hasattr(data, "vocab") else 10000)
    name = name or f"{space.study}-{preset or 'base'}-{datetime.now():%Y%m%d-%H%M%S}"
    directory = sweep_dir(name)
    if directory.exists():
        raise UserError(f"sweep {name} already exists in {directory}: resume it with "
                        f"`rhnsearch sweep resume {name}` or pick another --name")
    start_ray(address)  # an unreachable cluster fails here, before anything is recorded
    if address:
        check_resources(space, local=False)
    client = MlflowClient(uri)
    experiment_id = get_experiment(client, uri, experiment or space.study)
    parent = client.create_run(experiment_id, run_name=name, tags={
        "sweep": name, "study": space.study, "preset": preset or "base", "kind": "sweep"})
    state = {"name": name, "space_path": str(space_path), "preset": preset,
             "overrides": list(overrides), "search": search, "scheduler": scheduler,
             "tracking_uri": uri, "experiment_id": experiment_id,
             "parent_run_id": parent.info.run_id, "data_dir": str(root),
             "trials": len(cells) * space.samples,
             "space": space.model_dump(mode="json")}
    directory.mkdir(parents=True)
    (directory / STATE_FILE).write_text(json.dumps(state, indent=1))
    for key, value in [("space", Path(space_path).name), ("preset", preset or "base"),
                       ("search", search), ("scheduler", scheduler),
                       ("trials", state["trials"]), ("dataset", space.dataset),
                       ("seed", space.seed), ("overrides", " ".join(overrides))]:
        client.log_param(parent.info.run_id, key, value)
    client.log_dict(parent.info.run_id, state["space"], "space.json")
    constants = {"threads": max(1, int(space.resources.cpu)), **space.fixed,
                 "dataset": space.dataset, "data_dir": str(root), "preset": preset or "base",
                 "study": space.study}
    param_space, search_alg, num_samples = build_search(space, cells, constants, search)
    tracker = MLflowTracker(uri, experiment_id, parent.info.run_id, name, str(directory))
    scheduler_state = str(directory / SCHEDULER_STATE_FILE)
    tuner = tune.Tuner(
        tune.with_resources(run_trial, {"cpu": space.resources.cpu,
                                        "gpu": space.resources.gpu}),
        param_space=param_space,
        tune_config=tune.TuneConfig(metric=METRIC, mode=MODE, search_alg=search_alg,
                                    scheduler=build_scheduler(space, scheduler, scheduler_state),
                                    num_samples=num_samples,
                                    max_concurrent_trials=space.max_concurrent or None,
                                    reuse_actors=True),
        run_config=tune.RunConfig(
            name=name, storage_path=str(sweeps_root), callbacks=[tracker],
            failure_config=tune.FailureConfig(max_failures=2),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1), verbose=1))
    return finish(tuner, state)


def resume_sweep(name: str, address: str | None = None) -> dict:
    """Continue an interrupted sweep: finished trials are kept, unfinished ones resume from
    their last checkpoint, the same MLflow parent run is reused."""
    directory = sweep_dir(name)
    if not (directory / STATE_FILE).exists():
        known = sorted(p.name for p in SWEEPS_DIR.glob("*") if (p / STATE_FILE).exists())
        raise UserError(f"no sweep named {name!r} in {SWEEPS_DIR}: known sweeps are "
                        f"{', '.join(known) or 'none'}")
    state = json.loads((directory / STATE_FILE).read_text())
    check_store(state["tracking_uri"])
    if not tune.Tuner.can_restore(str(directory)):
        raise UserError(f"sweep {name} stopped before Ray saved its state: start it again "
                        "with `rhnsearch sweep run`")
    start_ray(address)
    space = Space.model_validate(state["space"])
    repair_checkpoint_names(directory)
    tuner = tune.Tuner.restore(
        str(directory), tune.with_resources(run_trial, {"cpu": space.resources.cpu,
                                                        "gpu": space.resources.gpu}),
        resume_unfinished=True, resume_errored=True)
    MlflowClient(state["tracking_uri"]).set_tag(state["parent_run_id"], "resumed",
                                                datetime.now().isoformat(timespec="seconds"))
    return finish(tuner, state)


def stale_checkpoints(directory: Path) -> list[tuple[Path, str]]:
    """(trial dir, checkpoint name) of each trial whose latest checkpoint in the saved Tune
    state is no longer on disk.

    With num_to_keep=1, Tune deletes the superseded checkpoint when it registers a new one
    and saves its experiment state naming the new one only afterwards: a driver killed in
    between leaves a state naming a deleted checkpoint, and Tune's resume fails that trial
    (ray-project/ray#27790).
    """
    states = sorted(directory.glob("experiment_state-*.json"))
    if not states:
        return []
    stale = []
    for trial in json.loads(states[-1].read_text())["trial_data"]:
        info, run = (json.loads(part) if isinstance(part, str) else part for part in trial)
        manager = run.get("checkpoint_manager") or {}
        text = (bytes.fromhex(manager["value"]).decode("latin-1")  # its pickle, not loaded
                if manager.get("_type") == "CLOUDPICKLE_FALLBACK" else json.dumps(manager))
        named = re.findall(r"checkpoint_\d{6}", text)
        trial_dir = directory / info["relative_logdir"]
        if named and not (trial_dir / max(named)).exists():
            stale.append((trial_dir, max(named)))
    return stale


def repair_checkpoint_names(directory: Path):
    """Give each stale trial the checkpoint Tune registered in place of the deleted one:
    the first complete one after it. Tune registers a checkpoint only after it has logged
    its result, so the trial goes on from an epoch that MLflow has (a later checkpoint may
    hold an epoch whose result the killed driver never saw)."""
    from ..train import CHECKPOINT_FILE
    for trial_dir, name in stale_checkpoints(directory):
        newer = [c for c in sorted(trial_dir.glob("checkpoint_[0-9]*"))
                 if c.name > name and zipfile.is_zipfile(c / CHECKPOINT_FILE)]
        if newer:  # (one cut short by the kill is not a zip yet)
            newer[0].rename(trial_dir / name)
            log.info("%s: resuming from %s (Tune's state named %s, which it had deleted)",
                     trial_dir.name, newer[0].name, name)


def finish(tuner, state: dict) -> dict:
    """Run the Tuner; when every trial has ended, keep the best model and close the parent
    run. The summary is read back from MLflow."""
    start = time.monotonic()
    results = tuner.fit()
    client = MlflowClient(state["tracking_uri"])
    try:
        summary = summarize(client, state)
    except MlflowException as exc:  # the tracker has kept what MLflow missed
        raise UserError(f"sweep {state['name']}: every trial ended but MLflow at "
                        f"{state['tracking_uri']} is not answering "
                        f"({str(exc).splitlines()[0][:160]}): when it is back, `rhnsearch "
                        f"sweep resume {state['name']}` sends the kept records and closes "
                        "the sweep") from None
    summary["wall_seconds"] = round(time.monotonic() - start, 1)
    summary["complete"] = summary["running"] == 0 and summary["trials"] == state["trials"]
    if summary["complete"]:
        parent = state["parent_run_id"]
        if summary["best"]:
            if state["space"].get("keep_model") == "best":
                keep_best_model(client, results, summary["best"])
            client.set_tag(parent, "best_run_id", summary["best"]["run_id"])
        now = int(time.time() * 1000)
        client.log_batch(parent, metrics=[
            Metric(k, float(v), now, 0) for k, v in summary.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)])
        from ..results.plots import log_sweep_plots
        log_sweep_plots(client, state["experiment_id"], parent)
        client.set_terminated(parent, "FINISHED")
    return summary


def summarize(client: MlflowClient, state: dict) -> dict:
    """Counts by status and the best trial, read back from the sweep's MLflow runs."""
    runs = client.search_runs([state["experiment_id"]],
                              f"tags.mlflow.parentRunId = '{state['parent_run_id']}'",
                              max_results=50000)
    counts = {s: 0 for s in ("completed", "stopped", "diverged", "failed", "running")}
    train_seconds, best = 0.0, None
    for run in runs:
        status = run.data.tags.get("status", "running")
        counts[status] = counts.get(status, 0) + 1
        history = client.get_metric_history(run.info.run_id, "epoch_seconds")
        train_seconds += sum(m.value for m in history)
        loss = run.data.metrics.get("best_valid_loss")
        if status in ("completed", "stopped") and loss is not None and loss == loss and (
                best is None or loss < best["best_valid_loss"]):
            best = {"run_id": run.info.run_id, "trial_id": run.data.tags.get("trial_id"),
                    "best_valid_loss": loss, "params": run.data.params}
    return {"name": state["name"], "trials": len(runs), **counts,
            "train_seconds": round(train_seconds, 1), "best": best}


def keep_best_model(client: MlflowClient, results, best: dict):
    """Log the best trial's config and best-valid weights as its run's `model` artifact."""
    import torch

    from ..analysis.checkpoint import log_model
    from ..train import CHECKPOINT_FILE
    for result in results:
        if result.metrics.get("trial_id") != best["trial_id"] or result.checkpoint is None:
            continue
        with result.checkpoint.as_directory() as ckpt:
            state = torch.load(Path(ckpt) / CHECKPOINT_FILE, weights_only=True)
        log_model(client, best["run_id"], state["config"], state["best_state"] or state["model"])
        return


def format_summary(summary: dict) -> str:
    best = summary["best"]
    best_text = "no trial finished"
    if best:
        p = best["params"]
        best_text = (f"best valid_loss {best['best_valid_loss']:.4f} ({p.get('arch')} depth "
                     f"{p.get('depth')} width {p.get('width')}, run {best['run_id'][:8]})")
    overhead = summary["wall_seconds"] / summary["train_seconds"] if summary[
        "train_seconds"] else float("nan")
    ending = "" if summary["complete"] else (
        f"; not finished: `rhnsearch sweep resume {summary['name']}` continues it")
    return (f"sweep {summary['name']}: {summary['trials']} trials: {summary['completed']} "
            f"completed, {summary['stopped']} stopped early, {summary['diverged']} diverged, "
            f"{summary['failed']} failed, {summary['running']} unfinished; {best_text}; "
            f"wall {summary['wall_seconds']:.0f}s for {summary['train_seconds']:.0f}s of "
            f"training ({overhead:.2f}x){ending}")


def print_summary(summary: dict):
    print(format_summary(summary), file=sys.stderr)
