"""Deep-transition RNNs (Pascanu et al. 2013): DT-RNN and DT(S)-RNN, tanh units, no gates.

DT-RNN:    z_1 = f(W x[t] + R_1 y[t-1] + b_1), z_l = f(R_l z_{l-1} + b_l), y[t] = z_L.
DT(S)-RNN: the last layer also sees the input and the previous state through shortcuts,
           y[t] = f(R_L z_{L-1} + U y[t-1] + V x[t] + b_L) (for depth >= 2; depth 1 is DT-RNN).
"""
import torch
from torch import nn
from torch.nn import functional as F

from .dropout import apply_mask, variational_mask


class DTRNN(nn.Module):
    """Deep-transition RNN layer; `shortcuts=True` makes it a DT(S)-RNN."""

    shortcuts = False

    def __init__(self, input_size: int, width: int, depth: int, drop_i: float = 0.0,
                 drop_h: float = 0.0):
        super().__init__()
        self.input_size, self.width, self.depth = input_size, width, depth
        self.drop_i, self.drop_h = drop_i, drop_h
        self.has_shortcuts = self.shortcuts and depth >= 2
        n_in = 2 * width if self.has_shortcuts else width
        self.input_weight = nn.Parameter(torch.empty(n_in, input_size))  # [W; V]
        self.recurrent = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        if self.has_shortcuts:
            self.shortcut = nn.Linear(width, width, bias=False)  # U

    def initial_state(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        return like.new_zeros(batch, self.width)

    def step(self, projected: torch.Tensor, y: torch.Tensor, mask_h) -> torch.Tensor:
        y_in = apply_mask(y, mask_h)
        if self.has_shortcuts:
            projected, shortcut_x = projected.chunk(2, dim=-1)
        z = torch.tanh(projected + self.recurrent[0](y_in))
        last = self.depth - 1
        for layer in range(1, self.depth):
            pre = self.recurrent[layer](z)
            if layer == last and self.has_shortcuts:
                pre = pre + self.shortcut(y_in) + shortcut_x
            z = torch.tanh(pre)
        return z

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None):
        batch = x.shape[1]
        y = self.initial_state(batch, x) if state is None else state
        mask_i = variational_mask(self.drop_i, (batch, self.input_size), x, self.training)
        mask_h = variational_mask(self.drop_h, (batch, self.width), x, self.training)
        projected = F.linear(apply_mask(x, mask_i), self.input_weight)
        outputs = []
        for t in range(x.shape[0]):
            y = self.step(projected[t], y, mask_h)
            outputs.append(y)
        return torch.stack(outputs), y


class DTSRNN(DTRNN):
    """DT(S)-RNN: DT-RNN with input and state shortcuts into the last transition layer."""

    shortcuts = True
