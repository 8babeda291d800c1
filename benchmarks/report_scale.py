"""What the report's figures and importances cost as a sweep grows, side by side in one run:
as they are (a swarm becomes a jittered strip past `plots.SWARM_MAX` settings a cell, parallel
coordinates draw `plots.PARALLEL_MAX` trials drawn at random, importance fits
`importance.MAX_TRIALS` trials an architecture drawn at random) and without those bounds (every
setting swarmed, every trial a line, every trial fitted), on the committed `jsb_paper`
example's search trials repeated to N (each copy's best_valid_loss and lr moved by 1% at random,
so that no two trials are equal). Seconds to draw each figure as the report's PNG, and to fit
the importances of every architecture.

    python benchmarks/report_scale.py [--trials 552 2000 10000]
"""

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from rhnsearch.results import importance, plots, report
from rhnsearch.tracking import store

TRIALS = Path(__file__).parents[1] / "results" / "examples" / "jsb_paper" / "trials.parquet"
CHOSEN = pd.Series({"sweep": "jsb-paper", "study": "jsb_optimization", "preset": "paper"})


def repeated(trials: pd.DataFrame, n: int) -> pd.DataFrame:
    """TRIALS repeated to N rows, each copy's loss and learning rate moved by 1% at random."""
    out = pd.concat([trials] * math.ceil(n / len(trials)), ignore_index=True).iloc[:n].copy()
    rng = np.random.default_rng(0)
    for column in ("metrics.best_valid_loss", "params.lr"):
        out[column] = out[column] * np.exp(rng.normal(0, 0.01, len(out)))
    out["trial_id"] = [f"t{i}" for i in range(len(out))]
    return out


def seconds(work, trials: pd.DataFrame) -> float:
    start = time.perf_counter()
    work(trials)
    return time.perf_counter() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, nargs="+", default=[552, 2000, 10000])
    args = p.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    search = store.search_trials(pd.read_parquet(TRIALS))
    warnings.simplefilter("ignore", UserWarning)  # seaborn: points a swarm cannot place
    every = float("inf")
    cases = {
        "swarm": (
            lambda t: report.image(plots.swarm(CHOSEN, t), ""),
            lambda t: report.image(plots.swarm(CHOSEN, t, swarm_max=every), ""),
        ),
        "parallel": (
            lambda t: report.image(plots.parallel(CHOSEN, t), ""),
            lambda t: report.image(plots.parallel(CHOSEN, t, max_lines=len(t)), ""),
        ),
        "importance": (
            lambda t: importance.importances(t),
            lambda t: importance.importances(t, max_trials=len(t)),
        ),
    }
    warm = repeated(search, min(args.trials))  # (the search's own trials at the default sizes)
    for bounded, _ in cases.values():  # imports and caches warmed, outside the timings
        bounded(warm)
    print(f"{'trials':>7} {'part':>10} {'bounded s':>10} {'unbounded s':>12} {'ratio':>6}")
    for n in args.trials:
        trials = repeated(search, n)
        for part, (bounded, unbounded) in cases.items():
            now, before = seconds(bounded, trials), seconds(unbounded, trials)
            print(f"{n:>7} {part:>10} {now:>10.2f} {before:>12.2f} {before / now:>6.1f}")


if __name__ == "__main__":
    main()
