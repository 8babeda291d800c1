"""Does per-cell ASHA earn its keep? Two subcommands on one study's sweeps:

    python benchmarks/asha.py fifo [--space spaces/jsb_optimization.yaml] [--preset cpu]
        [--set samples=4 ...] [--data-dir DIR] [--workdir DIR]
    python benchmarks/asha.py replay --workdir DIR [--sweep fifo] [--grace 1 2 4] [--rf 2 3 4]
        [--orders 5]

`fifo` runs the study with per-cell ASHA and with FIFO, the same settings each time; `replay`
replays per-cell ASHA at other grace periods and reduction factors on the FIFO sweep's
learning curves (DIR: the workdir of `fifo`). Each prints one line per sweep or setting, then
one JSON line; `python benchmarks/asha.py COMMAND --help` says what they hold.
"""

import argparse
import heapq
import itertools
import json
import math
import os
import tempfile
from collections import deque
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

import rhnsearch
from rhnsearch.errors import UserError
from rhnsearch.search.scheduler import STOP, CellASHAScheduler
from rhnsearch.tracking.store import history, open_experiment, sweeps
from rhnsearch.tracking.store import trials as sweep_trials

EXPERIMENT = "asha_vs_fifo"  # the MLflow experiment of both sweeps (stores made before too)

ROOT = Path(__file__).resolve().parents[1]

FIFO = """Runs one study twice on a local Ray, the same sampled settings each time: with
per-cell ASHA and with FIFO (every setting to the last epoch). Prints each run's trial-epochs
(epochs trained, summed over its trials), wall time and the ranking of the cells by their best
setting's best validation loss; last, one JSON line with "asha_trial_epochs",
"fifo_trial_epochs", "ratio" (ASHA / FIFO), "same_ranking" (the same order of all cells) and
"kendall_tau" (how alike the two orders are, 1 = the same). For scale, "fifo_halves_tau" is
how alike FIFO's own order is between two halves of its settings (each cell's settings split
at random, median over 1000 splits) and "fifo_halves_same" how often the halves give the same
order: the noise of a cell order measured on this many settings.

The MLflow store and the sweeps go to a fresh directory (--workdir, default a temporary one).
A finished sweep that the workdir's store already holds for the same space is read, not run
again: the ASHA sweep is named after its settings ('cell_asha-g2-rf3'), so another ASHA
setting (`--set scheduler.grace_period=4`) is measured against the FIFO run already there.
"""

REPLAY = """Per-cell ASHA replayed on a finished FIFO sweep's learning curves: what would the
study have cost, and which cell order would it have given, at each grace period and reduction
factor?

The real scheduler (rhnsearch.search.scheduler.CellASHAScheduler) decides. The trials arrive
as in the sweep: in trial order, --concurrent at once, each epoch taking the seconds it took.
Every trial is seeded, so its curve does not depend on the scheduler: a replay gives what a
sweep would have, up to the order in which the trials reach a rung (the replay of grace 2,
rf 3 on the `cpu` JSB preset gave 1,693 trial-epochs; real sweeps 1,693 and 1,697).

--workdir holds the results/ of `benchmarks/asha.py fifo`. One line per setting, then a JSON
line with them all: "ratio" (trial-epochs / FIFO's), "same_ranking" and "kendall_tau" (as
there) in the sweep's arrival order, and their range over --orders arrival orders (the
sweep's, then random ones): a setting that keeps the order only in one order is luck.
"""


# -- the cell order --------------------------------------------------------------------------


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


# -- fifo: per-cell ASHA against FIFO --------------------------------------------------------


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


def compare(args):
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


# -- replay: other ASHA settings on the FIFO sweep's curves ----------------------------------


class Trial:
    """What the scheduler reads of a Tune trial: its id, and its config (its cell and its
    setting, the run's params: a setting's seeds share its fate)."""

    def __init__(self, trial_id: str, config: dict):
        self.trial_id, self.config = trial_id, config


def replay(
    runs: pd.DataFrame, curves: dict, grace: int, rf: float, max_t: int, concurrent: int
) -> pd.DataFrame:
    """The trials of RUNS as the scheduler would have ended them: status and best loss."""
    scheduler = CellASHAScheduler(max_t, grace, rf, metric="valid_loss", mode="min")
    queue, clock, order, ended = deque(runs.to_dict("records")), [], itertools.count(), []

    def start(now: float):
        if queue:
            run = queue.popleft()
            params = {k[7:]: v for k, v in run.items() if k.startswith("params.")}
            cell = f"{run['params.arch']} d{run['params.depth']}"
            trial = Trial(run["trial_id"], {**params, "cell": cell})
            heapq.heappush(clock, (now + curves[run["run_id"]][0][0], next(order), run, trial, 1))

    for _ in range(concurrent):
        start(0.0)
    while clock:
        now, _, run, trial, epoch = heapq.heappop(clock)
        seconds, losses = curves[run["run_id"]]
        loss = losses[epoch - 1]
        decision = scheduler.on_trial_result(None, trial, {"epoch": epoch, "valid_loss": loss})
        diverged = not math.isfinite(loss) or (epoch == len(losses) and run["status"] == "diverged")
        if diverged or decision == STOP or epoch >= max_t:
            finite = [x for x in losses[:epoch] if math.isfinite(x)]
            ended.append(
                {
                    "params.arch": run["params.arch"],
                    "params.depth": run["params.depth"],
                    "epochs": epoch,
                    "status": "diverged"
                    if diverged
                    else "completed"
                    if epoch >= max_t
                    else "stopped",
                    "metrics.best_valid_loss": min(finite, default=math.nan),
                }
            )
            start(now)
        else:
            heapq.heappush(clock, (now + seconds[epoch], next(order), run, trial, epoch + 1))
    return pd.DataFrame(ended)


