"""Train one configuration epoch by epoch: metrics to a callback, divergence as a result,
checkpoint and resume, test loss at the best-valid weights."""

from __future__ import annotations

import copy
import math
import os
import pickle
import random
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from .data import DATASETS
from .errors import UserError
from .files.layout import CHECKPOINT_FILE
from .models import BACKENDS, build_model, check_arch, detach_state
from .tasks import get_task

STREAM_WINDOW = 400  # steps of a window when a text is read as one stream (see _batches)


@dataclass
class TrialConfig:
    """Everything one trial needs; logged with the run, so the run can be redone from it.

    The optimizer defaults train JSB models (RHN depth 2 width 128: valid 8.71 nats per step
    in 30 epochs): SGD with momentum at the best RHN settings of the `cpu` JSB study, on
    batches of 8 (docs/studies.md). The studies fix their own settings in their spaces."""

    dataset: str = "jsb"  # jsb | ptb | ptb-sample
    arch: str = "rhn"  # rhn | hsg | dtrnn | dtsrnn | lstm
    depth: int = 1
    width: int = 64
    tied: bool = False
    epochs: int = 30
    batch_size: int = 8
    bptt: int = 35  # words only
    optimizer: str = "sgd"  # sgd | adam
    lr: float = 0.1
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0
    clip: float = 10.0  # grad-norm clip; 0 disables
    lr_decay: float = 1.0  # lr / lr_decay**max(epoch - lr_decay_start, 0)
    lr_decay_start: int = 0
    init_scale: float = 0.05
    t_bias: float = -3.0
    hsg_bias: float = -2.5
    drop_x: float = 0.0
    drop_i: float = 0.0
    drop_h: float = 0.0
    drop_o: float = 0.0
    train_fraction: float = 1.0  # train on this leading fraction of the training split
    final_streams: int = 0  # words: the final valid and test numbers over this many streams,
    #   each from a zero state; 0: the task's protocol, the whole text as one stream (the RHN
    #   authors'); more are faster, for small presets
    max_loss: float = 0.0  # divergence cap; 0 = 3x the loss of a uniform guess
    seed: int = 0
    threads: int = 0  # torch threads; 0 leaves torch's default
    device: str = "auto"  # auto (CUDA if present) | cpu | cuda
    backend: str = "auto"  # auto | reference | fused: how the cell's loop runs
    loss_per: str = "step"  # step: the loss each update descends is the mean per time
    #   step; window (words): summed over a window's steps and averaged over the batch, as in
    #   the RHN authors' PTB code, so that their lr, clip and weight decay mean the same here

    @classmethod
    def from_dict(cls, values: dict) -> TrialConfig:
        """Build from a dict, ignoring keys that are not config fields (a checkpoint's config
        saved by another version; a sweep's trial is read strictly, `TrialSpec.from_tune`)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    @property
    def task(self) -> str:
        return DATASETS[self.dataset]

    def validate(self) -> TrialConfig:
        """Raise a one-line UserError naming the first bad field."""

        def bad(field, why):
            raise UserError(f"{field}={getattr(self, field)!r}: {why}")

        for f in fields(self):
            value, kind = (
                getattr(self, f.name),
                {"int": int, "float": (int, float), "bool": bool, "str": str}[f.type],
            )
            if not isinstance(value, kind) or (f.type != "bool" and isinstance(value, bool)):
                bad(f.name, f"must be a {f.type}")
            if f.type == "float" and not math.isfinite(value):
                bad(f.name, "must be a finite number")
        if self.dataset not in DATASETS:
            bad("dataset", f"use one of {', '.join(DATASETS)}")
        if self.optimizer not in ("sgd", "adam"):
            bad("optimizer", "use sgd or adam")
        if self.backend not in BACKENDS:
            bad("backend", f"use one of {', '.join(BACKENDS)}")
        for field in ("depth", "width", "epochs", "batch_size", "bptt"):
            if getattr(self, field) < 1:
                bad(field, "must be a positive integer")
        if self.final_streams < 0:
            bad("final_streams", "must be 0 (one stream) or a number of streams")
        for field in ("drop_x", "drop_i", "drop_h", "drop_o"):
            if not 0.0 <= getattr(self, field) < 1.0:
                bad(field, "dropout rates must be in [0, 1)")
        if self.lr <= 0:
            bad("lr", "must be positive")
        if not 0.0 < self.train_fraction <= 1.0:
            bad("train_fraction", "must be in (0, 1]")
        if self.loss_per not in ("step", "window"):
            bad("loss_per", "use step or window")
        check_arch(self.arch, self.depth, self.width)
        get_task(self.task).check(self.tied, self.loss_per)
        return self


def trial_model(config: TrialConfig, vocab_size: int = 0) -> torch.nn.Module:
    """The model a config describes, freshly initialized from torch's current RNG."""
    return build_model(
        config.task,
        config.arch,
        config.depth,
        config.width,
        vocab_size=vocab_size,
        tied=config.tied,
        init_scale=config.init_scale,
        t_bias=config.t_bias,
        hsg_bias=config.hsg_bias,
        drop_x=config.drop_x,
        drop_i=config.drop_i,
        drop_h=config.drop_h,
        drop_o=config.drop_o,
        backend=config.backend,
    )


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device {name!r} asked for but CUDA is not available: use auto or cpu")
    return torch.device(name)


