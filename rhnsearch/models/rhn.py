"""Recurrent Highway Network layers: RHN (coupled carry gate) and RHN with Highway State Gating.

Both follow the nn.LSTM convention: input (T, B, F), optional state (B, n), return
(outputs (T, B, n), final state (B, n)). The input is projected for all time steps in one
matrix product before the time loop; each highway layer uses one fused (n, 2n) product for
its H and T pre-activations.
"""
import torch
from torch import nn
from torch.nn import functional as F

from .dropout import apply_mask, variational_mask


class RHN(nn.Module):
    """One RHN layer of recurrence depth `depth`: s_l = s_{l-1} + t_l * (h_l - s_{l-1})."""

    def __init__(self, input_size: int, width: int, depth: int, drop_i: float = 0.0,
                 drop_h: float = 0.0):
        super().__init__()
        self.input_size, self.width, self.depth = input_size, width, depth
        self.drop_i, self.drop_h = drop_i, drop_h
        self.input_weight = nn.Parameter(torch.empty(2 * width, input_size))  # [W_H; W_T]
        self.recurrent = nn.ModuleList(nn.Linear(width, 2 * width) for _ in range(depth))

    def transform_bias(self, layer: int) -> torch.Tensor:
        """The transform-gate bias b_T of highway layer `layer` (a view: writable in no_grad)."""
        return self.recurrent[layer].bias[self.width:]

    def set_transform_bias(self, value: float):
        with torch.no_grad():
            for layer in range(self.depth):
                self.transform_bias(layer).fill_(value)

    def initial_state(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        return like.new_zeros(batch, self.width)

    def project_input(self, x: torch.Tensor) -> torch.Tensor:
        """W x[t] for every t at once, with the sequence's input dropout mask."""
        mask = variational_mask(self.drop_i, (x.shape[1], self.input_size), x, self.training)
        return F.linear(apply_mask(x, mask), self.input_weight)

    def state_mask(self, batch: int, like: torch.Tensor):
        return variational_mask(self.drop_h, (batch, self.width), like, self.training)

    def step(self, projected: torch.Tensor, s: torch.Tensor, mask_h, gates=None) -> torch.Tensor:
        """One time step through all highway layers; appends each layer's t_l to `gates`."""
        for layer, linear in enumerate(self.recurrent):
            pre = F.linear(apply_mask(s, mask_h), linear.weight, linear.bias)
            if layer == 0:
                pre = pre + projected
            h, t = pre.chunk(2, dim=-1)
            t = torch.sigmoid(t)
            s = s + t * (torch.tanh(h) - s)
            if gates is not None:
                gates.append(t)
        return s

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None, gates=None):
        batch = x.shape[1]
        s = self.initial_state(batch, x) if state is None else state
        projected, mask_h = self.project_input(x), self.state_mask(batch, x)
        outputs = []
        for t in range(x.shape[0]):
            s = self.step(projected[t], s, mask_h, gates)
            outputs.append(s)
        return torch.stack(outputs), s


class HSG(nn.Module):
    """An RHN layer wrapped by a Highway State Gate: ŝ[t] = g ŝ[t-1] + (1 - g) s_L[t].

    g = sigm(W_R ŝ[t-1] + W_F s_L[t] + b_G); ŝ feeds the output and the next step's RHN.
    """

    def __init__(self, input_size: int, width: int, depth: int, drop_i: float = 0.0,
                 drop_h: float = 0.0):
        super().__init__()
        self.rhn = RHN(input_size, width, depth, drop_i, drop_h)
        self.width, self.depth = width, depth
        self.gate_state = nn.Linear(width, width, bias=False)  # W_R
        self.gate_new = nn.Linear(width, width)  # W_F, b_G

    def set_gate_bias(self, value: float):
        with torch.no_grad():
            self.gate_new.bias.fill_(value)

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None, gates=None,
                hsg_gates=None):
        batch = x.shape[1]
        s_hat = self.rhn.initial_state(batch, x) if state is None else state
        projected, mask_h = self.rhn.project_input(x), self.rhn.state_mask(batch, x)
        outputs = []
        for t in range(x.shape[0]):
            s_new = self.rhn.step(projected[t], s_hat, mask_h, gates)
            g = torch.sigmoid(self.gate_state(s_hat) + self.gate_new(s_new))
            s_hat = s_new + g * (s_hat - s_new)
            if hsg_gates is not None:
                hsg_gates.append(g)
            outputs.append(s_hat)
        return torch.stack(outputs), s_hat
