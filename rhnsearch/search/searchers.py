"""How a sweep samples its trials: a setting of each (arch, depth) cell in turn, drawn at random
(Tune's sampling domains) or asked of the cell's own Optuna study (TPE, GP or CMA-ES), so that
one cell's losses never steer another's search. A hyperparameter the cell's arch does not read
(t_bias without transform gates) is not sampled for it.

A sweep's trials come in rounds: its first, then one per `sweep extend`, each a set of slots
(setting k of a cell, run with seed s) that the earlier rounds did not have; a confirmation
round (`sweep confirm`) runs chosen settings again with new seeds (ConfirmSearcher). Setting k of a
cell at random is a function of the space's seed, the cell and k alone, so a round drawn later
goes on with the same stream; the Optuna studies live in the sweep's storage, so a resumed or
extended sweep goes on with them.
"""

import contextlib
import os
import pickle
import zlib

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import BaseJournalBackend, JournalFileBackend, JournalFileOpenLock
from optuna.trial import TrialState
from ray import tune
from ray.tune.search import Searcher

from ..files import storage, versions
from ..files.append_log import AppendLog
from ..files.layout import OPTUNA_JOURNAL
from ..models import resolve_arch
from .space import Cell, Distribution, Space
from .trial import tune_config

METRIC, MODE = "valid_loss", "min"
BEST = "best_valid_loss"  # what a cell's study is told of a trial
TUNE_TRIAL = "tune_trial_id"  # the user attr of an Optuna trial: the Tune trial asked for it
SAMPLERS = {
    "tpe": lambda seed: optuna.samplers.TPESampler(seed=seed, constant_liar=True),
    "gp": lambda seed: optuna.samplers.GPSampler(seed=seed),
    "cmaes": lambda seed: optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False),
}


def tune_domain(dist: Distribution):
    low_high = getattr(dist, dist.kind)
    return {
        "uniform": lambda: tune.uniform(*low_high),
        "loguniform": lambda: tune.loguniform(*low_high),
        "randint": lambda: tune.randint(low_high[0], low_high[1] + 1),
        "choice": lambda: tune.choice(low_high),
    }[dist.kind]()


def optuna_distribution(dist: Distribution):
    low_high = getattr(dist, dist.kind)
    return {
        "uniform": lambda: FloatDistribution(*low_high),
        "loguniform": lambda: FloatDistribution(*low_high, log=True),
        "randint": lambda: IntDistribution(*low_high),
        "choice": lambda: CategoricalDistribution(low_high),
    }[dist.kind]()


def round_slots(samples: int, seeds: int, done: tuple[int, int] = (0, 0)) -> list[tuple]:
    """The (setting, seed) slots of a cell in a round that brings a sweep to SAMPLES settings
    run with SEEDS seeds each, where DONE = (settings, seeds) had run before."""
    return [(k, s) for k in range(samples) for s in range(seeds) if k >= done[0] or s >= done[1]]


def stream_seed(*parts) -> list[int]:
    """Seed words for numpy or Optuna from ints and labels (a label by its CRC-32)."""
    return [p if isinstance(p, int) else zlib.crc32(str(p).encode()) for p in parts]


class CellSearcher(Searcher):
    """Tune searcher: for each setting index, a setting of every cell in turn, each run with
    its seeds (`fixed.seed` + s where the space sweeps seeds), so that every cell has had as
    many trials as any other at every moment. Saved with Tune's experiment (`saved`: its
    position), so a resumed round goes on where it stopped."""

    def __init__(self, space: Space, cells: dict[str, Cell], constants: dict, slots: list[tuple]):
        super().__init__(metric=METRIC, mode=MODE)
        self.params = {
            label: {
                k: d for k, d in space.params.items() if k not in resolve_arch(cell.arch).unused
            }
            for label, cell in cells.items()
        }
        self.seeded = "seed" not in space.params  # else each setting draws its own seed
        self.space_seed, self.constants = space.seed, constants
        settings = sorted({k for k, _ in slots})  # (setting, cell, seed) in the order they run
        self.order = [(k, c, s) for k in settings for c in cells for j, s in slots if j == k]
        self.next = 0

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True  # the metric and mode are the sweep's own (METRIC, MODE)

    def suggest(self, trial_id: str):
        if self.next >= len(self.order):
            return Searcher.FINISHED
        k, label, s = self.order[self.next]
        self.next += 1
        seed = {"seed": self.constants.get("seed", 0) + s} if self.seeded else {}
        return tune_config(self.constants, label, {**seed, **self.setting(trial_id, label, k)})

    def setting(self, trial_id: str, label: str, k: int) -> dict:
        """Setting K of the cell LABEL, at random: a function of the space's seed, the cell
        and K alone."""
        rng = np.random.default_rng(stream_seed(self.space_seed, label, k))
        drawn = self.params[label].items()
        return {name: tune_domain(d).sample(random_state=rng) for name, d in drawn}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
        pass  # a random setting learns nothing from the others

    def save(self, checkpoint_path: str):
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.saved(), f)

    def restore(self, checkpoint_path: str):
        with open(checkpoint_path, "rb") as f:
            self.__dict__.update(pickle.load(f))

    def saved(self) -> dict:
        return {"next": self.next}