class Trainer:
    """One model, its optimizer and data; `fit(callback)` runs the remaining epochs."""

    def __init__(self, config: TrialConfig, data):
        config.validate()
        if config.dataset != data.name:
            raise UserError(f"config asks for dataset {config.dataset!r} but got {data.name!r}")
        self.config, self.data = config, data
        if config.threads > 0:
            torch.set_num_threads(config.threads)
        self.device = pick_device(config.device)
        random.seed(config.seed)
        torch.manual_seed(config.seed)
        self.shuffle = torch.Generator().manual_seed(config.seed)
        self.task = get_task(config.task)
        vocab = len(getattr(data, "vocab", ()))
        self.model = trial_model(config, vocab).to(self.device)
        self.n_params = sum(p.numel() for p in self.model.parameters())  # = count_params
        self.optimizer = self._optimizer()
        self.max_loss = config.max_loss or 3 * self.task.uniform_loss(vocab)
        self.epoch, self.status = 0, "running"
        self.best_valid, self.best_epoch, self.best_state = math.inf, 0, None
        self.last_finite_loss = math.nan
        self.history: list[dict] = []

    def _optimizer(self):
        c = self.config
        if c.optimizer == "sgd":
            return torch.optim.SGD(
                self.model.parameters(),
                lr=c.lr,
                momentum=c.momentum,
                nesterov=c.nesterov and c.momentum > 0,
                weight_decay=c.weight_decay,
            )
        if c.optimizer == "adam":
            return torch.optim.Adam(self.model.parameters(), lr=c.lr, weight_decay=c.weight_decay)
        raise UserError(f"unknown optimizer {c.optimizer!r}: use sgd or adam")

    def lr_at(self, epoch: int) -> float:
        c = self.config
        return c.lr / c.lr_decay ** max(epoch - c.lr_decay_start, 0)

    def _batches(self, split: str, shuffle: bool, batch_size: int | None = None):
        """(inputs, targets, mask) of a split on the device (training: its train_fraction), in
        batches of BATCH_SIZE (default the config's). One stream (batch 1) is read in windows
        of at least STREAM_WINDOW steps: the state flows on from window to window, so their
        length changes nothing but the evaluation's speed."""
        c = self.config
        data = self.data.split(split)
        if split == "train" and c.train_fraction < 1.0:
            data = data[: max(1, int(len(data) * c.train_fraction))]
        bptt = max(c.bptt, STREAM_WINDOW) if batch_size == 1 else c.bptt
        return self.task.batches(
            data, batch_size or c.batch_size, bptt, self.shuffle if shuffle else None, self.device
        )

    def train_epoch(self):
        """One pass over the training data: (mean loss, mean grad norm, steps, items)."""
        self.model.train()
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.epoch + 1)
        total, count, norms, steps, state = 0.0, 0, 0.0, 0, None
        for x, y, mask in self._batches("train", shuffle=True):
            if not self.task.carries_state:
                state = None
            logits, state = self.model(x, state)
            state = detach_state(state)
            loss_sum, n = self.model.loss_sum(logits, y, mask)
            loss = loss_sum / (self.config.batch_size if self.config.loss_per == "window" else n)
            value = loss_sum.item() / n
            if math.isfinite(value):
                self.last_finite_loss = value
            if not math.isfinite(value) or value > self.max_loss:
                self.status = "diverged"
                break
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            clip = self.config.clip if self.config.clip > 0 else math.inf
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip).item()
            if not math.isfinite(norm):
                self.status = "diverged"
                break
            self.optimizer.step()
            total, count, norms, steps = total + loss_sum.item(), count + n, norms + norm, steps + 1
        return (
            (total / count if count else math.nan),
            (norms / steps if steps else math.nan),
            steps,
            count,
        )

    @torch.no_grad()
    def evaluate(self, split: str, batch_size: int | None = None) -> float:
        """Mean loss per real step (JSB) or per token (words) of `split`, in batches of
        BATCH_SIZE (default the config's; words: that many streams, each from a zero state)."""
        self.model.eval()
        total, count, state = 0.0, 0, None
        for x, y, mask in self._batches(split, shuffle=False, batch_size=batch_size):
            logits, state = self.model(x, state if self.task.carries_state else None)
            loss_sum, n = self.model.loss_sum(logits, y, mask)
            total, count = total + loss_sum.item(), count + n
        return total / count

    def _with_ppl(self, metrics: dict) -> dict:
        if self.task.perplexity:
            for key in [k for k in metrics if k.endswith("_loss")]:
                metrics[key.replace("_loss", "_ppl")] = math.exp(min(metrics[key], 700))
        return metrics

    def run_epoch(self) -> dict:
        """Train and validate one epoch; returns its metrics. Their status is the trainer's
        after the epoch: running, diverged (which ends the run), or completed after the last."""
        start = time.perf_counter()
        lr = self.lr_at(self.epoch + 1)
        train_loss, grad_norm, steps, items = self.train_epoch()
        self.epoch += 1
        valid_loss = math.nan
        if self.status != "diverged":
            valid_loss = self.evaluate("valid")
            if not math.isfinite(valid_loss) or valid_loss > self.max_loss:
                self.status = "diverged"
            elif valid_loss < self.best_valid:
                self.best_valid, self.best_epoch = valid_loss, self.epoch
                self.best_state = copy.deepcopy(self.model.state_dict())
        if self.status == "running" and self.epoch >= self.config.epochs:
            self.status = "completed"
        seconds = time.perf_counter() - start
        metrics = self._with_ppl(
            {
                "epoch": self.epoch,
                "train_loss": train_loss if self.status != "diverged" else self.last_finite_loss,
                "valid_loss": valid_loss,
                "best_valid_loss": self.best_valid,
                "lr": lr,
                "grad_norm": grad_norm,
                "epoch_seconds": seconds,
                self.task.throughput_key: items / seconds,
            }
        )
        metrics["status"] = self.status
        self.history.append(metrics)
        return metrics

    def finish(self) -> dict:
        """Final result: status completed or diverged, and the test loss of the best-valid
        weights (the epoch chosen on batched validation). Where the task evaluates its final
        numbers on the whole text as one stream (words, as the RHN authors reported theirs),
        the test loss is so computed, and the valid loss too (`full_valid_loss`), unless the
        config's final_streams asks for more streams. `best_train_loss`: the training
        objective those weights reached, on the whole training set without dropout (in
        batches, as trained), what an optimization study asks about."""
        if self.status == "running":
            self.status = "completed"
        final = {"test_loss": math.nan, "best_train_loss": math.nan}
        if self.best_state is not None:
            current = copy.deepcopy(self.model.state_dict())
            self.model.load_state_dict(self.best_state)
            final["best_train_loss"] = self.evaluate("train")
            streams = self.task.final_batch_size and (
                self.config.final_streams or self.task.final_batch_size
            )
            final["test_loss"] = self.evaluate("test", streams)
            if streams:
                final["full_valid_loss"] = self.evaluate("valid", streams)
            self.model.load_state_dict(current)
        last = self.history[-1] if self.history else {}
        return self._with_ppl(
            {
                "status": self.status,
                "epochs": self.epoch,
                "params": self.n_params,
                "dataset": self.config.dataset,
                "train_loss": last.get("train_loss", math.nan),
                "valid_loss": last.get("valid_loss", math.nan),
                "best_valid_loss": self.best_valid,
                "best_epoch": self.best_epoch,
                **final,
            }
        )

    def fit(self, callback=None) -> dict:
        """Run the remaining epochs, `callback(metrics)` after each; never raises on
        divergence."""
        while self.epoch < self.config.epochs and self.status == "running":
            metrics = self.run_epoch()
            if callback is not None:
                callback(metrics)
        return self.finish()

    # -- checkpoints -------------------------------------------------------------------
    def save(self, directory) -> Path:
        """Write the full training state to directory/trainer.pt (atomically)."""
        path = Path(directory) / CHECKPOINT_FILE
        state = {
            "config": asdict(self.config),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "status": self.status,
            "best_valid": self.best_valid,
            "best_epoch": self.best_epoch,
            "best_state": self.best_state,
            "last_finite_loss": self.last_finite_loss,
            "history": self.history,
            "torch_rng": torch.get_rng_state(),
            "shuffle_rng": self.shuffle.get_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)
        return path

    def load(self, directory):
        """Restore a state written by `save` (weights-only unpickling)."""
        state = read_checkpoint(directory, self.device)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch, self.status = state["epoch"], state["status"]
        self.best_valid, self.best_epoch = state["best_valid"], state["best_epoch"]
        self.best_state, self.history = state["best_state"], state["history"]
        self.last_finite_loss = state["last_finite_loss"]
        torch.set_rng_state(state["torch_rng"].cpu())
        self.shuffle.set_state(state["shuffle_rng"].cpu())
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
        return self

    @staticmethod
    def best_weights(directory) -> tuple[dict, dict]:
        """The config (TrialConfig's fields) and best-valid weights of the state `save` wrote
        to DIRECTORY, on the CPU: the latest weights where no epoch was valid."""
        state = read_checkpoint(directory, "cpu")
        return state["config"], state["best_state"] or state["model"]


