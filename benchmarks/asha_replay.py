"""Per-cell ASHA replayed on a finished FIFO sweep's learning curves: what would the study have
cost, and which cell order would it have given, at each grace period and reduction factor?

The real scheduler (rhnsearch.search.scheduler.CellASHAScheduler) decides. The trials arrive
as in the sweep: in trial order, --concurrent at once, each epoch taking the seconds it took.
Every trial is seeded, so its curve does not depend on the scheduler: a replay gives what a
sweep would have, up to the order in which the trials reach a rung (the replay of grace 2,
rf 3 on the `cpu` JSB preset gave 1,693 trial-epochs; real sweeps 1,693 and 1,697).

    python benchmarks/asha_replay.py --workdir DIR [--sweep fifo] [--grace 1 2 4] [--rf 2 3 4]
        [--orders 5]

DIR holds the results/ of `benchmarks/asha_vs_fifo.py`. One line per setting, then a JSON line
with them all: "ratio" (trial-epochs / FIFO's), "same_ranking" and "kendall_tau" (as there) in
the sweep's arrival order, and their range over --orders arrival orders (the sweep's, then
random ones): a setting that keeps the order only in one order is luck.
"""

import argparse
import heapq
import itertools
import json
import math
import os
from collections import deque

import pandas as pd
from asha_vs_fifo import EXPERIMENT, ranking, tau

from rhnsearch.search.scheduler import STOP, CellASHAScheduler
from rhnsearch.tracking.store import history, open_experiment
from rhnsearch.tracking.store import trials as sweep_trials


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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--sweep", default="fifo")
    parser.add_argument("--grace", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--rf", type=float, nargs="+", default=[2, 3, 4])
    parser.add_argument("--concurrent", type=int, default=2)
    parser.add_argument(
        "--orders",
        type=int,
        default=5,
        help="arrival orders replayed: the sweep's, then random ones",
    )
    args = parser.parse_args(argv)
    os.chdir(args.workdir)
    exp = open_experiment(EXPERIMENT)
    runs = sweep_trials(exp, args.sweep)
    runs = runs.assign(order=runs["trial_id"].str.rsplit("_", n=1).str[-1].astype(int))
    runs = runs.sort_values("order")
    epochs = history(exp, runs)
    curves = {
        run_id: (list(g["metrics.epoch_seconds"]), list(g["metrics.valid_loss"]))
        for run_id, g in epochs.groupby("run_id")
    }
    max_t = int(runs["params.epochs"].astype(int).max())
    fifo_epochs, fifo_ranking = int(runs["metrics.epoch"].sum()), ranking(runs)
    rows = []
    for grace, rf in itertools.product(args.grace, args.rf):
        replays = []  # the sweep's arrival order, then random ones
        for k in range(args.orders):
            arrivals = runs if k == 0 else runs.sample(frac=1, random_state=k)
            ended = replay(arrivals, curves, grace, rf, max_t, args.concurrent)
            order = ranking(ended)
            replays.append(
                (
                    round(ended["epochs"].sum() / fifo_epochs, 3),
                    order == fifo_ranking,
                    round(tau(order, fifo_ranking), 3),
                )
            )
        ratios, same, taus = zip(*replays)
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


if __name__ == "__main__":
    main()
