"""A recurrent layer with its task's input and output: JSB piano roll or PTB words.

`SequenceModel(inputs, state)` returns (logits (T, B, out), state); `loss_sum` returns the
summed loss and the number of real time steps (or tokens) it covers, so that epoch losses are
exact averages however the batches are padded.
"""
import torch
from torch import nn
from torch.nn import functional as F

from .dropout import apply_mask, variational_mask

JSB_KEYS = 88


def detach_state(state):
    """Cut the graph between BPTT windows (tensor or nn.LSTM's tuple)."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s.detach() for s in state)
    return state.detach()


class SequenceModel(nn.Module):
    """Embedding (words) or piano-roll input, one recurrent layer, output dropout and head."""

    def __init__(self, task: str, layer: nn.Module, out_features: int, drop_x: float = 0.0,
                 drop_o: float = 0.0, tied: bool = False):
        super().__init__()
        self.task, self.layer, self.drop_x, self.drop_o = task, layer, drop_x, drop_o
        width = layer.width
        self.embedding = nn.Embedding(out_features, width) if task != "jsb" else None
        self.head = nn.Linear(width, out_features)
        if tied:
            self.head.weight = self.embedding.weight

    def embed(self, inputs: torch.Tensor) -> torch.Tensor:
        """Token ids (T, B) to vectors, dropping whole word types (drop_x) per sequence."""
        x = self.embedding(inputs)
        if self.training and self.drop_x > 0:
            keep = variational_mask(self.drop_x, (self.embedding.num_embeddings, 1), x, True)
            x = x * keep[inputs]
        return x

    def forward(self, inputs: torch.Tensor, state=None, **layer_kwargs):
        x = inputs if self.embedding is None else self.embed(inputs)
        outputs, state = self.layer(x, state, **layer_kwargs)
        mask = variational_mask(self.drop_o, (outputs.shape[1], outputs.shape[2]), outputs,
                                self.training)
        return self.head(apply_mask(outputs, mask)), state

    def loss_sum(self, logits: torch.Tensor, targets: torch.Tensor, mask=None):
        """(summed loss, count): JSB sums BCE over the 88 keys per real step; words sum CE."""
        if self.task == "jsb":
            per_step = F.binary_cross_entropy_with_logits(
                logits, targets, reduction="none").sum(-1)
            if mask is None:
                return per_step.sum(), per_step.numel()
            return (per_step * mask).sum(), int(mask.sum().item())
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                             reduction="sum")
        return ce, targets.numel()
