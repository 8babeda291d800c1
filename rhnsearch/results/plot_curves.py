"""Learning curves: a loss per epoch of the sweep's top trials by best validation loss.
One line per trial, labelled with its arch, depth, width, trial id, status and best loss."""

import pandas as pd
from matplotlib.figure import Figure

from ..errors import UserError
from ..tracking import store
from . import arch_label
from .plot_common import fitted, loss_unit, sweep_title
from .tables import finished


def curves(
    sweep: pd.Series,
    trials: pd.DataFrame,
    exp: store.Experiment,
    top: int = 5,
    metric: str = "valid_loss",
) -> Figure:
    """METRIC per epoch of the TOP trials by best validation loss (not diverged)."""
    best = trials[finished(trials, "best_valid_loss")].nsmallest(top, "metrics.best_valid_loss")
    if best.empty:
        raise UserError(
            f"sweep {sweep['sweep']} has no trial with a finite validation loss "
            "to draw: every trial diverged, failed or is still running"
        )
    hist = store.history(exp, best)
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    for rank, (_, run) in enumerate(best.iterrows(), 1):
        rows = hist[hist["run_id"] == run["run_id"]]
        tied = " WT" if pd.notna(run.get("params.tied")) and run["params.tied"] else ""
        ax.plot(
            rows["epoch"],
            rows[f"metrics.{metric}"],
            marker=".",
            label=f"#{rank} {arch_label(run['params.arch'])} depth "
            f"{run['params.depth']} width {run['params.width']}{tied} "
            f"({run['trial_id']}, {run['status']}): best {run['metrics.best_valid_loss']:.4g}",
        )
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"{metric} ({loss_unit(trials)})")
    fig.legend(loc="outside lower center", fontsize=7)
    ax.grid(alpha=0.3)
    ax.set_title(
        fitted(
            sweep_title(sweep, trials, f"Learning curves of the top {len(best)} trials"), fig, 10
        ),
        fontsize=10,
    )
    return fig
