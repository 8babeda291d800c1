"""The expected best loss of k settings drawn from each cell vs k (`expected_best`).
One curve per arch with a band of ± its std, one panel per depth, the study's K dotted."""

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator

from ..errors import UserError
from . import arch_label, arch_order
from .expected_best import expected_best
from .plot_common import fitted, loss_unit, sweep_title
from .tables import finished


def expected_best_curves(
    sweep: pd.Series, trials: pd.DataFrame, best_of: int, metric: str = "best_valid_loss"
) -> Figure:
    """The expected best METRIC of k settings vs k (`expected_best`, k = 1 to each cell's
    settings that did not diverge), one curve per arch with a band of ± its std, one panel per
    depth, the study's K dotted where a cell has as many. The loss axis stops at the median
    setting's loss: the curves fall from the cell's mean (k = 1) to near its best."""
    ok = trials[finished(trials, metric)]
    if ok.empty:
        raise UserError(f"sweep {sweep['sweep']} has no setting with a finite {metric}")
    depths = sorted(trials["params.depth"].unique())
    archs = sorted(trials["params.arch"].unique(), key=arch_order)
    colors = dict(zip(archs, sns.color_palette("colorblind", len(archs))))
    fig = Figure(figsize=(3.2 * len(depths) + 1.5, 4.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(depths), sharey=True))
    for (arch, depth), cell in ok.groupby(["params.arch", "params.depth"]):
        ks = np.arange(1, len(cell) + 1)
        mean, std = expected_best(cell[f"metrics.{metric}"], ks)
        ax = axes[depths.index(depth)]
        ax.plot(ks, mean, color=colors[arch], label=arch_label(arch))
        ax.fill_between(ks, mean - std, mean + std, color=colors[arch], alpha=0.2, lw=0)
    losses = ok[f"metrics.{metric}"]
    most = int(ok.groupby(["params.arch", "params.depth"]).size().max())
    ticks = [k for k in (1, 2, 5, 10, 20, 50, 100, 200, 500) if k < most] + [most]
    for ax, depth in zip(axes, depths):
        if best_of <= most:
            ax.axvline(best_of, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_xticks(ticks, [str(k) for k in ticks])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("settings drawn (k, log scale)")
        ax.set_title(f"depth {depth}", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"expected best {metric} ({loss_unit(trials)})")
    span = losses.median() - losses.min()
    axes[0].set_ylim(losses.min() - 0.05 * span, losses.median())
    handles = [Line2D([], [], color=colors[a], label=arch_label(a)) for a in archs]
    handles += [Line2D([], [], color="grey", linestyle=":", label=f"K = {best_of}")] * (
        best_of <= most
    )
    fig.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False)
    fig.suptitle(
        fitted(
            sweep_title(
                sweep,
                trials,
                f"expected best {metric} of k settings drawn from each cell's (band: ± 1 std; "
                "a setting stopped early at its best so far: an upper bound)",
            ),
            fig,
            10,
        ),
        fontsize=10,
    )
    return fig
