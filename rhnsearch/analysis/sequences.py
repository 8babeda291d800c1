"""The inputs the analyses feed a trained model, and the cells they look into."""

import torch

from ..errors import UserError
from ..models import RHNCell


def example_sequences(trainer, count: int, split: str) -> tuple[torch.Tensor, list[int]]:
    """(inputs (T, B[, 88]), real length of each): the first `count` sequences of `split`
    as the task defines them (chorales, or bptt-word windows of `count` streams)."""
    if count < 1:
        raise UserError(f"--sequences must be a positive integer, got {count}")
    inputs, lengths = trainer.task.examples(trainer.data.split(split), count, trainer.config.bptt)
    return inputs.to(trainer.device), lengths


def highway_cell(trainer, analysis: str) -> RHNCell:
    """The model's RHN cell (an HSG cell is one too); a UserError for other archs."""
    cell = getattr(trainer.model.layer, "cell", None)
    if not isinstance(cell, RHNCell):
        raise UserError(
            f"{analysis} needs an rhn or hsg model but this run's arch is "
            f"{trainer.config.arch}: pick a run of arch rhn or hsg"
        )
    return cell
