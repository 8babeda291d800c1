"""How sure a comparison of cells is: a bootstrap over each cell's settings (its trials).

A cell's statistic is its best loss, the minimum over its settings, as the papers compare
cells. It is recomputed on RESAMPLES draws, each of half the cell's settings (rounded up)
taken with replacement; the 95% interval is the 2.5th to 97.5th percentile of those. A gap
between two cells is recomputed from independent draws of each, and is significant when its
interval excludes 0.

Half, not all: the bootstrap of a minimum that redraws all n settings is too sure of itself
(its draws hit the observed best most of the time; on two cells of 10 settings from one
distribution it called 18% of gaps significant), the m-out-of-n bootstrap with m = n/2 about
2%. The interval says how much a cell's best depends on which settings were drawn, not where
the cell's true optimum lies. A cell of one setting has no interval (None): repeat its
setting with seeds to get one.
"""

import numpy as np

RESAMPLES = 4000
SEED = 0  # the same interval for the same trials, every time
LEVEL = 0.95


def _draws(losses, rng) -> np.ndarray | None:
    """The best of each resample of LOSSES, or None for fewer than two."""
    losses = np.asarray(losses, dtype=float)
    if len(losses) < 2:
        return None
    half = (len(losses) + 1) // 2
    return losses[rng.integers(0, len(losses), size=(RESAMPLES, half))].min(axis=1)


def _bounds(values: np.ndarray) -> tuple[float, float]:
    tail = (1 - LEVEL) / 2
    low, high = np.quantile(values, [tail, 1 - tail], method="inverted_cdf")
    return float(low), float(high)


def best_interval(losses) -> tuple[float, float] | None:
    """The 95% interval of the best of LOSSES (a cell's settings), or None for one setting."""
    draws = _draws(losses, np.random.default_rng(SEED))
    return None if draws is None else _bounds(draws)


def gap_interval(losses, reference) -> tuple[float, float] | None:
    """The 95% interval of best(LOSSES) - best(REFERENCE), or None if either cell has one
    setting."""
    rng = np.random.default_rng(SEED)
    mine, theirs = _draws(losses, rng), _draws(reference, rng)
    if mine is None or theirs is None:
        return None
    return _bounds(mine - theirs)


def shown(bounds: tuple[float, float] | None, digits: int = 4) -> str:
    """An interval as [low, high], or a dash where there is none."""
    if bounds is None:
        return "– (< 2 trials)"
    return f"[{bounds[0]:.{digits}g}, {bounds[1]:.{digits}g}]"


def excludes_zero(bounds: tuple[float, float] | None) -> str:
    if bounds is None:
        return "–"
    return "yes" if bounds[0] > 0 or bounds[1] < 0 else "no"
