"""What rhnsearch uses of Ray beyond its public API: the names of the files Tune saves its state in
and how Tune reads them, the layout of its saved experiment state (each trial's folder, status
and newest checkpoint; a state written back without its ended trials) and of its saved search
state (the folder it makes new trials in), the checkpoints Tune's manager holds, the names of a
trial's checkpoint folders, the analysis Tune builds as it restores a Tuner, a restored Tuner's
searcher, scheduler and callbacks, `ray.init`'s private node address and the logger of its token
notice, the setting by which a worker lowers its own niceness, its GCS client (asked whether a
cluster refuses this client's token), Tune's default metric name, the statuses of a trial waiting
to run, the result files its result grid reads, how it draws a new trial's id and how its
restore lists the experiment's folder.

Each function first checks that the installed Ray is in SUPPORTED and raises a one-line
UserError otherwise (a saved state read wrongly would resume a sweep wrongly). A state read
here that is not laid out as expected raises KeyError, TypeError or ValueError: the callers
say so and go on without it.
"""

import contextlib
import json
import logging
import pickle
import posixpath
import re
import shlex
import uuid

from . import require

SUPPORTED = ">=2.60,<2.61"
EXPERIMENT_STATE = r"experiment_state-.*\.json"  # one per driver session; resume reads the newest
EXPERIMENT_STATE_END = rb'"stats": \{"start_time": [-+.0-9eE]+\}\}'  # save_to_dir writes it last
SEARCH_STATE = r"search_gen_state-.*\.json"  # the search generator's and its wrappers'
SEARCHER_STATE = r"searcher-state-.*\.pkl"  # the searcher's own `save`
CHECKPOINT = r"checkpoint_\d{6}"  # a trial's checkpoint folder, numbered from 0
TRIAL_ID_DIGITS = 12  # hex digits of a new trial's id (Tune's own: 8)


def _check(what: str):
    require("ray", SUPPORTED, what)


def is_experiment_state(name: str) -> bool:
    """Whether the file `name` is Tune's saved experiment state (rewritten in place)."""
    _check("Tune's file names")
    return re.fullmatch(EXPERIMENT_STATE, name) is not None


def is_whole_experiment_state(data) -> bool:
    """Whether `data` (bytes or a buffer), a copy of Tune's experiment state, holds one whole
    state. Tune's `save_to_dir` writes the state's `stats` last, and nothing before them reads
    so (each trial's state is a JSON string; the controller's has no `stats`). A copy cut short
    does not end with them; a copy that read on across a rewrite (a whole state, then the tail
    of the next, longer one) holds them twice. The bytes are searched, not decoded or parsed,
    so the check keeps no memory as the state grows. A copy spliced inside the state (the start
    of one, the rest of the next) can pass, as it could pass a parse."""
    _check("the layout of Tune's experiment state")
    ends = [match.end() for match in re.finditer(EXPERIMENT_STATE_END, data)]
    return len(ends) == 1 and not bytes(data[ends[0] :]).strip()


def newest_experiment_state(names: list[str]) -> str | None:
    """The newest of Tune's saved experiment states among the file names `names` (None
    without one)."""
    return _newest(names, EXPERIMENT_STATE)


def load_experiment_state(data: bytes) -> dict:
    """A saved experiment state's bytes, parsed as Tune's restore parses them."""
    _check("Tune's saved experiment state")
    return json.loads(data)


def newest_saved_states(names: list[str]) -> list[tuple[str, object]]:
    """(name, loader) of the newest file of each kind of saved state that Tune's resume
    reads, among the file names `names`: the loader is how Tune reads its bytes (the searcher's
    state is what rhnsearch's searcher saves, under Tune's name)."""
    from ray import cloudpickle

    kinds = {
        EXPERIMENT_STATE: load_experiment_state,
        r"basic-variant-state-.*\.json": cloudpickle.loads,
        SEARCH_STATE: cloudpickle.loads,
        SEARCHER_STATE: pickle.loads,
    }
    found = [(_newest(names, pattern), load) for pattern, load in kinds.items()]
    return [(name, load) for name, load in found if name is not None]


def newest_search_states(names: list[str]) -> tuple[str | None, str | None]:
    """The newest saved state of Tune's search generator and of the searcher it wraps, among
    the file names `names` (None for one not there)."""
    return _newest(names, SEARCH_STATE), _newest(names, SEARCHER_STATE)


