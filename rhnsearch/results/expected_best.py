"""The expected best of k settings of a cell (Dodge et al. 2019, "Show Your Work"): the mean
and standard deviation of the lowest of k losses drawn at random, with replacement, from the
cell's n observed ones, computed exactly from their order statistics, not by resampling.

With the losses sorted ascending, v[0] <= ... <= v[n-1], the lowest of k draws is v[i] with
probability ((n - i) / n)**k - ((n - i - 1) / n)**k. Of k = 1 that is the cell's mean loss; as
k grows it falls to the cell's best, the best of n the tables show. The std is the spread of
one such best of k, not an interval for the cell's optimum.

A setting ASHA stopped early enters at its best loss so far: its best_valid_loss is the lowest
over the epochs it ran, never below what it would have reached had it trained on. The curve
is then an upper bound on the expected best had every setting trained to the end.
"""

import numpy as np

BEST_OF = 10  # the K of a kind of study that names none (studies.Kind.best_of)


def weights(n: int, ks) -> np.ndarray:
    """Per k of KS (rows), the probability that the lowest of k draws from n sorted losses
    is each of them (columns, ascending)."""
    above = np.arange(n, -1, -1) / n  # (n - i) / n, i = 0..n
    k = np.asarray(ks, dtype=float).reshape(-1, 1)
    return above[:-1] ** k - above[1:] ** k


def expected_best(losses, ks) -> tuple[np.ndarray, np.ndarray]:
    """The mean and std of the lowest of k of LOSSES (drawn with replacement), per k of KS."""
    values = np.sort(np.asarray(losses, dtype=float))
    if not len(values):
        raise ValueError("no losses: a cell without a finished setting has no expected best")
    w = weights(len(values), ks)
    mean = w @ values
    spread = (w * (values - mean[:, None]) ** 2).sum(axis=1)
    return mean, np.sqrt(spread)
