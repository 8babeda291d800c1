"""Plain Optuna at the size of a sweep: what each cell's own TPE study costs to ask and tell as
it grows, without Tune or rhnsearch's driver, for the part of an Optuna sweep's driver cost
that is Optuna's own (`scale.py --search optuna`).

As the sweep's searcher (`search/searchers.py`, `CellStudies`) uses them: the JSB study's `cpu`
preset's 12 cells, a study each in one journal file (one `JournalStorage`, made by the
sweep's `optuna_storage`; --storage-per-study: one a study, as the searcher had it before), each
asked in turn for a setting of the space's distributions by a seeded `TPESampler` with
`constant_liar=True`, --slots trials in flight (a trial is told when it is the oldest of them
and the slots are full), each told a loss drawn at random (TPE's cost is in the number of
trials, not their values). Prints the CPU milliseconds an ask and a tell take, on average over
the trials from each size in --trials to the next, and the process's peak RSS; then one JSON
line.

    python benchmarks/optuna_studies.py [--trials 500 2000 10000] [--slots 64]
"""

import argparse
import json
import resource
import tempfile
import time
from collections import deque
from pathlib import Path

import numpy as np
import optuna

from rhnsearch.data import load_dataset
from rhnsearch.search.searchers import CellSearcher, optuna_distribution, optuna_storage
from rhnsearch.search.space import load_space

SPACE = Path(__file__).resolve().parents[1] / "spaces" / "jsb_optimization.yaml"
PRESET = "cpu"


def cell_distributions() -> dict[str, dict]:
    """Each cell's Optuna distributions, as the sweep's searcher asks its study for them."""
    space = load_space(SPACE, preset=PRESET)
    cells = space.cells_for(load_dataset(space.dataset))
    drawn = CellSearcher(space, cells, {}, []).params  # each cell's params its arch reads
    return {
        label: {name: optuna_distribution(d) for name, d in params.items()}
        for label, params in drawn.items()
    }


def run(sizes: list[int], slots: int, folder: Path, *, storage_per_study: bool) -> list[dict]:
    """Ask up to max(SIZES) trials, a cell at a time, and tell each once SLOTS more are in
    flight; per span of SIZES, the mean CPU ms of its asks and tells and the peak RSS at its
    end."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    shared = optuna_storage(str(folder))  # the sweep's own journal file, lock and storage
    cells = cell_distributions()
    labels = list(cells)
    studies = {
        label: optuna.create_study(
            study_name=label,
            storage=optuna_storage(str(folder)) if storage_per_study else shared,
            sampler=optuna.samplers.TPESampler(seed=k, constant_liar=True),
        )
        for k, label in enumerate(cells)
    }
    rng = np.random.default_rng(0)
    in_flight, rows = deque(), []
    ask_s = tell_s = 0.0
    told_now = start = 0
    for n in range(max(sizes)):
        label = labels[n % len(labels)]
        began = time.process_time()
        trial = studies[label].ask(cells[label])
        ask_s += time.process_time() - began
        in_flight.append((label, trial.number))
        if len(in_flight) == slots:  # the oldest trial ends
            told, number = in_flight.popleft()
            began = time.process_time()
            studies[told].tell(number, float(rng.lognormal(0, 0.1)))
            tell_s += time.process_time() - began
            told_now += 1
        if n + 1 in sizes:
            span = n + 1 - start
            rows.append(
                {
                    "trials": n + 1,
                    "trials_a_study": (n + 1) // len(cells),
                    "ask_ms": round(1000 * ask_s / span, 2),
                    "tell_ms": round(1000 * tell_s / max(1, told_now), 2),
                    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                }
            )
            print(
                f"{rows[-1]['trials']:>7} {rows[-1]['trials_a_study']:>7} "
                f"{rows[-1]['ask_ms']:>9.2f} {rows[-1]['tell_ms']:>9.2f} "
                f"{rows[-1]['peak_rss_mb']:>8}",
                flush=True,
            )
            ask_s = tell_s = 0.0
            start, told_now = n + 1, 0
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[500, 2000, 10000])
    parser.add_argument("--slots", type=int, default=64)
    parser.add_argument(
        "--storage-per-study",
        action="store_true",
        help="each study its own JournalStorage of the one file (as rhnsearch had it before "
        "stop 68): each replays, holds and re-reads every study's trials",
    )
    args = parser.parse_args()
    print(
        f"plain Optuna: 12 TPE studies (constant liar) in one journal file, {args.slots} in flight"
    )
    print(f"{'trials':>7} {'a study':>7} {'ask ms':>9} {'tell ms':>9} {'RSS MB':>8}")
    print("  (ask and tell: the mean over the trials since the row before)")
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(
            sorted(args.trials), args.slots, Path(tmp), storage_per_study=args.storage_per_study
        )
    print(
        json.dumps(
            {
                "optuna": optuna.__version__,
                "slots": args.slots,
                "storage_per_study": args.storage_per_study,
                "sizes": rows,
            }
        )
    )


if __name__ == "__main__":
    main()
