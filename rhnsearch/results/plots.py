"""The papers' figures from one sweep's MLflow runs (PNG or SVG), and their logging as
artifacts of the sweep's parent run."""

import logging
import tempfile
import textwrap
import warnings
from functools import partial
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import LogLocator, MaxNLocator, NullLocator
from matplotlib.transforms import blended_transform_factory

from ..errors import UserError, first_line
from ..tracking import store
from . import arch_label, arch_order
from .expected_best import expected_best
from .export import atomic, check_out
from .importance import fitted_on
from .studies import Groups, kind_of
from .tables import best_per_cell, finished, sweep_dataset, swept_in_depth

log = logging.getLogger(__name__)
PLOT_OUT = (".png", ".svg")
DODGE_WIDTH = 0.8  # seaborn's default width of a dodged category
CLIP_MARGIN = 0.5  # parallel coordinates: the loss axis stops at best + CLIP_MARGIN x |best|
LOG_SPAN = 2.0  # the swarm's loss axis is log-scaled where its losses span more than this factor
PARALLEL_MAX = 1000  # parallel coordinates: more trials, and this many are drawn at random
CROWDED_SWARM = r".* of the points cannot be placed"  # seaborn's warning, at draw time
SWARM_MAX = 150  # settings of a cell beyond which a swarm cannot lay its points out: a strip


def _title(sweep: pd.Series, trials: pd.DataFrame, what: str) -> str:
    return (
        f"{what}\n{sweep_dataset(trials)} · sweep {sweep['sweep']} · preset "
        f"{sweep['preset']} · {len(trials)} trials"
    )


def fitted(text: str, fig: Figure, fontsize: float, share: float = 1.0) -> str:
    """TEXT wrapped into lines that fit SHARE of FIG's width at FONTSIZE (points; a
    character is about 0.6 of it wide)."""
    chars = max(20, int(share * fig.get_figwidth() * 72 / (0.6 * fontsize)))
    return "\n".join(textwrap.fill(line, chars) for line in text.split("\n"))


def _unit(trials: pd.DataFrame) -> str:
    """The loss unit the trials' task logged (rhnsearch.tasks), e.g. nats per time step."""
    units = trials.get("params.loss_unit", pd.Series(dtype="str")).dropna().unique()
    return " / ".join(sorted(units)) or "nats"


