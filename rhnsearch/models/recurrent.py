"""`Recurrent`: one recurrent layer built around a cell (cells.py)."""

import torch
from torch import nn

from ..errors import UserError
from . import fused
from .dropout import apply_mask, variational_mask

BACKENDS = ("auto", "reference", "fused")


class Recurrent(nn.Module):
    """A cell's time loop with variational dropout on its input (drop_i) and state (drop_h),
    one mask per sequence. The input is projected for all steps at once; the loop then runs
    on the `reference` backend (a plain autograd loop over the cell) or the `fused` one (the
    same math in one autograd Function with a hand-written backward, fused/); `auto` takes
    fused where the cell has one.

    forward(x (T, B, F), state (B, n) or None for zeros, return_gates=False) -> (outputs
    (T, B, n), final state (B, n)[, gates]); gates: {"transform": (T, L, B, n)} for RHN cells,
    plus {"hsg": (T, B, n)} for HSG.
    """

    def __init__(
        self, cell: nn.Module, drop_i: float = 0.0, drop_h: float = 0.0, backend: str = "auto"
    ):
        super().__init__()
        if backend not in BACKENDS:
            raise UserError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
        if backend == "fused" and not fused.supports(cell):
            raise UserError(f"{type(cell).__name__} has no fused loop: use backend reference")
        self.cell, self.drop_i, self.drop_h, self.backend = cell, drop_i, drop_h, backend
        self.input_size, self.width, self.depth = cell.input_size, cell.width, cell.depth
        self.register_load_state_dict_pre_hook(_checkpoints_before_cells)

    @property
    def fused(self) -> bool:
        return self.backend != "reference" and fused.supports(self.cell)

    def forward(
        self, x: torch.Tensor, state: torch.Tensor | None = None, return_gates: bool = False
    ):
        batch = x.shape[1]
        state = x.new_zeros(batch, self.width) if state is None else state
        mask_i = variational_mask(self.drop_i, (batch, self.input_size), x, self.training)
        mask_h = variational_mask(self.drop_h, (batch, self.width), x, self.training)
        p = self.cell.project(apply_mask(x, mask_i))
        if self.fused:
            outputs, gates = fused.run(self.cell, p, state, mask_h, return_gates)
        else:
            outputs, gates = self.loop(p, state, mask_h)
        return (outputs, outputs[-1], gates) if return_gates else (outputs, outputs[-1])

    def loop(self, p: torch.Tensor, state: torch.Tensor, mask):
        """The reference backend: the cell, step by step."""
        outputs, gates = [], []
        for p_t in p:
            state, step_gates = self.cell(p_t, state, mask)
            outputs.append(state)
            gates.append(step_gates)
        return torch.stack(outputs), {k: torch.stack([g[k] for g in gates]) for k in gates[0]}


def _checkpoints_before_cells(module, state_dict, prefix, *args):
    """Load weights saved before the layers held cells (rhnsearch 0.1): `layer.X` and an HSG's
    `layer.rhn.X` are now `layer.cell.X`."""
    for key in [k for k in state_dict if k.startswith(prefix)]:
        name = key[len(prefix) :]
        if not name.startswith("cell."):
            state_dict[prefix + "cell." + name.removeprefix("rhn.")] = state_dict.pop(key)
