"""`rhnsearch sweep run`, `resume`, `extend`, `confirm` and `status`: a sweep on a local Ray
or a cluster, shown as it runs (`display`), and where it stands; the group's other commands
are in `sweep_plan` and `sweep_submit`."""

import contextlib
import signal
import sys

from ..errors import UserError
from .sweep_options import (
    add_address,
    add_json,
    add_run_options,
    add_storage_path,
    add_sweep_name,
    add_verbose,
    overrides,
)
from .sweep_plan import add_check, add_plan
from .sweep_submit import add_logs, add_slurm, add_slurm_request, add_submit, confirm_on_slurm


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


def print_summary(summary, as_json) -> int:
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
    return print_summary(summary, as_json)


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


def cmd_status(args):
    if args.address:
        from ..sweep.jobs import job_status

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
    """Each round of the sweep that has closed: its wall time, device-hours and trial-epochs,
    each beside the plan's where the sweep has one."""
    if not phases:
        return
    label = unit.replace("_hours", "").upper() + "-hours"

    def beside(value, planned, digits: int) -> str:
        shown = "-" if value is None else f"{value:.{digits}f}"
        return shown + ("" if planned is None else f" / {planned:.{digits}f}")

    print(
        f"{'round':<22} {'wall':>10} {label + ' (/ planned)':>24} {'trial-epochs (/ planned)':>26}"
    )
    for phase in phases:
        wall = "-" if phase["wall_seconds"] is None else f"{phase['wall_seconds']:.0f} s"
        planned = phase["planned"]
        print(
            f"{phase['name']:<22} {wall:>10} "
            f"{beside(phase['hours'][unit], planned.get(unit), 3):>24} "
            f"{beside(phase['trial_epochs'], planned.get('trial_epochs'), 0):>26}"
        )