def loss_axis_top(losses: pd.Series) -> float:
    """Top of a loss axis that keeps the informative band readable: the largest loss, unless
    some lie further than CLIP_MARGIN x |best| above the best (and above the lower quartile):
    the axis then stops there and those settings are drawn at its edge."""
    if losses.empty:
        return 1.0
    best = losses.min()
    clip = max(best + CLIP_MARGIN * abs(best), losses.quantile(0.25))
    return float(min(losses.max(), clip))


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
    diverged = trials["status"].eq("diverged")
    depths = sorted(trials["params.depth"].unique())
    archs = sorted(trials["params.arch"].unique(), key=arch_order)
    labels = [arch_label(a) for a in archs]
    colors = dict(zip(archs, sns.color_palette("colorblind", len(archs))))
    fig = Figure(figsize=(9.5, 5.2), layout="constrained")
    ax = fig.add_subplot()
    finite = loss[ok]
    log = bool(len(finite)) and finite.min() > 0 and finite.max() > LOG_SPAN * finite.min()
    if log:
        ax.set_yscale("log")  # before the swarm: seaborn places its points in log space
    to_axis, from_axis = (np.log10, lambda v: 10**v) if log else (float, float)
    low, high = (to_axis(finite.min()), to_axis(finite.max())) if len(finite) else (0.0, 1.0)
    span = high - low if high > low else max(abs(high) * 0.1, 1e-6)
    line, top = from_axis(high + 0.08 * span), from_axis(high + 0.15 * span)
    points = trials[ok].assign(
        arch=trials["params.arch"].map(arch_label),
        loss=loss,
        depth=trials["params.depth"].astype(int),
    )
    largest = int(points.groupby(["arch", "depth"]).size().max()) if len(points) else 0
    strip = largest > swarm_max
    if not points.empty:
        draw = partial(sns.stripplot, jitter=0.35, size=2.5, alpha=0.6) if strip else sns.swarmplot
        draw(
            data=points,
            x="depth",
            y="loss",
            hue="arch",
            order=depths,
            hue_order=labels,
            dodge=True,
            **({} if strip else {"size": 4 if len(points) > 200 else 5}),
            ax=ax,
            legend=False,
            palette=[colors[a] for a in archs],
        )
        hollow_stopped(ax, points.loc[points["status"] == "stopped", "loss"])
        for collection in ax.collections:
            collection.set_gid("shown")
    band = DODGE_WIDTH / len(archs)
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
    ax.axhline(line, color="grey", linestyle="--", linewidth=0.8)
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
    ax.set_xlabel("recurrence depth")
    ax.set_ylabel(f"{metric} ({_unit(trials)}{', log scale' if log else ''})")
    swarm_legend(ax, trials, archs, colors)
    notes = ", ".join(
        f"{n} {'stopped early' if s == 'stopped' else s}"
        for s, n in trials["status"].value_counts().items()
        if s != "diverged"
    )
    shape = f"; a jittered strip: up to {largest} settings a cell" if strip else ""
    ax.set_title(
        fitted(
            _title(sweep, trials, f"{metric} of each random setting ({notes}{shape})"),
            fig,
            10,
            share=0.75,
        ),
        fontsize=10,
    )
    return fig


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
    axes[0].set_ylabel(f"expected best {metric} ({_unit(trials)})")
    span = losses.median() - losses.min()
    axes[0].set_ylim(losses.min() - 0.05 * span, losses.median())
    handles = [Line2D([], [], color=colors[a], label=arch_label(a)) for a in archs]
    handles += [Line2D([], [], color="grey", linestyle=":", label=f"K = {best_of}")] * (
        best_of <= most
    )
    fig.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False)
    fig.suptitle(
        fitted(
            _title(
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
            _title(
                sweep, trials, f"{sweep['study']}: perplexity vs depth; published: {groups.source}"
            ),
            fig,
            10,
        ),
        fontsize=10,
    )
    return fig


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
    ax.set_ylabel(f"{metric} ({_unit(trials)})")
    fig.legend(loc="outside lower center", fontsize=7)
    ax.grid(alpha=0.3)
    ax.set_title(
        fitted(_title(sweep, trials, f"Learning curves of the top {len(best)} trials"), fig, 10),
        fontsize=10,
    )
    return fig


def _axis(values: pd.Series) -> tuple[pd.Series, list, list]:
    """A parallel-coordinates axis: each value's position in [0, 1] (categories evenly
    spaced; numbers linear, or log when `store.log_scaled`), and its ticks and their labels."""
    present = values.dropna()
    if pd.api.types.is_bool_dtype(values) or not pd.api.types.is_numeric_dtype(values):
        kinds = sorted(present.unique(), key=str)
        ticks = list(np.linspace(0, 1, len(kinds))) if len(kinds) > 1 else [0.5]
        return values.map(dict(zip(kinds, ticks))).astype("float64"), ticks, [str(k) for k in kinds]
    scale = np.log10 if store.log_scaled(values) else (lambda v: v)
    numbers = values.astype("float64")
    low, high = scale(present.min()), scale(present.max())
    width = high - low if high > low else 1.0
    if pd.api.types.is_integer_dtype(values) and present.nunique() <= 10:
        marks = sorted(present.unique())
    else:
        marks = [10**v if scale is np.log10 else v for v in np.linspace(low, high, 5)]
    return (
        (scale(numbers) - low) / width,
        [(scale(m) - low) / width for m in marks],
        [f"{m:.3g}" for m in marks],
    )


def parallel(
    sweep: pd.Series,
    trials: pd.DataFrame,
    metric: str = "best_valid_loss",
    *,
    max_lines: int = PARALLEL_MAX,
) -> Figure:
    """Parallel coordinates: one line per trial across the hyperparameters that vary in the
    sweep (`store.hyperparameters`) and METRIC. Finished trials are coloured by METRIC (best
    drawn last); METRIC's axis stops at `loss_axis_top` (lines above it end at a '>' mark);
    diverged trials are dashed grey lines ending at a 'diverged' mark above it.

    Args:
        max_lines: of more trials, this many drawn at random (seed 0) are drawn, as the
            title says; the axes span them all.
    """
    names = store.hyperparameters(trials)
    ok, diverged = finished(trials, metric), trials["status"].eq("diverged")
    loss = trials[f"metrics.{metric}"]
    low, clip = (loss[ok].min(), loss_axis_top(loss[ok])) if ok.any() else (0.0, 1.0)
    axes = [_axis(trials[n]) for n in names]
    shown = loss.clip(upper=clip)
    y_loss = ((shown - low) / (clip - low if clip > low else 1.0)).where(ok)
    above = ok & (loss > clip)
    y_loss = y_loss.mask(above, 1.08).mask(diverged, 1.16)
    ys = np.column_stack([a[0].to_numpy(float) for a in axes] + [y_loss.to_numpy(float)])
    fig = Figure(figsize=(max(8.0, 1.25 * (len(names) + 1) + 2), 5.2), layout="constrained")
    ax = fig.add_subplot()
    xs = np.arange(len(names) + 1)
    cmap, norm = matplotlib.colormaps["viridis"], matplotlib.colors.Normalize(low, clip)
    drawn = np.ones(len(trials), dtype=bool)
    if len(trials) > max_lines:
        drawn = trials.index.isin(trials.sample(max_lines, random_state=0).index)
    order = loss[ok & drawn].sort_values(ascending=False).index  # best last, on top
    lines = LineCollection(
        [np.column_stack([xs, ys[trials.index.get_loc(i)]]) for i in order],
        colors=cmap(norm(shown[order].to_numpy())),
        linewidths=1.4,
        alpha=0.85,
        gid="finished",
        zorder=2,
    )
    ax.add_collection(lines)
    ax.add_collection(
        LineCollection(
            [
                np.column_stack([xs, ys[trials.index.get_loc(i)]])
                for i in trials.index[diverged & drawn]
            ],
            colors="grey",
            linestyles="--",
            linewidths=1.0,
            gid="diverged",
            zorder=1,
        )
    )
    loss_ticks = MaxNLocator(5).tick_values(low, clip)
    loss_ticks = [t for t in loss_ticks if low <= t <= low + 0.93 * (clip - low)] or [low]
    ticks = [(a[1], a[2]) for a in axes] + [
        (
            [(t - low) / (clip - low if clip > low else 1.0) for t in loss_ticks]
            + ([1.08] if above.any() else [])
            + ([1.16] if diverged.any() else []),
            [f"{t:.4g}" for t in loss_ticks]
            + ([f"> {clip:.4g}"] if above.any() else [])
            + (["diverged"] if diverged.any() else []),
        )
    ]
    for x, (positions, labels) in zip(xs, ticks):
        ax.axvline(x, color="black", linewidth=0.8, zorder=0)
        for y, label in zip(positions, labels):
            ax.text(
                x - 0.04,
                y,
                label,
                ha="right",
                va="center",
                fontsize=7,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.7, "pad": 0.5},
            )
    ax.set_xticks(
        xs,
        [
            n.removeprefix("params.") + (" (log)" if store.log_scaled(trials[n]) else "")
            for n in names
        ]
        + [metric],
    )
    ax.set_xlim(-0.6, len(names) + 0.3)
    ax.set_ylim(-0.05, 1.22)
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    fig.colorbar(
        matplotlib.cm.ScalarMappable(norm, cmap),
        ax=ax,
        label=f"{metric}" + (f" (clipped at {clip:.4g})" if above.any() else ""),
        shrink=0.8,
    )
    counts = trials["status"].value_counts()
    notes = ", ".join(f"{n} {'stopped early' if s == 'stopped' else s}" for s, n in counts.items())
    left_out = "; failed trials not drawn" if counts.get("failed", 0) else ""
    if not drawn.all():
        left_out += f"; {drawn.sum():,} of the {len(trials):,} trials drawn at random"
    ax.set_title(
        fitted(
            _title(
                sweep,
                trials,
                f"Settings of each trial and the {metric} reached\n({notes}{left_out})",
            ),
            fig,
            10,
        ),
        fontsize=10,
    )
    return fig


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


