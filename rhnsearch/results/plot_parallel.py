"""Parallel coordinates: one line per trial across the settings that vary and its loss.
Finished trials are coloured by the loss (best drawn last), diverged ones dashed grey.
The loss axis stops at `loss_axis_top`, past which lines end at a '>' mark.
Of more than PARALLEL_MAX trials, that many drawn at random are drawn."""

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..tracking import store
from .plot_common import fitted, sweep_title
from .tables import finished

CLIP_MARGIN = 0.5  # the loss axis stops at best + CLIP_MARGIN x |best|
PARALLEL_MAX = 1000  # more trials, and this many are drawn at random
ABOVE, DIVERGED = 1.08, 1.16  # heights of the '>' and 'diverged' marks above the loss axis


def loss_axis_top(losses: pd.Series) -> float:
    """Top of a loss axis that keeps the informative band readable: the largest loss, unless
    some lie further than CLIP_MARGIN x |best| above the best (and above the lower quartile):
    the axis then stops there and those settings are drawn at its edge."""
    if losses.empty:
        return 1.0
    best = losses.min()
    clip = max(best + CLIP_MARGIN * abs(best), losses.quantile(0.25))
    return float(min(losses.max(), clip))


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


def loss_ticks(low: float, clip: float, above: bool, diverged: bool) -> tuple[list, list]:
    """The loss axis's ticks, as `_axis`: up to five from LOW to below CLIP, then the '>' mark
    where some finished trials lie ABOVE CLIP and the 'diverged' mark where some DIVERGED."""
    ticks = MaxNLocator(5).tick_values(low, clip)
    ticks = [t for t in ticks if low <= t <= low + 0.93 * (clip - low)] or [low]
    return (
        [(t - low) / (clip - low if clip > low else 1.0) for t in ticks]
        + ([ABOVE] if above else [])
        + ([DIVERGED] if diverged else []),
        [f"{t:.4g}" for t in ticks]
        + ([f"> {clip:.4g}"] if above else [])
        + (["diverged"] if diverged else []),
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
    shown = loss.clip(upper=clip)
    y_loss = ((shown - low) / (clip - low if clip > low else 1.0)).where(ok)
    above = ok & (loss > clip)
    y_loss = y_loss.mask(above, ABOVE).mask(diverged, DIVERGED)
    axes = [_axis(trials[n]) for n in names]
    axes.append((y_loss, *loss_ticks(low, clip, above.any(), diverged.any())))
    ys = np.column_stack([a[0].to_numpy(float) for a in axes])
    fig = Figure(figsize=(max(8.0, 1.25 * (len(names) + 1) + 2), 5.2), layout="constrained")
    ax = fig.add_subplot()
    xs = np.arange(len(names) + 1)
    cmap, norm = matplotlib.colormaps["viridis"], matplotlib.colors.Normalize(low, clip)
    drawn = np.ones(len(trials), dtype=bool)
    if len(trials) > max_lines:
        drawn = trials.index.isin(trials.sample(max_lines, random_state=0).index)
    order = loss[ok & drawn].sort_values(ascending=False).index  # best last, on top
    ax.add_collection(
        LineCollection(
            polylines(trials, xs, ys, order),
            colors=cmap(norm(shown[order].to_numpy())),
            linewidths=1.4,
            alpha=0.85,
            gid="finished",
            zorder=2,
        )
    )
    ax.add_collection(
        LineCollection(
            polylines(trials, xs, ys, trials.index[diverged & drawn]),
            colors="grey",
            linestyles="--",
            linewidths=1.0,
            gid="diverged",
            zorder=1,
        )
    )
    logs = [" (log)" if store.log_scaled(trials[n]) else "" for n in names]
    parallel_axes(ax, axes, [n.removeprefix("params.") + g for n, g in zip(names, logs)] + [metric])
    fig.colorbar(
        matplotlib.cm.ScalarMappable(norm, cmap),
        ax=ax,
        label=f"{metric}" + (f" (clipped at {clip:.4g})" if above.any() else ""),
        shrink=0.8,
    )
    what = f"Settings of each trial and the {metric} reached\n({parallel_notes(trials, drawn)})"
    ax.set_title(fitted(sweep_title(sweep, trials, what), fig, 10), fontsize=10)
    return fig


def polylines(trials: pd.DataFrame, xs: np.ndarray, ys: np.ndarray, index) -> list:
    """The line of each trial of INDEX: its row of YS (one position per axis) at XS."""
    return [np.column_stack([xs, ys[trials.index.get_loc(i)]]) for i in index]


def parallel_axes(ax, axes: list, names: list):
    """One vertical line per axis (of AXES, `_axis`'s), each tick's label on a white box left
    of it and its name below; no y axis, and no frame but the bottom line."""
    xs = np.arange(len(axes))
    for x, (_, positions, labels) in zip(xs, axes):
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
    ax.set_xticks(xs, names)
    ax.set_xlim(-0.6, xs[-1] + 0.3)
    ax.set_ylim(-0.05, 1.22)
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)


def parallel_notes(trials: pd.DataFrame, drawn: np.ndarray) -> str:
    """The title's count of each status, and what is not drawn: failed trials, and those left
    out of the random sample (where not all are DRAWN)."""
    counts = trials["status"].value_counts()
    notes = ", ".join(f"{n} {'stopped early' if s == 'stopped' else s}" for s, n in counts.items())
    left_out = "; failed trials not drawn" if counts.get("failed", 0) else ""
    if not drawn.all():
        left_out += f"; {drawn.sum():,} of the {len(trials):,} trials drawn at random"
    return notes + left_out