def search_state_for(data: bytes, trial_ids: set[str]) -> bytes | None:
    """Tune's saved search-generator state `data` made to have made the trials `trial_ids`
    and no others: its count of the trials made (not finished, where that count falls) and
    its concurrency limiter's live trials. None where it had made them already."""
    from ray import cloudpickle

    _check("Tune's saved search state")
    state = cloudpickle.loads(data)
    limiter = state.get("name:ConcurrencyLimiter", {"live_trials": set()})
    unknown = limiter["live_trials"] - trial_ids
    if state["counter"] == len(trial_ids) and not unknown:
        return None
    if state["counter"] > len(trial_ids):
        state["finished"] = False
    state["counter"] = len(trial_ids)
    if unknown:
        limiter["live_trials"] -= unknown
        limiter["num_unfinished_live_trials"] = max(
            0, limiter["num_unfinished_live_trials"] - len(unknown)
        )
    return cloudpickle.dumps(state)


def search_state_at(data: bytes, filesystem, experiment_fs_path: str) -> bytes | None:
    """Tune's saved search-generator state `data` with its experiment, of which a resumed
    search makes its new trials, at EXPERIMENT_FS_PATH on FILESYSTEM: the restore moves the
    saved trials to a moved experiment's folder (TuneController._restore_trials) but gives the
    new trials the folder the state was saved in. None where it is there already."""
    from ray import cloudpickle

    _check("Tune's saved search state")
    state = cloudpickle.loads(data)
    where = state["experiment"].storage  # also the spec's "storage": one object in the pickle
    parent, name = posixpath.split(experiment_fs_path.rstrip("/"))
    if (where.storage_fs_path, where.experiment_dir_name) == (parent, name):
        return None
    where.storage_filesystem, where.storage_fs_path, where.experiment_dir_name = (
        filesystem,
        parent,
        name,
    )
    return cloudpickle.dumps(state)


def _newest(names: list[str], pattern: str) -> str | None:
    _check("Tune's file names")
    return max((name for name in names if re.fullmatch(pattern, name)), default=None)


DECODED = "rhnsearch decoded"  # a parsed state's trial infos, decoded once (`_saved_trials`)


def _saved_trials(state: dict) -> list[tuple[dict, object]]:
    """(trial info, run state as saved) of each trial in a saved experiment state, parsed:
    the info decoded (once a state: 9 kB of JSON a trial, which each reader would decode
    again), the run state not yet (`_decoded`)."""
    _check("Tune's saved experiment state")
    if DECODED not in state:
        state[DECODED] = [(_decoded(info), run) for info, run in state["trial_data"]]
    return state[DECODED]


def _decoded(part) -> dict:
    return json.loads(part) if isinstance(part, str) else part


def saved_trial_ids(state: dict) -> set[str]:
    """The ids of the trials in a saved experiment state, parsed."""
    return {info["trial_id"] for info, _ in _saved_trials(state)}


def _newest_checkpoint(run) -> str | None:
    """The name of the newest checkpoint a trial's saved run state names, or None."""
    manager = _decoded(run).get("checkpoint_manager") or {}
    saved = (
        bytes.fromhex(manager["value"]).decode("latin-1")  # its pickle, not loaded
        if manager.get("_type") == "CLOUDPICKLE_FALLBACK"
        else json.dumps(manager)
    )
    named = re.findall(CHECKPOINT, saved)
    return max(named) if named else None


def resumable_checkpoints(state: dict) -> list[tuple[str, str | None]]:
    """(trial folder relative to the experiment, name of its newest checkpoint or None) of
    each trial in a saved experiment state, parsed, that a resume runs again: every one but
    those that finished (TERMINATED)."""
    from ray.tune.experiment import Trial

    return [
        (info["relative_logdir"], _newest_checkpoint(run))
        for info, run in _saved_trials(state)
        if info["status"] != Trial.TERMINATED
    ]


def ended_trials(state: dict) -> list[dict]:
    """Each trial of a saved experiment state, parsed, that finished (TERMINATED; a resume
    runs it no more): its id, its folder relative to the experiment and its newest
    checkpoint's name (or None)."""
    from ray.tune.experiment import Trial

    return [
        {
            "trial_id": info["trial_id"],
            "folder": info["relative_logdir"],
            "checkpoint": _newest_checkpoint(run),
        }
        for info, run in _saved_trials(state)
        if info["status"] == Trial.TERMINATED
    ]


