"""How a sweep samples its trials: Tune's random search over every cell, or Optuna's TPE with
its study kept in the sweep's storage (so that a resumed sweep continues the same study)."""

import json

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import BaseJournalBackend, JournalFileBackend
from ray import tune
from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter
from ray.tune.search.optuna import OptunaSearch

from . import storage
from .space import Distribution, Space

METRIC, MODE = "valid_loss", "min"
OPTUNA_JOURNAL = "optuna_journal"


def tune_sampler(dist: Distribution):
    low_high = getattr(dist, dist.kind)
    return {
        "uniform": lambda: tune.uniform(*low_high),
        "loguniform": lambda: tune.loguniform(*low_high),
        "randint": lambda: tune.randint(low_high[0], low_high[1] + 1),
        "choice": lambda: tune.choice(low_high),
    }[dist.kind]()


class OptunaSpace:
    """Optuna define-by-run space: TPE samples the hyperparameters; the cells (by label) take
    turns, so every (arch, depth) cell gets the same number of trials. The turn is counted
    here, not by Optuna's trial numbers: this object is saved with Tune's searcher state, so a
    resumed sweep goes on from the turn of Tune's saved trials (a trial the killed driver had
    asked Optuna for, but not yet saved, stays RUNNING in the study, orphaned)."""

    def __init__(self, cells: list[str], params: dict, constants: dict):
        self.cells, self.params, self.constants, self.count = cells, params, constants, 0

    def __call__(self, trial):
        for name, dist in self.params.items():
            low_high = getattr(dist, dist.kind)
            if dist.kind == "choice":
                trial.suggest_categorical(name, low_high)
            elif dist.kind == "randint":
                trial.suggest_int(name, *low_high)
            else:
                trial.suggest_float(name, *low_high, log=dist.kind == "loguniform")
        cell = self.cells[self.count % len(self.cells)]
        self.count += 1
        return {**self.constants, "cell": cell}


class StudyAheadOptunaSearch(OptunaSearch):
    """Tune's OptunaSearch for a study that may be ahead of Tune's saved state: the study
    records a trial's end at once, Tune saves its experiment every few seconds, so a resumed
    sweep may train again the last epochs of a trial the study has finished. Those results
    are not reported to the study again (Optuna refuses them)."""

    def on_trial_result(self, trial_id: str, result: dict):
        try:
            super().on_trial_result(trial_id, result)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass


class ObjectJournal(BaseJournalBackend):
    """An Optuna journal on an object store: each append is one new object, numbered."""

    def __init__(self, location: str):
        self.location, self.logs, self.objects = location, [], 0

    def __getstate__(self):
        return {"location": self.location, "logs": [], "objects": 0}

    def read_logs(self, log_number_from: int):
        for name in storage.listdir(self.location)[self.objects :]:
            self.logs += json.loads(storage.read_text(storage.join(self.location, name)))
            self.objects += 1
        return self.logs[log_number_from:]

    def append_logs(self, logs: list):
        self.read_logs(len(self.logs))  # the numbering must follow every object
        storage.write_text(
            storage.join(self.location, f"{self.objects:09d}.json"), json.dumps(logs)
        )


def optuna_storage(experiment: str) -> JournalStorage:
    """The Optuna study's storage in the sweep's directory: a journal file (with its own
    lock, safe on shared filesystems), or numbered objects in a bucket."""
    location = storage.join(experiment, OPTUNA_JOURNAL)
    if storage.is_uri(location):
        return JournalStorage(ObjectJournal(location))
    return JournalStorage(JournalFileBackend(location + ".log"))


def load_study(experiment: str, name: str) -> optuna.Study:
    """An Optuna sweep's study, as its storage has it."""
    return optuna.load_study(study_name=name, storage=optuna_storage(experiment))


def build_search(
    space: Space, cells: list[str], constants: dict, search: str, experiment: str, name: str
):
    """(param_space, search_alg, num_samples) for the Tuner of the sweep `name`, whose Tune
    experiment is at `experiment`. A trial's config names its cell by label (what Tune's
    progress table shows); the trainable looks the cell up."""
    if search == "random":
        first = constants.get("seed", 0)  # each setting once per seed: a grid over them
        seeds = (
            {"seed": tune.grid_search(list(range(first, first + space.seeds)))}
            if space.seeds > 1
            else {}
        )
        param_space = {
            **constants,
            "cell": tune.grid_search(cells),
            **seeds,
            **{k: tune_sampler(d) for k, d in space.params.items()},
        }
        # Tune ignores max_concurrent_trials beside a BasicVariantGenerator: the cap goes here
        return (
            param_space,
            BasicVariantGenerator(random_state=space.seed, max_concurrent=space.max_concurrent),
            space.samples,
        )
    optuna_search = StudyAheadOptunaSearch(
        OptunaSpace(cells, space.params, constants),
        metric=METRIC,
        mode=MODE,
        seed=space.seed,
        study_name=name,
        storage=optuna_storage(experiment),
    )
    limit = space.max_concurrent or 2
    return None, ConcurrencyLimiter(optuna_search, max_concurrent=limit), len(cells) * space.samples
