"""How sure a comparison of two cells is, measured on what the tables show.

A gap between two cells is the difference of their expected best of k settings
(`expected_best`, k the fewer of the study's K and each cell's settings). It excludes 0 when a
permutation test rejects, at 5%, that both cells' settings come from one distribution: the
two cells' losses are pooled and relabelled PERMUTATIONS times (a fixed seed), and the p-value
is the share of relabellings whose gap is as far from 0 as the observed one, exact under no
difference whatever the distribution. The gap's 95% interval is the set of shifts d for which
the test of the first cell's losses less d against the second's does not reject (test
inversion, each end found by bisection), so it excludes 0 exactly when the test rejects. Cells
too small for any relabelling to be rare (2 settings against 2) leave it unbounded.

The probability of improvement is the chance that a random setting of one cell beats one of
the other (a lower loss; a tie counts half: the Mann-Whitney statistic, rliable's probability
of improvement), with a 95% percentile bootstrap that redraws each cell's settings.

A cell's best of n, the tables' best, gets no interval: a bootstrap of a minimum is
inconsistent (its draws land on the observed best most of the time). A cell of one setting
gives no comparison an interval: repeat its setting with seeds to get one.
"""

from functools import cache
from typing import NamedTuple

import numpy as np

from .expected_best import BEST_OF, weights

PERMUTATIONS = 2000
RESAMPLES = 2000
SEED = 0  # the same intervals for the same trials, every time
LEVEL = 0.95
TOLERANCE = 1e-4  # an interval's ends, as a share of the cells' spread of losses


class Gap(NamedTuple):
    value: float  # expected best of k of the first cell less the second's
    k: int
    p: float  # the permutation test's p-value of no difference
    bounds: tuple[float, float]  # the shifts the test does not reject (may be infinite)


@cache
def _relabellings(n: int) -> np.ndarray:
    """PERMUTATIONS orders of n pooled settings (a fixed seed): each relabels them."""
    return np.random.default_rng(SEED).random((PERMUTATIONS, n)).argsort(axis=1)


def gap(losses, reference, best_of: int = BEST_OF) -> Gap | None:
    """The gap of LOSSES' expected best of k to REFERENCE's, its test and its 95% interval;
    None if either cell has fewer than two settings.

    Args:
        best_of: the study's K; k is the fewer of it and each cell's settings.
    """
    a, b = np.asarray(losses, dtype=float), np.asarray(reference, dtype=float)
    if min(len(a), len(b)) < 2:
        return None
    k = min(best_of, len(a), len(b))
    wa, wb = weights(len(a), [k])[0], weights(len(b), [k])[0]
    labels = _relabellings(len(a) + len(b))
    spread = float(np.ptp(np.concatenate([a, b]))) or 1.0

    def p_value(shift: float) -> float:
        mine = a - shift
        observed = abs(np.sort(mine) @ wa - np.sort(b) @ wb)
        drawn = np.concatenate([mine, b])[labels]
        gaps = np.sort(drawn[:, : len(a)], axis=1) @ wa - np.sort(drawn[:, len(a) :], axis=1) @ wb
        extreme = np.count_nonzero(np.abs(gaps) >= observed - 1e-12 * spread)
        return float((1 + extreme) / (PERMUTATIONS + 1))

    alpha = 1 - LEVEL
    value = float(np.sort(a) @ wa - np.sort(b) @ wb)
    p = p_value(0.0)

    def end(far: float) -> float:
        """The accepted shift nearest the rejected FAR, bisected from VALUE (p = 1); 0 is
        placed first, so that the interval holds 0 exactly when the test accepts it."""
        accept, reject = value, far
        if (accept < 0) != (far < 0):
            accept, reject = (0.0, reject) if p >= alpha else (accept, 0.0)
        if reject == far and p_value(far) >= alpha:
            return float(np.copysign(np.inf, far - value))
        while abs(reject - accept) > TOLERANCE * spread:
            mid = (accept + reject) / 2
            accept, reject = (mid, reject) if p_value(mid) >= alpha else (accept, mid)
        return float(accept)

    low = end(a.min() - b.max() - spread)  # every shifted setting above the reference's
    high = end(a.max() - b.min() + spread)  # every one below
    return Gap(value, k, p, (low, high))


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


CLAIMS = ("worse", "not worse")  # what a claim says of a gap's sign: above 0, or not above


def verdict(found: Gap | None, claim: str) -> str:
    """How a gap's interval bears on a CLAIM about its sign (`CLAIMS`): 'holds' where the
    interval lies on the claim's side of 0, 'does not hold' where it lies on the other; where
    it holds 0, a claim of a difference ('worse') is 'not resolved' and a claim of none ('not
    worse') is 'consistent with' the numbers (not shown by them). No interval: 'not resolved'."""
    if claim not in CLAIMS:
        raise ValueError(f"claim {claim!r}: one of {CLAIMS}")
    if found is None:
        return "not resolved"
    above, below = found.bounds[0] > 0, found.bounds[1] < 0  # (it excludes 0 iff p < 5%)
    if claim == "worse":
        return "holds" if above else "does not hold" if below else "not resolved"
    return "holds" if below else "does not hold" if above else "consistent with"


def excludes_zero(found: Gap | None) -> str:
    if found is None:
        return "–"
    return "yes" if found.p < 1 - LEVEL else "no"


def shown_improvement(losses, reference) -> str:
    """`improvement` as 'P [low, high]'."""
    value, bounds = improvement(losses, reference)
    return f"{value:.2f}" + ("" if bounds is None else f" [{bounds[0]:.2f}, {bounds[1]:.2f}]")
