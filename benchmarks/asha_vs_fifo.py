"""Does per-cell ASHA earn its keep? Runs one study twice on a local Ray, the same sampled
settings each time: with per-cell ASHA and with FIFO (every setting to the last epoch). Prints
each run's trial-epochs (epochs trained, summed over its trials), wall time and the ranking of
the cells by their best setting's best validation loss; last, one JSON line with
"asha_trial_epochs", "fifo_trial_epochs", "ratio" (ASHA / FIFO), "same_ranking" (the same
order of all cells) and "kendall_tau" (how alike the two orders are, 1 = the same). For scale,
"fifo_halves_tau" is how alike FIFO's own order is between two halves of its settings (each
cell's settings split at random, median over 1000 splits) and "fifo_halves_same" how often
the halves give the same order: the noise of a cell order measured on this many settings.

    python benchmarks/asha_vs_fifo.py [--space spaces/jsb_optimization.yaml] [--preset cpu]
        [--set samples=4 ...] [--data-dir DIR]

The MLflow store and the sweeps go to a fresh directory (--workdir, default a temporary one).
A finished sweep that the workdir's store already holds for the same space is read, not run
again: the ASHA sweep is named after its settings ('cell_asha-g2-rf3'), so another ASHA
setting (`--set scheduler.grace_period=4`) is measured against the FIFO run already there.
"""

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

import rhnsearch
from rhnsearch.errors import UserError
from rhnsearch.tracking.store import open_experiment, sweeps
from rhnsearch.tracking.store import trials as sweep_trials

EXPERIMENT = "asha_vs_fifo"

ROOT = Path(__file__).resolve().parents[1]


def ranking(trials: pd.DataFrame) -> list[str]:
    """Cells ('rhn d6') from best to worst by their best setting's best validation loss
    (a cell whose settings all diverged or failed comes last)."""
    ok = trials["status"].isin(["completed", "stopped"])
    best = trials[ok].groupby(["params.arch", "params.depth"])["metrics.best_valid_loss"].min()
    cells = {f"{a} d{d}" for a, d in zip(trials["params.arch"], trials["params.depth"])}
    ranked = [f"{a} d{d}" for (a, d), _ in best.sort_values().items()]
    return ranked + sorted(cells - set(ranked))


def tau(order: list[str], reference: list[str]) -> float:
    return kendalltau([order.index(c) for c in reference], range(len(reference))).statistic


def halves(trials: pd.DataFrame, splits: int = 1000, seed: int = 0) -> tuple[float, float]:
    """(median tau, share of same orders) between the cell orders of two random halves of
    each cell's settings."""
    rng = np.random.default_rng(seed)
    cells = trials.groupby(["params.arch", "params.depth"]).indices.values()
    taus, same = [], 0
    for _ in range(splits):
        first = np.concatenate([rng.permutation(i)[: len(i) // 2] for i in cells])
        one, other = ranking(trials.iloc[first]), ranking(trials.drop(trials.index[first]))
        taus.append(tau(one, other))
        same += one == other
    return float(np.median(taus)), same / splits


def without_scheduler(space: dict) -> dict:
    return {k: v for k, v in space.items() if k != "scheduler"}


def finished(name: str, space: dict):
    """(trials, trials_seconds) of the sweep NAME if the store holds it finished, else None;
    an error if that sweep ran on another space (the scheduler's settings aside)."""
    try:
        exp = open_experiment(EXPERIMENT)
    except UserError:
        return None
    table = sweeps(exp)
    done = table[(table["sweep"] == name) & (table["run_status"] == "FINISHED")]
    if done.empty:
        return None
    run_id = done.iloc[-1]["run_id"]
    stored = json.loads(Path(exp.client.download_artifacts(run_id, "space.json")).read_text())
    if without_scheduler(stored) != without_scheduler(space):
        raise SystemExit(
            f"sweep {name} in {Path.cwd()} ran on another space or preset: pass another --workdir"
        )
    seconds = exp.client.get_run(run_id).data.metrics["trials_seconds"]
    return sweep_trials(exp, name), seconds


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
    space = rhnsearch.load_space(args.space, preset=args.preset, overrides=args.overrides)
    grace, rf = space.scheduler.grace_period, space.scheduler.reduction_factor
    names = {"cell_asha": f"cell_asha-g{grace}-rf{rf:g}", "fifo": "fifo"}
    stored_as = json.loads(space.model_dump_json())  # as the sweep's space.json holds it
    outcome = {}
    for scheduler, name in names.items():
        found = finished(name, stored_as)
        if found is None:
            summary = rhnsearch.run_sweep(
                args.space,
                preset=args.preset,
                overrides=args.overrides,
                scheduler=scheduler,
                data_dir=args.data_dir,
                experiment=EXPERIMENT,
                name=name,
            )
            found = rhnsearch.load_trials(EXPERIMENT, sweep=name), summary["trials_seconds"]
        trials, seconds = found
        outcome[scheduler] = {
            "trial_epochs": int(trials["metrics.epoch"].sum()),
            "trials_seconds": seconds,
            "ranking": ranking(trials),
            "trials": trials,
        }
        print(
            f"{name:>16}: {outcome[scheduler]['trial_epochs']} trial-epochs in "
            f"{seconds:.0f} s; cells best to worst: "
            f"{', '.join(outcome[scheduler]['ranking'])}",
            flush=True,
        )
    asha, fifo = outcome["cell_asha"], outcome["fifo"]
    halves_tau, halves_same = halves(fifo.pop("trials"))
    print(
        json.dumps(
            {
                "workdir": str(workdir),
                "asha": names["cell_asha"],
                "asha_trial_epochs": asha["trial_epochs"],
                "fifo_trial_epochs": fifo["trial_epochs"],
                "ratio": round(asha["trial_epochs"] / fifo["trial_epochs"], 3),
                "asha_seconds": asha["trials_seconds"],
                "fifo_seconds": fifo["trials_seconds"],
                "same_ranking": asha["ranking"] == fifo["ranking"],
                "kendall_tau": round(tau(asha["ranking"], fifo["ranking"]), 3),
                "fifo_halves_tau": round(halves_tau, 3),
                "fifo_halves_same": halves_same,
                "asha_ranking": asha["ranking"],
                "fifo_ranking": fifo["ranking"],
            }
        )
    )


if __name__ == "__main__":
    main()
