"""The papers' figures from one sweep's MLflow runs, saved as PNG or SVG.
Each kind is drawn in a plot_* module of its own (plot_swarm, plot_depth, ...), imported from here.
A finished sweep logs its study's figure and learning curves on its parent run."""

import warnings
from pathlib import Path

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from ..errors import UserError
from ..tracking import store
from .export import atomic, check_out
from .plot_curves import curves
from .plot_depth import depth_curves
from .plot_expected_best import expected_best_curves
from .plot_importance import importance_bars
from .plot_parallel import PARALLEL_MAX, parallel
from .plot_swarm import CROWDED_SWARM, LOG_SPAN, SWARM_MAX, swarm
from .studies import kind_of
from .tables import check_metric

__all__ = [  # the figures and bounds the report, the CLI, tests and benchmarks use from here
    "LOG_SPAN",
    "PARALLEL_MAX",
    "SWARM_MAX",
    "curves",
    "depth_curves",
    "draw",
    "expected_best_curves",
    "importance_bars",
    "make",
    "parallel",
    "plot",
    "save",
    "savefig",
    "swarm",
    "sweep_figures",
]
PLOT_OUT = (".png", ".svg")


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
    check_metric(trials, chosen["sweep"], metric)
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


def sweep_figures(exp: store.Experiment, sweep: str, *, runs=None) -> dict[str, Figure]:
    """The figures a finished SWEEP of EXP logs on its parent run: its study's figure and the
    learning curves, by kind (from RUNS, its trial runs, where already read)."""
    chosen, trials = store.sweep_trials(exp, sweep, runs=runs)
    return {kind: draw(kind, chosen, trials, exp) for kind in (kind_of(chosen).figure, "curves")}