def make(
    kind: str,
    exp: store.Experiment,
    sweep: str | None = None,
    metric: str | None = None,
    top: int = 5,
) -> Figure:
    """The figure KIND drawn from a sweep of EXP (default: its latest sweep)."""
    chosen, trials = store.sweep_trials(exp, sweep)
    return draw(kind, chosen, trials, exp, metric, top)


def draw(
    kind: str,
    chosen: pd.Series,
    trials: pd.DataFrame,
    exp: store.Experiment,
    metric: str | None = None,
    top: int = 5,
) -> Figure:
    """The figure KIND of the sweep CHOSEN, drawn from its search TRIALS."""
    metric = metric or ("best_valid_loss" if kind == "swarm" else "valid_loss")
    if f"metrics.{metric}" not in trials:
        raise UserError(
            f"no metric {metric!r} in sweep {chosen['sweep']}: use one of "
            f"{', '.join(c[8:] for c in trials if c.startswith('metrics.'))}"
        )
    if kind == "swarm":
        return swarm(chosen, trials, metric)
    if kind == "curves":
        return curves(chosen, trials, exp, top, metric)
    groups = kind_of(chosen).groups
    if groups is None:
        raise UserError(
            f"sweep {chosen['sweep']} has no published depth curve to draw "
            "against (its space's report kind has none): draw swarm or curves"
        )
    return depth_curves(chosen, trials, groups)


