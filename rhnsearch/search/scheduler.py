"""Asynchronous successive halving (ASHA) with one set of rungs per (arch, depth, tied) cell,
judging settings (a setting's seeds share its fate), its rungs and decisions kept in a JSON
file so that a resumed sweep decides as the interrupted one did."""

import hashlib
import itertools
import json
import logging
import math
import threading

import numpy as np
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from ..compat import ray as ray_compat
from ..files import storage, versions
from ..files.append_log import AppendLog

log = logging.getLogger(__name__)
CONTINUE, STOP = TrialScheduler.CONTINUE, TrialScheduler.STOP
ALL = "all cells"
STATE_LOCK = threading.Lock()  # a scheduler's changes, made on Tune's loop, saved on another
SAVE_GAP = 1.0  # seconds at least between two appends of the changes (`_save`)
DECISIONS = "decisions"  # the log of changes, beside the state file (`decisions_log`)


def cell_key(config: dict) -> str:
    """The cell of a trial's config: its label, as sweeps name cells ('rhn d4 w96'), or for a
    cell given as a dict of arch, depth and tied, 'rhn depth 4' ('... tied')."""
    cell = config["cell"]
    if isinstance(cell, str):
        return cell
    return f"{cell['arch']} depth {cell['depth']}" + (" tied" if cell.get("tied") else "")


NOT_THE_SETTING = ("seed", "data_dir", "threads")  # a replicate's, or where it runs


def setting_key(config: dict) -> str:
    """The setting of a trial's config, the same for each of its seeds (and wherever its data
    and threads are): its cell and a digest of the rest ('rhn d4 w96 1f0c...')."""
    rest = json.dumps({k: v for k, v in config.items() if k not in NOT_THE_SETTING}, sort_keys=True)
    return f"{cell_key(config)} {hashlib.sha256(rest.encode()).hexdigest()[:16]}"


class LiveFIFOScheduler(FIFOScheduler):
    """FIFOScheduler's choice of the trial to run (the first added that is pending, else the
    first paused; None if none is) made among the live trials only: FIFOScheduler looks
    through every trial of the sweep, finished ones included, at each step of Tune's loop."""

    def __init__(self):
        super().__init__()
        self._added: dict[str, int] = {}  # trial id -> the order Tune added it in (again
        self._adds = 0  # when it recovers a failed trial: to the end of its list)

    def __setstate__(self, state: dict):
        self.__dict__.update(versions.fifo_state(state))

    def on_trial_add(self, tune_controller, trial):
        self._added[trial.trial_id], self._adds = self._adds, self._adds + 1

    def choose_trial_to_run(self, tune_controller):
        live = sorted(
            tune_controller.get_live_trials(),
            key=lambda trial: self._added.get(trial.trial_id, self._adds),
        )
        for status in ray_compat.waiting_statuses():
            for trial in live:
                if trial.status == status:
                    return trial
        return None


