"""Scale: the real driver (`sweep run`: its searcher, per-cell ASHA, MLflow tracker, storage and
checkpoints) over a simulated trainable, at sizes a laptop could never train, to see what the
driver and the results commands cost as the number of trials grows.

The JSB study's `cpu` preset (12 cells: 3 archs x 4 depths, ASHA within each cell, rungs at
epochs 2, 6 and 18) with --trials / 12 settings a cell (rounded down) and --epochs epochs at
most, run by `lifecycle.run_sweep` in a fresh process on a local Ray of --slots logical CPUs
(one a trial, no GPU), its trials the simulated trainable below instead of `run_trial`: the
benchmark puts it in the sweep's trainable (`tuner.trainable`), and marks the phases where
run_sweep builds the Tuner (resume_sweep restores it) and closes the sweep. A simulated trial
follows the real reporting protocol (`sweep/trainable.py`, `train.epoch_reports`): each epoch
it sleeps --epoch-ms, reports the metrics a real JSB trial reports (placement and held seconds
included) with a checkpoint as the real one writes it (`trainer.pt`, here a tiny zip with its
epoch, and `held.json`), and ends on the final result (status completed or diverged, best
epoch, test loss, best training loss) or is stopped by ASHA. Its losses are replayed from a
learning curve of a history export (`results export --history`; by default the committed
`jsb_paper` example's), picked by the trial's cell (arch and depth) and seed: a curve that
diverges within --epochs ends the trial diverged there, a shorter one (stopped by the sweep
that made it) holds its last values to the end. --synthetic-curves replays made-up curves
instead (clearly not the study's: for trying the benchmark without a history file). The
simulated checkpoints hold no weights, so the sweep keeps no model (`keep_model=none`).

Per size, with a fresh MLflow store (a sqlite file, or `mlflow server` on a fresh PostgreSQL
database) and a fresh storage (a directory, or a bucket of moto's S3 server): the driver's
CPU seconds (user + system, all its threads, `run_sweep` from start to return) per
trial-epoch, its peak RSS, wall seconds per trial, the wall and CPU seconds of its phases (setup
until the Tuner is built; trials, with the MLflow drain; the sweep's close: summary, histories,
plots, report), the storage's bytes and objects when the sweep is done, MLflow
records lost (trial-epochs Tune took from the trials that MLflow lacks, and trials whose run
never ended: must be 0), and the wall and CPU seconds of `sweep status`, `results report`,
`results export --history` and `results table` run on the finished sweep, and the seconds
headless Chromium (where there is one) takes to open its report. One table row per
size as it finishes, then one JSON line.

    python benchmarks/scale.py [--trials 500 2000 10000] [--search random|optuna]
        [--scheduler cell_asha|asha] [--store sqlite|postgres] [--storage dir|bucket]
        [--slots 64] [--epochs 40] [--epoch-ms 5] [--histories FILE.parquet |
        --synthetic-curves] [--fill] [--no-turns] [--no-nice-start] [--keep DIR]
        [--trace-memory] [--memray DIR]
        [--plain-tune [--plain-with storage|limit|searcher ...]]
        [--kill-at K [--kill-on ended|started] | --resume-kept WORK]
    python benchmarks/scale.py --restore 2000 20000

--fill has each worker's first trial wait until there is a worker a slot (or 300 s): Tune
gives the actor of a trial that ends to the next trial and drops the one it was starting for it
(`reuse_actors`), so sub-second simulated trials run on the actors that were up before the
first trial ended, which on a slow machine is a fraction of the slots; a lab's trials last
minutes, and every slot's actor is up before one ends. A resumed driver's workers fill again.
As a sweep's, the simulated slots' workers import the trainable (torch, Tune) as they start, as
many at once as the machine has cores, and start at niceness 15 (`cluster/worker_start.py`);
--no-nice-start starts them at 0 until they connect, as before stop 74, and --no-turns also has
them all import at once, as before stop 73.

--plain-tune runs the same trials in plain Tune instead, for the driver's cost that is Tune's
own: the same simulated trials and cells, Tune's random search and its ASHA at the same rungs,
no MLflow and no callback (--storage dir). --plain-with adds pieces of the sweep's driver to
it (`plain_tune`), to tell which of them grows.
--kill-at K SIGKILLs the driver once K trials have ended and resumes the sweep (`sweep resume`'s
code, the trials simulated as before) in a fresh process: the row is the resume's, with the
seconds from its start to its first trial's, and the driver CPU, records lost and settings run
twice over both drivers (the killed one's CPU read just before the kill). --kill-on started
counts the trials Tune has started (STARTS) instead of the MLflow runs ended: a server that lags
Tune's trials (PostgreSQL's, on two cores) has ended half the runs only after every trial ran,
so a kill counted in its runs leaves the resume no trial to start. --resume-kept WORK
does that second half alone, on a sweep that --keep kept in WORK and whose driver was killed
(with the options of the run that made it), in place.
--restore N [N ...] runs no sweep: it times Tune's restore of a saved experiment state of N
ended trials and one live one (copies of a real trial Tune saved), from the state's parse to
the live trial's start, as Tune's state holds them all and as a resume leaves it (the ended
trials moved to the round's index first: `sweep.ended_index`), side by side for each N.
--keep keeps each size's store and storage for a look afterwards;
--trace-memory traces the driver's Python allocations (slower: not for timing) and prints, per
phase, its RSS and Python heap at the phase's start and end and the source lines whose live
allocations grew the most.
--memray runs each driver under memray (`pip install memray`), native stacks included, for
what holds the memory that tracemalloc does not see (`memray flamegraph DIR/TRIALS.bin`).

`--store postgres` needs Debian's PostgreSQL and root (tests/lab_services.py), `--storage
bucket` moto's server (the `test` extra). Run it on an otherwise idle machine: the trials
share its cores with the driver.
"""

import argparse
import ctypes
import json
import logging
import math
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
import zipfile
import zlib
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import sqlalchemy

from rhnsearch.files.layout import CHECKPOINT_FILE, HELD_FILE

ROOT = Path(__file__).resolve().parents[1]
SPACE = ROOT / "spaces" / "jsb_optimization.yaml"
PRESET, CELLS = "cpu", 12  # the preset's cells: 3 archs x 4 depths
HISTORIES = ROOT / "results" / "examples" / "jsb_paper" / "histories.parquet"
EXPERIMENT, NAME = "scale", "scale"
REPLAYED = ("train_loss", "valid_loss", "grad_norm", "steps_per_sec")  # a curve's, each epoch
ENDING = ("test_loss", "best_train_loss")  # a curve's, on its last row
RAY_TEMP = Path("/tmp/scale-ray")
STARTS = "starts.txt"  # beside the driver's answer: the wall-clock time of each trial's start
BUCKET = "sweeps"
AWS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
}


# -- the curves ------------------------------------------------------------------------------


