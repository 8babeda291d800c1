"""Does per-cell ASHA earn its keep? Runs one study twice on a local Ray, the same sampled
settings each time: with per-cell ASHA and with FIFO (every setting to the last epoch). Prints
each run's trial-epochs (epochs trained, summed over its trials), wall time and the ranking of
the cells by their best setting's best validation loss; last, one JSON line with
"asha_trial_epochs", "fifo_trial_epochs", "ratio" (ASHA / FIFO) and "same_ranking".

    python benchmarks/asha_vs_fifo.py [--space spaces/jsb_optimization.yaml] [--preset cpu]
        [--set samples=4 ...] [--data-dir DIR]

The MLflow store and the sweeps go to a fresh directory (--workdir, default a temporary one).
"""
import argparse
import json
import os
import tempfile
from pathlib import Path

import pandas as pd

import rhnsearch

ROOT = Path(__file__).resolve().parents[1]


def ranking(trials: pd.DataFrame) -> list[str]:
    """Cells ('rhn d6') from best to worst by their best setting's best validation loss
    (a cell whose settings all diverged or failed comes last)."""
    ok = trials["status"].isin(["completed", "stopped"])
    best = trials[ok].groupby(["params.arch", "params.depth"])["metrics.best_valid_loss"].min()
    cells = {f"{a} d{d}" for a, d in zip(trials["params.arch"], trials["params.depth"])}
    ranked = [f"{a} d{d}" for (a, d), _ in best.sort_values().items()]
    return ranked + sorted(cells - set(ranked))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", default=str(ROOT / "spaces" / "jsb_optimization.yaml"))
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--data-dir", help="default: $RHNSEARCH_DATA_DIR or the user cache")
    parser.add_argument("--workdir", help="where results/ goes (default: a temporary dir)")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="asha-vs-fifo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    outcome = {}
    for scheduler in ("cell_asha", "fifo"):
        summary = rhnsearch.run_sweep(args.space, args.preset, args.overrides,
                                      scheduler=scheduler, data_dir=args.data_dir,
                                      experiment="asha_vs_fifo", name=scheduler)
        trials = rhnsearch.load_trials("asha_vs_fifo", sweep=scheduler)
        outcome[scheduler] = {"trial_epochs": int(trials["metrics.epoch"].sum()),
                              "trials_seconds": summary["trials_seconds"],
                              "ranking": ranking(trials)}
        print(f"{scheduler:>9}: {outcome[scheduler]['trial_epochs']} trial-epochs in "
              f"{summary['trials_seconds']:.0f} s; cells best to worst: "
              f"{', '.join(outcome[scheduler]['ranking'])}", flush=True)
    asha, fifo = outcome["cell_asha"], outcome["fifo"]
    print(json.dumps({"workdir": str(workdir), "asha_trial_epochs": asha["trial_epochs"],
                      "fifo_trial_epochs": fifo["trial_epochs"],
                      "ratio": round(asha["trial_epochs"] / fifo["trial_epochs"], 3),
                      "asha_seconds": asha["trials_seconds"],
                      "fifo_seconds": fifo["trials_seconds"],
                      "same_ranking": asha["ranking"] == fifo["ranking"],
                      "asha_ranking": asha["ranking"], "fifo_ranking": fifo["ranking"]}))


if __name__ == "__main__":
    main()
