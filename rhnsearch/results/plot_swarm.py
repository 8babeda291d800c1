"""The RHN paper's Figure 4: one point per random setting, x = recurrence depth, a swarm per arch.
Completed settings are filled dots, those stopped early by ASHA rings, diverged ones crosses above.
Past SWARM_MAX settings a cell, every point is drawn in a jittered strip instead.
The loss axis is log-scaled where the losses span more than a factor of LOG_SPAN."""

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import LogLocator, MaxNLocator, NullLocator

from . import arch_label, arch_order
from .plot_common import fitted, loss_unit, sweep_title
from .tables import finished

DODGE_WIDTH = 0.8  # seaborn's default width of a dodged category
LOG_SPAN = 2.0  # the swarm's loss axis is log-scaled where its losses span more than this factor
CROWDED_SWARM = r".* of the points cannot be placed"  # seaborn's warning, at draw time
SWARM_MAX = 150  # settings of a cell beyond which a swarm cannot lay its points out: a strip


class LossScale(NamedTuple):
    """The swarm's loss axis: log-scaled or not, the maps to and from its units (log10 or
    linear), and the range of the losses that did not diverge in those units."""

    log: bool
    to_axis: Callable
    from_axis: Callable
    low: float
    high: float
    span: float


def loss_scale(ax, finite: pd.Series) -> LossScale:
    """AX's loss axis for the losses FINITE, log-scaled where they span more than LOG_SPAN
    (set here, before the swarm: seaborn places its points in log space)."""
    log = bool(len(finite)) and finite.min() > 0 and finite.max() > LOG_SPAN * finite.min()
    if log:
        ax.set_yscale("log")
    to_axis, from_axis = (np.log10, lambda v: 10**v) if log else (float, float)
    low, high = (to_axis(finite.min()), to_axis(finite.max())) if len(finite) else (0.0, 1.0)
    span = high - low if high > low else max(abs(high) * 0.1, 1e-6)
    return LossScale(log, to_axis, from_axis, low, high, span)


def swarm(
    sweep: pd.Series,
    trials: pd.DataFrame,
    metric: str = "best_valid_loss",
    *,
    swarm_max: int = SWARM_MAX,
) -> Figure:
    """RHN paper Figure 4: one point per random setting, x = recurrence depth, one swarm per
    architecture. Completed settings are filled dots, those stopped early by ASHA rings; every
    setting that did not diverge is on the axis (log-scaled where the losses span more than a
    factor of LOG_SPAN, so that the spread of the swarm, the paper's evidence, shows whole);
    diverged settings are crosses in a row above a dashed line; each kind is counted.

    Args:
        swarm_max: where a cell has more settings than this, every point is drawn in a
            jittered strip instead, as the title says (a swarm would stack most of them on
            its edge, and take long: benchmarks/report_scale.py).
    """
    loss = trials[f"metrics.{metric}"]
    ok = finished(trials, metric)
    depths = sorted(trials["params.depth"].unique())
    archs = sorted(trials["params.arch"].unique(), key=arch_order)
    colors = dict(zip(archs, sns.color_palette("colorblind", len(archs))))
    fig = Figure(figsize=(9.5, 5.2), layout="constrained")
    ax = fig.add_subplot()
    scale = loss_scale(ax, loss[ok])
    top = scale.from_axis(scale.high + 0.15 * scale.span)
    points = trials[ok].assign(
        arch=trials["params.arch"].map(arch_label),
        loss=loss,
        depth=trials["params.depth"].astype(int),
    )
    largest = int(points.groupby(["arch", "depth"]).size().max()) if len(points) else 0
    strip = largest > swarm_max
    if not points.empty:
        swarm_points(ax, points, depths, archs, colors, strip)
    diverged_crosses(ax, trials, depths, archs, colors, top)
    swarm_axes(ax, depths, scale, top)
    ax.set_xlabel("recurrence depth")
    ax.set_ylabel(f"{metric} ({loss_unit(trials)}{', log scale' if scale.log else ''})")
    swarm_legend(ax, trials, archs, colors)
    notes = ", ".join(
        f"{n} {'stopped early' if s == 'stopped' else s}"
        for s, n in trials["status"].value_counts().items()
        if s != "diverged"
    )
    shape = f"; a jittered strip: up to {largest} settings a cell" if strip else ""
    ax.set_title(
        fitted(
            sweep_title(sweep, trials, f"{metric} of each random setting ({notes}{shape})"),
            fig,
            10,
            share=0.75,
        ),
        fontsize=10,
    )
    return fig


