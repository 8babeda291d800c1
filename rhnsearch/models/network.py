"""A whole model: the task's input, one recurrent layer, output dropout and the task's head."""

import torch
from torch import nn

from .dropout import apply_mask, variational_mask


def detach_state(state):
    """Cut the graph between BPTT windows (a tensor, or nn.LSTM's tuple)."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s.detach() for s in state)
    return state.detach()


class SequenceModel(nn.Module):
    """Inputs (T, B[, F]) -> logits (T, B, outputs). Word ids pass through an embedding whose
    rows (word types) are dropped with rate drop_x, one mask per sequence (a word dropped from
    a sequence is dropped at every step of it, as in the RHN authors' code); the layer's
    outputs are dropped with rate drop_o; `tied` shares the head's weights with the
    embedding."""

    def __init__(
        self,
        task,
        layer: nn.Module,
        vocab_size: int = 0,
        drop_x: float = 0.0,
        drop_o: float = 0.0,
        tied: bool = False,
    ):
        super().__init__()
        self.task, self.layer, self.drop_x, self.drop_o = task, layer, drop_x, drop_o
        self.embedding = task.embedding(layer.width, vocab_size)
        self.head = nn.Linear(layer.width, task.outputs(vocab_size))
        if tied:
            self.head.weight = self.embedding.weight

    def embed(self, inputs: torch.Tensor) -> torch.Tensor:
        """What the recurrent layer reads: the inputs, or the embeddings of word ids."""
        if self.embedding is None:
            return inputs
        x = self.embedding(inputs)
        if self.training and self.drop_x > 0:  # keep[b, w]: is word w kept in sequence b
            keep = variational_mask(
                self.drop_x, (inputs.shape[1], self.embedding.num_embeddings), x, True
            )
            x = x * keep.gather(1, inputs.t()).t().unsqueeze(-1)
        return x

    def forward(self, inputs: torch.Tensor, state=None, return_gates: bool = False):
        """(logits, final state[, gates of the layer])."""
        outputs, state, *gates = self.layer(self.embed(inputs), state, return_gates)
        mask = variational_mask(
            self.drop_o, (outputs.shape[1], outputs.shape[2]), outputs, self.training
        )
        return (self.head(apply_mask(outputs, mask)), state, *gates)

    def loss_sum(self, logits: torch.Tensor, targets: torch.Tensor, mask=None):
        """(summed loss, count) in the task's units."""
        return self.task.loss_sum(logits, targets, mask)
