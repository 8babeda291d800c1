"""Lesioning (RHN paper, section 6): push one highway layer's transform gates to carry and
measure how much the training loss grows."""

import pandas as pd
import torch
from matplotlib.figure import Figure

from .sequences import highway_cell

LESION_BIAS = -100.0  # sigm(-100 + R s) is 0 in float32: the layer only carries its input


def lesion(trainer, bias: float = LESION_BIAS) -> pd.DataFrame:
    """Per highway layer (1 = first): training loss with that layer's transform-gate bias
    set to `bias`, and its change from the intact model. The training set is the part the
    trial trained on (its train_fraction)."""
    cell = highway_cell(trainer, "lesion")
    base = trainer.evaluate("train")
    rows = []
    for layer in range(cell.depth):
        with torch.no_grad():
            saved = cell.transform_bias(layer).clone()
            cell.transform_bias(layer).fill_(bias)
        loss = trainer.evaluate("train")
        with torch.no_grad():
            cell.transform_bias(layer).copy_(saved)
        rows.append(
            {
                "layer": layer + 1,
                "train_loss": loss,
                "intact_train_loss": base,
                "delta": loss - base,
            }
        )
    return pd.DataFrame(rows)


def lesion_figure(table: pd.DataFrame, title: str, unit: str) -> Figure:
    fig = Figure(figsize=(max(6.0, 1.5 + 0.6 * len(table)), 4), layout="constrained")
    ax = fig.subplots()
    bars = ax.bar(table["layer"], table["delta"], color="tab:red")
    ax.bar_label(bars, fmt="%.3g", fontsize=8)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(table["layer"])
    ax.set_xlabel("lesioned highway layer (transform gates forced to carry)")
    ax.set_ylabel(f"training loss change ({unit})")
    ax.set_title(f"{title}\nintact training loss {table['intact_train_loss'].iloc[0]:.4f}")
    return fig
