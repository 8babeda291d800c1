"""Spectrum of the temporal Jacobian dy[t]/dy[t-1] with its Geršgorin discs (RHN paper,
sections 3-4): every eigenvalue lies in the union of the discs centred at J_ii with radius
sum_{j != i} |J_ij|; with the transform gates closed (carry) all eigenvalues are 1 (eq. 15)."""

import numpy as np
import pandas as pd
import torch
from matplotlib.collections import PatchCollection
from matplotlib.figure import Figure
from matplotlib.patches import Circle

from ..errors import UserError
from ..models import LSTM


def temporal_jacobians(layer, x: torch.Tensor, y_prev: torch.Tensor) -> torch.Tensor:
    """J_m = d y[t] / d y[t-1] for M independent steps (autograd): x (M, ...) the layer's
    inputs at t, y_prev (M, n) the states before them; returns (M, n, n).

    Each step is one time step of the layer's own forward (so RHN, HSG, DT-RNN and DT(S)-RNN
    alike); rows of the batch do not interact, so the Jacobian of the batch sum holds all M."""

    def step(y):
        return layer(x.unsqueeze(0), y)[1].sum(0)

    return torch.autograd.functional.jacobian(step, y_prev).permute(1, 0, 2)


def sampled_steps(length: int, count: int) -> list[int]:
    """Up to `count` steps spread evenly over 1..length-1 (step 0 starts from the zero
    state; it is used only for one-step sequences)."""
    first = min(1, length - 1)
    return torch.linspace(first, length - 1, count).round().long().unique().tolist()


def sample_jacobians(trainer, inputs: torch.Tensor, lengths: list[int], steps: int):
    """(J (M, n, n), index DataFrame of sequence and step) at sampled steps of each sequence,
    along the model's own trajectory from the zero state (eval mode: no dropout)."""
    model, layer = trainer.model.eval(), trainer.model.layer
    if isinstance(layer, LSTM):
        raise UserError(
            "spectrum needs a model whose state is one vector (rhn, hsg, dtrnn, "
            "dtsrnn); lstm's is (h, c): pick another run"
        )
    if steps < 1:
        raise UserError(f"--steps must be a positive integer, got {steps}")
    with torch.no_grad():
        x = model.embed(inputs)
        outputs, _ = layer(x)
    y_prev = torch.cat([torch.zeros_like(outputs[:1]), outputs[:-1]])
    index = pd.DataFrame(
        [(seq, t) for seq, n in enumerate(lengths) for t in sampled_steps(n, steps)],
        columns=["sequence", "step"],
    )
    t, b = torch.tensor(index.step.values), torch.tensor(index.sequence.values)
    return temporal_jacobians(layer, x[t, b], y_prev[t, b]), index


def spectra(jacobians: torch.Tensor, index: pd.DataFrame, model: str) -> pd.DataFrame:
    """One row per Jacobian and row i: `model`, sequence, step, i, eigenvalue i (by
    decreasing modulus) and the Geršgorin disc of row i."""
    jac = jacobians.detach().double().cpu()
    eig = torch.linalg.eigvals(jac)
    eig = torch.gather(eig, 1, eig.abs().argsort(1, descending=True))
    centre = jac.diagonal(dim1=1, dim2=2)
    radius = jac.abs().sum(-1) - centre.abs()
    m, n = centre.shape
    table = index.loc[index.index.repeat(n)].reset_index(drop=True)
    table.insert(0, "model", model)
    table.insert(3, "i", np.tile(np.arange(n), m))
    return table.assign(
        eig_real=eig.real.ravel().numpy(),
        eig_imag=eig.imag.ravel().numpy(),
        eig_abs=eig.abs().ravel().numpy(),
        disc_centre=centre.ravel().numpy(),
        disc_radius=radius.ravel().numpy(),
    )


def per_jacobian(table: pd.DataFrame) -> pd.DataFrame:
    """Per sampled step: spectral radius, Geršgorin bound max_i |J_ii| + r_i, mean |λ|."""
    grouped = table.assign(bound=table.disc_centre.abs() + table.disc_radius).groupby(
        ["model", "sequence", "step"], sort=False
    )
    return grouped.agg(
        spectral_radius=("eig_abs", "max"),
        gersgorin_bound=("bound", "max"),
        mean_abs_eig=("eig_abs", "mean"),
    ).reset_index()


def radius_stats(steps: pd.DataFrame) -> dict:
    rho = steps.spectral_radius
    return {
        "spectral_radius_mean": rho.mean(),
        "spectral_radius_median": rho.median(),
        "spectral_radius_min": rho.min(),
        "spectral_radius_max": rho.max(),
        "spectral_radius_above_1": (rho > 1).mean(),
        "gersgorin_bound_mean": steps.gersgorin_bound.mean(),
        "mean_abs_eig": steps.mean_abs_eig.mean(),
        "jacobians": len(steps),
    }


def spectrum_figure(table: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """One complex-plane panel per model: Geršgorin discs of every sampled Jacobian (blue),
    their eigenvalues (red), the unit circle (dashed); shared axes."""
    models = list(dict.fromkeys(table.model))
    fig = Figure(figsize=(5 * len(models), 5.3), layout="constrained")
    axes = fig.subplots(1, len(models), squeeze=False, sharex=True, sharey=True)[0]
    reach = (
        max(1.05, (table.disc_centre.abs() + table.disc_radius).max(), table.eig_abs.max()) * 1.05
    )
    for ax, model in zip(axes, models):
        rows = table[table.model == model]
        discs = [Circle((c, 0.0), r) for c, r in zip(rows.disc_centre, rows.disc_radius)]
        ax.add_collection(
            PatchCollection(
                discs,
                facecolor="none",
                linewidth=0.5,
                edgecolor=(0.12, 0.47, 0.71, 0.25),
                rasterized=True,
            )
        )
        ax.add_patch(Circle((0, 0), 1, fill=False, linestyle="--", color="black"))
        ax.scatter(rows.eig_real, rows.eig_imag, s=6, color="tab:red", zorder=3)
        ax.set_aspect("equal")
        ax.set_xlim(-reach, reach)
        ax.set_ylim(-reach, reach)
        ax.set_xlabel("Re λ")
        rho = steps[steps.model == model].spectral_radius
        ax.set_title(
            f"{model}\nspectral radius median {rho.median():.3f}, "
            f"max {rho.max():.3f} ({len(rho)} steps)",
            fontsize=10,
        )
    axes[0].set_ylabel("Im λ")
    return fig
