"""The LSTM baseline: torch.nn.LSTM with variational input dropout."""
import torch
from torch import nn

from .dropout import apply_mask, variational_mask


class LSTM(nn.Module):
    """One nn.LSTM layer (no recurrence depth, no recurrent dropout); its state is nn.LSTM's
    (h, c) pair, each (1, B, n). Same interface as `Recurrent` (no gates are returned)."""

    def __init__(self, input_size: int, width: int, drop_i: float = 0.0):
        super().__init__()
        self.input_size, self.width, self.depth, self.drop_i = input_size, width, 1, drop_i
        self.lstm = nn.LSTM(input_size, width)

    def forward(self, x: torch.Tensor, state=None, return_gates: bool = False):
        mask = variational_mask(self.drop_i, (x.shape[1], self.input_size), x, self.training)
        outputs, state = self.lstm(apply_mask(x, mask), state)
        return (outputs, state, {}) if return_gates else (outputs, state)
