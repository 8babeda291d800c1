"""`rhnsearch sweep check` and `sweep plan`: a space validated and its cells listed, and what a
sweep of it will cost, before it runs."""

import sys

from ..errors import UserError
from .sweep_options import (
    add_data_dir,
    add_json,
    add_preset_and_overrides,
    add_scheduler,
    add_space,
)


def add_check(ssub):
    check = ssub.add_parser(
        "check",
        help="validate a space and list its cells",
        description="Validate a search space (with preset and "
        "overrides) and print its cells; nothing runs.",
    )
    add_space(check)
    add_preset_and_overrides(check)
    add_data_dir(check, "; word widths are solved for its vocabulary if it is there")
    check.set_defaults(run=cmd_check)


def add_plan(ssub):
    plan = ssub.add_parser(
        "plan",
        help="what a sweep will cost, before it runs",
        description="Time a few training and validation batches of every "
        "cell on this machine's device and print, per cell and in total, "
        "seconds per epoch, the trial-epochs FIFO would run and those the "
        "space's scheduler is expected to run, device-hours and the wall "
        "time on N devices.",
    )
    add_space(plan)
    add_preset_and_overrides(plan)
    add_scheduler(plan)
    add_data_dir(plan)
    devices = plan.add_mutually_exclusive_group()
    devices.add_argument("--gpus", type=int, metavar="N", help="GPUs the sweep will have")
    devices.add_argument(
        "--cpus",
        type=int,
        metavar="N",
        help="CPU cores the sweep will have (default: this machine's, for a space of CPU trials)",
    )
    plan.add_argument(
        "--confirm",
        type=int,
        nargs=2,
        metavar=("TOP", "SEEDS"),
        help="add a confirmation round, `sweep confirm NAME --top TOP --seeds SEEDS`: TOP "
        "settings a cell, each run again with SEEDS seeds for every epoch",
    )
    add_json(plan, "plan")
    plan.set_defaults(run=cmd_plan)


def cmd_check(args):
    from ..data import load_dataset
    from ..search.space import load_space

    space = load_space(args.space, preset=args.preset, overrides=args.overrides)
    print(
        f"{space.study}: {space.num_trials} trials, dataset {space.dataset}, search "
        f"{space.search}, scheduler {space.scheduler.name}, {space.epochs} epochs max"
    )
    try:  # word widths depend on the vocabulary: the data's own, if it is at hand
        data = load_dataset(space.dataset, data_dir=args.data_dir, allow_fetch=False)
    except UserError:
        data = None
        print(
            f"  ({space.dataset} is not in the data dir: word widths are solved for a "
            "10,000-word vocabulary; a sweep solves them for the data's own)"
        )
    for cell in space.cells_for(data).values():
        print(
            f"  {cell.arch:>7} depth {cell.depth:>2} tied {str(cell.tied):5} "
            f"width {cell.width:>5} params {cell.params:>11,}"
        )


def cmd_plan(args):
    import os

    import torch

    from ..search.plan import confirm_trials, plan, timed_on, timing_data, totals
    from ..search.space import load_space
    from .output import print_json

    space = load_space(args.space, preset=args.preset, overrides=args.overrides)
    confirmed = confirm_trials(space, args.confirm)
    on_gpu = args.gpus is not None or (args.cpus is None and space.resources.gpu > 0)
    per_trial = space.resources.gpu if on_gpu else space.resources.cpu
    if per_trial <= 0:
        raise UserError(
            "the space's trials ask for no GPU (resources.gpu is 0): plan with "
            "--cpus N, or --set resources.gpu=1"
        )
    devices = (
        (args.gpus or max(1, torch.cuda.device_count()))
        if on_gpu
        else (args.cpus or os.cpu_count())
    )
    where = timed_on(space)
    data, data_name = timing_data(space, args.data_dir)
    print(f"{space.study}: timing each cell on {where}, with {data_name}", file=sys.stderr)
    rows = plan(
        space,
        data,
        args.scheduler,
        on_progress=lambda cell: print(f"  timing {cell}", file=sys.stderr),
        confirmed=confirmed,
    )
    unit = "GPU" if on_gpu else "CPU"
    total = totals(rows, per_trial, devices)
    if args.json:
        print_json(
            {
                "study": space.study,
                "timed_on": where,
                "data": data_name,
                "devices": devices,
                "unit": unit,
                "per_trial": per_trial,
                "cells": [{**vars(row), "seconds": row.seconds} for row in rows],
                **total,
            }
        )
        return
    print_plan(
        rows,
        total,
        scheduler=args.scheduler or space.scheduler.name,
        unit=unit,
        devices=devices,
        per_trial=per_trial,
        timed_on=f"{where} with {data_name}",
    )


def print_plan(rows, total, *, scheduler, unit, devices, per_trial, timed_on):
    """The plan as a table, a row per cell, then its totals.

    Args:
        rows: the plan's rows, one a cell.
        total: their totals (`search.plan.totals`).
        scheduler: the scheduler whose trial-epochs the table expects.
        unit: "GPU" or "CPU".
        devices: how many of them the sweep will have.
        per_trial: how many of them a trial holds.
        timed_on: the device and data the cells were timed on.
    """
    confirm = sum(r.confirm_epochs for r in rows)
    print(
        f"{'cell':<18} {'params':>11} {'s/epoch':>8} {'FIFO trial-epochs':>17} "
        f"{scheduler + ' (expected)':>20}{' confirm' if confirm else ''} {'hours':>7}"
    )
    for row in rows:
        print(
            f"{row.cell:<18} {row.params:>11,} {row.epoch_seconds:>8.2f} "
            f"{row.fifo_epochs:>17,} {row.expected_epochs:>20,.0f}"
            f"{f' {row.confirm_epochs:>7,}' if confirm else ''} {row.seconds / 3600:>7.2f}"
        )
    print(
        f"total: {sum(r.fifo_epochs for r in rows):,} trial-epochs under FIFO, "
        f"{sum(r.expected_epochs for r in rows):,.0f} expected"
        f"{f', {confirm:,} to confirm' if confirm else ''}; "
        f"{total['trial_seconds'] / 3600:.2f} hours of trials, {total['device_hours']:.2f} "
        f"{unit}-hours; wall about {total['wall_seconds'] / 3600:.2f} h on {devices:g} "
        f"{unit}s ({per_trial:g} a trial), timed on {timed_on}"
    )
