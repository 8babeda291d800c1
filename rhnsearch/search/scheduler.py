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

log = logging.getLogger(__name__)
CONTINUE, STOP = TrialScheduler.CONTINUE, TrialScheduler.STOP
ALL = "all cells"
STATE_LOCK = threading.Lock()  # a scheduler's state, changed on Tune's loop, saved on another
SAVE_GAP = 1.0  # seconds at least between two writes of the state (`_save`)


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
    and the stopped trials are written to `state_file` (a path or URI; None keeps them in
    memory) after a decision is made, at most once a second, by the storage's own thread
    (Tune's event loop does not wait on a bucket), and read from it on first use: Tune never
    saves a scheduler's state, and `Tuner.restore` gives back this object as pickled at the
    start. A file written before settings were kept (rungs and stops alone) still gives its
    trials their decisions; its recorded trials' replicates are judged on its rungs as they
    are.
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
        with STATE_LOCK:  # the storage thread may be making the saved text of it
            cell = state["rungs"].setdefault(cell_key(trial.config) if self.per_cell else ALL, {})
            milestone = f"{reached[-1]:g}"
            rung = cell.setdefault(milestone, {})
            if trial.trial_id in rung:
                return CONTINUE  # recorded and kept there before
            decided = state["settings"].setdefault(setting_key(trial.config), {})
            decision = decided.get(milestone)
            if decision is None:  # the setting's first replicate here: judged on the others
                decision = decided[milestone] = self.judge(list(rung.values()), value)
                rung[trial.trial_id] = value
            elif decision == CONTINUE:
                return CONTINUE  # a replicate of a setting that goes on: nothing to save
            if decision == STOP:
                state["stopped"][trial.trial_id] = t
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
            text = storage.read_text(self.state_file) if self.state_file else None
            saved = versions.current_scheduler_state(json.loads(text or "{}"), self.state_file)
            self._state = {k: saved[k] for k in ("rungs", "settings", "stopped")}
            if text:
                log.info(
                    "scheduler state read from %s: %d trials stopped so far",
                    self.state_file,
                    len(self._state["stopped"]),
                )
        return self._state

    def _save(self):
        """Queue a write of the state: made into text on the storage thread when the write
        runs, so a decision costs Tune's loop nothing that grows with the trials, and at most
        once every SAVE_GAP seconds."""
        if self.state_file:
            storage.write_text_later(self.state_file, self._text, gap=SAVE_GAP)

    def _text(self) -> str:
        with STATE_LOCK:
            return json.dumps(
                {
                    "version": versions.SCHEDULER_VERSION,
                    "per_cell": self.per_cell,
                    "metric": self._metric,
                    "mode": self._mode,
                    "milestones": self.milestones,
                    **self._state,
                }
            )

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
