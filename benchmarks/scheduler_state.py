"""What per-cell ASHA's saved state costs Tune's event loop as a sweep grows: the seconds that
`CellASHAScheduler.on_trial_result` takes on the calling thread for every rung result of N
trials (12 cells, rungs at epochs 2, 6 and 18 as the JSB `cpu` preset's, losses at random),
its state saved to a file in a temporary directory, side by side in one run: the state made
into text on the storage thread when its write runs (as it does), and made into text at every
decision on the calling thread (as it did before: `json.dumps` of the whole state, which grows
with the trials, per decision).

    python benchmarks/scheduler_state.py [--trials 500 2000 10000]
"""

import argparse
import random
import tempfile
import time
from pathlib import Path

from ray.tune.experiment import Trial

from rhnsearch.files import storage
from rhnsearch.search.scheduler import CellASHAScheduler

CELLS = [f"{arch} d{depth}" for arch in ("rhn", "dtrnn", "dtsrnn") for depth in (1, 2, 4, 6)]


class OnTheLoop(CellASHAScheduler):
    """The scheduler as before: its state made into text when each decision queues a write."""

    def _save(self):
        if self.state_file:
            text = self._text()
            storage.write_text_later(self.state_file, lambda: text)


def loop_seconds(kind: type, trials: int, folder: Path) -> tuple[float, int]:
    """Seconds on the calling thread for every rung result of TRIALS trials, and decisions."""
    scheduler = kind(max_t=40, grace_period=2, reduction_factor=3, state_file=str(folder / "s"))
    scheduler.set_search_properties("valid_loss", "min")
    rng, seconds, decisions = random.Random(0), 0.0, 0
    for n in range(trials):
        config = {"cell": CELLS[n % len(CELLS)], "lr": rng.random(), "seed": n}
        trial = Trial("run_trial", config=config, trial_id=f"t{n:05d}", stub=True)
        for epoch in (2, 6, 18):
            start = time.perf_counter()
            decision = scheduler.on_trial_result(
                None, trial, {"epoch": epoch, "valid_loss": 9 + rng.random()}
            )
            seconds += time.perf_counter() - start
            decisions += 1
            if decision == "STOP":
                break
    storage.LATER.wait()
    return seconds, decisions


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[500, 2000, 10000])
    args = parser.parse_args()
    head = ("trials", "decisions", "text on the loop (ms each)", "as it does (ms each)", "ratio")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (7, 9, 27, 21, 6), strict=True)))
    for trials in args.trials:
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            before, decisions = loop_seconds(OnTheLoop, trials, Path(a))
            now, _ = loop_seconds(CellASHAScheduler, trials, Path(b))
        print(
            f"{trials:>7} {decisions:>9} {1000 * before / decisions:>27.3f} "
            f"{1000 * now / decisions:>21.3f} {before / now:>6.1f}"
        )


if __name__ == "__main__":
    main()