def without_trials(state: dict, trial_ids: set[str]) -> bytes:
    """A saved experiment state, parsed, made into the bytes Tune reads, without the trials
    `trial_ids`: but the last of them where it would hold no trial (Tune's restore takes the
    first restored trial's timestamp)."""
    infos = [info for info, _ in _saved_trials(state)]
    trials = state["trial_data"]
    kept = [t for t, info in zip(trials, infos) if info["trial_id"] not in trial_ids]
    rest = {k: v for k, v in state.items() if k != DECODED} | {"trial_data": kept or trials[-1:]}
    return json.dumps(rest).encode()  # its keys in their order: `stats` last, as Tune's


def restored_tuner(path: str, trainable, *, storage_filesystem=None):
    """Tune's Tuner restored from PATH, its unfinished and errored trials to run again, without
    the ExperimentAnalysis that Tune builds of the saved trials at the restore: nothing reads it
    before the fit's own results replace it, and building it reads the saved state and every
    trial's results again, a second copy of every trial that the fit would otherwise hold
    throughout."""
    from ray import tune
    from ray.tune.impl import tuner_internal

    _check("the ExperimentAnalysis a Tuner builds as it is restored")
    built = tuner_internal.ExperimentAnalysis
    tuner_internal.ExperimentAnalysis = _not_built  # Tune's restore keeps None where it raises
    try:
        tuner = tune.Tuner.restore(
            path,
            trainable,
            resume_unfinished=True,
            resume_errored=True,
            storage_filesystem=storage_filesystem,
        )
    finally:
        tuner_internal.ExperimentAnalysis = built
    return tuner


def _not_built(*args, **options):
    raise LookupError("the restored Tuner's ExperimentAnalysis is not built")


def restored_parts(tuner) -> list:
    """The searcher, scheduler and callbacks that a restored Tuner (`restored_tuner`) unpickled
    from its saved state, as they will run."""
    _check("a restored Tuner's configs")
    local = tuner._local_tuner
    tune_config, run_config = local._tune_config, local._run_config
    return [tune_config.search_alg, tune_config.scheduler, *(run_config.callbacks or [])]


def keep_metric_statistics(trial, metric: str):
    """Let Tune's record of `trial` hold the running statistics (max, min, mean, the last 5
    and 10 values) of `metric` alone, as it ends (sweep/ended_trials.py)."""
    _check("Tune's metric statistics of a trial")
    metadata = trial.run_metadata  # (its attributes set anew: Tune's JSON of it is redone)
    metadata.metric_analysis = {k: v for k, v in metadata.metric_analysis.items() if k == metric}
    metadata.metric_n_steps = {k: v for k, v in metadata.metric_n_steps.items() if k == metric}


def forget_checkpoints(trial):
    """Let Tune's checkpoint manager of `trial` hold none of the checkpoints it registered:
    called as the trial registers a newer one (which the manager then holds, alone), once its
    older ones are bound for deletion from the storage (sweep/checkpoints.py). With its own
    num_to_keep off, Tune holds every checkpoint a trial registered (2.3 kB each, some 6 a
    trial), in the driver's memory and in each save of its experiment state."""
    _check("Tune's checkpoint manager")
    trial.run_metadata.checkpoint_manager._checkpoint_results.clear()


def is_checkpoint(name: str) -> bool:
    """Whether `name` is the name of one of a trial's checkpoint folders."""
    _check("Tune's checkpoint names")
    return re.fullmatch(CHECKPOINT, name) is not None


def is_first_checkpoint(name: str) -> bool:
    """Whether `name` is the name of a trial's first checkpoint folder (none is older)."""
    _check("Tune's checkpoint names")
    return name == "checkpoint_000000"


TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"
DEFAULT_TOKEN_NOTICE = "Token authentication is enabled for this Ray cluster."


class _NoDefaultTokenNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(DEFAULT_TOKEN_NOTICE)


def init_on_loopback(**options):
    """`ray.init(**options)` starting a local Ray whose processes listen on 127.0.0.1 only,
    without Ray's notice that such a Ray has token authentication on by default (its warning
    that authentication is off is kept)."""
    import ray

    _check("ray.init's _node_ip_address and its token notice's logger")
    notice = _NoDefaultTokenNotice()
    logging.getLogger(TOKEN_LOGGER).addFilter(notice)
    try:
        ray.init(**options, _node_ip_address="127.0.0.1")
    finally:
        logging.getLogger(TOKEN_LOGGER).removeFilter(notice)


WORKER_NICENESS = "RAY_worker_niceness"  # a worker's setting: how much nicer it makes itself


