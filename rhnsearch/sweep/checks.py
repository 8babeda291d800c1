"""The checks a sweep passes before Ray starts, each failing in one line: that its folders take a
write and its storage answers, and for `sweep run` the whole request (space, cluster, data,
MLflow store, plan), so that bad input stops a sweep before anything is written.
"""

import errno
import os
import tempfile
from pathlib import Path

from ..cluster.connect import check_address, check_gpus
from ..compat import mlflow as mlflow_compat
from ..data import data_dir as default_data_dir
from ..data import load_dataset
from ..errors import UserError, first_line
from ..files import storage
from ..files.layout import LOCAL_SWEEPS, default_name, sweep_storage
from ..search.plan import load_plan
from ..search.space import Space, load_space
from ..tracking.uris import check_store, resolve_tracking_uri, sqlite_path
from .record import Round, SweepRecord


def probe_write(directory: Path):
    """Raise OSError unless a file can be written where DIRECTORY is (or would be made): one
    is written, synced and removed."""
    existing = next(p for p in (directory, *directory.parents) if p.exists())
    if not existing.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(existing))
    with tempfile.TemporaryFile(dir=existing) as probe:  # removed when closed
        probe.write(bytes(65536))
        probe.flush()
        os.fsync(probe.fileno())


def check_writable(directory: Path):
    """Fail in one line unless a file can be written where `directory` is (or would be
    made): a read-only or full disk must stop a sweep before it starts, not days later."""
    try:
        probe_write(directory)
    except OSError as exc:
        existing = next(p for p in (directory, *directory.parents) if p.exists())
        raise UserError(
            f"results directory {directory.parent} is not writable ({existing}: "
            f"{exc.strerror or exc}): free some space, make it writable, or run "
            "from a directory you can write (results/ is made in the current "
            "directory)"
        ) from None


def check_sweep_writable(record: SweepRecord, command: str):
    """Fail in one line unless the sweep's folder takes a write (a probe file or object,
    removed), and beside a bucket its folder on this disk too (`SweepPaths.local`): `sweep
    COMMAND` writes its state, checkpoints and journal there. Called before Ray starts and
    before anything is written to the storage or to MLflow, so that a read-only mount or
    bucket refuses the command and leaves the sweep as it was."""
    folder = record.paths.sweep
    try:
        if storage.is_uri(folder):
            storage.check_reachable(folder)
            probe_write(record.paths.local)
        else:
            probe_write(Path(folder))
    except (OSError, ValueError) as exc:  # pyarrow's errors are OSError, a bad URI ValueError
        raise UserError(
            f"sweep {record.name}: its folder {folder} cannot be written "
            f"({first_line(exc)}): `sweep {command}` writes its state and checkpoints there; "
            "make it writable, or copy the sweep to storage that is and pass --storage-path"
        ) from None


def check_going_on(record: SweepRecord, command: str):
    """What `sweep COMMAND` (resume, extend, confirm) checks before Ray starts: that this
    MLflow is one its trials can be logged with, and that the sweep's folder takes a write."""
    mlflow_compat.require_logging()
    check_sweep_writable(record, command)


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


def checked_space(space_path, preset: str | None, overrides, search: str | None) -> Space:
    """The space of a sweep request, and the search it runs with (SEARCH, else the space's),
    checked alike wherever the sweep is asked for: `sweep run` (`checked_sweep`), a Ray Job
    (`jobs.submit`) and a Slurm job (`slurm.submit_sweep`), so that bad input is one line
    here, not a job's failure on the cluster."""
    space = load_space(space_path, preset=preset, overrides=overrides)
    if (search or space.search) != "random" and space.seeds > 1:
        raise UserError(
            f"seeds ({space.seeds}) repeats each setting of a random search: drop "
            "--search optuna, or run with seeds 1"
        )
    return space


def checked_sweep(
    space_path,
    *,
    preset: str | None,
    overrides,
    address: str | None,
    search: str | None,
    scheduler: str | None,
    data_dir,
    tracking_uri: str | None,
    name: str | None,
    storage_path: str | None,
    plan,
) -> SweepRecord:
    """The record of the sweep `run_sweep` is asked for (its options, as it
    takes them), every check made that can be before Ray starts, in this order: the space,
    the cluster's address or this machine's GPUs, the storage, the search, the dataset
    (fetched on first use), the MLflow store, the plan. The record's experiment and parent
    run are not made yet: their ids are empty (`lifecycle.recorded_sweep` makes them)."""
    space = checked_space(space_path, preset, overrides, search)
    mlflow_compat.require_logging()
    # Absolute paths first: in a Ray Job, joining the cluster may replace the working dir.
    space_path = Path(space_path).resolve()
    if address:
        check_address(address)
    else:
        check_gpus(space.resources.gpu, local=True)
    root = sweep_storage(storage_path, address)
    check_writable(LOCAL_SWEEPS.resolve() if storage.is_uri(root) else Path(root))
    check_storage(root)
    search = search or space.search
    scheduler = scheduler or space.scheduler.name
    data_root = default_data_dir(data_dir).resolve()
    # fetched on first use, before Ray starts
    data = load_dataset(space.dataset, data_dir=data_root)
    uri = resolve_tracking_uri(tracking_uri)
    if not sqlite_path(uri):
        check_store(uri)  # a server that does not answer fails before Ray starts
    cells = space.cells_for(data)
    planned = load_plan(plan, cells) if plan else None
    name = name or default_name(space.study, preset)
    return SweepRecord(
        name=name,
        space_path=str(space_path),
        preset=preset,
        overrides=tuple(overrides),
        search=search,
        scheduler=scheduler,
        tracking_uri=uri,
        experiment_id="",
        parent_run_id="",
        data_dir=str(data_root),
        storage=root,
        trials=space.num_trials,
        cells=cells,
        space=space,
        plan=planned,
        rounds=(Round(space.samples, space.seeds),),
    )
