"""`rhnsearch sweep ...` commands."""

import contextlib
import json
import logging
import signal
import sys
from pathlib import Path

from ..errors import UserError

STORAGE_HELP = (
    "where Tune's state and the checkpoints go: a directory every node sees or a "
    "bucket URI (s3://, gs://); default $RHNSEARCH_STORAGE, else results/sweeps "
    "with a local Ray"
)

# Options that several subcommands share, each declared here once with its one help text.


def add_space(p):
    p.add_argument("space", help="search space YAML, e.g. spaces/jsb_optimization.yaml")


def add_preset_and_overrides(p):
    p.add_argument("--preset", help="a preset of the space: paper or smoke")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a space field, e.g. --set samples=4 --set fixed.epochs=20",
    )


def add_scheduler(p):
    p.add_argument(
        "--scheduler",
        choices=["cell_asha", "asha", "fifo"],
        help="cell_asha stops a trial worse than the others of its (arch, depth) "
        "cell, asha one worse than any others; fifo runs every trial to the end "
        "(default: the space's)",
    )


def add_data_dir(p, use: str = ""):
    """--data-dir; USE, what the command does with it, ends its help's parenthesis."""
    p.add_argument("--data-dir", help=f"data dir (default: $RHNSEARCH_DATA_DIR or user cache{use})")


def add_sweep_name(p):
    p.add_argument("name", help="the sweep's name (see results/sweeps/)")


def add_address(p):
    p.add_argument("--address", help="Ray cluster address to join (HOST:PORT or auto)")


def add_storage_path(p):
    p.add_argument("--storage-path", help=STORAGE_HELP)


def add_json(p, what: str = "summary"):
    p.add_argument("--json", action="store_true", help=f"print the {what} as JSON")


def add_verbose(p):
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also print Tune's status tables and a box a trial (by default: one live "
        "display on a terminal, else a line a trial)",
    )


def add_run_options(p):
    """What `sweep run` and `sweep submit` share: the space and how the sweep runs it."""
    add_space(p)
    p.add_argument(
        "--plan",
        metavar="FILE",
        help="the plan of `sweep plan SPACE --json > FILE`: recorded with the sweep, so that "
        "`sweep status` and the report show device-hours spent next to planned",
    )
    add_preset_and_overrides(p)
    p.add_argument("--search", choices=["random", "optuna"], help="default: the space's")
    p.add_argument(
        "--sampler",
        choices=["tpe", "gp", "cmaes"],
        help="each cell's Optuna sampler with --search optuna (--set sampler=...; default: "
        "the space's, else tpe)",
    )
    add_scheduler(p)
    add_data_dir(p, "; with submit, a path on the cluster")
    p.add_argument(
        "--tracking-uri", help="MLflow tracking URI (default: sqlite:///results/mlflow.db)"
    )
    p.add_argument("--experiment", help="MLflow experiment (default: the space's file name)")
    p.add_argument("--name", help="sweep name (default: STUDY-PRESET-TIMESTAMP)")
    add_storage_path(p)
    add_run_overrides(p)


def add_run_overrides(p):
    """The options that are shorthands for --set (see `overrides`)."""
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="run one trial at a time (--set max_concurrent=1): the trials reach "
        "each rung in the searcher's order, so the seed fixes which trials early "
        "stopping stops too, not only each trial's settings and curve (the "
        "JSB smoke preset's trials: 1.3x the time on 2 cores; up to Nx where N "
        "trials would run at once)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        metavar="N",
        help="run each setting N times, with seeds fixed.seed to fixed.seed+N-1 "
        "(--set seeds=N): a study of one setting per cell then gets an interval "
        "per cell; ASHA judges the setting, so its N runs go on or stop together",
    )
    p.add_argument(
        "--register-model",
        metavar="NAME",
        help="register the sweep's best model in the MLflow Model Registry as a "
        "new version of NAME (--set register_model=NAME)",
    )


def overrides(args) -> list[str]:
    """The --set overrides, then those of --seeds, --sampler, --deterministic and
    --register-model."""
    return (
        args.overrides
        + ([f"seeds={args.seeds}"] if args.seeds is not None else [])
        + ([f"sampler={args.sampler}"] if args.sampler else [])
        + (["max_concurrent=1"] if args.deterministic else [])
        + ([f"register_model={json.dumps(args.register_model)}"] if args.register_model else [])
    )