def savefig(fig: Figure, target, **options):
    """fig.savefig(TARGET, **OPTIONS), without seaborn's warning that some points of a dense
    swarm are drawn on its edge (they are: SWARM_MAX), which it gives as the figure is drawn."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", CROWDED_SWARM, UserWarning)
        fig.savefig(target, **options)


def save(fig: Figure, path: Path):
    """Save FIG to PATH (format from its extension), atomically; SVG text stays text."""
    with atomic(path) as tmp, matplotlib.rc_context({"svg.fonttype": "none"}):
        savefig(fig, tmp, format=path.suffix.lower()[1:], dpi=150)


def plot(
    kind: str,
    out,
    experiment: str | None = None,
    tracking_uri: str | None = None,
    sweep: str | None = None,
    metric: str | None = None,
    top: int = 5,
    force: bool = False,
) -> Path:
    """Draw the figure KIND from the store into OUT (.png or .svg)."""
    path = check_out(out, PLOT_OUT, force)
    if top < 1:
        raise UserError(f"--top {top}: draw at least 1 trial")
    exp = store.open_experiment(experiment, tracking_uri)
    save(make(kind, exp, sweep, metric, top), path)
    return path


def log_sweep_plots(client, experiment_id: str, parent_run_id: str, *, runs=None):
    """Log the study's plots of a finished sweep as PNG artifacts (plots/) of its parent run
    (from RUNS, its trial runs, where already read). Never raises: a plot that cannot be
    drawn is a warning, not a failed sweep."""
    try:
        parent = client.get_run(parent_run_id)
        exp = store.Experiment(
            client.get_experiment(experiment_id).name, experiment_id, client.tracking_uri, client
        )
        chosen, trials = store.sweep_trials(exp, parent.data.tags.get("sweep"), runs=runs)
        with tempfile.TemporaryDirectory() as tmp:
            for kind in (kind_of(chosen).figure, "curves"):
                save(draw(kind, chosen, trials, exp), Path(tmp) / f"{kind}.png")
            client.log_artifacts(parent_run_id, tmp, "plots")
    except Exception as exc:  # noqa: BLE001 - plots are a courtesy, the sweep has succeeded
        log.warning(
            "could not log the sweep's plots to MLflow run %s (%s: %s); draw them "
            "with `rhnsearch results plot`",
            parent_run_id,
            type(exc).__name__,
            first_line(exc),
        )
