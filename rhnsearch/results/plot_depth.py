"""Perplexity vs recurrence depth, valid and test side by side, log-scaled.
Measured (solid) and published on PTB (dashed), per group of the study's `Groups`.
The RHN paper's Fig. 5a untied and WT, or the HSG paper's Table 1 with and without HSG.
A cell whose best trial diverged or failed is an X at the top."""

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from .plot_common import fitted, sweep_title
from .studies import Groups
from .tables import best_per_cell, sweep_dataset, swept_in_depth


def depth_curves(sweep: pd.Series, trials: pd.DataFrame, groups: Groups) -> Figure:
    """Perplexity vs recurrence depth, valid and test side by side (`best_per_cell`), per
    group of GROUPS, measured (solid) and published on PTB (dashed), and the published point
    like the sweep's as a star: the RHN paper's Fig. 5a untied and WT (authors' README, at a
    weight decay the paper does not give, larger than its reduced one; the star its depth-10 WT
    number at the reduced decay, whose value, 1e-7, is from the authors' code), or the HSG
    paper's Table 1 with and without HSG. Log scale: the presets differ by orders."""
    if groups.key != "params.arch":  # one arch's curve per group: the arch swept in depth
        trials = swept_in_depth(trials)
    cells = best_per_cell(trials, groups.key)
    pub, star = groups.published, groups.star
    ds = sweep_dataset(trials)
    fig = Figure(figsize=(11, 4.8), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    colors = sns.color_palette("colorblind", len(groups.groups))
    for ax, column, name in zip(axes, ("valid", "test"), ("valid", "test")):
        for color, (value, label, suffix) in zip(colors, groups.groups):
            mine = cells[cells["key"] == value].sort_values("depth")
            ax.plot(
                mine["depth"], mine[column], "o-", color=color, label=f"{label}, {ds} (measured)"
            )
            ax.plot(
                pub.index,
                pub[column + suffix],
                "s--",
                color=color,
                mfc="none",
                label=f"{label}, PTB (published{groups.note})",
            )
            if star and value == star["tied"]:
                ax.plot(
                    [star["depth"]],
                    [star[column]],
                    "*",
                    color=color,
                    ms=11,
                    label=f"{label}, PTB (published; weight decay {star['weight_decay']:g} "
                    "from the authors' code)",
                )
            bad = mine[mine["status"].isin(["diverged", "failed"])]
            ax.scatter(
                bad["depth"],
                [0.97] * len(bad),
                marker="X",
                color=color,
                s=60,
                transform=blended_transform_factory(ax.transData, ax.transAxes),
            )
        ax.set_yscale("log")
        ax.set_xlabel("recurrence depth")
        ax.set_title(f"{name} perplexity", fontsize=10)
        ax.set_xticks(sorted(set(cells["depth"]) | set(pub.index)))
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("perplexity (log scale)")
    missing = int(cells["test"].isna().sum())
    axes[1].set_title(
        fitted(
            f"test perplexity ({missing} of {len(cells)} measured cells have "
            "none: best trial stopped early by ASHA, diverged (X at top) or "
            "failed)",
            fig,
            9,
            share=0.45,
        ),
        fontsize=9,
    )
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=2, fontsize=8)
    fig.suptitle(
        fitted(
            sweep_title(
                sweep, trials, f"{sweep['study']}: perplexity vs depth; published: {groups.source}"
            ),
            fig,
            10,
        ),
        fontsize=10,
    )
    return fig
