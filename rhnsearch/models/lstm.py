"""The LSTM baseline: torch.nn.LSTM with variational input dropout."""
import torch
from torch import nn

from ..errors import UserError

from .dropout import apply_mask, variational_mask


class LSTM(nn.Module):
    """One nn.LSTM layer; state is nn.LSTM's (h, c) pair, each (1, B, n)."""

    def __init__(self, input_size: int, width: int, depth: int = 1, drop_i: float = 0.0,
                 drop_h: float = 0.0):
        super().__init__()
        if depth != 1:
            raise UserError(f"lstm has no recurrence depth: use depth 1, not {depth}")
        if drop_h > 0:
            raise UserError("lstm does not support drop_h (nn.LSTM has no recurrent mask): "
                             "set drop_h to 0")
        self.input_size, self.width, self.depth, self.drop_i = input_size, width, 1, drop_i
        self.lstm = nn.LSTM(input_size, width)

    def forward(self, x: torch.Tensor, state=None):
        mask = variational_mask(self.drop_i, (x.shape[1], self.input_size), x, self.training)
        return self.lstm(apply_mask(x, mask), state)
