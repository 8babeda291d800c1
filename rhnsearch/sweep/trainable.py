"""The Ray Tune trainable: one trial = one `Trainer`, reporting each epoch with a checkpoint."""

import json
import logging
import os
import socket
import tempfile
import time
from pathlib import Path

import ray
import torch
from ray import tune

from ..cluster.connect import ALLOW_CPU_FALLBACK
from ..data import load_dataset
from ..files.layout import HELD_FILE
from ..provenance import cpu_name
from ..search.trial import TrialSpec
from ..train import Trainer, epoch_reports

_DATA = {}  # dataset cache per worker process: (name, data dir) -> data


def assigned_gpus() -> list:
    """The GPUs Ray gave this trial. A trial given one must train on it: where torch sees no
    CUDA device it fails, in one line, unless $RHNSEARCH_ALLOW_CPU_FALLBACK is 1."""
    gpus = ray.get_gpu_ids()
    if gpus and not torch.cuda.is_available() and os.environ.get(ALLOW_CPU_FALLBACK) != "1":
        raise RuntimeError(
            f"Ray gave this trial GPU {','.join(map(str, gpus))} on {socket.gethostname()} but "
            f"torch {torch.__version__} sees no CUDA device there: install a CUDA build of "
            f"torch on the GPU nodes, or set resources.gpu=0 ({ALLOW_CPU_FALLBACK}=1 trains "
            "on the CPU instead)"
        )
    return gpus


def run_trial(config: dict, cells: dict):
    """Train the trial of a Tune CONFIG (`TrialSpec.from_tune`), `tune.report` per epoch;
    resumes from Tune's checkpoint. (CELLS: label -> cell, passed by `tune.with_parameters`.)

    The last report of a trial that ends by itself carries status completed or diverged and
    its test numbers; a trial stopped by the scheduler ends on a report with status running.
    Every report says where the trial runs (its Ray node, CPU, device and the GPUs Ray assigned)
    and what it has held so far: `held_seconds`, the wall time of its workers since each
    started (kept in its checkpoint, so summed across retries and resumes), and that times
    the CPUs and GPUs Ray gave it (`cpu_seconds`, `gpu_seconds`: a quarter GPU counts a
    quarter).
    """
    started = time.monotonic()
    logging.getLogger("ray.train").setLevel(logging.WARNING)  # no line per checkpoint
    gpus = assigned_gpus()
    held = ray.get_runtime_context().get_assigned_resources()
    spec = TrialSpec.from_tune(config, cells)
    cfg = spec.config
    key = (cfg.dataset, spec.data_dir)
    if key not in _DATA:
        _DATA[key] = load_dataset(cfg.dataset, data_dir=spec.data_dir)
    trainer = Trainer(cfg, _DATA[key])
    checkpoint, before = tune.get_checkpoint(), 0.0
    if checkpoint:
        with checkpoint.as_directory() as directory:
            trainer.load(directory)
            kept = Path(directory) / HELD_FILE  # (none in checkpoints of rhnsearch 0.2)
            before = json.loads(kept.read_text())["held_seconds"] if kept.exists() else 0.0
    placement = {
        "device": str(trainer.device),
        "gpu_ids": ",".join(map(str, gpus)) or "none",
        "node_id": ray.get_runtime_context().get_node_id(),
        "torch_version": str(torch.__version__),
        "cpu": cpu_name(),
    }
    for metrics in epoch_reports(trainer):
        seconds = before + time.monotonic() - started
        spent = {
            "held_seconds": seconds,
            "cpu_seconds": seconds * held.get("CPU", 0.0),
            "gpu_seconds": seconds * held.get("GPU", 0.0),
        }
        with tempfile.TemporaryDirectory() as directory:
            trainer.save(directory)
            (Path(directory) / HELD_FILE).write_text(json.dumps({"held_seconds": seconds}))
            tune.report(
                {**metrics, **placement, **spent, "n_params": trainer.n_params},
                checkpoint=tune.Checkpoint.from_directory(directory),
            )
