"""Gate values of a trained model: mean transform-gate activity per highway layer over time
(RHN paper, Figure 5b) and the histogram of the HSG gate values (HSG paper, Figure 7)."""

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from ..errors import UserError
from ..models import HSGCell
from .sequences import highway_cell


@torch.no_grad()
def gate_activity(trainer, inputs: torch.Tensor, lengths: list[int]) -> list[np.ndarray]:
    """Transform gates t_l averaged over units: one (layers, steps) array per sequence."""
    highway_cell(trainer, "gates")
    _, _, gates = trainer.model.eval()(inputs, return_gates=True)
    mean = gates["transform"].mean(-1)  # (T, L, B)
    return [mean[:n, :, b].T.cpu().numpy() for b, n in enumerate(lengths)]


def activity_table(activity: list[np.ndarray]) -> pd.DataFrame:
    """Long table: sequence, layer (1 = first highway layer), step, mean_gate."""
    parts = []
    for seq, act in enumerate(activity):
        layers, steps = np.indices(act.shape)
        parts.append(
            pd.DataFrame(
                {
                    "sequence": seq,
                    "layer": layers.ravel() + 1,
                    "step": steps.ravel(),
                    "mean_gate": act.ravel(),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def activity_figure(activity: list[np.ndarray], title: str) -> Figure:
    """One heatmap per sequence, layers x time, white (carry) to red (transform)."""
    fig = Figure(
        figsize=(10, 1.2 + 0.35 * sum(a.shape[0] + 1.5 for a in activity)), layout="constrained"
    )
    axes = fig.subplots(len(activity), 1, squeeze=False)[:, 0]
    for seq, (ax, act) in enumerate(zip(axes, activity)):
        image = ax.imshow(
            act,
            aspect="auto",
            cmap="Reds",
            vmin=0,
            vmax=1,
            interpolation="nearest",
            extent=(-0.5, act.shape[1] - 0.5, act.shape[0] + 0.5, 0.5),
        )
        ax.set_yticks(range(1, act.shape[0] + 1))
        ax.set_ylabel(f"seq {chr(65 + seq) if seq < 26 else seq}\nlayer")
    axes[-1].set_xlabel("time step")
    fig.colorbar(image, ax=list(axes), label="mean transform gate t")
    fig.suptitle(title)
    return fig


@torch.no_grad()
def hsg_gate_values(trainer, inputs: torch.Tensor, lengths: list[int]) -> pd.DataFrame:
    """Every HSG gate value g at the real steps: sequence, step, unit, value."""
    if not isinstance(getattr(trainer.model.layer, "cell", None), HSGCell):
        raise UserError(
            f"hsg-gates needs an hsg model but this run's arch is "
            f"{trainer.config.arch}: pick a run of arch hsg"
        )
    _, _, values = trainer.model.eval()(inputs, return_gates=True)
    gates = values["hsg"].cpu().numpy()  # (T, B, n)
    parts = []
    for seq, n in enumerate(lengths):
        steps, units = np.indices(gates[:n, seq].shape)
        parts.append(
            pd.DataFrame(
                {
                    "sequence": seq,
                    "step": steps.ravel(),
                    "unit": units.ravel(),
                    "value": gates[:n, seq].ravel(),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def hsg_figure(values: pd.DataFrame, title: str) -> Figure:
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    ax.hist(values["value"], bins=50, range=(0, 1), color="tab:green")
    ax.set_xlim(0, 1)
    ax.set_xlabel("HSG gate value g (1 = the state passes through time)")
    ax.set_ylabel("count")
    steps = values.groupby("sequence").step.nunique()
    ax.set_title(
        f"{title}\n{len(values)} values from {steps.sum()} steps of {len(steps)} sequences"
    )
    return fig