class CellASHAScheduler(LiveFIFOScheduler):
    """ASHA (the rule of Ray's AsyncHyperBandScheduler with one bracket) comparing each setting
    only with the settings of its own cell (per_cell=True), or with every setting
    (per_cell=False).

    A setting is a trial's config but its seed (`setting_key`): the trials of one setting
    with `seeds` N are its replicates, and every other trial is a setting of its own. Rungs are
    at grace_period * reduction_factor**k epochs, below max_t. The first replicate of a setting
    to reach a rung is recorded there, and its setting stopped if its metric is worse than the
    rung's (1 - 1/reduction_factor) quantile of the values recorded before it, one for each
    other setting; the first setting of a rung, so the only setting of a cell, always goes on.
    Each later replicate reaching the rung gets that decision, unrecorded: replicates are never
    compared with each other, and they go on or stop together. A missing or non-finite metric
    (a diverged trial, which ends by itself) is neither recorded nor judged. A trial reporting
    an epoch again (retried or resumed) keeps the decision made when it got there.

    The rungs (each setting's value, under the trial that was judged), each setting's decisions
    and the stopped trials are kept beside `state_file` (a path or URI; None keeps them in
    memory): each change is appended to its log (`decisions_log`) at most once a second, by the
    storage's own thread (Tune's event loop does not wait on a bucket), so that a save costs
    the changes since the last and not the sweep; they are read on first use: Tune never saves
    a scheduler's state, and `Tuner.restore` gives back this object as pickled at the start.
    `state_file` itself is what rhnsearch wrote before the log (the whole state, rewritten at
    each save): a sweep that has one reads it first and appends its changes to the log. One
    written before settings were kept (rungs and stops alone) still gives its trials their
    decisions; its recorded trials' replicates are judged on its rungs as they are.
    """

    def __init__(
        self,
        max_t: int,
        grace_period: int = 1,
        reduction_factor: float = 3,
        per_cell: bool = True,
        state_file: str | None = None,
        time_attr: str = "epoch",
        metric: str | None = None,
        mode: str | None = None,
    ):
        if not 0 < grace_period < max_t or reduction_factor <= 1:
            raise ValueError(
                f"need 0 < grace_period ({grace_period}) < max_t ({max_t}) and "
                f"reduction_factor ({reduction_factor}) > 1"
            )
        super().__init__()
        self.max_t, self.rf, self.per_cell = max_t, reduction_factor, per_cell
        self.milestones = list(
            itertools.takewhile(
                lambda m: m < max_t, (grace_period * reduction_factor**k for k in itertools.count())
            )
        )
        self.state_file, self.time_attr = state_file, time_attr
        self._metric, self._mode = metric, mode
        # {"rungs": {cell: {milestone: {trial_id: value}}}, "settings": {setting: {milestone:
        # decision}}, "stopped": {trial_id: epoch}}
        self._state = None
        self._log, self._unsaved = None, []  # the log of changes, those not appended yet

    def __getstate__(self) -> dict:  # pickled (tuner.pkl) as at the start: read on first use
        return {**self.__dict__, "_state": None, "_log": None, "_unsaved": []}

    def set_search_properties(self, metric, mode, **spec) -> bool:
        if (self._metric and metric) or (self._mode and mode):
            return False
        self._metric, self._mode = metric or self._metric, mode or self._mode
        if self._metric is None and self._mode:
            self._metric = ray_compat.default_metric()
        return True

    def on_trial_add(self, tune_controller, trial):
        if not self._metric or self._mode not in ("min", "max"):
            raise ValueError(
                f"{type(self).__name__} needs a metric and a mode (min or max): "
                "pass them here or to tune.TuneConfig"
            )
        super().on_trial_add(tune_controller, trial)

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        t = result.get(self.time_attr)
        if t is None:
            return CONTINUE
        if t >= self.max_t:
            return STOP
        state = self._load()
        stopped_at = state["stopped"].get(trial.trial_id)
        if stopped_at is not None and t >= stopped_at:
            return STOP  # stopped there before the driver was restarted, or the trial retried
        reached = [m for m in self.milestones if m <= t]
        value = result.get(self._metric)
        if not reached or value is None or not math.isfinite(value):
            return CONTINUE
        cell = cell_key(trial.config) if self.per_cell else ALL
        milestone = f"{reached[-1]:g}"
        rung = state["rungs"].get(cell, {}).get(milestone, {})
        if trial.trial_id in rung:
            return CONTINUE  # recorded and kept there before
        setting = setting_key(trial.config)
        decision = state["settings"].get(setting, {}).get(milestone)
        if decision is None:  # the setting's first replicate here: judged on the others
            decision = self.judge(list(rung.values()), value)
            change = {"cell": cell, "milestone": milestone, "trial": trial.trial_id}
            change |= {"value": value, "setting": setting, "decision": decision}
        elif decision == CONTINUE:
            return CONTINUE  # a replicate of a setting that goes on: nothing to save
        else:
            change = {"trial": trial.trial_id}
        if decision == STOP:
            change["stopped"] = t
        apply(state, change)
        with STATE_LOCK:  # the storage thread may be taking the changes to append them
            self._unsaved.append(change)
        self._save()
        return decision

    def judge(self, recorded: list[float], value: float) -> str:
        """STOP if `value` is worse than the (1 - 1/rf) quantile of the values recorded."""
        if not recorded:
            return CONTINUE
        sign = 1.0 if self._mode == "max" else -1.0
        cutoff = np.percentile([sign * v for v in recorded], (1 - 1 / self.rf) * 100)
        return STOP if sign * value < cutoff else CONTINUE

    def _load(self) -> dict:
        if self._state is None:
            self._unsaved = []
            if self.state_file:
                self._state, self._log = read_state(self.state_file)
            else:
                self._state = versions.current_scheduler_state({}, "")
        return self._state

    def _save(self):
        """Queue an append of the changes not saved yet: on the storage thread, which takes
        whatever changes there are when it runs, at most once every SAVE_GAP seconds."""
        if self.state_file:
            storage.LATER.put(f"append {self._log.location}", self._append, gap=SAVE_GAP)

    def _append(self):
        with STATE_LOCK:
            changes, self._unsaved = self._unsaved, []
        if not changes:
            return
        header = {"version": versions.SCHEDULER_VERSION, "per_cell": self.per_cell}
        header |= {"metric": self._metric, "mode": self._mode, "milestones": self.milestones}
        try:  # a new log starts with what wrote it
            self._log.append(changes if self._log.read_to else [header, *changes])
        except Exception:
            with STATE_LOCK:  # appended at the next save (the storage thread logs why)
                self._unsaved[:0] = changes
            raise

    def debug_string(self) -> str:
        state = self._load()
        stopped = state["stopped"]
        lines = [
            f"{'Per-cell ASHA' if self.per_cell else 'ASHA'}: rungs at epochs "
            f"{', '.join(f'{m:g}' for m in self.milestones)}; {len(stopped)} trials "
            "stopped"
        ]
        for key, rungs in sorted(state["rungs"].items()):
            trials = set().union(*rungs.values())
            sizes = ", ".join(f"{len(r)} at {m}" for m, r in rungs.items())
            lines.append(f"  {key}: {sizes}; {len(trials & stopped.keys())} stopped")
        return "\n".join(lines)