def workers_started_nice(niceness: int, python: str) -> dict:
    """The runtime_env fields that start each worker's PYTHON (a path) at NICENESS and have it
    stay there. A worker otherwise starts at the raylet's niceness and makes itself nicer (by
    15, its setting) only once it has connected: many starting at once starve those that run."""
    _check("the setting by which a worker lowers its niceness")
    return {
        "py_executable": f"nice -n {niceness} {shlex.quote(python)}",
        "env_vars": {WORKER_NICENESS: "0"},
    }


def refuses_token(address: str) -> bool:
    """Whether the GCS at ADDRESS (HOST:PORT) refuses this client's Ray token, asked once.
    `ray.init` asks twenty times, a second apart, before it gives up on a refusal."""
    from ray._raylet import GcsClient
    from ray.exceptions import AuthenticationError

    _check("Ray's GcsClient")
    try:
        GcsClient(address=address)
    except AuthenticationError:
        return True
    except Exception:  # noqa: BLE001 - anything else is ray.init's to say
        return False
    return False


def default_metric() -> str:
    """The metric name Tune gives a scheduler that is told a mode but no metric."""
    _check("Tune's default metric")
    from ray.tune.result import DEFAULT_METRIC

    return DEFAULT_METRIC


def waiting_statuses() -> tuple[str, str]:
    """The statuses of a trial that FIFO scheduling starts, in its order: pending, then
    paused."""
    _check("Tune's trial statuses")
    from ray.tune.experiment import Trial

    return Trial.PENDING, Trial.PAUSED


def longer_trial_ids():
    """Have Tune draw each new trial's id from 48 random bits (12 hex digits), not its 32
    (`Trial.generate_id`, which takes what it draws). Two trials of a 20,000-trial sweep
    share 32 bits with a chance of 1 in 22 (1 in 86 at 10,000): the second then crashes the
    driver if the first is running, and if it has ended, its records go to the first one's
    MLflow run and it is lost to the sweep (and Tune's saved state keeps one of the two, so
    that a resume runs one setting twice). At 48 bits the chance is 1 in 1.4 million at
    20,000 trials. A trial keeps its id: an earlier one's, of 8 digits, too."""
    _check("how Tune draws a new trial's id")
    from ray.tune.experiment import Trial

    Trial.generate_id = classmethod(lambda cls: uuid.uuid4().hex[:TRIAL_ID_DIGITS])


@contextlib.contextmanager
def no_result_files():
    """Within it, Tune's result grid looks for no trial's result files: a sweep turns Tune's
    file loggers off (MLflow has the results), and at the end of `fit` its
    ExperimentAnalysis would look for two in every trial's folder, warn of each missing and,
    on a bucket, spend four requests a trial on them (two of them listings)."""
    from ray.tune.analysis.experiment_analysis import ExperimentAnalysis

    _check("Tune's ExperimentAnalysis reading each trial's result files")
    fetch = ExperimentAnalysis._fetch_trial_dataframes
    ExperimentAnalysis._fetch_trial_dataframes = _no_trial_dataframes
    try:
        yield
    finally:
        ExperimentAnalysis._fetch_trial_dataframes = fetch


def _no_trial_dataframes(analysis) -> dict:
    return {}  # a Result's metrics_dataframe is None then


@contextlib.contextmanager
def restore_listed(experiment_fs_path: str, names: list[str]):
    """Within it, Tune's restore of the experiment at EXPERIMENT_FS_PATH takes NAMES (the
    resume's own listing of that folder) for what the folder holds, rather than listing it
    twice more: for its newest experiment state, and for the state files it copies to the
    driver. The folder holds a folder a trial: on a bucket, a page of listing every 1,000
    trials (some 2 s a listing on moto at 16,000). Tune takes from NAMES only its own state
    files, which the resume rewrites in place. Every other listing is Tune's own."""
    _check("Tune's listings of the experiment's folder as it restores")
    from ray.tune.execution import experiment_state
    from ray.tune.execution.tune_controller import TuneController

    listed, resume = experiment_state._list_at_fs_path, TuneController.resume
    folder = posixpath.normpath(experiment_fs_path)

    def listing(fs, fs_path, file_filter=None):
        if file_filter is None and posixpath.normpath(fs_path) == folder:
            return list(names)
        return listed(fs, fs_path, file_filter)

    def resume_listed(controller, *args, **options):
        experiment_state._list_at_fs_path = listing
        try:
            return resume(controller, *args, **options)
        finally:
            experiment_state._list_at_fs_path = listed

    TuneController.resume = resume_listed
    try:
        yield
    finally:
        TuneController.resume = resume