class CellStudies(CellSearcher):
    """CellSearcher asking each cell's own Optuna study, `SWEEP/CELL` in the sweep's journal,
    for its settings, and telling it each trial's best valid loss (inf where it diverged).
    Each Optuna trial carries the id of the Tune trial it was asked for (user attr
    TUNE_TRIAL), so that a trial Tune saved after the searcher's own state (a driver killed
    between their uploads) is still told. A trial the killed driver had asked for but Tune
    had not saved stays RUNNING in its study; the resumed round asks for its setting again."""

    def __init__(self, space, cells, constants, slots, sweep: str, sweep_dir: str, sampler: str):
        super().__init__(space, cells, constants, slots)
        self.sweep, self.sweep_dir, self.sampler = sweep, sweep_dir, sampler
        self.asked: dict[str, tuple[str, int]] = {}  # Tune trial id -> (cell, Optuna number)
        self.studies: dict[str, optuna.Study] = {}
        self.journal: JournalStorage | None = None

    def __getstate__(self):
        return {**self.__dict__, "studies": {}, "journal": None}

    def __setstate__(self, state: dict):
        self.__dict__.update(versions.searcher_state(state))

    def storage(self) -> JournalStorage:
        """The sweep's journal, one storage for every cell's study: a storage replays and holds
        every study of its file, and reads what the others appended at each ask and tell (one
        a study held a copy of every study's trials each)."""
        if self.journal is None:
            self.journal = optuna_storage(self.sweep_dir)
        return self.journal

    def study(self, label: str) -> optuna.Study:
        if label not in self.studies:
            study = optuna.create_study(
                study_name=study_name(self.sweep, label),
                storage=self.storage(),
                direction="minimize",
                load_if_exists=True,
            )
            # seeded by the trials it has: one seeded alike by each driver of a resumed or
            # extended sweep would draw its first settings again
            seed = np.random.SeedSequence(stream_seed(self.space_seed, label, len(study.trials)))
            study.sampler = SAMPLERS[self.sampler](int(seed.generate_state(1)[0]))
            self.studies[label] = study
        return self.studies[label]

    def setting(self, trial_id, label, k):
        trial = self.study(label).ask(
            {name: optuna_distribution(d) for name, d in self.params[label].items()}
        )
        trial.set_user_attr(TUNE_TRIAL, trial_id)
        self.asked[trial_id] = (label, trial.number)
        return dict(trial.params)

    def asked_unsaved(self, trial_id: str) -> tuple[str, int] | None:
        """(cell, Optuna number) of the RUNNING Optuna trial asked for TRIAL_ID, which the
        searcher's saved state lacks; None where no study has one."""
        existing = set(optuna.get_all_study_names(self.storage()))
        for label in self.params:
            if study_name(self.sweep, label) not in existing:
                continue
            running = self.study(label).get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            for trial in running:
                if trial.user_attrs.get(TUNE_TRIAL) == trial_id:
                    return label, trial.number
        return None

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
        asked = self.asked.pop(trial_id, None) or self.asked_unsaved(trial_id)
        if asked is None:
            return
        label, number = asked
        result = result or {}
        loss = float("inf") if result.get("status") == "diverged" else result.get(BEST)
        if error or loss is None or loss != loss:
            self.study(label).tell(number, state=TrialState.FAIL, skip_if_finished=True)
        else:
            self.study(label).tell(number, loss, skip_if_finished=True)

    def saved(self) -> dict:
        return {"next": self.next, "asked": self.asked}  # (which Optuna trial each Tune trial is)


