"""The recurrent cells, in textbook form: the definition of every model rhnsearch trains.

A cell computes one time step: `cell(p, state, mask) -> (new state, gates)`, where `p` is the
step's projected input (`cell.project(x)` computes it for all steps at once), `state` is the
previous state (B, n) and `mask` the sequence's recurrent dropout mask (B, n) or None. `gates`
maps a gate's name to its values at this step. `Recurrent` (recurrent.py) runs the time loop,
either over these cells (backend "reference") or in a fused loop with a hand-written backward
(backend "fused", fused/), which the tests hold to these definitions.

Notation: n = width, L = recurrence depth, x[t] the input, s or y the state, σ the logistic
sigmoid. The equations, with references, are in docs/models.md.
"""

import torch
from torch import nn
from torch.nn import functional as F

from .dropout import apply_mask


class RHNCell(nn.Module):
    """Recurrent Highway Network cell with coupled carry gate (Zilly et al. 2017).

    s_0 = s[t-1]; for l = 1..L:
        h_l = tanh(W_H x[t] 1{l=1} + R_Hl s_{l-1} + b_Hl)
        t_l = σ(W_T x[t] 1{l=1} + R_Tl s_{l-1} + b_Tl)
        s_l = h_l t_l + s_{l-1} (1 - t_l)
    s[t] = s_L. Weights: input_weight = [W_H; W_T] (no bias); recurrent[l] = [R_Hl; R_Tl] with
    bias [b_Hl; b_Tl].
    """

    def __init__(self, input_size: int, width: int, depth: int):
        super().__init__()
        self.input_size, self.width, self.depth = input_size, width, depth
        self.input_weight = nn.Parameter(torch.empty(2 * width, input_size))
        self.recurrent = nn.ModuleList(nn.Linear(width, 2 * width) for _ in range(depth))

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.input_weight)

    def forward(self, p, s, mask=None):
        transform = []
        for layer, recurrent in enumerate(self.recurrent):
            a = recurrent(apply_mask(s, mask)) + (p if layer == 0 else 0)
            a_h, a_t = a.chunk(2, dim=-1)
            h, t = torch.tanh(a_h), torch.sigmoid(a_t)
            s = h * t + s * (1 - t)
            transform.append(t)
        return s, {"transform": torch.stack(transform)}

    def transform_bias(self, layer: int) -> torch.Tensor:
        """b_T of highway layer `layer` (0-based), a view: writable under torch.no_grad()."""
        return self.recurrent[layer].bias[self.width :]


class HSGCell(RHNCell):
    """RHN cell with Highway State Gating (Shoham & Permuter 2018): the state carried through
    time, ŝ, mixes the RHN's new state s_L[t] (computed from ŝ[t-1]) with ŝ[t-1]:

        g[t] = σ(W_R ŝ[t-1] + W_F s_L[t] + b_G)
        ŝ[t] = g ŝ[t-1] + (1 - g) s_L[t]
    """

    def __init__(self, input_size: int, width: int, depth: int):
        super().__init__(input_size, width, depth)
        self.gate_state = nn.Linear(width, width, bias=False)  # W_R
        self.gate_new = nn.Linear(width, width)  # W_F, b_G

    def forward(self, p, s_hat, mask=None):
        s, gates = super().forward(p, s_hat, mask)
        g = torch.sigmoid(self.gate_state(s_hat) + self.gate_new(s))
        return g * s_hat + (1 - g) * s, {**gates, "hsg": g}


class DTRNNCell(nn.Module):
    """Deep-transition RNN cell (Pascanu et al. 2014): an L-layer tanh MLP from y[t-1] to y[t].

    z_1 = tanh(W x[t] + R_1 y[t-1] + b_1),  z_l = tanh(R_l z_{l-1} + b_l),  y[t] = z_L
    """

    shortcuts = False

    def __init__(self, input_size: int, width: int, depth: int):
        super().__init__()
        self.input_size, self.width, self.depth = input_size, width, depth
        self.has_shortcuts = self.shortcuts and depth >= 2
        blocks = 2 if self.has_shortcuts else 1  # [W] or [W; V]
        self.input_weight = nn.Parameter(torch.empty(blocks * width, input_size))
        self.recurrent = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.input_weight)

    def forward(self, p, y, mask=None):
        z = apply_mask(y, mask)
        for layer, recurrent in enumerate(self.recurrent):
            z = torch.tanh(recurrent(z) + (p if layer == 0 else 0))
        return z, {}


class DTSRNNCell(DTRNNCell):
    """DT(S)-RNN cell: a DT-RNN whose last layer also sees the input and the previous state
    through shortcuts (for L >= 2; at L = 1 it is a DT-RNN):

        y[t] = tanh(R_L z_{L-1} + U y[t-1] + V x[t] + b_L)

    input_weight = [W; V]; shortcut = U (no bias).
    """

    shortcuts = True

    def __init__(self, input_size: int, width: int, depth: int):
        super().__init__(input_size, width, depth)
        if self.has_shortcuts:
            self.shortcut = nn.Linear(width, width, bias=False)

    def forward(self, p, y, mask=None):
        if not self.has_shortcuts:
            return super().forward(p, y, mask)
        direct, via_shortcut = p.chunk(2, dim=-1)
        y = z = apply_mask(y, mask)
        for layer, recurrent in enumerate(self.recurrent):
            a = recurrent(z) + (direct if layer == 0 else 0)
            if layer == self.depth - 1:
                a = a + self.shortcut(y) + via_shortcut
            z = torch.tanh(a)
        return z, {}


CELLS = {"rhn": RHNCell, "hsg": HSGCell, "dtrnn": DTRNNCell, "dtsrnn": DTSRNNCell}
