"""What Tune's restore of a sweep costs before its resumed fit starts, side by side in one run:
on a copy of the Tune folder of a sweep that `scale.py --keep DIR` kept, `Tuner.restore` as
Tune does it (an ExperimentAnalysis built of every saved trial, which nothing reads before the
fit's own results replace it) and as `compat.ray.restored_tuner` does it (not built), by turns,
--repeats times each: the wall and CPU seconds and the RSS each adds to this process. Tune's
warnings as it builds the analysis (one a trial: rhnsearch turns Tune's result files off) go
to stderr, as they went to a resumed driver's log.

    python benchmarks/resume_start.py DIR [--repeats 3]    # e.g. /tmp/keep/random-sqlite-dir-1992
"""

import argparse
import gc
import resource
import shutil
import tempfile
import time
from pathlib import Path

import psutil
from ray import tune

from rhnsearch.compat import ray as ray_compat

NAME = "scale"  # scale.py's sweep


def trial(config):
    """Tune's restore takes the trainable again, by its name (scale.py's); the fit is not run."""


def restore(path: str, analysis: bool):
    """The Tuner restored from PATH, with Tune's ExperimentAnalysis built (ANALYSIS) or not."""
    if analysis:
        return tune.Tuner.restore(path, trial, resume_unfinished=True, resume_errored=True)
    return ray_compat.restored_tuner(path, trial)


def timed(path: str, analysis: bool) -> tuple[float, float, float]:
    """(wall s, CPU s, RSS MB added) of one restore from PATH."""
    gc.collect()
    rss = psutil.Process().memory_info().rss
    usage = resource.getrusage(resource.RUSAGE_SELF)
    wall = time.perf_counter()
    tuner = restore(path, analysis)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
    added = (psutil.Process().memory_info().rss - rss) / 2**20
    del tuner
    return wall, cpu, added


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kept", type=Path, help="a size's folder that scale.py --keep kept")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="resume-start-") as folder:
        path = str(shutil.copytree(args.kept / "sweeps" / NAME, Path(folder) / NAME))
        trials = sum(1 for d in Path(path).iterdir() if d.name.startswith("trial_"))
        print(f"Tune's restore of {trials} saved trials (a copy of {args.kept})")
        print(f"{'restore':36s} {'wall s':>7s} {'CPU s':>7s} {'RSS +MB':>8s}")
        rows = {True: [], False: []}
        timed(path, False)  # imports and caches warmed, not counted
        for _ in range(args.repeats):
            for analysis in (True, False):
                rows[analysis].append(timed(path, analysis))
                label = "Tune's, its analysis built" if analysis else "restored_tuner, not built"
                wall, cpu, added = rows[analysis][-1]
                print(f"{label:36s} {wall:7.2f} {cpu:7.2f} {added:+8.0f}", flush=True)
        built, not_built = (min(w for w, _, _ in rows[a]) for a in (True, False))
        cost = built - not_built
        print(f"the analysis, fastest of each: {cost:.2f} s, {1000 * cost / trials:.2f} ms a trial")


if __name__ == "__main__":
    main()
