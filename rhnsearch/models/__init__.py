"""The models: `build_model(task, arch, depth, width, ...)`.

Each arch but the LSTM baseline is a cell (cells.py: the math, in textbook form; or one of
your own, `module:Class`, archs.py) run by `Recurrent` (recurrent.py) on a reference or a fused
backend (fused/).
"""

import torch
from torch import nn

from ..tasks import get_task
from .archs import BUILT_IN, Arch, resolve_arch
from .cells import CELLS, DTRNNCell, DTSRNNCell, HSGCell, RHNCell
from .lstm import LSTM
from .network import SequenceModel, detach_state
from .recurrent import BACKENDS, Recurrent

ARCHS = BUILT_IN

__all__ = [
    "ARCHS",
    "Arch",
    "BACKENDS",
    "CELLS",
    "DTRNNCell",
    "DTSRNNCell",
    "HSGCell",
    "LSTM",
    "RHNCell",
    "Recurrent",
    "SequenceModel",
    "build_layer",
    "build_model",
    "check_arch",
    "detach_state",
    "resolve_arch",
]


def check_arch(arch: str, depth: int = 1, width: int = 1) -> Arch:
    """The arch (`resolve_arch`); a one-line UserError for one, or a depth or width, that
    cannot be."""
    resolved = resolve_arch(arch)
    resolved.check(depth, width)
    return resolved


def build_layer(
    arch: str,
    input_size: int,
    width: int,
    depth: int,
    drop_i: float = 0.0,
    drop_h: float = 0.0,
    backend: str = "auto",
) -> nn.Module:
    """One recurrent layer: (T, B, input_size) -> (T, B, width)."""
    cell = check_arch(arch, depth, width).cell
    if cell is None:
        return LSTM(input_size, width, drop_i, drop_h)
    return Recurrent(cell(input_size, width, depth), drop_i, drop_h, backend)


def build_model(
    task: str,
    arch: str,
    depth: int,
    width: int,
    *,
    vocab_size: int = 0,
    tied: bool = False,
    init_scale: float = 0.04,
    t_bias: float = -2.0,
    hsg_bias: float = -2.5,
    drop_x: float = 0.0,
    drop_i: float = 0.0,
    drop_h: float = 0.0,
    drop_o: float = 0.0,
    backend: str = "auto",
) -> SequenceModel:
    """One recurrent layer of `arch` with the input and head of `task` ("jsb" or "ptb").

    All weights start uniform in [-init_scale, init_scale]; then the transform-gate biases
    b_T are set to `t_bias` and the HSG gate bias b_G to `hsg_bias` (negative: the gates
    start closed, the layers carry their input).

    Args:
        task: "jsb" (88 notes in, 88 out) or "ptb" (words in, words out).
        arch: rhn, hsg, dtrnn, dtsrnn or lstm (docs/models.md).
        depth: the recurrence depth (highway layers a step).
        width: the units of the recurrent layer.
        vocab_size: the vocabulary of a "ptb" task.
        tied: the head shares the embedding's weights (WT; "ptb" only).
        init_scale: weights start uniform in [-init_scale, init_scale].
        t_bias: the transform-gate biases b_T (RHN and HSG cells).
        hsg_bias: the HSG gate bias b_G.
        drop_x: the rate at which whole word types of the embedding are dropped.
        drop_i: dropout of the layer's input, one mask a sequence.
        drop_h: dropout of the state each layer reads, one mask a sequence.
        drop_o: dropout of the layer's output.
        backend: how the cell's loop runs: auto, reference or fused.
    """
    the_task = get_task(task)
    the_task.check(tied)
    layer = build_layer(arch, the_task.input_size(width), width, depth, drop_i, drop_h, backend)
    model = SequenceModel(the_task, layer, vocab_size, drop_x, drop_o, tied)
    with torch.no_grad():
        for p in model.parameters():
            nn.init.uniform_(p, -init_scale, init_scale)
        cell = getattr(layer, "cell", None)
        if isinstance(cell, RHNCell):
            for layer_index in range(depth):
                cell.transform_bias(layer_index).fill_(t_bias)
        if isinstance(cell, HSGCell):
            cell.gate_new.bias.fill_(hsg_bias)
    return model
