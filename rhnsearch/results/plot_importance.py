"""Each hyperparameter's importance (the frame of `importance.importances`).
One panel per architecture, one bar per evaluator."""

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from . import arch_label
from .importance import fitted_on


def importance_bars(frame: pd.DataFrame) -> Figure:
    """One panel per architecture: each hyperparameter's importance, one bar per evaluator
    (the frame of `importance.importances`)."""
    archs = list(dict.fromkeys(frame["arch"]))
    evaluators = list(dict.fromkeys(frame["evaluator"]))
    names = max(
        (list(dict.fromkeys(frame.loc[frame["arch"] == a, "hyperparameter"])) for a in archs),
        key=len,
    )
    fig = Figure(
        figsize=(max(4.0 * len(archs), 6.0), 2.2 + 0.25 * len(names) * len(evaluators)),
        layout="constrained",
    )
    axes = fig.subplots(1, len(archs), sharex=True, squeeze=False)[0]
    colors = sns.color_palette("colorblind", len(evaluators))
    height = 0.8 / len(evaluators)
    for ax, arch in zip(axes, archs):
        mine = frame[frame["arch"] == arch]
        for k, (evaluator, color) in enumerate(zip(evaluators, colors)):
            values = mine[mine["evaluator"] == evaluator].set_index("hyperparameter")
            values = values["importance"].reindex(names)
            ax.barh(
                np.arange(len(names)) + (k - (len(evaluators) - 1) / 2) * height,
                values.fillna(0),
                height=height,
                color=color,
                label=evaluator,
            )
        ax.set_yticks(range(len(names)), names)
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(f"{arch_label(arch)} ({fitted_on(mine.iloc[0])})", fontsize=10)
        ax.set_xlabel("importance (sums to 1)")
    fig.legend(
        *axes[-1].get_legend_handles_labels(),
        loc="outside lower center",
        ncol=len(evaluators),
        fontsize=8,
    )
    return fig
