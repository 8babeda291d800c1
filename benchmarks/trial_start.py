"""How long plain Tune takes to start trials that all want to start at once, as a resumed sweep's
do (the trials that were running when its driver was killed): a fresh local Ray of --slots
logical CPUs, then a Tuner of --slots trials of a function that only records when it starts
(Tune's default search: every trial pending at once), no MLflow, no rhnsearch. Prints the
seconds from `ray.init` to `fit`, and from `fit` to the first and the last trial's start, for
each --slots given, one after another, and again with Tune's pending trials (trials whose actor
is being started) capped at each --max-pending given (`TUNE_MAX_PENDING_TRIALS_PG`).

    python benchmarks/trial_start.py [--slots 2 64] [--max-pending 2 8]
"""

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

import ray
from ray import tune


def started(folder: str):
    """A trial function that appends its start's wall-clock time to FOLDER/starts.txt."""

    def trial(config):
        with open(Path(folder) / "starts.txt", "a") as f:
            f.write(f"{time.time()}\n")

    return trial


def measure(slots: int, max_pending: int | None) -> dict:
    """One fresh Ray of SLOTS logical CPUs, SLOTS trials, at most MAX_PENDING of them pending."""
    os.environ.pop("TUNE_MAX_PENDING_TRIALS_PG", None)
    if max_pending:
        os.environ["TUNE_MAX_PENDING_TRIALS_PG"] = str(max_pending)
    with tempfile.TemporaryDirectory(prefix="trial-start-") as folder:
        begun = time.time()
        ray.init(
            num_cpus=slots,
            num_gpus=0,
            include_dashboard=False,
            logging_level=logging.WARNING,
            _temp_dir=f"{folder}/ray",
        )
        fit = time.time()
        tune.Tuner(
            started(folder),
            param_space={"x": tune.grid_search(list(range(slots)))},
            run_config=tune.RunConfig(storage_path=f"{folder}/results", verbose=0),
        ).fit()
        starts = sorted(float(t) for t in (Path(folder) / "starts.txt").read_text().split())
        ray.shutdown()
    return {
        "slots": slots,
        "max_pending": max_pending or "auto",
        "init_s": fit - begun,
        "first_s": starts[0] - fit,
        "last_s": starts[-1] - fit,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--slots", type=int, nargs="+", default=[2, 64])
    p.add_argument("--max-pending", type=int, nargs="*", default=[])
    args = p.parse_args()
    print(f"{'slots':>5s} {'pending':>7s} {'init s':>7s} {'first s':>8s} {'last s':>7s}")
    for slots in args.slots:
        for max_pending in [None, *args.max_pending]:
            row = measure(slots, max_pending)
            print(
                f"{row['slots']:5d} {row['max_pending']:>7} {row['init_s']:7.1f} "
                f"{row['first_s']:8.1f} {row['last_s']:7.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