def read_checkpoint(directory, device) -> dict:
    """The state `Trainer.save` wrote to DIRECTORY, its tensors on DEVICE; one that holds
    pickled objects other than tensors and plain data is refused unread."""
    path = Path(directory) / CHECKPOINT_FILE
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError:
        raise UserError(
            f"{path} holds pickled objects that are not weights: refused "
            "unread (loading them could run code); delete it or use a "
            "checkpoint rhnsearch saved"
        ) from None


def epoch_reports(trainer: Trainer):
    """The metrics of each epoch TRAINER has left to train, as the Tune trainable reports them:
    the last with the status the trial ended with (completed or diverged), its best epoch, its
    test numbers and its training loss there (`Trainer.finish`). A trainer restored from the
    checkpoint of its last epoch has none left: that epoch is given again, so that the trial
    still ends on its final result (a resume may restore such a checkpoint in place of an
    earlier one: sweep/checkpoints.py)."""

    def done() -> bool:
        return trainer.status != "running" or trainer.epoch >= trainer.config.epochs

    def ended(metrics: dict) -> dict:
        final = trainer.finish()
        return {
            **metrics,
            **{k: v for k, v in final.items() if k.startswith(("test_", "full_", "best_train_"))},
            "status": final["status"],
            "best_epoch": final["best_epoch"],
        }

    if done() and trainer.history:
        yield ended(dict(trainer.history[-1]))
    while not done():
        metrics = trainer.run_epoch()
        yield ended(metrics) if done() else metrics