def add_sweep(sub):
    p = sub.add_parser(
        "sweep",
        help="run, resume and submit sweeps",
        description="Run a search space on Ray Tune, recorded in MLflow.",
    )
    ssub = p.add_subparsers(dest="sweep_command", required=True)
    for add in (
        add_run,
        add_resume,
        add_extend,
        add_confirm,
        add_check,
        add_plan,
        add_submit,
        add_slurm,
    ):
        add(ssub)
    add_logs(ssub)
    add_status(ssub)


def add_run(ssub):
    run = ssub.add_parser(
        "run",
        help="run a sweep on a local Ray or a cluster",
        description="Run a sweep: a local Ray by default, or join the cluster at --address.",
    )
    add_run_options(run)
    add_address(run)
    add_json(run)
    add_verbose(run)
    run.add_argument(
        "--resume",
        action="store_true",
        help="resume the sweep --name if it exists, else start it: one command for a job "
        "that may run again (a requeued Slurm job)",
    )
    run.set_defaults(run=cmd_run)


def add_resume(ssub):
    resume = ssub.add_parser(
        "resume",
        help="resume an interrupted sweep by name",
        description="Resume an interrupted sweep: finished trials are not rerun.",
    )
    add_sweep_name(resume)
    add_address(resume)
    add_storage_path(resume)
    add_json(resume)
    add_verbose(resume)
    resume.set_defaults(run=cmd_resume)


def add_extend(ssub):
    extend = ssub.add_parser(
        "extend",
        help="add settings or seeds to every cell of a finished sweep",
        description="Extend a finished sweep under the same MLflow parent run: more settings "
        "a cell (the same random stream, or each cell's Optuna study, goes on) or more seeds "
        "a setting; the old trials are kept as they are, the rungs of early stopping too, and "
        "the report covers every trial.",
    )
    add_sweep_name(extend)
    extend.add_argument("--samples", type=int, metavar="N", help="settings a cell in all")
    extend.add_argument("--seeds", type=int, metavar="N", help="seeds a setting in all")
    add_address(extend)
    add_storage_path(extend)
    add_json(extend)
    add_verbose(extend)
    extend.set_defaults(run=cmd_extend)


def add_confirm(ssub):
    confirm = ssub.add_parser(
        "confirm",
        help="train each cell's best settings again with new seeds, at the full budget",
        description="A confirmation round of a finished sweep, under the same MLflow parent "
        "run: the --top best finished settings of every cell (by best valid loss, ties by "
        "trial id) trained again with --seeds seeds the sweep has not used, for the space's "
        "full epochs, without early stopping. Its runs are tagged round=confirm; the search's "
        "tables leave them out, and `results confirmed` compares the cells on them. With "
        "--slurm the round is a Slurm batch job, resumed after a requeue or time limit.",
    )
    add_sweep_name(confirm)
    confirm.add_argument("--top", type=int, required=True, metavar="K", help="settings a cell")
    confirm.add_argument(
        "--seeds", type=int, required=True, metavar="N", help="new seeds a setting (at least 2)"
    )
    add_address(confirm)
    add_storage_path(confirm)
    add_json(confirm)
    add_verbose(confirm)
    confirm.add_argument(
        "--resume",
        action="store_true",
        help="resume the sweep's confirmation round if it has not finished, else start one: "
        "one command for a job that may run again (a requeued Slurm job)",
    )
    confirm.add_argument(
        "--slurm", action="store_true", help="submit the round as a Slurm batch job (below)"
    )
    add_slurm_request(confirm)
    confirm.set_defaults(run=cmd_confirm)


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


def add_submit(ssub):
    submit = ssub.add_parser(
        "submit",
        help="submit a sweep as a Ray Job, or as a Slurm batch job",
        description="Submit the sweep to a Ray cluster through the Jobs API (entrypoint and "
        "runtime_env from jobs/), or with --slurm to Slurm: a batch script that starts a Ray "
        "cluster in the allocation and runs the sweep there, resumed after a requeue, "
        "preemption or time limit.",
    )
    add_run_options(submit)
    where = submit.add_mutually_exclusive_group(required=True)
    where.add_argument("--address", help="the cluster's dashboard, e.g. http://127.0.0.1:8265")
    where.add_argument("--slurm", action="store_true", help="submit with sbatch (below)")
    submit.add_argument("--follow", action="store_true", help="Ray Job: follow its logs")
    add_slurm_request(submit)
    submit.set_defaults(run=cmd_submit)