def read_curves(path: Path, epochs: int) -> dict[str, list[dict]]:
    """The learning curves of a history export's search trials (not a confirmation round's),
    per cell 'ARCH dDEPTH', in trial order: each trial's first EPOCHS epochs of REPLAYED
    metrics, its ENDING metrics and whether it diverged within them."""
    frame = pd.read_parquet(path)
    if "round" in frame:
        frame = frame[frame["round"] != "confirm"]
    frame = frame.sort_values(["trial_id", "epoch"])
    curves = {}
    for _, rows in frame.groupby("trial_id", sort=True):
        first, last = rows.iloc[0], rows.iloc[-1]
        kept = rows[rows["epoch"] <= epochs]
        curves.setdefault(f"{first['params.arch']} d{first['params.depth']}", []).append(
            {
                "epochs": [
                    {m: float(row.get(f"metrics.{m}", math.nan)) for m in REPLAYED}
                    for _, row in kept.iterrows()
                ],
                "ending": {m: float(last.get(f"metrics.{m}", math.nan)) for m in ENDING},
                "diverged": last["status"] == "diverged" and len(kept) == len(rows),
            }
        )
    return curves


def synthetic_histories(epochs: int) -> pd.DataFrame:
    """Made-up learning curves in the history export's columns, 8 trials a cell: a loss
    decaying to a floor, one trial in four diverging. Not the study's: for a dry run."""
    rng, rows = np.random.default_rng(0), []
    for arch in ("rhn", "dtrnn", "dtsrnn"):
        for depth in (1, 2, 4, 6):
            for k in range(8):
                floor, tau = rng.uniform(8.0, 9.5), rng.uniform(2.0, 10.0)
                last = int(rng.integers(3, epochs)) if k % 4 == 3 else epochs
                for epoch in range(1, last + 1):
                    loss = floor + 4.0 * math.exp(-epoch / tau)
                    diverged = epoch == last < epochs
                    rows.append(
                        {
                            "trial_id": f"{arch}_{depth}_{k}",
                            "status": "diverged" if last < epochs else "completed",
                            "params.arch": arch,
                            "params.depth": depth,
                            "epoch": epoch,
                            "metrics.train_loss": loss - 0.3,
                            "metrics.valid_loss": math.nan if diverged else loss,
                            "metrics.grad_norm": rng.uniform(0.5, 5.0),
                            "metrics.steps_per_sec": 100.0,
                            "metrics.test_loss": loss + 0.1 if epoch == last else math.nan,
                            "metrics.best_train_loss": loss - 0.5 if epoch == last else math.nan,
                        }
                    )
    return pd.DataFrame(rows)


def pick_curve(curves: dict, label: str, cell, seed: int) -> dict:
    """The curve a trial of the cell LABEL and SEED replays: one of its arch and depth's (of
    all of them where the history has none of that cell), the same for the same cell and
    seed."""
    same = curves.get(f"{cell.arch} d{cell.depth}")
    group = same or [c for key in sorted(curves) for c in curves[key]]
    return group[zlib.crc32(f"{label} {seed}".encode()) % len(group)]


# -- the simulated trainable -----------------------------------------------------------------


def simulated(curves, epoch_ms: float, starts: Path, fill: tuple[Path, int] | None = None):
    """The trial function the sweep's Tuner runs in place of `run_trial` (CONFIG, CELLS as it
    takes them): its cell and seed's curve replayed, reported as a real trial reports. Each
    start (a restored trial's too) appends its wall-clock time to STARTS. CURVES is their
    object in Ray's store (`ray.put`), fetched once per worker: Tune unpickles the trainable
    each time it looks it up, and the curves pickled with it would cost the driver some
    330 kB of unpickling a lookup, where `run_trial` pickles to 54 bytes. FILL, a folder and
    a count: each worker's first trial leaves its mark in the folder and waits (300 s at
    most) until COUNT workers have (`--fill`)."""
    fetched = {}  # the curves, in each worker that has fetched them

    def trial(config: dict, cells: dict):
        import ray
        from ray import tune

        with open(starts, "a") as f:
            f.write(f"{time.time()}\n")
        if not fetched and fill:
            wait_for_workers(*fill)
        started = time.monotonic()
        cell = cells[config["cell"]]
        if not fetched:
            fetched.update(ray.get(curves))
        curve = pick_curve(fetched, config["cell"], cell, config["seed"])
        last = len(curve["epochs"]) if curve["diverged"] else config["epochs"]
        resources = ray.get_runtime_context().get_assigned_resources()
        placement = {
            "device": "cpu",
            "gpu_ids": "none",
            "node_id": ray.get_runtime_context().get_node_id(),
            "torch_version": "simulated",
            "cpu": "simulated",
        }
        state, before = restored(tune.get_checkpoint())
        # (a trial restored from its last epoch reports it again, as train.epoch_reports does)
        for epoch in range(min(state["epoch"] + 1, last), last + 1):
            tick = time.monotonic()
            time.sleep(epoch_ms / 1000)
            metrics = {**curve["epochs"][min(epoch, len(curve["epochs"])) - 1]}
            if metrics["valid_loss"] < state["best_valid_loss"]:
                state.update(best_valid_loss=metrics["valid_loss"], best_epoch=epoch)
            state["epoch"] = epoch
            ended = "diverged" if curve["diverged"] and epoch == last else "completed"
            metrics.update(
                epoch=epoch,
                best_valid_loss=state["best_valid_loss"],
                lr=config["lr"],
                epoch_seconds=time.monotonic() - tick,
                status=ended if epoch == last else "running",
            )
            if epoch == last:
                metrics.update(curve["ending"], best_epoch=state["best_epoch"])
            seconds = before + time.monotonic() - started
            spent = {
                "held_seconds": seconds,
                "cpu_seconds": seconds * resources.get("CPU", 0.0),
                "gpu_seconds": seconds * resources.get("GPU", 0.0),
            }
            with tempfile.TemporaryDirectory() as directory:
                save(Path(directory), state, seconds)
                tune.report(
                    {**metrics, **placement, **spent, "n_params": cell.params},
                    checkpoint=tune.Checkpoint.from_directory(directory),
                )

    return trial


def wait_for_workers(folder: Path, count: int, patience: float = 300.0):
    """Mark this worker in FOLDER and wait until COUNT workers have, or PATIENCE seconds."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(os.getpid())).touch()
    deadline = time.monotonic() + patience
    while len(os.listdir(folder)) < count and time.monotonic() < deadline:
        time.sleep(0.2)


def save(directory: Path, state: dict, held_seconds: float):
    """A simulated checkpoint, named as the real trainable names its files: CHECKPOINT_FILE a
    zip (as torch.save writes) of the trial's STATE, HELD_FILE its held seconds."""
    with zipfile.ZipFile(directory / CHECKPOINT_FILE, "w") as archive:
        archive.writestr("state.json", json.dumps(state))
    (directory / HELD_FILE).write_text(json.dumps({"held_seconds": held_seconds}))