def decisions_log(state_file: str) -> str:
    """The log of a scheduler's changes (AppendLog), in the folder of its state file."""
    return storage.join(storage.parent(state_file), DECISIONS)


def apply(state: dict, change: dict, where: str = ""):
    """Make one change of the log (read from WHERE) to STATE: a value recorded in a rung, a
    setting's decision there, a trial stopped; its first line says what wrote it."""
    if "version" in change:
        versions.checked(change, versions.SCHEDULER_VERSION, where)
        return
    if "value" in change:
        rung = state["rungs"].setdefault(change["cell"], {}).setdefault(change["milestone"], {})
        rung[change["trial"]] = change["value"]
        decided = state["settings"].setdefault(change["setting"], {})
        decided[change["milestone"]] = change["decision"]
    if "stopped" in change:
        state["stopped"][change["trial"]] = change["stopped"]


def read_state(state_file: str) -> tuple[dict, AppendLog]:
    """The rungs, settings and stopped trials a scheduler keeps beside STATE_FILE (the file,
    if an older rhnsearch wrote one, then each change in the log), and the log, read to its
    end."""
    text = storage.read_text(state_file)
    saved = versions.current_scheduler_state(json.loads(text or "{}"), state_file)
    state = {k: saved[k] for k in ("rungs", "settings", "stopped")}
    changes = AppendLog(decisions_log(state_file))
    for change in changes.read():
        apply(state, change, changes.location)
    if text or changes.read_to:
        log.info(
            "scheduler state read from %s: %d trials stopped so far",
            changes.location,
            len(state["stopped"]),
        )
    return state, changes
