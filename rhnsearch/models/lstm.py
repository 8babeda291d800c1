"""The LSTM baseline: one LSTM layer with variational dropout on its input and its state
(Gal & Ghahramani 2016: the "Variational LSTM" the RHN paper compares with)."""

import torch
from torch import nn
from torch.nn import functional as F

from .dropout import apply_mask, variational_mask


class LSTM(nn.Module):
    """One LSTM layer (no recurrence depth); its state is nn.LSTM's (h, c) pair, each
    (1, B, n). Same interface as `Recurrent` (no gates are returned).

    Without recurrent dropout (or in eval mode) it runs torch's nn.LSTM; with it, a step loop
    over the same weights that drops the state h with one mask per sequence, the same at
    every step (nn.LSTM takes no mask on h). Both paths compute the same function."""

    def __init__(self, input_size: int, width: int, drop_i: float = 0.0, drop_h: float = 0.0):
        super().__init__()
        self.input_size, self.width, self.depth = input_size, width, 1
        self.drop_i, self.drop_h = drop_i, drop_h
        self.lstm = nn.LSTM(input_size, width)

    def forward(self, x: torch.Tensor, state=None, return_gates: bool = False):
        mask_i = variational_mask(self.drop_i, (x.shape[1], self.input_size), x, self.training)
        mask_h = variational_mask(self.drop_h, (x.shape[1], self.width), x, self.training)
        if mask_h is None:
            outputs, state = self.lstm(apply_mask(x, mask_i), state)
        else:
            outputs, state = self.loop(apply_mask(x, mask_i), state, mask_h)
        return (outputs, state, {}) if return_gates else (outputs, state)

    def loop(self, x: torch.Tensor, state, mask_h: torch.Tensor):
        """The LSTM step by step, its state h dropped by MASK_H before each recurrent product
        (torch's gate order: input, forget, cell, output)."""
        lstm = self.lstm
        if state is None:
            h = c = x.new_zeros(x.shape[1], self.width)
        else:
            h, c = state[0][0], state[1][0]
        projected = F.linear(x, lstm.weight_ih_l0, lstm.bias_ih_l0 + lstm.bias_hh_l0)
        outputs = []
        for p in projected:
            i, f, g, o = (p + F.linear(h * mask_h, lstm.weight_hh_l0)).chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs), (h.unsqueeze(0), c.unsqueeze(0))
