"""`rhnsearch sweep submit`, `slurm-job`, `slurm-node` and `logs`: a sweep handed to a cluster as
a Ray Job or a Slurm batch job, and followed there."""

import logging
import sys
from pathlib import Path

from .sweep_options import add_run_options, overrides


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


def cmd_submit(args):
    if args.slurm:
        return submit_to_slurm(args)
    from ..sweep.jobs import submit

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
    from ..sweep.slurm import Request

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
    from ..sweep.slurm import submit_sweep

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


def confirm_on_slurm(args):
    from ..sweep.slurm import submit_confirm

    path, text, job_id = submit_confirm(
        args.name,
        slurm_request(args),
        args.storage_path,
        top=args.top,
        seeds=args.seeds,
        dry_run=args.dry_run,
    )
    submitted(path, text, job_id)


def cmd_slurm_job(args):
    from ..sweep.slurm import run_job

    logging.getLogger(run_job.__module__).setLevel(logging.INFO)  # the job's own progress
    return run_job(args.job_dir, args.sweep_args, args.command)


def cmd_slurm_node(args):
    from ..sweep.slurm import run_node

    logging.getLogger(run_node.__module__).setLevel(logging.INFO)
    return run_node(args.job_dir)


def follow(address: str, job_id: str) -> int:
    from ..sweep.jobs import follow_logs

    status = follow_logs(address, job_id, sys.stdout)
    print(f"{job_id}: {status}", file=sys.stderr)
    return 0 if status == "SUCCEEDED" else 1


def cmd_logs(args):
    from ..sweep.jobs import job_call

    if args.follow:
        return follow(args.address, args.job)
    print(job_call(args.address, args.job, "get_job_logs"), end="")
