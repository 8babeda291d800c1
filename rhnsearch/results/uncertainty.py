"""How sure a comparison of two cells is, measured on what the tables show.

A gap between two cells is the difference of their expected best of k settings
(`expected_best`), at a k the cells' settings can estimate: the fewer of the study's K and a
quarter of the smaller cell's settings (`comparable_k`). Its 95% interval is a BCa bootstrap
(`scipy.stats.bootstrap`, each cell's settings redrawn on their own, a fixed seed) at the
nominal level `BOOTSTRAP_LEVEL`: on pairs of the study's own cells (DT-RNN's settings spread
over tens of nats, RHN's over tenths; `benchmarks/calibration.py`) a 95% bootstrap covered
the true gap in as few as 90% of pairs, a 99% one in at least 94%, at 20 settings a cell and
more. Below `MIN_SETTINGS` a cell no interval met that, so a gap there is "too few settings to
resolve" rather than a number that overstates. A gap at k = n (the cells' best) is left
alone: the expected best of n settings rests on a cell's few best and no interval of it held.

The probability of improvement is the chance that a random setting of one cell beats one of
the other (a lower loss; a tie counts half: the Mann-Whitney statistic, rliable's probability
of improvement), with a 95% percentile bootstrap that redraws each cell's settings.

A cell of one setting gives no comparison an interval: repeat its setting with seeds to get
one. Each verdict is at 5% on its own: a finding's several claims are not corrected for
being several (`verdict` says so).
"""

from typing import NamedTuple

import numpy as np
from scipy import stats

from .expected_best import BEST_OF, weights

RESAMPLES = 2000
SEED = 0  # the same intervals for the same trials, every time
LEVEL = 0.95  # what an interval promises
BOOTSTRAP_LEVEL = 0.99  # the BCa level that keeps LEVEL on the study's cells (calibration.py)
SETTINGS_PER_K = 4  # k at most a quarter of a cell's settings
MIN_SETTINGS = 20  # fewer a cell: too few settings to resolve a gap


class Gap(NamedTuple):
    value: float  # expected best of k of the first cell less the second's
    k: int
    bounds: tuple[float, float] | None  # its 95% interval; None: too few settings to resolve


def comparable_k(best_of: int, *sizes: int) -> int:
    """The k of a gap between cells of SIZES settings: the fewer of the study's K (BEST_OF)
    and a quarter of the smallest cell (at least 1)."""
    return max(1, min(best_of, min(sizes) // SETTINGS_PER_K))


def _expected_best_gap(k: int):
    """The statistic scipy's bootstrap redraws: expected best of k of x less that of y."""

    def statistic(x, y, axis=-1):
        x, y = np.sort(np.moveaxis(x, axis, -1), -1), np.sort(np.moveaxis(y, axis, -1), -1)
        return x @ weights(x.shape[-1], [k])[0] - y @ weights(y.shape[-1], [k])[0]

    return statistic


def gap(losses, reference, best_of: int = BEST_OF) -> Gap | None:
    """The gap of LOSSES' expected best of k to REFERENCE's and its 95% interval (None where
    a cell has fewer than MIN_SETTINGS); None if either cell has fewer than two settings.

    Args:
        best_of: the study's K (`comparable_k`).
    """
    a, b = np.asarray(losses, dtype=float), np.asarray(reference, dtype=float)
    if min(len(a), len(b)) < 2:
        return None
    k = comparable_k(best_of, len(a), len(b))
    statistic = _expected_best_gap(k)
    value = float(statistic(a, b))
    if min(len(a), len(b)) < MIN_SETTINGS:
        return Gap(value, k, None)
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return Gap(value, k, (value, value))
    found = stats.bootstrap(
        (a, b),
        statistic,
        n_resamples=RESAMPLES,
        confidence_level=BOOTSTRAP_LEVEL,
        method="BCa",
        vectorized=True,
        rng=np.random.default_rng(SEED),
    ).confidence_interval
    return Gap(value, k, (float(found.low), float(found.high)))


def improvement(losses, reference) -> tuple[float, tuple[float, float] | None]:
    """The probability that a random setting of LOSSES beats one of REFERENCE (lower; a tie
    counts half) and its 95% bootstrap interval, None if either cell has fewer than two."""
    a, b = np.asarray(losses, dtype=float), np.asarray(reference, dtype=float)
    wins = (a[:, None] < b) + 0.5 * (a[:, None] == b)
    if min(len(a), len(b)) < 2:
        return float(wins.mean()), None
    rng = np.random.default_rng(SEED)
    mine = rng.multinomial(len(a), np.full(len(a), 1 / len(a)), size=RESAMPLES)
    theirs = rng.multinomial(len(b), np.full(len(b), 1 / len(b)), size=RESAMPLES)
    draws = ((mine @ wins) * theirs).sum(axis=1) / (len(a) * len(b))
    tail = (1 - LEVEL) / 2
    low, high = np.quantile(draws, [tail, 1 - tail], method="inverted_cdf")
    return float(wins.mean()), (float(low), float(high))


def shown(bounds: tuple[float, float] | None, digits: int = 4) -> str:
    """An interval as [low, high] (an unbounded end as -inf or inf), or a dash where there is
    none."""
    if bounds is None:
        return "– (< 2 trials)"
    return f"[{bounds[0]:.{digits}g}, {bounds[1]:.{digits}g}]"


TOO_FEW = f"– (< {MIN_SETTINGS} settings a cell)"


def shown_gap(found: Gap | None) -> str:
    """A gap's interval (`shown`), or why it has none."""
    if found is not None and found.bounds is None:
        return TOO_FEW
    return shown(found and found.bounds)


CLAIMS = ("worse", "not worse")  # what a claim says of a gap's sign: above 0, or not above
UNRESOLVABLE = "too few settings to resolve"


def verdict(found: Gap | None, claim: str) -> str:
    """How a gap's interval bears on a CLAIM about its sign (`CLAIMS`): 'holds' where the
    interval lies on the claim's side of 0, 'does not hold' where it lies on the other; where
    it holds 0, a claim of a difference ('worse') is 'not resolved' and a claim of none ('not
    worse') is 'consistent with' the numbers (not shown by them). No interval: 'not resolved',
    or UNRESOLVABLE where the cells have too few settings for one. Each at 5%, uncorrected
    for the other claims of a finding."""
    if claim not in CLAIMS:
        raise ValueError(f"claim {claim!r}: one of {CLAIMS}")
    if found is None:
        return "not resolved"
    if found.bounds is None:
        return UNRESOLVABLE
    above, below = found.bounds[0] > 0, found.bounds[1] < 0
    if claim == "worse":
        return "holds" if above else "does not hold" if below else "not resolved"
    return "holds" if below else "does not hold" if above else "consistent with"


def excludes_zero(found: Gap | None) -> str:
    """'yes' or 'no', or a dash where the gap has no interval."""
    if found is None or found.bounds is None:
        return "–"
    return "yes" if found.bounds[0] > 0 or found.bounds[1] < 0 else "no"


def shown_improvement(losses, reference) -> str:
    """`improvement` as 'P [low, high]'."""
    value, bounds = improvement(losses, reference)
    return f"{value:.2f}" + ("" if bounds is None else f" [{bounds[0]:.2f}, {bounds[1]:.2f}]")
