"""The fused backend of `Recurrent`: each cell's whole time loop in one autograd Function with
a hand-written backward (rhn.py, dtrnn.py), on oneDNN's packed products where they work
(kernels.py). The cells in ../cells.py define what these loops compute; the tests hold the two
to each other."""

import torch

from ..cells import DTRNNCell, DTSRNNCell, HSGCell, RHNCell
from .dtrnn import DTRNNLoop
from .rhn import RHNLoop


def supports(cell) -> bool:
    """Whether the cell is one whose math the fused loops compute (not a subclass that may
    change it)."""
    return type(cell) in (RHNCell, HSGCell, DTRNNCell, DTSRNNCell)


def run(cell, p: torch.Tensor, state: torch.Tensor, mask, keep_gates: bool = False):
    """(outputs (T, B, n), gates) of `cell` over the projected input `p` from `state`, as
    the reference loop computes them (gates only with `keep_gates`)."""
    recurrent = [lin.weight for lin in cell.recurrent] + [lin.bias for lin in cell.recurrent]
    if isinstance(cell, RHNCell):
        hsg = isinstance(cell, HSGCell)
        extra = [cell.gate_state.weight, cell.gate_new.weight, cell.gate_new.bias] if hsg else []
        out, transform, g = RHNLoop.apply(
            p, state, mask, cell.depth, hsg, keep_gates, *recurrent, *extra
        )
        gates = {"transform": transform, **({"hsg": g} if hsg else {})} if keep_gates else {}
        return out, gates
    extra = [cell.shortcut.weight] if cell.has_shortcuts else []
    out = DTRNNLoop.apply(p, state, mask, cell.depth, cell.has_shortcuts, *recurrent, *extra)
    return out, {}
