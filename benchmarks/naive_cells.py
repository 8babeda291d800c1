"""Naive reference cells for the speed benchmark and the equivalence tests.

Textbook loops: per highway (or transition) layer an nn.Linear on the state, the input
projected inside the time loop, Python loops over time and depth. Each cell takes its weights
from one of our layers (`from_layer`), so outputs and gradients can be compared with it, and
draws its dropout masks in the same order (input mask, then state mask).
"""
import torch
from torch import nn
from torch.nn import functional as F

from rhnsearch.models.dropout import apply_mask, variational_mask


def _copy_linear(linear: nn.Linear) -> nn.Linear:
    out = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None)
    out.load_state_dict(linear.state_dict())
    return out.to(linear.weight.device)


class NaiveRHN(nn.Module):
    """RHN (optionally with Highway State Gating) as a textbook loop."""

    def __init__(self, layer):
        super().__init__()
        hsg = getattr(layer, "rhn", None) is not None
        rhn = layer.rhn if hsg else layer
        self.input_size, self.width, self.depth = rhn.input_size, rhn.width, rhn.depth
        self.drop_i, self.drop_h, self.training = rhn.drop_i, rhn.drop_h, layer.training
        self.input_weight = nn.Parameter(rhn.input_weight.detach().clone())
        self.recurrent = nn.ModuleList(_copy_linear(lin) for lin in rhn.recurrent)
        self.gate_state = _copy_linear(layer.gate_state) if hsg else None
        self.gate_new = _copy_linear(layer.gate_new) if hsg else None

    def forward(self, x, state=None):
        batch, n = x.shape[1], self.width
        s = x.new_zeros(batch, n) if state is None else state
        mask_i = variational_mask(self.drop_i, (batch, self.input_size), x, self.training)
        mask_h = variational_mask(self.drop_h, (batch, n), x, self.training)
        outputs = []
        for step in range(x.shape[0]):
            s_prev = s
            for layer, linear in enumerate(self.recurrent):
                pre = linear(apply_mask(s, mask_h))
                if layer == 0:
                    pre = pre + F.linear(apply_mask(x[step], mask_i), self.input_weight)
                h, t = torch.tanh(pre[:, :n]), torch.sigmoid(pre[:, n:])
                s = h * t + s * (1 - t)
            if self.gate_state is not None:
                g = torch.sigmoid(self.gate_state(s_prev) + self.gate_new(s))
                s = g * s_prev + (1 - g) * s
            outputs.append(s)
        return torch.stack(outputs), s


class NaiveDTRNN(nn.Module):
    """DT-RNN / DT(S)-RNN as a textbook loop."""

    def __init__(self, layer):
        super().__init__()
        self.input_size, self.width, self.depth = layer.input_size, layer.width, layer.depth
        self.drop_i, self.drop_h, self.training = layer.drop_i, layer.drop_h, layer.training
        self.input_weight = nn.Parameter(layer.input_weight.detach().clone())
        self.recurrent = nn.ModuleList(_copy_linear(lin) for lin in layer.recurrent)
        self.shortcut = _copy_linear(layer.shortcut) if layer.has_shortcuts else None

    def forward(self, x, state=None):
        batch, n = x.shape[1], self.width
        y = x.new_zeros(batch, n) if state is None else state
        mask_i = variational_mask(self.drop_i, (batch, self.input_size), x, self.training)
        mask_h = variational_mask(self.drop_h, (batch, n), x, self.training)
        outputs = []
        for step in range(x.shape[0]):
            x_t, y_in = apply_mask(x[step], mask_i), apply_mask(y, mask_h)
            z = y_in
            for layer, linear in enumerate(self.recurrent):
                pre = linear(z)
                if layer == 0:
                    pre = pre + F.linear(x_t, self.input_weight[:n])
                if layer == self.depth - 1 and self.shortcut is not None:
                    pre = pre + self.shortcut(y_in) + F.linear(x_t, self.input_weight[n:])
                z = torch.tanh(pre)
            y = z
            outputs.append(y)
        return torch.stack(outputs), y


def naive_like(layer) -> nn.Module:
    """The naive cell with `layer`'s weights (RHN, HSG, DTRNN or DTSRNN)."""
    return NaiveDTRNN(layer) if hasattr(layer, "has_shortcuts") else NaiveRHN(layer)
