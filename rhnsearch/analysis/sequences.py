"""The inputs the analyses feed a trained model, and the layers they look into."""
import torch

from ..data import batches, batchify, windows
from ..errors import UserError
from ..models import HSG, RHN


def example_sequences(trainer, count: int, split: str) -> tuple[torch.Tensor, list[int]]:
    """(inputs (T, B[, 88]), real length of each): the first `count` chorales of `split`
    (JSB), or the first bptt-token window of `count` streams of the split (words)."""
    if count < 1:
        raise UserError(f"--sequences must be a positive integer, got {count}")
    data = trainer.data.split(split)
    if trainer.config.task == "jsb":
        inputs, _, mask = next(batches(data[:count], count))
        lengths = [int(n) for n in mask.sum(0).tolist()]
    else:
        inputs, _ = next(windows(batchify(data, count), trainer.config.bptt))
        lengths = [inputs.shape[0]] * inputs.shape[1]
    return inputs.to(trainer.device), lengths


def layer_input(model, inputs: torch.Tensor) -> torch.Tensor:
    """What the recurrent layer reads: the piano roll, or the word embeddings."""
    return inputs if model.embedding is None else model.embed(inputs)


def highway_layer(trainer, analysis: str) -> RHN:
    """The model's RHN (an HSG's wrapped RHN); a UserError for other archs."""
    layer = trainer.model.layer
    rhn = layer.rhn if isinstance(layer, HSG) else layer
    if not isinstance(rhn, RHN):
        raise UserError(f"{analysis} needs an rhn or hsg model but this run's arch is "
                        f"{trainer.config.arch}: pick a run of arch rhn or hsg")
    return rhn
