"""Each hyperparameter's importance per architecture, by Optuna's importance evaluators run on
an Optuna study rebuilt from a sweep's stored trials (value: the trial's best valid loss)."""

import math
from contextlib import contextmanager

import optuna
import pandas as pd
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState, create_trial

from ..tracking import store
from . import arch_order
from .tables import finished

EVALUATORS = ("fANOVA", "PED-ANOVA")  # Optuna's importance evaluators, as `evaluators` names them
MIN_TRIALS = 4  # fewer usable trials of an architecture: no importance for it
# more: fitted on this many drawn at random. fANOVA's forest's time grows faster than the
# trials (docs/scale-history.md)
MAX_TRIALS = 250
SAMPLE_SEED = 0
VALUE = "metrics.best_valid_loss"


def evaluators() -> dict:
    """EVALUATORS by name, made anew. (`optuna.importance` is imported here, not with this
    module: its import takes 2 s, which a sweep closing with too few trials for an importance
    need not spend.)"""
    from optuna.importance import FanovaImportanceEvaluator, PedAnovaImportanceEvaluator

    return {"fANOVA": FanovaImportanceEvaluator(seed=0), "PED-ANOVA": PedAnovaImportanceEvaluator()}


def python(value):
    """A pandas scalar as the plain Python value Optuna stores."""
    return value.item() if hasattr(value, "item") else value


def distribution(values: pd.Series) -> BaseDistribution:
    """The Optuna distribution the values were drawn from, as far as they tell: categorical
    for strings and booleans, int or float between their extremes, log when
    `store.log_scaled`."""
    present = [python(v) for v in values.dropna()]
    if pd.api.types.is_bool_dtype(values) or not pd.api.types.is_numeric_dtype(values):
        return CategoricalDistribution(sorted(set(present), key=str))
    low, high, log = min(present), max(present), store.log_scaled(values)
    if pd.api.types.is_integer_dtype(values):
        return IntDistribution(int(low), int(high), log=log)
    return FloatDistribution(float(low), float(high), log=log)


@contextmanager
def quiet():
    """Optuna without its INFO lines (a new study per architecture), as it was after."""
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)


def study(trials: pd.DataFrame, names: list) -> optuna.Study:
    """A minimizing study with one COMPLETE trial per row of TRIALS (in order): its NAMES
    params (missing ones left out) and its best valid loss as value."""
    dists = {name: distribution(trials[name]) for name in names}
    out = optuna.create_study(direction="minimize")
    for _, row in trials.iterrows():
        params = {n.removeprefix("params."): python(row[n]) for n in names if pd.notna(row[n])}
        out.add_trial(
            create_trial(
                params=params,
                value=float(row[VALUE]),
                state=TrialState.COMPLETE,
                distributions={
                    n.removeprefix("params."): dists[n]
                    for n in names
                    if n.removeprefix("params.") in params
                },
            )
        )
    return out


def importances(trials: pd.DataFrame, *, max_trials: int = MAX_TRIALS) -> tuple[pd.DataFrame, dict]:
    """Per architecture, evaluator and hyperparameter: its importance (normalized to sum to 1
    per architecture and evaluator), from the finished trials with a finite best valid loss
    (`trials` of them used, of `finished`). Also the architectures left out, each with the
    reason.

    Args:
        max_trials: an architecture with more finished trials is fitted on this many of them,
            drawn at random with SAMPLE_SEED: fANOVA's forest grows with the trials
            (benchmarks/report_scale.py).
    """
    rows, skipped = [], {}
    usable = trials[finished(trials, "best_valid_loss")]
    for arch in sorted(trials["params.arch"].unique(), key=arch_order):
        mine = usable[usable["params.arch"] == arch]
        names = store.hyperparameters(mine)
        if len(mine) < MIN_TRIALS:
            skipped[arch] = (
                f"{len(mine)} finished trial{'s' * (len(mine) != 1)} with a "
                f"finite validation loss; importance needs {MIN_TRIALS}"
            )
            continue
        if not names:
            skipped[arch] = "no hyperparameter varies among its finished trials"
            continue
        used = mine.sample(max_trials, random_state=SAMPLE_SEED) if len(mine) > max_trials else mine
        with quiet():
            built = study(used.sort_index(), names)
            found = {
                name: optuna.importance.get_param_importances(built, evaluator=evaluator)
                for name, evaluator in evaluators().items()
            }
        for evaluator, values in found.items():
            rows += [
                {
                    "arch": arch,
                    "evaluator": evaluator,
                    "hyperparameter": name,
                    "importance": float(values.get(name, math.nan)),
                    "trials": len(used),
                    "finished": len(mine),
                }
                for name in (n.removeprefix("params.") for n in names)
            ]
    return pd.DataFrame(
        rows,
        columns=["arch", "evaluator", "hyperparameter", "importance", "trials", "finished"],
    ), skipped


def fitted_on(row: pd.Series) -> str:
    """'N trials', or 'N of M trials, drawn at random' where the importance used a sample (a
    row of the `importances` frame)."""
    if row["trials"] == row["finished"]:
        return f"{row['trials']} trials"
    return f"{row['trials']:,} of {row['finished']:,} trials, drawn at random"