def add_slurm_request(submit):
    """The options of the Slurm batch job of `sweep submit` and `sweep confirm`."""
    slurm = submit.add_argument_group(
        "Slurm",
        "with --slurm: the batch script is written to STORAGE/NAME/slurm/sweep.sbatch "
        "(confirm.sbatch for `sweep confirm`) "
        "(results/sweeps/NAME/slurm beside a bucket), its output appended to slurm-JOBID.out "
        "there; paths are made absolute (the job runs on a node of the shared filesystem)",
    )
    slurm.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    slurm.add_argument("--time", help="time limit, e.g. 24:00:00 (default: the partition's)")
    slurm.add_argument("--partition", help="partition")
    slurm.add_argument("--account", help="account to charge")
    slurm.add_argument("--cpus-per-node", type=int, metavar="N", help="CPUs on each node")
    slurm.add_argument("--gpus-per-node", type=int, metavar="N", help="GPUs on each node")
    slurm.add_argument("--gres", help="generic resources, e.g. gpu:a100:4")
    slurm.add_argument(
        "--signal-seconds",
        type=int,
        default=300,
        metavar="S",
        help="Slurm's warning S seconds before the time limit (default 300): the sweep saves "
        "its state, stops its trials and the job requeues itself",
    )
    slurm.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="OPTION",
        help="a further #SBATCH line, e.g. --sbatch=--qos=high (repeatable)",
    )
    slurm.add_argument(
        "--dry-run", action="store_true", help="print the batch script; write and submit nothing"
    )


def add_slurm(ssub):
    """The commands a Slurm job runs: `slurm-job` (the batch script's) and `slurm-node`."""
    job = ssub.add_parser(
        "slurm-job",
        help="run by a Slurm batch script: Ray over the allocation, then the sweep",
        description="The command of the batch script `sweep submit --slurm` writes: a Ray "
        "cluster over the job's nodes, the sweep on it (`sweep run ARGS --resume`), a requeue "
        "on Slurm's warning signal.",
    )
    job.add_argument("job_dir", help="the sweep's job directory")
    job.add_argument(
        "--command",
        choices=("run", "confirm"),
        default="run",
        help="the sweep command the job runs (default run; confirm: a confirmation round)",
    )
    job.add_argument(
        "sweep_args", nargs="+", help="-- then the arguments of `sweep run` (or confirm)"
    )
    job.set_defaults(run=cmd_slurm_job)
    node = ssub.add_parser(
        "slurm-node",
        help="run by srun in a Slurm job: one worker node of its Ray cluster",
        description="A worker node of the job's Ray cluster: joins the head, stays until "
        "Slurm stops the step.",
    )
    node.add_argument("job_dir", help="the sweep's job directory")
    node.set_defaults(run=cmd_slurm_node)


def add_logs(ssub):
    logs = ssub.add_parser(
        "logs", help="print a submitted sweep's logs", description="Print a Ray Job's logs."
    )
    logs.add_argument("job", help="job id printed by `sweep submit`")
    logs.add_argument("--address", required=True, help="e.g. http://127.0.0.1:8265")
    logs.add_argument("--follow", action="store_true", help="follow until the job ends")
    logs.set_defaults(run=cmd_logs)


def add_status(ssub):
    status = ssub.add_parser(
        "status",
        help="where a sweep stands: its trials, and device-hours spent against its plan",
        description="A sweep's trials by status and, per cell and in all, the device-hours "
        "its trials held next to those its plan expected (`sweep run --plan`), read from its "
        "storage and MLflow; with --address, a submitted Ray Job's status instead.",
    )
    status.add_argument("name", help="the sweep's name, or with --address the job id")
    status.add_argument("--address", help="a Ray dashboard: print the Ray Job NAME's status")
    add_storage_path(status)
    add_json(status, "status")
    status.add_argument(
        "--watch",
        action="store_true",
        help="follow the sweep as it runs (another process's, a Slurm job's), from its "
        "storage and MLflow store, until it ends; then print its status",
    )
    status.set_defaults(run=cmd_status)


def format_summary(summary: dict) -> str:
    best = summary["best"]
    best_text = "no trial finished"
    if best:
        p = best["params"]
        best_text = (
            f"best valid_loss {best['best_valid_loss']:.4f} ({p.get('arch')} depth "
            f"{p.get('depth')} width {p.get('width')}, run {best['run_id'][:8]})"
        )
    overhead = (
        summary["wall_seconds"] / summary["train_seconds"]
        if summary["train_seconds"]
        else float("nan")
    )
    ending = (
        ""
        if summary["complete"]
        else (f"; not finished: `rhnsearch sweep resume {summary['name']}` continues it")
    )
    return (
        f"sweep {summary['name']}: {summary['trials']} trials: {summary['completed']} "
        f"completed, {summary['stopped']} stopped early, {summary['diverged']} diverged, "
        f"{summary['failed']} failed, {summary['running']} unfinished; {best_text}; "
        f"wall {summary['wall_seconds']:.0f}s for {summary['train_seconds']:.0f}s of "
        f"training ({overhead:.2f}x){ending}"
    )


