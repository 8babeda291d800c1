"""The two tasks, and everything that differs between them: predicting the next step of a
piano roll (JSB Chorales: 88 independent Bernoulli keys) and the next word (Penn Treebank: a
softmax over the vocabulary). Models, the trainer, budgets and analyses ask the task; no other
module branches on its name.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F

from .data import batches, batchify, windows
from .errors import UserError

KEYS = 88  # piano keys, MIDI 21..108


class Task:
    """What a task decides. `vocab` is the word vocabulary's size (unused by piano rolls)."""

    name: str
    loss_unit: str  # what one unit of loss is: nats per ...
    throughput_key: str  # metric name of items trained per second
    carries_state: bool  # whether the state flows from one batch into the next
    perplexity: bool  # whether losses are also reported as perplexities
    final_batch_size: int | None  # batch of the final valid and test numbers (None: the
    #                               training batch)

    def input_size(self, width: int) -> int:
        """Features per step that the recurrent layer reads."""
        raise NotImplementedError

    def embedding(self, width: int, vocab: int) -> nn.Embedding | None:
        """The input layer's weights, if the inputs are ids."""
        raise NotImplementedError

    def outputs(self, vocab: int) -> int:
        raise NotImplementedError

    def io_params(self, width: int, vocab: int, tied: bool) -> int:
        """Parameters outside the recurrent layer: input embedding and output head."""
        raise NotImplementedError

    def check(self, tied: bool, loss_per: str = "step"):
        """A UserError for a setting the task does not have."""

    def uniform_loss(self, vocab: int) -> float:
        """The loss of a model that predicts nothing (the divergence cap is a multiple)."""
        raise NotImplementedError

    def loss_sum(self, logits, targets, mask=None) -> tuple[torch.Tensor, int]:
        """(summed loss, number of items it is summed over)."""
        raise NotImplementedError

    def batches(
        self,
        split,
        batch_size: int,
        bptt: int,
        shuffle: torch.Generator | None,
        device: torch.device,
    ):
        """(inputs, targets, mask or None) batches of a data split, on `device`; in a random
        order drawn from `shuffle` where the task allows."""
        raise NotImplementedError

    def examples(self, split, count: int, bptt: int) -> tuple[torch.Tensor, list[int]]:
        """(inputs, real length of each of the `count` sequences) for the analyses."""
        raise NotImplementedError


class PianoRolls(Task):
    """Chorales as piano rolls (T, B, 88): the loss is the binary cross-entropy summed over the
    88 keys, per real (unpadded) time step. Each chorale starts from the zero state."""

    name, loss_unit, throughput_key = "jsb", "nats per time step", "steps_per_sec"
    carries_state, perplexity, final_batch_size = False, False, None  # a chorale is a sequence

    def input_size(self, width):
        return KEYS

    def embedding(self, width, vocab):
        return None

    def outputs(self, vocab):
        return KEYS

    def io_params(self, width, vocab, tied):
        return width * KEYS + KEYS

    def check(self, tied, loss_per="step"):
        if tied:
            raise UserError("weight tying is for word tasks: set tied to false for jsb")
        if loss_per != "step":
            raise UserError(
                f"loss_per={loss_per!r}: chorales differ in length, so jsb "
                "averages its loss per time step; use loss_per step"
            )

    def uniform_loss(self, vocab):
        return KEYS * math.log(2)

    def loss_sum(self, logits, targets, mask=None):
        per_step = F.binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(-1)
        if mask is None:
            return per_step.sum(), per_step.numel()
        return (per_step * mask).sum(), int(mask.sum().item())

    def batches(self, split, batch_size, bptt, shuffle, device):
        for batch in batches(split, batch_size, shuffle):
            yield tuple(t.to(device) for t in batch)

    def examples(self, split, count, bptt):
        inputs, _, mask = next(batches(split[:count], count))
        return inputs, [int(n) for n in mask.sum(0).tolist()]


class Words(Task):
    """A word stream cut into `batch_size` parallel streams and `bptt`-step windows; the state
    flows from each window into the next. The loss is the cross-entropy per word. The final
    valid and test numbers read the whole text as one stream (batch 1), as the RHN authors'
    code reports them; each epoch's validation is batched, as theirs is."""

    name, loss_unit, throughput_key = "ptb", "nats per word", "tokens_per_sec"
    carries_state, perplexity, final_batch_size = True, True, 1

    def input_size(self, width):
        return width  # the embedding size is the width

    def embedding(self, width, vocab):
        if vocab < 1:
            raise UserError("the word task needs vocab_size (the data's vocabulary)")
        return nn.Embedding(vocab, width)

    def outputs(self, vocab):
        return vocab

    def io_params(self, width, vocab, tied):
        return vocab * width + (vocab if tied else width * vocab + vocab)

    def uniform_loss(self, vocab):
        return math.log(vocab)

    def loss_sum(self, logits, targets, mask=None):
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum"
        )
        return loss, targets.numel()

    def batches(self, split, batch_size, bptt, shuffle, device):
        for x, y in windows(batchify(split, batch_size).to(device), bptt):
            yield x, y, None

    def examples(self, split, count, bptt):
        inputs, _ = next(windows(batchify(split, count), bptt))
        return inputs, [inputs.shape[0]] * inputs.shape[1]


TASKS = {task.name: task for task in (PianoRolls(), Words())}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise UserError(f"unknown task {name!r}: use one of {', '.join(TASKS)}")
    return TASKS[name]