def restored(checkpoint) -> tuple[dict, float]:
    """The state and held seconds of a trial's Tune CHECKPOINT (a fresh trial's without)."""
    if checkpoint is None:
        return {"epoch": 0, "best_valid_loss": math.inf, "best_epoch": 0}, 0.0
    with checkpoint.as_directory() as directory:
        with zipfile.ZipFile(Path(directory) / CHECKPOINT_FILE) as archive:
            state = json.loads(archive.read("state.json"))
        held = json.loads((Path(directory) / HELD_FILE).read_text())["held_seconds"]
    return state, held


# -- the driver, in a process of its own -----------------------------------------------------


def drive(args) -> dict:
    """Run the sweep with `run_sweep` (the code of `rhnsearch sweep run`) on a Ray of --slots
    logical CPUs, its trials simulated: the driver's wall and CPU seconds in each phase (setup
    until the Tuner is built, trials until the sweep closes, close), its peak RSS, the sweep's
    summary and the last epoch Tune took of each trial."""
    import ray
    from ray import tune

    from rhnsearch.cluster import worker_start
    from rhnsearch.cluster.malloc import limit_malloc_arenas
    from rhnsearch.sweep import lifecycle
    from rhnsearch.sweep import tuner as sweep_tuner

    trials = args.trials[0]
    limit_malloc_arenas()  # as start_ray does, before Ray's threads
    ray.init(
        address="local",
        num_cpus=args.slots,
        num_gpus=0,
        include_dashboard=False,
        logging_level=logging.WARNING,
        _temp_dir=args.ray_dir,
        # as start_ray has a sweep's workers import the trainable, in turns
        runtime_env=None
        if args.no_turns
        else worker_start.runtime_env(lifecycle.WORKER_IMPORTS, local=not args.no_nice_start),
    )
    curves = ray.put(read_curves(args.histories, args.epochs))
    work = Path(args.result).parent
    # a folder a driver: a resumed driver's workers fill its slots again
    fill = (work / f"workers-{os.getpid()}", min(args.slots, trials)) if args.fill else None
    function, taken = simulated(curves, args.epoch_ms, work / STARTS, fill), {}
    marks = {}  # phase -> (wall, CPU seconds, peak RSS MB) when it began
    memory = {}  # phase -> (RSS MB, after malloc_trim, Python's heap MB, its snapshot) at its start
    if args.trace_memory:
        tracemalloc.start()

    def mark(phase: str):
        marks[phase] = time.monotonic(), cpu_seconds(), peak_mb()
        if args.trace_memory:
            rss = psutil.Process().memory_info().rss / 2**20
            ctypes.CDLL("libc.so.6").malloc_trim(0)  # what the C heap holds free goes back
            memory[phase] = (
                rss,
                psutil.Process().memory_info().rss / 2**20,
                tracemalloc.get_traced_memory()[0] / 2**20,
                tracemalloc.take_snapshot(),
            )

    real_build_tuner, real_close_sweep = lifecycle.build_tuner, lifecycle.close_sweep
    real_trainable, real_fit = sweep_tuner.trainable, tune.Tuner.fit

    def fit(tuner):  # counts the last epoch of each trial as `fit` returns; holds nothing of
        results = real_fit(tuner)  # the Tuner, which the sweep lets go before its close
        taken.update(
            {r.metrics["trial_id"]: r.metrics.get("epoch", 0) for r in results if r.metrics}
        )
        return results

    def build_tuner(space, record):
        mark("trials")
        return real_build_tuner(space, record)

    def trainable(space, cells, _=None):  # the trials simulated, a restored Tuner's too
        if "trials" not in marks:  # (resume_sweep restores the Tuner: no build_tuner)
            mark("trials")
        return real_trainable(space, cells, function)

    def close_sweep(*args, **options):
        mark("close")
        return real_close_sweep(*args, **options)

    lifecycle.build_tuner, lifecycle.close_sweep = build_tuner, close_sweep
    sweep_tuner.trainable, tune.Tuner.fit = trainable, fit
    mark("setup")
    try:
        if args.plain_tune:
            summary, taken = plain_tune(args, function, mark)
            mark("end")
            return phased(marks, memory, summary, taken)
        if args.resume:
            summary = lifecycle.resume_sweep(NAME, storage_path=args.root)
            mark("end")
            return phased(marks, memory, summary, taken)
        summary = lifecycle.run_sweep(
            SPACE,
            preset=PRESET,
            overrides=[
                f"samples={trials // CELLS}",
                f"fixed.epochs={args.epochs}",
                "resources.cpu=1",
                "resources.gpu=0",
                "keep_model=none",
            ],
            search=args.search,
            scheduler=args.scheduler,
            tracking_uri=args.uri,
            experiment=EXPERIMENT,
            name=NAME,
            storage_path=args.root,
        )
        mark("end")
    finally:
        ray.shutdown()
    return phased(marks, memory, summary, taken)