def report(summary, as_json) -> int:
    """Print the summary; exit code 0 only if every trial completed, stopped or diverged."""
    from .output import print_json

    print(format_summary(summary), file=sys.stderr)
    if as_json:
        print_json(summary)
    return 0 if summary["complete"] and summary["failed"] == 0 else 1


def sweep_then_report(sweep, as_json: bool, verbose: bool = False) -> int:
    """Run SWEEP(on_start) and print its summary, the sweep shown as it runs on stderr (a live
    display on a terminal, else a line a trial: `display`); what Tune and Ray print goes to the
    sweep's driver.log, or with --verbose where it always went.
    With --json, stdout holds the JSON line only: what Ray and Tune print (trial logs, their
    nodes' messages) goes to stderr, and Ray is disconnected before the line is printed, so no
    late message can follow it. Once the sweep has returned, SIGINT is ignored: a stop that
    comes too late to stop anything (Slurm's warning signal as the sweep ends) leaves the exit
    code the summary's."""
    import ray

    from ..tracking.sender import drain_seconds
    from .display import Watching

    drain_seconds()  # a bad $RHNSEARCH_MLFLOW_WAIT is refused before anything is stored
    watching = Watching(verbose=verbose)
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        try:
            summary = sweep(watching.begin)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        finally:
            watching.stop()
            ray.shutdown()
    return report(summary, as_json)


def cmd_run(args):
    from ..sweep.lifecycle import run_sweep

    return sweep_then_report(
        lambda on_start: run_sweep(
            args.space,
            preset=args.preset,
            overrides=overrides(args),
            address=args.address,
            search=args.search,
            scheduler=args.scheduler,
            data_dir=args.data_dir,
            tracking_uri=args.tracking_uri,
            experiment=args.experiment,
            name=args.name,
            storage_path=args.storage_path,
            resume=args.resume,
            plan=args.plan,
            on_start=on_start,
        ),
        args.json,
        args.verbose,
    )


def cmd_resume(args):
    from ..sweep.lifecycle import resume_sweep

    return sweep_then_report(
        lambda on_start: resume_sweep(
            args.name, address=args.address, storage_path=args.storage_path, on_start=on_start
        ),
        args.json,
        args.verbose,
    )


def cmd_extend(args):
    from ..sweep.lifecycle import extend_sweep

    if args.samples is None and args.seeds is None:
        raise UserError("sweep extend: give --samples N (settings a cell) or --seeds N")
    return sweep_then_report(
        lambda on_start: extend_sweep(
            args.name,
            samples=args.samples,
            seeds=args.seeds,
            address=args.address,
            storage_path=args.storage_path,
            on_start=on_start,
        ),
        args.json,
        args.verbose,
    )


def cmd_confirm(args):
    if args.slurm:
        return confirm_on_slurm(args)
    from ..sweep.lifecycle import confirm_sweep

    return sweep_then_report(
        lambda on_start: confirm_sweep(
            args.name,
            top=args.top,
            seeds=args.seeds,
            address=args.address,
            storage_path=args.storage_path,
            resume=args.resume,
            on_start=on_start,
        ),
        args.json,
        args.verbose,
    )


def confirm_on_slurm(args):
    from ..cluster.slurm import submit_confirm

    path, text, job_id = submit_confirm(
        args.name,
        slurm_request(args),
        args.storage_path,
        top=args.top,
        seeds=args.seeds,
        dry_run=args.dry_run,
    )
    submitted(path, text, job_id)


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
            f"  {cell['arch']:>7} depth {cell['depth']:>2} tied {str(cell['tied']):5} "
            f"width {cell['width']:>5} params {cell['params']:>11,}"
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


def cmd_submit(args):
    if args.slurm:
        return submit_to_slurm(args)
    from ..cluster.jobs import submit

    job_id = submit(
        args.address,
        args.space,
        args.tracking_uri,
        args.storage_path,
        args.preset,
        overrides(args),
        args.name,
        search=args.search,
        scheduler=args.scheduler,
        data_dir=args.data_dir,
        experiment=args.experiment,
        plan=args.plan,
    )
    print(job_id)
    if args.follow:
        return follow(args.address, job_id)


