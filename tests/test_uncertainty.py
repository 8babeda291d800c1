"""The expected best of k settings and the comparisons of cells (rhnsearch.results
expected_best and uncertainty), checked by hand, by enumeration and on the committed JSB run's
losses (results/examples/jsb_paper/trials.parquet)."""

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom

from conftest import ROOT

TRIALS = ROOT / "results" / "examples" / "jsb_paper" / "trials.parquet"


def cell_losses() -> dict:
    """Per (arch, depth) of the committed run's search: the settings that finished, and which
    of them ASHA stopped."""
    from rhnsearch.tracking.store import search_trials

    trials = search_trials(pd.read_parquet(TRIALS))
    ok = trials[trials["status"].isin(("completed", "stopped"))]
    return {
        key: (group["metrics.best_valid_loss"].to_numpy(), group["status"].eq("stopped").to_numpy())
        for key, group in ok.groupby(["params.arch", "params.depth"])
    }


def test_the_expected_best_is_the_mean_best_of_every_draw():
    """Every ordered draw of k of 5 losses (5**k, equally likely): the mean and std of their
    bests are the exact formula's."""
    from rhnsearch.results.expected_best import expected_best

    losses = np.array([9.1, 8.7, 9.1, 12.0, 8.9])  # with a tie
    ks = [1, 2, 3, 4]
    mean, std = expected_best(losses, ks)
    for i, k in enumerate(ks):
        bests = [min(d) for d in itertools.product(losses, repeat=k)]
        assert mean[i] == pytest.approx(np.mean(bests), rel=1e-12)
        assert std[i] == pytest.approx(np.std(bests), rel=1e-9)
    assert mean[0] == pytest.approx(losses.mean())  # k = 1: the mean setting
    assert std[0] == pytest.approx(losses.std())
    assert expected_best(losses, [10_000])[0][0] == pytest.approx(losses.min())


def test_the_expected_best_of_a_real_cell_matches_drawing_it():
    """The committed run's RHN cell at depth 6: the exact curve against 200,000 draws of k of
    its settings, within 5 standard errors, and falling with k to its best."""
    from rhnsearch.results.expected_best import expected_best

    losses, _ = cell_losses()[("rhn", 6)]
    ks = np.arange(1, len(losses) + 1)
    mean, std = expected_best(losses, ks)
    rng = np.random.default_rng(1)
    for k in (1, 5, 10, 40):
        bests = losses[rng.integers(0, len(losses), size=(200_000, k))].min(axis=1)
        error = bests.std() / np.sqrt(len(bests))
        assert abs(bests.mean() - mean[k - 1]) < 5 * error
        assert std[k - 1] == pytest.approx(bests.std(), rel=0.1)  # heavy-tailed at k = 40
    assert np.all(np.diff(mean) <= 0) and mean[-1] > losses.min()


def test_a_stopped_setting_that_would_have_improved_only_lowers_the_curve():
    """A setting ASHA stopped enters at its best so far, at or above what it would have
    reached: lowering any stopped setting's loss, by any amount, lowers every point of the
    curve or leaves it: the curve of the recorded losses is an upper bound."""
    from rhnsearch.results.expected_best import expected_best

    rng = np.random.default_rng(2)
    ks = np.arange(1, 41)
    for key in (("rhn", 1), ("dtrnn", 6)):
        losses, stopped = cell_losses()[key]
        assert stopped.any()
        recorded, _ = expected_best(losses, ks)
        for _ in range(50):
            trained_on = losses - stopped * rng.exponential(0.5, len(losses)) * rng.random() * 3
            lower, _ = expected_best(trained_on, ks)
            assert np.all(lower <= recorded + 1e-12)
        one = losses.copy()
        one[np.flatnonzero(stopped)[0]] = losses.min() - 1  # one stopped setting the best
        assert np.all(expected_best(one, ks)[0] < recorded)


def test_a_gap_with_no_difference_is_declared_at_most_5_percent_of_the_time():
    """Pairs of cells drawn from one distribution, the committed run's finished RHN settings,
    at 10 and 40 settings a cell: the gap's interval excludes 0 in at most 5% of pairs, give
    or take what the pairs' number allows (binomial, 1 in 1,000); the test is exact."""
    from rhnsearch.results import uncertainty

    pool = np.concatenate([v for (arch, _), (v, _) in cell_losses().items() if arch == "rhn"])
    rng = np.random.default_rng(3)
    for n, pairs in ((10, 120), (40, 80)):
        declared = 0
        for _ in range(pairs):
            found = uncertainty.gap(rng.choice(pool, n), rng.choice(pool, n), 40)
            low, high = found.bounds
            assert (low > 0 or high < 0) == (found.p < 0.05)  # excludes 0 as the test rejects
            declared += found.p < 0.05
        assert declared <= binom.ppf(0.999, pairs, 0.05), (n, declared)


def test_a_gap_interval_holds_the_shifts_its_test_accepts():
    """The committed run's DT-RNN and RHN cells at depth 6: the test rejects the interval's
    ends moved outward and accepts them; the gap lies inside; a cell of one setting, or two
    against two (no relabelling rare enough), has no bounded interval."""
    from rhnsearch.results import uncertainty

    cells = cell_losses()
    dtrnn, rhn = cells[("dtrnn", 6)][0], cells[("rhn", 6)][0]
    found = uncertainty.gap(dtrnn, rhn, 40)
    low, high = found.bounds
    assert found.k == len(dtrnn) == 27 and low < found.value < high
    for shift, accepted in ((low, True), (high, True), (low - 0.01, False), (high + 0.01, False)):
        assert (uncertainty.gap(dtrnn - shift, rhn, 40).p >= 0.05) is accepted, shift
    assert uncertainty.gap([1.0], [1.0, 2.0]) is None
    assert uncertainty.gap([5.0, 7.0], [1.0, 3.0]).bounds == (-np.inf, np.inf)
    assert uncertainty.excludes_zero(None) == "–"


def test_the_probability_of_improvement_counts_wins_and_half_ties():
    """Of [1, 2, 3] against [2, 4]: 1 and 2 beat 4, 1 beats 2, 2 ties 2: (4 + 0.5) / 6; its
    interval holds it. One setting: no interval."""
    from rhnsearch.results import uncertainty

    value, (low, high) = uncertainty.improvement([1.0, 2.0, 3.0], [2.0, 4.0])
    assert value == pytest.approx(4.5 / 6) and low <= value <= high
    assert uncertainty.improvement([1.0], [2.0, 4.0]) == (1.0, None)
    assert uncertainty.shown_improvement([1.0], [2.0, 4.0]) == "1.00"


def test_a_claim_is_worded_from_the_side_of_0_its_interval_lies_on():
    """A claim that a cell is worse holds only where the interval lies above 0; one that it
    is not worse holds where it lies below, and is merely consistent with an interval holding
    0; the other side of 0 refutes either; no interval resolves nothing."""
    from rhnsearch.results.uncertainty import Gap, verdict

    above, around, below = (
        Gap(1.0, 5, 0.01, (0.2, 1.5)),
        Gap(0.1, 5, 0.6, (-0.4, 0.7)),
        Gap(-1.0, 5, 0.01, (-1.5, -0.2)),
    )
    assert [verdict(g, "worse") for g in (above, around, below, None)] == [
        "holds",
        "not resolved",
        "does not hold",
        "not resolved",
    ]
    assert [verdict(g, "not worse") for g in (above, around, below, None)] == [
        "does not hold",
        "consistent with",
        "holds",
        "not resolved",
    ]
    with pytest.raises(ValueError):
        verdict(above, "better")