def swarm_points(ax, points: pd.DataFrame, depths: list, archs: list, colors: dict, strip: bool):
    """The settings that did not diverge (POINTS), dodged by arch at each depth: a swarm, or
    a jittered strip where STRIP; those stopped early as rings."""
    draw = partial(sns.stripplot, jitter=0.35, size=2.5, alpha=0.6) if strip else sns.swarmplot
    draw(
        data=points,
        x="depth",
        y="loss",
        hue="arch",
        order=depths,
        hue_order=[arch_label(a) for a in archs],
        dodge=True,
        **({} if strip else {"size": 4 if len(points) > 200 else 5}),
        ax=ax,
        legend=False,
        palette=[colors[a] for a in archs],
    )
    hollow_stopped(ax, points.loc[points["status"] == "stopped", "loss"])
    for collection in ax.collections:
        collection.set_gid("shown")


def diverged_crosses(ax, trials: pd.DataFrame, depths: list, archs: list, colors: dict, top: float):
    """The diverged settings as crosses in one row at height TOP, spread across each cell's
    dodged band."""
    band = DODGE_WIDTH / len(archs)
    diverged = trials["status"].eq("diverged")
    for (arch, depth), cell in trials[diverged].groupby(["params.arch", "params.depth"]):
        center = depths.index(depth) - DODGE_WIDTH / 2 + band * (archs.index(arch) + 0.5)
        xs = center + np.linspace(-band / 3, band / 3, len(cell) + 2)[1:-1]
        ax.scatter(
            xs,
            [top] * len(cell),
            color=colors[arch],
            gid="diverged",
            zorder=3,
            marker="X",
            s=70,
            linewidth=0.6,
            edgecolors="black",
        )


def swarm_axes(ax, depths: list, scale: LossScale, top: float):
    """The swarm's axes: a dashed line under the diverged row, one tick per depth, the loss
    axis's limits and ticks (the diverged row's labelled 'diverged' at TOP)."""
    log, to_axis, from_axis, low, high, span = scale
    ax.axhline(from_axis(high + 0.08 * span), color="grey", linestyle="--", linewidth=0.8)
    ax.set_xticks(range(len(depths)), depths)
    ax.set_xlim(-0.5, len(depths) - 0.5)
    ax.set_ylim(from_axis(low - 0.05 * span), from_axis(high + 0.21 * span))
    locator = LogLocator(subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0)) if log else MaxNLocator(6)
    ticks = [
        t
        for t in locator.tick_values(from_axis(low), from_axis(high))
        if low - 0.05 * span <= to_axis(t) <= high + 0.04 * span
    ]
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_yticks([*ticks, top], [f"{t:.3g}" for t in ticks] + ["diverged"])


def swarm_legend(ax, trials: pd.DataFrame, archs: list, colors: dict):
    """The swarm's legend: each arch with its divergences, then each kind of marker counted."""
    diverged = trials["status"].eq("diverged")
    handles = [
        Line2D(
            [],
            [],
            marker="o",
            linestyle="",
            color=colors[a],
            label=f"{arch_label(a)}: {int(diverged[trials['params.arch'] == a].sum())}"
            f" of {int((trials['params.arch'] == a).sum())} diverged",
        )
        for a in archs
    ]
    counts = trials["status"].value_counts()
    handles += [
        Line2D(
            [],
            [],
            marker="o",
            linestyle="",
            color="black",
            label=f"filled: completed ({counts.get('completed', 0)})",
        ),
        Line2D(
            [],
            [],
            marker="o",
            linestyle="",
            color="white",
            markeredgecolor="black",
            label=f"hollow: stopped early by ASHA ({counts.get('stopped', 0)})",
        ),
        Line2D(
            [],
            [],
            marker="X",
            linestyle="",
            color="white",
            markeredgecolor="black",
            label=f"diverged (at top): {int(diverged.sum())} of {len(trials)}",
        ),
    ]
    ax.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8, frameon=False
    )


def hollow_stopped(ax, stopped_losses: pd.Series):
    """Draw the swarm's points of trials stopped early as rings (the swarm moves points
    sideways only, so a point is known by its loss)."""
    for collection in ax.collections:
        ys = collection.get_offsets()[:, 1]
        if not len(ys):
            continue
        face = np.repeat(collection.get_facecolors()[:1], len(ys), axis=0)
        edge = face.copy()
        stopped = np.isclose(
            ys[:, None], stopped_losses.to_numpy()[None, :], rtol=1e-9, atol=0
        ).any(axis=1)  # a log axis gives them back rounded
        face[stopped] = (1, 1, 1, 1)
        collection.set_facecolors(face)
        collection.set_edgecolors(edge)
        collection.set_linewidths(1.2)