def slurm_request(args):
    """The Slurm request of `sweep submit --slurm` or `sweep confirm --slurm`."""
    from ..cluster.slurm import Request

    return Request(
        nodes=args.nodes,
        time=args.time,
        partition=args.partition,
        account=args.account,
        cpus_per_node=args.cpus_per_node,
        gpus_per_node=args.gpus_per_node,
        gres=args.gres,
        signal_seconds=args.signal_seconds,
        extra=args.sbatch,
    )


def submitted(path, text: str, job_id: str | None):
    """Print a Slurm job's id, or with --dry-run its batch script."""
    if job_id is None:
        print(text, end="")
        return
    print(job_id)
    print(f"submitted {path} as Slurm job {job_id}", file=sys.stderr)


def submit_to_slurm(args):
    from ..cluster.slurm import submit_sweep

    path, text, job_id = submit_sweep(
        args.space,
        slurm_request(args),
        args.tracking_uri,
        args.storage_path,
        args.preset,
        overrides(args),
        args.name,
        dry_run=args.dry_run,
        search=args.search,
        scheduler=args.scheduler,
        data_dir=args.data_dir,
        experiment=args.experiment,
        plan=args.plan and str(Path(args.plan).resolve()),
    )
    submitted(path, text, job_id)


def cmd_slurm_job(args):
    from ..cluster.slurm import run_job

    logging.getLogger(run_job.__module__).setLevel(logging.INFO)  # the job's own progress
    return run_job(args.job_dir, args.sweep_args, args.command)


def cmd_slurm_node(args):
    from ..cluster.slurm import run_node

    logging.getLogger(run_node.__module__).setLevel(logging.INFO)
    return run_node(args.job_dir)


def follow(address: str, job_id: str) -> int:
    from ..cluster.jobs import follow_logs

    status = follow_logs(address, job_id, sys.stdout)
    print(f"{job_id}: {status}", file=sys.stderr)
    return 0 if status == "SUCCEEDED" else 1


def cmd_logs(args):
    from ..cluster.jobs import job_call

    if args.follow:
        return follow(args.address, args.job)
    print(job_call(args.address, args.job, "get_job_logs"), end="")


def cmd_status(args):
    if args.address:
        from ..cluster.jobs import job_status

        print(job_status(args.address, args.name))
        return
    from ..sweep.status import sweep_status
    from .output import print_json

    if args.watch:
        from .display import watch

        watch(args.name, args.storage_path)
    status = sweep_status(args.name, args.storage_path)
    if args.json:
        print_json(status)
        return
    counts = ", ".join(f"{n} {s}" for s, n in sorted(status["statuses"].items()))
    unit = status["unit"].replace("_hours", "").upper() + "-hours"
    print(f"sweep {status['name']}: {status['trials']} trials ({counts or 'none started'})")
    print(f"{'cell':<22} {'trials':>6} {'ended':>6} {'planned ' + unit:>17} {'spent ' + unit:>15}")
    for cell in status["cells"]:
        planned = "-" if cell["planned"] is None else f"{cell['planned']:.3f}"
        print(
            f"{cell['cell']:<22} {cell['trials']:>6} {cell['ended']:>6} {planned:>17} "
            f"{cell['spent']:>15.3f}"
        )
    planned = "-" if status["planned"] is None else f"{status['planned']:.3f}"
    print(f"{'total':<22} {status['trials']:>6} {'':>6} {planned:>17} {status['spent']:>15.3f}")
    print_phases(status["phases"], status["unit"])


def print_phases(phases: list[dict], unit: str):
    """Each round of the sweep that has closed: its wall time, device-hours (beside the plan's)
    and trial-epochs."""
    if not phases:
        return
    label = unit.replace("_hours", "").upper() + "-hours"
    print(f"{'round':<22} {'wall':>12} {label:>15} {'planned':>10} {'trial-epochs':>13}")
    for phase in phases:
        wall = "-" if phase["wall_seconds"] is None else f"{phase['wall_seconds']:.0f} s"
        planned = phase["planned"].get(unit)
        epochs = phase["trial_epochs"]
        print(
            f"{phase['name']:<22} {wall:>12} {phase['hours'][unit]:>15.3f} "
            f"{'-' if planned is None else f'{planned:.3f}':>10} "
            f"{'-' if epochs is None else epochs:>13}"
        )
