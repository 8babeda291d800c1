"""What every figure of a sweep shares, drawn by none of them alone.
Its title: what it shows, then the dataset, the sweep, the preset and the trial count.
Text wrapped to fit the figure's width, and the loss unit its axes name."""

import textwrap

import pandas as pd
from matplotlib.figure import Figure

from .tables import sweep_dataset


def sweep_title(sweep: pd.Series, trials: pd.DataFrame, what: str) -> str:
    return (
        f"{what}\n{sweep_dataset(trials)} · sweep {sweep['sweep']} · preset "
        f"{sweep['preset']} · {len(trials)} trials"
    )


def fitted(text: str, fig: Figure, fontsize: float, share: float = 1.0) -> str:
    """TEXT wrapped into lines that fit SHARE of FIG's width at FONTSIZE (points; a
    character is about 0.6 of it wide)."""
    chars = max(20, int(share * fig.get_figwidth() * 72 / (0.6 * fontsize)))
    return "\n".join(textwrap.fill(line, chars) for line in text.split("\n"))


def loss_unit(trials: pd.DataFrame) -> str:
    """The loss unit the trials' task logged (rhnsearch.tasks), e.g. nats per time step."""
    units = trials.get("params.loss_unit", pd.Series(dtype="str")).dropna().unique()
    return " / ".join(sorted(units)) or "nats"