def plain_tune(args, function, mark) -> tuple[dict, dict]:
    """The trials of --trials in plain Tune, with none of rhnsearch's driver: the same
    simulated trial function and cells, drawn by Tune's own random search (the cells a grid,
    num_samples settings each), stopped by Tune's ASHA across all trials at the same rungs
    (epochs 2, 6, 18, reduction 3), on the same storage, with no callback (Tune's settings
    as `start_ray` makes them for a sweep). --plain-with adds the sweep's own pieces, one at
    a time, to find which of them grows: `storage` (the storage filesystem the sweep gives
    Tune), `limit` (its max_concurrent_trials, one a slot, and max_failures), `searcher`
    (its random CellSearcher and the configs it gives Tune, with `limit`, as the sweep runs
    it). The summary (trials, statuses) and the last epoch of each trial."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from rhnsearch.cluster.connect import start_ray
    from rhnsearch.data import load_dataset
    from rhnsearch.files import storage
    from rhnsearch.search.searchers import CellSearcher, round_slots
    from rhnsearch.search.space import load_space
    from rhnsearch.search.trial import tune_constants

    overrides = [f"samples={args.trials[0] // CELLS}", f"fixed.epochs={args.epochs}"]
    space = load_space(SPACE, preset=PRESET, overrides=overrides)
    cells = space.cells_for(load_dataset(space.dataset))
    start_ray(None)  # Ray is up: only the Tune settings a sweep's driver has
    pieces = set(args.plain_with)
    if "searcher" in pieces:
        constants = tune_constants(space, None, PRESET)
        slots = round_slots(space.samples, 1)
        searched = {"search_alg": CellSearcher(space, cells, constants, slots)}
        searched["num_samples"] = len(slots) * len(cells)
    else:
        searched = {"num_samples": space.samples}
    if "storage" in pieces:
        filesystem, path = storage.split(args.root)
        stored = {"storage_path": path, "storage_filesystem": filesystem}
    else:
        stored = {"storage_path": args.root}
    limited = {"max_concurrent_trials": args.slots} if pieces & {"limit", "searcher"} else {}
    failures = tune.FailureConfig(max_failures=2 if limited else 0)
    mark("trials")
    tuner = tune.Tuner(
        tune.with_resources(tune.with_parameters(function, cells=cells), {"cpu": 1}),
        param_space={}
        if "searcher" in pieces
        else {
            "cell": tune.grid_search(list(cells)),
            "seed": tune.randint(0, 2**31 - 1),
            "epochs": args.epochs,
            "lr": tune.loguniform(1e-4, 1e-1),
        },
        tune_config=tune.TuneConfig(
            metric="best_valid_loss",
            mode="min",
            scheduler=ASHAScheduler(
                time_attr="epoch", max_t=args.epochs, grace_period=2, reduction_factor=3
            ),
            reuse_actors=True,
            **searched,
            **limited,
        ),
        run_config=tune.RunConfig(name=NAME, verbose=1, failure_config=failures, **stored),
    )
    results = tuner.fit()
    taken = {r.metrics["trial_id"]: r.metrics.get("epoch", 0) for r in results if r.metrics}
    statuses = [r.metrics.get("status") for r in results if r.metrics]
    summary = {"trials": len(results)} | {
        s: statuses.count(s) for s in ("completed", "diverged", "running")
    }
    summary["stopped"], summary["failed"] = summary.pop("running"), len(results) - len(statuses)
    return summary, taken


def phased(marks: dict, memory: dict, summary: dict, taken: dict) -> dict:
    """`drive`'s answer: each phase's wall and CPU seconds and the peak RSS by its end."""
    phases = list(marks)
    return {
        "phases": {
            phase: {
                "wall": marks[end][0] - marks[phase][0],
                "cpu": marks[end][1] - marks[phase][1],
                "peak_mb": marks[end][2],  # the driver's peak RSS by the phase's end
            }
            for phase, end in zip(phases, phases[1:])
        },
        "peak_mb": marks["end"][2],
        "memory": grown(memory),
        "summary": summary,
        "taken": taken,
    }


def grown(memory: dict, sites: int = 15) -> dict:
    """Per phase (--trace-memory): the driver's RSS, its RSS once the C heap gave back what it
    held free (malloc_trim), and Python's heap (MB) at its start and end, and the source lines
    whose live allocations grew the most in it (MB, blocks)."""
    phases = list(memory)
    return {
        phase: {
            "rss_mb": [memory[phase][0], memory[end][0]],
            "trimmed_rss_mb": [memory[phase][1], memory[end][1]],
            "heap_mb": [memory[phase][2], memory[end][2]],
            "grew": [
                [str(d.traceback), d.size_diff / 2**20, d.count_diff]
                for d in memory[end][3].compare_to(memory[phase][3], "lineno")[:sites]
            ],
        }
        for phase, end in zip(phases, phases[1:])
    }


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_driver(args, trials: int, work: Path, store: tuple, root: str, env: dict) -> dict:
    """`drive` in a fresh process on the MLflow STORE (`tracking_store`'s (URI, database));
    with --kill-at K, SIGKILLed once K trials have ended (their MLflow runs ended) or, with
    --kill-on started, started, then `drive --resume` in another: the resume's answer, with
    "killed": the trials ended and started, the wall seconds and the killed driver's CPU
    seconds at the kill, and the seconds from the resume's start to the first trial it
    starts. With --resume-kept, the resume alone."""
    uri, database = store
    if args.resume_kept:  # its driver killed before this run
        killed = {"trials_ended": ended_trials(database)}
        return resumed(args, trials, work, uri, root, env, killed)
    if not args.kill_at:
        return driven(args, trials, work, uri, root, env)
    start = time.monotonic()
    counters = {  # each count, and the seconds between looks: a store's query, a file's read
        "ended": (lambda: ended_trials(database), 1.0),
        "started": (lambda: started_trials(work), 0.1),  # (sub-second trials start fast)
    }
    count, every = counters[args.kill_on]
    cpu = driven(
        args, trials, work, uri, root, env, until=lambda: count() >= args.kill_at, every=every
    )
    killed = {
        "trials_ended": ended_trials(database),
        "trials_started": started_trials(work),
        "counted": args.kill_on,
        "after_s": time.monotonic() - start,
        **cpu,
    }
    return resumed(args, trials, work, uri, root, env, killed)


def started_trials(work: Path) -> int:
    """The trial starts in WORK's STARTS so far (a restored trial's start counts again)."""
    with suppress(FileNotFoundError), open(work / STARTS, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    return 0


def resumed(args, trials, work, uri, root, env, killed: dict) -> dict:
    """`drive --resume` of the sweep in WORK, whose driver was killed: its answer, with
    "killed": KILLED and the seconds from the resume's start to the first trial it starts,
    and with the trials that had ended before the kill among those Tune took."""
    from rhnsearch.files import storage

    ended = ended_epochs(storage.join(root, NAME))
    start = time.time()
    answer = driven(args, trials, work, uri, root, env, "--resume")
    later = [t for t in map(float, (work / STARTS).read_text().split()) if t > start]
    if not later:  # (seen once: a resume whose trials had all ended, or that failed early)
        print(f"the resume started no trial: see {work / 'driver.log'}", file=sys.stderr)
    answer["killed"] = {**killed, "first_trial_s": min(later) - start if later else None}
    answer["taken"] = {**ended, **answer["taken"]}
    return answer


def ended_epochs(round_dir: str) -> dict[str, int]:
    """Trial id -> last epoch of each ended trial in Tune's saved experiment state of the
    round in ROUND_DIR: what the killed driver's Tune took of the trials its resume runs no
    more (the resume moves them out of Tune's state: sweep/ended_index.py)."""
    from rhnsearch.compat import ray as ray_compat
    from rhnsearch.sweep.checkpoints import saved_state

    state = saved_state(round_dir)
    ended = {entry["trial_id"] for entry in ray_compat.ended_trials(state)}
    saved = [[json.loads(p) if isinstance(p, str) else p for p in t] for t in state["trial_data"]]
    return {
        info["trial_id"]: run["last_result"].get("epoch", 0)
        for info, run in saved
        if info["trial_id"] in ended
    }


def driven(args, trials, work, uri, root, env, *options, until=None, every=1.0) -> dict:
    """`drive` in a fresh process (its output appended to WORK/driver.log), SIGKILLed once
    UNTIL() holds (asked every EVERY seconds); its Ray's temp dir removed afterwards and any
    process of that Ray still alive killed, by its pid."""
    ray_dir, result = RAY_TEMP / f"{os.getpid()}-{trials}{'-'.join(options)}", work / "driver.json"
    command = [sys.executable, __file__, "--driver", "--uri", uri, "--root", root, *options]
    if args.memray:
        args.memray.mkdir(parents=True, exist_ok=True)
        capture = args.memray / f"{trials}{'-'.join(options)}.bin"
        command[1:1] = ["-m", "memray", "run", "--native", "--force", "-o", str(capture)]
    command += ["--ray-dir", str(ray_dir), "--result", str(result), "--trials", str(trials)]
    command += ["--search", args.search, "--scheduler", args.scheduler]
    command += ["--slots", str(args.slots), "--epochs", str(args.epochs)]
    command += ["--epoch-ms", str(args.epoch_ms), "--histories", str(args.histories)]
    command += ["--fill"] * args.fill + ["--no-turns"] * args.no_turns
    command += ["--no-nice-start"] * args.no_nice_start
    command += ["--trace-memory"] * args.trace_memory + ["--plain-tune"] * args.plain_tune
    command += ["--plain-with", *args.plain_with] * bool(args.plain_with)
    try:
        with open(work / "driver.log", "a") as log:
            proc = subprocess.Popen(command, cwd=work, env=env, stdout=log, stderr=log)
            while until and proc.poll() is None and not until():
                time.sleep(every)
            if until and proc.poll() is None:
                times = psutil.Process(proc.pid).cpu_times()  # its own, not its Ray's
                peak = high_water_mb(proc.pid)
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return {"cpu_s": times.user + times.system, "peak_rss_mb": peak}
            code = proc.wait()
    finally:
        kill_ray(ray_dir)
    if code or until:
        sys.exit(
            f"driver of {trials} trials exited {code} "
            f"{'before it was killed ' * bool(until)}"
            f"(WORK/driver.log):\n{(work / 'driver.log').read_text()[-3000:]}"
        )
    return json.loads(result.read_text())


def high_water_mb(pid: int) -> float:
    """The peak RSS of the process PID so far (the kernel's VmHWM), in MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status)[1]) / 1024


def ended_trials(database: str) -> int:
    """The trials whose MLflow run has ended, read from the store's tables in DATABASE (a
    SQLAlchemy URL: the sqlite file, or the PostgreSQL database behind the server)."""
    query = (
        "SELECT COUNT(*) FROM runs JOIN tags USING (run_uuid) WHERE tags.key = 'kind'"
        " AND tags.value = 'trial' AND runs.end_time IS NOT NULL"
    )
    try:
        engine = sqlalchemy.create_engine(database, poolclass=sqlalchemy.pool.NullPool)
        with engine.connect() as db:
            return db.execute(sqlalchemy.text(query)).scalar_one()
    except sqlalchemy.exc.SQLAlchemyError:  # not made yet
        return 0


def kept_in_place(work: Path) -> bool:
    """Whether the sweep in WORK records WORK's store: a resumed sweep sends its records to
    the store its record names, so a copy's resume would send them into the original's."""
    record = json.loads((work / "sweeps" / NAME / "rhnsearch_sweep.json").read_text())
    return record["tracking_uri"] == f"sqlite:///{work.resolve() / 'mlflow.db'}"


def kill_ray(ray_dir: Path):
    """Kill the processes of the Ray whose temp dir is RAY_DIR that are still alive (those
    naming it, and their children: its workers name only their task), by pid; remove it."""
    named = [
        proc
        for proc in psutil.process_iter(["cmdline"])
        if any(str(ray_dir) in part for part in proc.info["cmdline"] or ())
    ]
    for proc in named:
        with suppress(psutil.NoSuchProcess):
            for child in [*proc.children(recursive=True), proc]:
                with suppress(psutil.NoSuchProcess):
                    child.kill()
    shutil.rmtree(ray_dir, ignore_errors=True)


# -- the services ----------------------------------------------------------------------------


@contextmanager
def tracking_store(kind: str, work: Path, workers: int):
    """The MLflow store's (URI, the SQLAlchemy URL of its database): a sqlite file in WORK,
    or `mlflow server` of WORKERS processes on a fresh PostgreSQL database
    (tests/lab_services.py), stopped and dropped afterwards."""
    if kind == "sqlite":
        uri = f"sqlite:///{work / 'mlflow.db'}"
        yield uri, uri
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from lab_services import mlflow_server, postgres_database

    with postgres_database() as database, mlflow_server(database, work, workers=workers) as url:
        yield url, database


@contextmanager
def sweep_storage(kind: str, work: Path):
    """(storage root, the environment that reaches it, a function giving the bytes and
    objects under the sweep's folder): a directory in WORK, or a bucket of moto's S3 server on
    a free loopback port, killed afterwards."""
    if kind == "dir":
        root = work / "sweeps"
        yield str(root), {}, lambda: folder_usage(root / NAME)
        return
    port = free_port()
    with open(work / "s3.log", "w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        import boto3

        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", **aws_keywords())
        for _ in range(100):
            try:
                s3.create_bucket(Bucket=BUCKET)
                break
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.2)
        root = f"s3://{BUCKET}/scale?endpoint_override=127.0.0.1:{port}&scheme=http"
        yield root, AWS, lambda: bucket_usage(s3, f"scale/{NAME}/")
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def aws_keywords() -> dict:
    return {
        "region_name": AWS["AWS_DEFAULT_REGION"],
        "aws_access_key_id": AWS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": AWS["AWS_SECRET_ACCESS_KEY"],
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def folder_usage(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def bucket_usage(s3, prefix: str) -> tuple[int, int]:
    size = count = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for item in page.get("Contents", []):
            size, count = size + item["Size"], count + 1
    return size, count


# -- one size --------------------------------------------------------------------------------


def timed(command: list[str], work: Path, env: dict) -> dict:
    """Wall and CPU seconds of `rhnsearch COMMAND` in WORK (which must exit 0)."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "rhnsearch.cli", *command],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    wall, after = time.monotonic() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        sys.exit(f"rhnsearch {' '.join(command)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"wall": wall, "cpu": cpu}


def results_commands(work: Path, uri: str, root: str, env: dict) -> dict:
    """The seconds of the four commands on the finished sweep (the history export written to
    WORK/history.parquet), and of the report's opening in headless Chromium where there is
    one."""
    store = ["--experiment", EXPERIMENT, "--sweep", NAME, "--tracking-uri", uri]
    seconds = {
        "status": timed(["sweep", "status", NAME, "--storage-path", root], work, env),
        "report": timed(["results", "report", *store, "--out", "report.html"], work, env),
        "export": timed(
            ["results", "export", *store, "--history", "--out", "history.parquet"], work, env
        ),
        "table": timed(["results", "table", *store], work, env),
    }
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser and (seconds_open := opened(browser, work / "report.html")) is not None:
        seconds["open"] = {"wall": seconds_open}
    return seconds


def opened(browser: str, page: Path, tries: int = 3) -> float | None:
    """The wall seconds headless Chromium takes to load PAGE and lay it out (its DOM dumped
    after the load event), less those of an empty page (the browser's own start); None, with
    a line on stderr, where the browser died at each of TRIES starts (a busy machine's
    Chromium aborts now and then: seen once in CI). Started as the browser tests start it."""
    sys.path.insert(0, str(ROOT / "tests"))
    from tiers import HEADLESS_CHROMIUM

    def load(url: str) -> float | None:
        for _ in range(tries):
            with tempfile.TemporaryDirectory() as profile:
                start = time.monotonic()
                proc = subprocess.run(
                    [browser, *HEADLESS_CHROMIUM, f"--user-data-dir={profile}",
                     "--window-size=1280,1000", "--dump-dom", url],
                    capture_output=True, timeout=300,
                )  # fmt: skip
                if proc.returncode == 0:
                    return time.monotonic() - start
        print(
            f"headless Chromium died at {tries} starts on {url} (exit {proc.returncode}): "
            "no open time",
            file=sys.stderr,
        )
        return None

    blank = [load("about:blank") for _ in range(2)]
    if None in blank:
        return None
    full = [load(page.as_uri()) for _ in range(2)]
    if None in full:
        return None
    return max(0.0, min(full) - min(blank))


def records_lost(history: Path, taken: dict) -> int:
    """Trial-epochs Tune took (TAKEN: trial id -> its last epoch) that MLflow lacks (the rows
    of the history export), and the trials whose run never ended (status running)."""
    frame = pd.read_parquet(history, columns=["trial_id", "epoch", "status"])
    stored = frame.groupby("trial_id")["epoch"].nunique()
    missing = sum(max(0, int(epoch) - int(stored.get(t, 0))) for t, epoch in taken.items())
    return missing + int(frame.loc[frame["status"] == "running", "trial_id"].nunique())


def settings_run_twice(history: Path) -> list[list[str]]:
    """The trials of the history export (runs of its sweep) that ran a setting another trial
    ran too, a list of trial ids a setting: a setting is its params, the seed's included."""
    frame = pd.read_parquet(history)
    params = sorted(c for c in frame.columns if c.startswith("params."))
    trials = frame.drop_duplicates("trial_id")
    twice = trials[trials.duplicated(params, keep=False)]
    return [sorted(group["trial_id"]) for _, group in twice.groupby(params, dropna=False)]


def measure(args, trials: int) -> dict:
    """One size: the sweep's driver, its storage, the commands and the records lost."""
    with ExitStack() as services:
        if args.resume_kept:
            work = args.resume_kept
        elif args.keep:  # a folder per size, kept for a look afterwards
            kind = "plain" if args.plain_tune else f"{args.search}-{args.store}-{args.storage}"
            work = args.keep / f"{kind}-{trials}"
            work.mkdir(parents=True)
        else:
            work = Path(services.enter_context(tempfile.TemporaryDirectory(prefix="scale-")))
        store = services.enter_context(tracking_store(args.store, work, args.server_workers))
        uri = store[0]
        root, reach, usage = services.enter_context(sweep_storage(args.storage, work))
        os.environ.update(reach)  # (a bucket's keys: this process reads Tune's state there too)
        env = dict(os.environ)
        driver = run_driver(args, trials, work, store, root, env)
        size, objects = usage()
        if args.plain_tune:  # no MLflow: no records, no results commands
            commands, lost = {}, 0
        else:
            commands = results_commands(work, uri, root, env)
            lost = records_lost(work / "history.parquet", driver["taken"])
            twice = settings_run_twice(work / "history.parquet")
    summary, phases = driver["summary"], driver["phases"]
    epochs = sum(driver["taken"].values())
    return {
        "trials": summary["trials"],
        "trial_epochs": epochs,
        **{s: summary.get(s, 0) for s in ("completed", "stopped", "diverged", "failed", "running")},
        # a killed driver's CPU counted with its resume's (--resume-kept: the resume's alone)
        "driver_cpu_ms_per_trial_epoch": 1000
        * (sum(p["cpu"] for p in phases.values()) + driver.get("killed", {}).get("cpu_s", 0))
        / epochs,
        "driver_peak_rss_mb": driver["peak_mb"],
        "wall_s_per_trial": sum(p["wall"] for p in phases.values()) / summary["trials"],
        **{f"{phase}_s": p["wall"] for phase, p in phases.items()},
        **{f"{phase}_cpu_s": p["cpu"] for phase, p in phases.items()},
        **{f"{phase}_peak_mb": p["peak_mb"] for phase, p in phases.items()},
        "storage_mb": size / 2**20,
        "storage_objects": objects,
        "mlflow_records_lost": lost,
        **{f"{name}_s": t["wall"] for name, t in commands.items()},
        **{f"{name}_cpu_s": t["cpu"] for name, t in commands.items() if "cpu" in t},
        **({"memory": driver["memory"]} if driver["memory"] else {}),
        **(
            {"doubled": sum(len(t) - 1 for t in twice), "run_twice": twice}
            if not args.plain_tune
            else {}
        ),
        **({"killed": driver["killed"]} if "killed" in driver else {}),
    }


# -- the command line ------------------------------------------------------------------------

COLUMNS = [  # (heading, key, format)
    ("trials", "trials", "{:>7d}"),
    ("trial-ep", "trial_epochs", "{:>9d}"),
    ("CPU ms/t-ep", "driver_cpu_ms_per_trial_epoch", "{:>11.2f}"),
    ("RSS MB", "driver_peak_rss_mb", "{:>7.0f}"),
    ("wall s/trial", "wall_s_per_trial", "{:>12.3f}"),
    ("trials CPU s", "trials_cpu_s", "{:>12.1f}"),
    ("close CPU s", "close_cpu_s", "{:>11.1f}"),
    ("storage MB", "storage_mb", "{:>10.2f}"),
    ("objects", "storage_objects", "{:>8d}"),
    ("lost", "mlflow_records_lost", "{:>5d}"),
    ("status s", "status_s", "{:>8.1f}"),
    ("report s", "report_s", "{:>8.1f}"),
    ("export s", "export_s", "{:>8.1f}"),
    ("table s", "table_s", "{:>7.1f}"),
    ("open s", "open_s", "{:>6.1f}"),
]


# -- --restore: Tune's restore of N saved trials, all in its state or the live one alone --------
def restore_trainable(config):
    """The restored live trial: it marks when it started, and ends."""
    from ray import tune

    with open(config["mark"], "a") as f:
        f.write(f"{time.time()}\n")
    tune.report({"loss": 1.0})


def restore_template(root: Path, mark: Path) -> Path:
    """A real Tune experiment of two ended trials of `restore_trainable`, saved in ROOT."""
    from ray import tune

    tune.Tuner(
        restore_trainable,
        param_space={"mark": str(mark)},
        tune_config=tune.TuneConfig(num_samples=2),
        run_config=tune.RunConfig(name="template", storage_path=str(root), verbose=0),
    ).fit()
    return root / "template"


def grown_experiment(template: Path, where: Path, n: int) -> Path:
    """TEMPLATE copied to WHERE with N ended trials and one live (pending) one in its state,
    each a copy of its first trial under an id and folder of its own."""
    from rhnsearch.compat import ray as ray_compat

    shutil.copytree(template, where)
    (path,) = [p for p in where.iterdir() if ray_compat.is_experiment_state(p.name)]
    state = json.loads(path.read_bytes())
    info, run = state["trial_data"][0]
    info = json.loads(info)
    state["trial_data"] = [
        [
            json.dumps(
                {
                    **info,
                    "trial_id": f"{info['trial_id']}_{i:06d}",
                    "relative_logdir": f"{info['relative_logdir']}_{i:06d}",
                    "status": "PENDING" if i == n else info["status"],
                }
            ),
            run,
        ]
        for i in range(n + 1)
    ]
    path.write_text(json.dumps(state))
    return where


def restore_seconds(where: Path, mark: Path, live_only: bool) -> float:
    """Seconds from the parse of the saved state in WHERE (and, LIVE_ONLY, its ended trials
    moved to the index) to the start of the live trial of the restored Tuner."""
    from rhnsearch.compat import ray as ray_compat
    from rhnsearch.sweep.ended_index import keep_live_trials

    mark.unlink(missing_ok=True)
    start = time.time()
    names = [p.name for p in where.iterdir()]
    (name,) = [n for n in names if ray_compat.is_experiment_state(n)]
    state = ray_compat.load_experiment_state((where / name).read_bytes())
    if live_only:
        keep_live_trials(str(where), state, names)
    del state
    ray_compat.restored_tuner(str(where), restore_trainable).fit()
    return float(mark.read_text().split()[0]) - start


def measure_restore(sizes: list[int]):
    """Print, for each size, the seconds to the live trial's start, then one JSON line."""
    import ray

    logging.getLogger("ray.tune").setLevel(logging.WARNING)
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    rows = []
    with tempfile.TemporaryDirectory(prefix="scale-restore-") as folder:
        root, mark = Path(folder), Path(folder) / "started"
        template = restore_template(root, mark)
        for n in sizes:
            row = {"ended_trials": n}
            for key, live_only in (("all_s", False), ("live_only_s", True)):
                where = grown_experiment(template, root / f"{key}-{n}", n)
                states = [p for p in where.iterdir() if p.name.startswith("experiment_state")]
                row["state_mb"] = sum(p.stat().st_size for p in states) / 1e6
                row[key] = restore_seconds(where, mark, live_only)
                shutil.rmtree(where)
            rows.append(row)
            print(
                f"{n:>7} ended trials ({row['state_mb']:.1f} MB of Tune's state): the live one "
                f"starts {row['all_s']:.2f} s after the "
                f"parse with all in Tune's state, {row['live_only_s']:.2f} s with the live "
                f"one alone ({row['all_s'] / row['live_only_s']:.1f}x)",
                flush=True,
            )
    ray.shutdown()
    first = rows[0]
    print(
        json.dumps(
            {
                "restore": [{k: round(v, 3) for k, v in row.items()} for row in rows],
                "growth_all": round(rows[-1]["all_s"] / first["all_s"], 3),
                "growth_live_only": round(rows[-1]["live_only_s"] / first["live_only_s"], 3),
            }
        )
    )


# -- --table: docs/scale.md's table of the rows kept in docs/scale/ ------------------------------
def store_name(run: dict) -> str:
    """RUN's store, a server's workers named (runs before `--server-workers` had one)."""
    if run["store"] == "sqlite":
        return "sqlite"
    workers = run.get("server_workers", 1)
    return f"{run['store']} ({workers} server worker{'s' * (workers > 1)})"


TABLE = [  # (heading, the value of a size's row and its run's options)
    ("trials", lambda s, run: f"{s['trials']:,}"),
    ("store", lambda s, run: store_name(run)),
    ("storage", lambda s, run: run["storage"]),
    ("search", lambda s, run: " ".join([run["search"], *options_named(run)])),
    ("epochs, ms", lambda s, run: f"{run['epochs']}, {run['epoch_ms']:g}"),
    ("killed at", lambda s, run: killed_at(s)),
    ("driver CPU ms a trial-epoch", lambda s, run: f"{s['driver_cpu_ms_per_trial_epoch']:.1f}"),
    ("peak RSS MB", lambda s, run: f"{peak_rss(s):,.0f}"),
    ("report, export, table s", lambda s, run: results_seconds(s)),
    ("resume's first trial s", lambda s, run: first_trial(s)),
    ("lost, run twice", lambda s, run: f"{s['mlflow_records_lost']}, {s.get('doubled', '-')}"),
]


def options_named(run: dict) -> list[str]:
    """The options of RUN that the table names beside its search, each in parentheses."""
    named = [
        ("--fill", bool(run.get("fill"))),
        (f"--slots {run.get('slots', 64)}", run.get("slots", 64) != 64),
        ("--no-turns", run.get("turns") is False),
        # (runs with turns before stop 74 started their workers at niceness 0)
        ("--no-nice-start", run.get("turns") is True and not run.get("nice_start")),
    ]
    return [f"({option})" for option, shown in named if shown]


def killed_at(size: dict) -> str:
    """The trials ended in MLflow when SIZE's driver was killed, or those started where the
    kill counted starts (`--kill-on started`)."""
    killed = size.get("killed")
    if not killed:
        return ""
    if killed.get("counted") == "started":
        return f"{killed['trials_started']:,} started"
    return f"{killed['trials_ended']:,}"


def peak_rss(size: dict) -> float:
    """The driver's peak RSS: of the killed driver and its resume, the larger (a run that
    recorded the killed one's)."""
    return max(size["driver_peak_rss_mb"], size.get("killed", {}).get("peak_rss_mb", 0))


def results_seconds(size: dict) -> str:
    return ", ".join(f"{size[k]:.1f}" if k in size else "-" for k in RESULTS_KEYS)


RESULTS_KEYS = ("report_s", "export_s", "table_s")


def first_trial(size: dict) -> str:
    seconds = size.get("killed", {}).get("first_trial_s")
    return "" if seconds is None else f"{seconds:.1f}"


def saved_run(path: Path) -> dict:
    """The run a scale.py output in PATH holds: its last line's JSON (a file of that line
    alone, or the whole output)."""
    return json.loads(path.read_text().strip().splitlines()[-1])


def table(paths: list[Path]) -> str:
    """A Markdown table with a row per size of each run saved in PATHS, in their order, each
    naming its file."""
    lines = [
        "| " + " | ".join([h for h, _ in TABLE] + ["run"]) + " |",
        "|" + "---|" * (len(TABLE) + 1),
    ]
    for path in paths:
        run = saved_run(path)
        for size in run["sizes"]:
            cells = [value(size, run) for _, value in TABLE] + [f"[{path.name}](scale/{path.name})"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, nargs="+", default=[500, 2000, 10000])
    p.add_argument("--search", choices=["random", "optuna"], default="random")
    p.add_argument(
        "--scheduler",
        choices=["cell_asha", "asha"],
        default="cell_asha",
        help="the sweep's: ASHA within each cell (the preset's) or Tune's own across all trials",
    )
    p.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument(
        "--server-workers",
        type=int,
        default=4,
        help="the PostgreSQL store's `mlflow server --workers` (4: jobs/README.md's lab server)",
    )
    p.add_argument("--storage", choices=["dir", "bucket"], default="dir")
    p.add_argument("--slots", type=int, default=64, help="Ray's logical CPUs: trials at once")
    p.add_argument("--epochs", type=int, default=40, help="epochs a trial at most")
    p.add_argument("--epoch-ms", type=float, default=5.0, help="a simulated epoch's sleep")
    p.add_argument("--histories", type=Path, default=HISTORIES, help="a history export")
    p.add_argument("--synthetic-curves", action="store_true", help="made-up curves instead")
    p.add_argument(
        "--fill",
        action="store_true",
        help="each worker's first trial waits until a worker a slot is up (see the docstring)",
    )
    p.add_argument(
        "--no-turns",
        action="store_true",
        help="workers import the trainable all at once, not in turns (before stop 73)",
    )
    p.add_argument(
        "--no-nice-start",
        action="store_true",
        help="workers start at niceness 0 and drop to 15 as they connect (before stop 74)",
    )
    p.add_argument(
        "--plain-tune",
        action="store_true",
        help="the same trials in plain Tune, without rhnsearch's driver (no MLflow)",
    )
    p.add_argument(
        "--plain-with",
        nargs="+",
        choices=["storage", "limit", "searcher"],
        default=[],
        help="--plain-tune with these pieces of the sweep's driver (see plain_tune)",
    )
    p.add_argument("--keep", type=Path, help="keep each size's store and storage under KEEP")
    p.add_argument(
        "--restore",
        type=int,
        nargs="+",
        metavar="N",
        help="time Tune's restore of N ended trials and a live one (no sweep runs)",
    )
    p.add_argument(
        "--table",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="print the Markdown table of runs saved in FILEs (their JSON lines; no sweep runs)",
    )
    p.add_argument(
        "--trace-memory",
        action="store_true",
        help="trace the driver's Python allocations (slower): the lines that grew in each phase",
    )
    p.add_argument(
        "--memray",
        type=Path,
        help="run each driver under memray with native stacks (slower): MEMRAY/TRIALS.bin",
    )
    p.add_argument(
        "--kill-at",
        type=int,
        help="SIGKILL the driver once this many trials have ended (or started: --kill-on), "
        "then `sweep resume` it",
    )
    p.add_argument(
        "--kill-on",
        choices=["ended", "started"],
        default="ended",
        help="what --kill-at counts: MLflow runs ended, or trials Tune started (for a store "
        "whose server lags the trials)",
    )
    p.add_argument(
        "--resume-kept",
        type=Path,
        metavar="WORK",
        help="resume the sweep a --keep run left in WORK (KEEP/KIND-TRIALS) after its driver "
        "was killed, as --kill-at's second half (with that run's options)",
    )
    for hidden in ("--uri", "--root", "--ray-dir", "--result"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    for hidden in ("--driver", "--resume"):
        p.add_argument(hidden, action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.restore:
        measure_restore(args.restore)
        return
    if args.table:
        print(table(args.table))
        return
    if args.plain_tune and args.storage != "dir":
        p.error("--plain-tune runs on --storage dir only")
    if args.plain_with and not args.plain_tune:
        p.error("--plain-with goes with --plain-tune")
    if args.kill_on != "ended" and not args.kill_at:
        p.error("--kill-on goes with --kill-at")
    if args.kill_at and args.plain_tune:
        p.error("--kill-at goes with rhnsearch's driver, not --plain-tune")
    if args.resume_kept and (args.plain_tune or args.store != "sqlite" or args.storage != "dir"):
        p.error(
            "--resume-kept goes with rhnsearch's driver on --store sqlite --storage dir "
            "(a kept PostgreSQL database or bucket is gone with its run's services)"
        )
    if args.resume_kept and (args.kill_at or args.keep or len(args.trials) != 1):
        p.error("--resume-kept takes one --trials, the kept run's, and no --kill-at or --keep")
    if args.resume_kept and not kept_in_place(args.resume_kept):
        p.error(f"{args.resume_kept} is not where its run kept it: resume it there, not a copy")
    if args.driver:
        Path(args.result).write_text(json.dumps(drive(args)))
        return
    with tempfile.TemporaryDirectory(prefix="scale-curves-") as folder:
        if args.synthetic_curves:
            args.histories = Path(folder) / "synthetic.parquet"
            synthetic_histories(args.epochs).to_parquet(args.histories)
        elif not args.histories.exists():
            sys.exit(
                f"no history export at {args.histories}: pass --histories or --synthetic-curves"
            )
        curves = "synthetic" if args.synthetic_curves else str(args.histories)
        print(
            "plain Tune (not rhnsearch's driver: Tune's random search and ASHA, no MLflow), "
            * args.plain_tune
            + f"{args.search} search, {args.scheduler} scheduler, "
            f"{store_name({'store': args.store, 'server_workers': args.server_workers})} store, "
            f"storage in a {args.storage}, "
            f"{args.slots} slots, {args.epochs} epochs at most, {args.epoch_ms:g} ms an epoch, "
            f"curves {curves}",
            flush=True,
        )
        print(" ".join(f"{h:>{len(f.format(0))}}" for h, _, f in COLUMNS), flush=True)
        rows = []
        for trials in args.trials:
            rows.append(measure(args, trials))
            print(
                " ".join(
                    f.format(rows[-1][k]) if k in rows[-1] else f"{'-':>{len(f.format(0))}}"
                    for _, k, f in COLUMNS
                ),
                flush=True,
            )
            if "killed" in rows[-1]:
                killed = rows[-1]["killed"]
                notes = [f"{killed['after_s']:.0f} s"] * ("after_s" in killed) + [
                    f"its peak RSS {killed['peak_rss_mb']:,.0f} MB"
                ] * ("peak_rss_mb" in killed)
                after = f" ({', '.join(notes)})" if notes else ""
                first = killed["first_trial_s"]
                count = (
                    f"{killed['trials_started']} trials had started "
                    f"({killed['trials_ended']} ended in MLflow)"
                    if killed.get("counted") == "started"
                    else f"{killed['trials_ended']} trials had ended"
                )
                print(
                    f"  killed once {count}{after}; "
                    + (
                        f"the resume started a trial {first:.1f} s after its own start; "
                        if first is not None
                        else "the resume started no trial; "
                    )
                    + f"settings run twice: {rows[-1]['doubled']}",
                    flush=True,
                )
            for phase, grew in rows[-1].get("memory", {}).items():
                (rss0, rss1), (heap0, heap1) = grew["rss_mb"], grew["heap_mb"]
                trimmed0, trimmed1 = grew["trimmed_rss_mb"]
                print(
                    f"  {phase}: RSS {rss0:.0f} -> {rss1:.0f} MB ({trimmed0:.0f} -> "
                    f"{trimmed1:.0f} trimmed), Python heap {heap0:.0f} -> {heap1:.0f} MB"
                )
                for line, mb, blocks in grew["grew"]:
                    print(f"    {mb:+8.2f} MB {blocks:+8d} blocks  {line}")
    print(
        json.dumps(
            {
                "plain_tune": args.plain_tune,
                "plain_with": args.plain_with,
                "search": args.search,
                "scheduler": args.scheduler,
                "store": args.store,
                **({"server_workers": args.server_workers} if args.store == "postgres" else {}),
                "storage": args.storage,
                "slots": args.slots,
                "epochs": args.epochs,
                "epoch_ms": args.epoch_ms,
                "fill": args.fill,
                "turns": not args.no_turns,
                "nice_start": not (args.no_turns or args.no_nice_start),
                "curves": curves,
                "sizes": [
                    {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}
                    for row in rows
                ],
            }
        )
    )


if __name__ == "__main__":
    main()
