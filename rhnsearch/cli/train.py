"""`rhnsearch train` (one configuration) and `rhnsearch budget` (widths for a budget)."""

import argparse
import sys
from dataclasses import fields
from pathlib import Path

from ..data.ptb import PTB_VOCAB
from ..tasks import TASKS
from ..train import TrialConfig
from .output import print_json


def add_train(sub):
    p = sub.add_parser(
        "train",
        help="train one configuration and print its metrics",
        description="Train one configuration epoch by epoch; progress on "
        "stderr, final metrics as JSON on the last stdout line with --json.",
    )
    p.add_argument(
        "--task",
        choices=sorted(TASKS),
        help="train on the task's own dataset (jsb or ptb) unless --dataset is given",
    )
    p.add_argument("--data-dir", help="data dir (default: $RHNSEARCH_DATA_DIR or user cache)")
    p.add_argument("--checkpoint-dir", help="save the trainer here each epoch; resume from it")
    p.add_argument("--json", action="store_true", help="print final metrics as one JSON line")
    for f in fields(TrialConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.type in (bool, "bool"):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            kind = {"int": int, "float": float, "str": str}.get(
                getattr(f.type, "__name__", str(f.type)), str
            )
            p.add_argument(flag, type=kind, default=f.default, help=f"default {f.default}")
    p.set_defaults(run=run_train)


def run_train(args):
    from ..data import load_dataset
    from ..train import CHECKPOINT_FILE, Trainer

    values = {f.name: getattr(args, f.name) for f in fields(TrialConfig)}
    if args.task and values["dataset"] == TrialConfig.dataset:  # --dataset not given
        values["dataset"] = args.task
    config = TrialConfig(**values).validate()
    trainer = Trainer(config, load_dataset(config.dataset, data_dir=args.data_dir))
    ckpt = Path(args.checkpoint_dir) if args.checkpoint_dir else None
    if ckpt and (ckpt / CHECKPOINT_FILE).exists():
        trainer.load(ckpt)
        print(f"resumed from {ckpt} at epoch {trainer.epoch}", file=sys.stderr)

    def progress(m):
        print(
            f"epoch {m['epoch']:>3}/{config.epochs}  train {m['train_loss']:.4f}  "
            f"valid {m['valid_loss']:.4f}  lr {m['lr']:.3g}  |g| {m['grad_norm']:.3g}  "
            f"{m['epoch_seconds']:.1f}s  {m['status']}",
            file=sys.stderr,
            flush=True,
        )
        if ckpt:
            ckpt.mkdir(parents=True, exist_ok=True)
            trainer.save(ckpt)

    result = trainer.fit(progress)
    if args.json:
        print_json(result)
    else:
        print(" ".join(f"{k}={v}" for k, v in result.items()))


def add_budget(sub):
    p = sub.add_parser(
        "budget",
        help="widths that fit a parameter budget, per depth",
        description="Solve the width whose parameter count is nearest the budget, for each depth.",
    )
    p.add_argument("--task", choices=sorted(TASKS), required=True)
    p.add_argument("--arch", required=True, help="rhn, hsg, dtrnn, dtsrnn or lstm")
    p.add_argument("--depths", required=True, help="e.g. 1-10 or 1,2,4,6")
    p.add_argument("--params", required=True, help="budget, e.g. 32M or 250k")
    p.add_argument("--tied", action="store_true", help="tie softmax and embedding (ptb)")
    p.add_argument("--vocab", type=int, default=PTB_VOCAB, help="vocabulary size (ptb)")
    p.add_argument("--json", action="store_true", help="print a JSON list as the last line")
    p.set_defaults(run=run_budget)


def run_budget(args):
    from ..budget import count_params, parse_count, parse_depths, solve_width

    budget = parse_count(args.params)
    rows = []
    for depth in parse_depths(args.depths):
        width = solve_width(budget, args.task, args.arch, depth, args.tied, args.vocab)
        rows.append(
            {
                "depth": depth,
                "width": width,
                "params": count_params(args.task, args.arch, depth, width, args.tied, args.vocab),
            }
        )
    out = sys.stderr if args.json else sys.stdout
    print(f"{'depth':>5} {'width':>6} {'params':>12}", file=out)
    for r in rows:
        print(f"{r['depth']:>5} {r['width']:>6} {r['params']:>12,}", file=out)
    if args.json:
        print_json(rows)