def replays(args):
    os.chdir(args.workdir)
    exp = open_experiment(EXPERIMENT)
    runs = sweep_trials(exp, args.sweep)
    # the trials in the order they started: Tune's trial ids of old stores end in their number
    # (`..._00012`); today's are hashes, and a trial's run starts as the trial does
    number = runs["trial_id"].str.rsplit("_", n=1).str[-1]
    numbered = number.str.fullmatch(r"\d+").all()
    runs = runs.assign(order=number.astype(int) if numbered else runs["start_time"])
    runs = runs.sort_values(["order", "trial_id"])
    epochs = history(exp, runs)
    curves = {
        run_id: (list(g["metrics.epoch_seconds"]), list(g["metrics.valid_loss"]))
        for run_id, g in epochs.groupby("run_id")
    }
    max_t = int(runs["params.epochs"].astype(int).max())
    fifo_epochs, fifo_ranking = int(runs["metrics.epoch"].sum()), ranking(runs)
    rows = []
    for grace, rf in itertools.product(args.grace, args.rf):
        replayed = []  # the sweep's arrival order, then random ones
        for k in range(args.orders):
            arrivals = runs if k == 0 else runs.sample(frac=1, random_state=k)
            ended = replay(arrivals, curves, grace, rf, max_t, args.concurrent)
            order = ranking(ended)
            replayed.append(
                (
                    round(ended["epochs"].sum() / fifo_epochs, 3),
                    order == fifo_ranking,
                    round(tau(order, fifo_ranking), 3),
                )
            )
        ratios, same, taus = zip(*replayed)
        rows.append(
            {
                "grace": grace,
                "rf": rf,
                "ratio": ratios[0],
                "same_ranking": same[0],
                "kendall_tau": taus[0],
                "orders": args.orders,
                "ratio_range": [min(ratios), max(ratios)],
                "same_in": sum(same),
                "tau_range": [min(taus), max(taus)],
            }
        )
        print(
            f"grace {grace} rf {rf:g}: {ratios[0]:.3f} of FIFO's {fifo_epochs} "
            f"trial-epochs, same ranking {same[0]}, tau {taus[0]:.3f}; over {args.orders} "
            f"arrival orders: ratio {min(ratios):.3f}-{max(ratios):.3f}, same ranking in "
            f"{sum(same)}, tau {min(taus):.3f}-{max(taus):.3f}",
            flush=True,
        )
    print(json.dumps({"sweep": args.sweep, "fifo_trial_epochs": fifo_epochs, "replays": rows}))


# -- the command line ------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    raw = argparse.RawDescriptionHelpFormatter
    run = commands.add_parser(
        "fifo", help="per-cell ASHA against FIFO on the same settings", description=FIFO
    )
    run.formatter_class = raw
    run.add_argument("--space", default=str(ROOT / "spaces" / "jsb_optimization.yaml"))
    run.add_argument("--preset", default="cpu")
    run.add_argument("--set", dest="overrides", action="append", default=[])
    run.add_argument("--data-dir", help="default: $RHNSEARCH_DATA_DIR or the user cache")
    run.add_argument("--workdir", help="where results/ goes (default: a temporary dir)")
    run.set_defaults(go=compare)
    again = commands.add_parser(
        "replay", help="other ASHA settings replayed on the FIFO sweep", description=REPLAY
    )
    again.formatter_class = raw
    again.add_argument("--workdir", required=True)
    again.add_argument("--sweep", default="fifo")
    again.add_argument("--grace", type=int, nargs="+", default=[1, 2, 3, 4])
    again.add_argument("--rf", type=float, nargs="+", default=[2, 3, 4])
    again.add_argument("--concurrent", type=int, default=2)
    again.add_argument(
        "--orders",
        type=int,
        default=5,
        help="arrival orders replayed: the sweep's, then random ones",
    )
    again.set_defaults(go=replays)
    args = parser.parse_args(argv)
    args.go(args)


if __name__ == "__main__":
    main()
