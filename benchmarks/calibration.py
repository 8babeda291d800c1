"""How often a gap between two cells is declared (its interval excludes 0), by the old
m-out-of-n bootstrap of the cells' best and by the permutation test of their expected best of
K (rhnsearch.results.uncertainty), on pairs of simulated cells drawn from one real cell's
losses, the second moved up (worse) by a known shift.

Each cell draws n settings with replacement from the RHN settings of the committed JSB run
that finished (results/examples/jsb_paper/trials.parquet, best_valid_loss, every depth). At no
shift the declared share is the false-positive rate (either sign; it should be at most 5%);
at a shift, the power (declared with the right sign: the shifted cell worse).

    python benchmarks/calibration.py [--pairs 300] [--shifts 0 0.1 0.3] [--n 10 40]
        [--best-of 10 40]

The new rule's k is the fewer of --best-of and n (the default K and the JSB study's).
"""

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from rhnsearch.results import uncertainty
from rhnsearch.results.expected_best import BEST_OF
from rhnsearch.results.studies import JSB_BEST_OF
from rhnsearch.tracking.store import search_trials

TRIALS = Path(__file__).parents[1] / "results/examples/jsb_paper/trials.parquet"


def rhn_losses() -> np.ndarray:
    trials = search_trials(pd.read_parquet(TRIALS))  # not the confirmation round's
    ok = trials["status"].isin(("completed", "stopped")) & (trials["params.arch"] == "rhn")
    return trials.loc[ok, "metrics.best_valid_loss"].to_numpy()


def old_gap(losses: np.ndarray, reference: np.ndarray, rng) -> tuple[float, float]:
    """The removed rule: 95% percentile interval of best(half) - best(half), 4000 redraws of
    half of each cell's settings (rounded up), with replacement."""

    def best_of_halves(x):
        half = (len(x) + 1) // 2
        return x[rng.integers(0, len(x), size=(4000, half))].min(axis=1)

    draws = best_of_halves(losses) - best_of_halves(reference)
    low, high = np.quantile(draws, [0.025, 0.975], method="inverted_cdf")
    return float(low), float(high)


def declared(bounds: tuple[float, float], shift: float) -> bool:
    """The shifted cell (the first) found worse, or at no shift, any difference found."""
    return bounds[0] > 0 or (shift == 0 and bounds[1] < 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--shifts", type=float, nargs="+", default=[0.0, 0.1, 0.3])
    parser.add_argument("--n", type=int, nargs="+", default=[10, 40])
    parser.add_argument("--best-of", type=int, nargs="+", default=[BEST_OF, JSB_BEST_OF])
    args = parser.parse_args()
    pool = rhn_losses()
    print(f"{len(pool)} finished RHN settings, std {pool.std():.3f} nats; {args.pairs} pairs")
    print(
        "| n | shift (nats) | old: m-out-of-n bootstrap of the best | "
        + " | ".join(f"new: permutation test, K = {k}" for k in args.best_of)
        + " |"
    )
    print("| ---: | ---: | ---: |" + " ---: |" * len(args.best_of))
    for n in args.n:
        for shift in args.shifts:
            rng = np.random.default_rng(0)
            old, new = 0, np.zeros(len(args.best_of))
            start = time.perf_counter()
            for _ in range(args.pairs):
                a = rng.choice(pool, n) + shift
                b = rng.choice(pool, n)
                old += declared(old_gap(a, b, rng), shift)
                new += [declared(uncertainty.gap(a, b, k).bounds, shift) for k in args.best_of]
            shares = " | ".join(f"{x / args.pairs:.1%}" for x in [old, *new])
            print(f"| {n} | {shift:.1f} | {shares} |  ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
