"""What a confirmation round (`sweep confirm`) runs: the best settings of each cell, chosen from
the search's finished trials as MLflow has them, and seeds the sweep has not used."""

import numpy as np
import pandas as pd

from ..errors import UserError
from ..search.space import Space
from ..tracking import schema
from ..tracking.store import search_trials
from .record import Confirmation, Confirmed

LOSS = "metrics.best_valid_loss"


def top_settings(trials: pd.DataFrame, cells: list[str], top: int, params: list[str]):
    """Each cell's TOP best settings among TRIALS (store.trials' frame): its search trials that
    finished (completed, or stopped early) with a finite best valid loss, a setting being the
    values of PARAMS (the sampled hyperparameters) in a cell, ranked by its best trial's loss,
    ties by trial id. Returns those best trials' rows, cell by cell in the order of CELLS, the
    best first; a one-line UserError where a cell has fewer than TOP settings.

    Args:
        trials: the sweep's trials.
        cells: the sweep's cells' labels.
        top: settings a cell.
        params: the names of the sampled hyperparameters (not the seed).
    """
    search = search_trials(trials)
    ok = search["status"].isin(schema.FINISHED) & np.isfinite(search[LOSS].astype(float))
    keys = ["params.cell", *(f"params.{p}" for p in params if f"params.{p}" in search)]
    ranked = search[ok].sort_values([LOSS, "trial_id"], kind="stable")
    best = ranked.drop_duplicates(keys)  # a setting by its best seed
    counts = best["params.cell"].value_counts()
    fewest = min(cells, key=lambda c: (counts.get(c, 0), cells.index(c)))
    if counts.get(fewest, 0) < top:
        raise UserError(
            f"--top {top}: cell {fewest} has {counts.get(fewest, 0)} finished setting(s); "
            f"confirm at most that many a cell"
        )
    chosen = best.groupby("params.cell", sort=False).head(top)
    order = chosen["params.cell"].map(cells.index)
    return chosen.assign(_cell=order).sort_values("_cell", kind="stable").drop(columns="_cell")


def new_seeds(trials: pd.DataFrame, count: int) -> tuple[int, ...]:
    """COUNT seeds that no trial of TRIALS ran with: those after the largest it used."""
    first = int(trials["params.seed"].max()) + 1
    return tuple(range(first, first + count))


def sampled_setting(params: dict[str, str], space: Space) -> dict:
    """The hyperparameters a trial sampled, typed as its config had them, from its MLflow
    PARAMS (strings): those of SPACE's params its arch reads, not the seed."""
    setting = {}
    for name, dist in space.params.items():
        if name == "seed" or name not in params:
            continue
        text = params[name]
        if dist.kind == "choice":
            setting[name] = next(v for v in dist.choice if str(v) == text)
        else:
            setting[name] = int(text) if dist.kind == "randint" else float(text)
    return setting


def confirmation(
    trials: pd.DataFrame, raw_params, space: Space, cells: list[str], *, top: int, seeds: int
) -> Confirmation:
    """The confirmation round of a sweep of SPACE whose trials are TRIALS.

    Args:
        trials: the sweep's trials (store.trials' frame).
        raw_params: run id -> that run's MLflow params as stored (strings).
        space: the sweep's space.
        cells: the sweep's cells' labels.
        top: settings a cell.
        seeds: seeds a setting.
    """
    chosen = top_settings(trials, cells, top, list(space.params))
    settings = tuple(
        Confirmed(cell, trial_id, sampled_setting(raw_params(run_id), space))
        for cell, trial_id, run_id in zip(
            chosen["params.cell"], chosen["trial_id"], chosen["run_id"]
        )
    )
    return Confirmation(settings, new_seeds(trials, seeds), space.epochs)