def saved_for(data: bytes, trial_ids: set[str]) -> bytes | None:
    """The saved state `data` of a searcher here (`save`) made to have asked for the trials
    `trial_ids` of its round and no others, the first len(trial_ids) it asked for: it asks
    for the slots after them again, and forgets a trial it asked for that is not among them
    (whose Optuna trial stays RUNNING in its study). None where it had asked for them
    already."""
    state = pickle.loads(data)
    asked = state.get("asked", {})
    if state["next"] == len(trial_ids) and asked.keys() <= trial_ids:
        return None
    state["next"] = len(trial_ids)
    if "asked" in state:
        state["asked"] = {t: cell for t, cell in asked.items() if t in trial_ids}
    return pickle.dumps(state)


class ConfirmSearcher(Searcher):
    """Tune searcher of a confirmation round (`sweep confirm`): each confirmed setting with each
    new seed, for the space's full epochs, the first seed of every setting first. Saved like
    CellSearcher: its position."""

    def __init__(self, constants: dict, confirm):
        super().__init__(metric=METRIC, mode=MODE)
        self.configs = [
            tune_config(
                {**constants, "epochs": confirm.epochs},
                c.cell,
                {**c.setting, "seed": seed, "confirms": c.trial_id},
            )
            for seed in confirm.seeds
            for c in confirm.settings
        ]
        self.next = 0

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True

    def suggest(self, trial_id: str):
        if self.next >= len(self.configs):
            return Searcher.FINISHED
        self.next += 1
        return self.configs[self.next - 1]

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
        pass  # its trials are fixed

    def save(self, checkpoint_path: str):
        with open(checkpoint_path, "wb") as f:
            pickle.dump({"next": self.next}, f)

    def restore(self, checkpoint_path: str):
        with open(checkpoint_path, "rb") as f:
            self.__dict__.update(pickle.load(f))


class ObjectJournal(BaseJournalBackend):
    """An Optuna journal on an object store (AppendLog): each append is one new object,
    numbered from 0, and a read asks for the objects after the last one it read, by number:
    its requests grow with the new objects, not with the journal (a listing of the prefix
    would read every key at every append)."""

    def __init__(self, location: str):
        self.objects, self.logs = AppendLog(location), []

    def __getstate__(self):
        return {"location": self.objects.location}

    def __setstate__(self, state: dict):  # also as pickled with its logs, before AppendLog
        self.__init__(state["location"])

    def read_logs(self, log_number_from: int):
        self.logs += self.objects.read()
        return self.logs[log_number_from:]

    def append_logs(self, logs: list):
        self.logs += self.objects.append(logs)  # those before it, then as written
        self.logs += logs


LOCK_GRACE = 10  # s a journal's lock file stands unchanged before the next writer takes it


def optuna_storage(sweep_dir: str) -> JournalStorage:
    """The Optuna studies' storage in the sweep's directory: a journal file, or numbered
    objects in a bucket. The file's lock is a file of its own (safe on NFSv3 and later): one
    a killed driver left is taken over after LOCK_GRACE s, also where the sweep's folder has
    moved since. (Optuna's default lock, which rhnsearch used before, is a symlink to the
    journal; once the folder moves, one left behind dangles and Optuna waits on it forever:
    it is removed here.)"""
    location = storage.join(sweep_dir, OPTUNA_JOURNAL)
    if storage.is_uri(location):
        return JournalStorage(ObjectJournal(location))
    path = location + ".log"
    lock = path + ".lock"  # Optuna's name for a journal's lock
    if os.path.islink(lock) and not os.path.exists(lock):
        with contextlib.suppress(OSError):  # gone already, or a reader's read-only disk
            os.unlink(lock)
    backend = JournalFileBackend(path, lock_obj=JournalFileOpenLock(path, LOCK_GRACE))
    return JournalStorage(backend)


def study_name(sweep: str, cell: str) -> str:
    return f"{sweep}/{cell}"


def study_names(sweep_dir: str) -> list[str]:
    """The Optuna studies in the sweep's storage at EXPERIMENT."""
    return optuna.get_all_study_names(optuna_storage(sweep_dir))


def load_study(sweep_dir: str, name: str) -> optuna.Study:
    """An Optuna study of a sweep (`study_name(sweep, cell)`), as its storage has it."""
    return optuna.load_study(study_name=name, storage=optuna_storage(sweep_dir))


def build_searcher(
    space: Space,
    cells: dict,
    constants: dict,
    slots: list[tuple],
    search: str,
    sweep_dir: str,
    sweep: str,
) -> CellSearcher:
    """The searcher of a round of SLOTS (`round_slots`) of the sweep SWEEP, whose folder is
    SWEEP_DIR: at random (SEARCH random) or by an Optuna study per cell (optuna)."""
    if search == "random":
        return CellSearcher(space, cells, constants, slots)
    return CellStudies(space, cells, constants, slots, sweep, sweep_dir, space.sampler)
