"""Model registry: `build_model(task, arch, depth, width, **options)`."""
import torch
from torch import nn

from ..errors import UserError
from .dtrnn import DTRNN, DTSRNN
from .lstm import LSTM
from .network import JSB_KEYS, SequenceModel, detach_state
from .rhn import HSG, RHN

LAYERS = {"rhn": RHN, "hsg": HSG, "dtrnn": DTRNN, "dtsrnn": DTSRNN, "lstm": LSTM}
TASKS = ("jsb", "ptb")

__all__ = ["LAYERS", "TASKS", "build_model", "detach_state", "SequenceModel", "RHN", "HSG",
           "DTRNN", "DTSRNN", "LSTM", "JSB_KEYS"]


def build_model(task: str, arch: str, depth: int, width: int, *, vocab_size: int | None = None,
                tied: bool = False, init_scale: float = 0.04, t_bias: float = -2.0,
                hsg_bias: float = -2.5, drop_x: float = 0.0, drop_i: float = 0.0,
                drop_h: float = 0.0, drop_o: float = 0.0) -> SequenceModel:
    """Build one recurrent layer of `arch` with the input and head of `task`.

    JSB: 88-key piano-roll input and 88 Bernoulli outputs. PTB: embedding of size `width`
    and a softmax over `vocab_size` words, optionally tied to the embedding. All weights are
    uniform in [-init_scale, init_scale]; then transform-gate biases are set to `t_bias`
    and the HSG gate bias to `hsg_bias`.
    """
    if task not in TASKS:
        raise UserError(f"unknown task {task!r}: use one of {', '.join(TASKS)}")
    if arch not in LAYERS:
        raise UserError(f"unknown arch {arch!r}: use one of {', '.join(LAYERS)}")
    if depth < 1 or width < 1:
        raise UserError(f"depth and width must be positive integers, got depth={depth} "
                        f"width={width}")
    if task == "jsb":
        if tied:
            raise UserError("weight tying is for the word task: set tied to false for jsb")
        input_size, out_features = JSB_KEYS, JSB_KEYS
    else:
        if not vocab_size:
            raise UserError("the ptb task needs vocab_size (the data's vocabulary)")
        input_size, out_features = width, vocab_size
    layer = LAYERS[arch](input_size, width, depth, drop_i=drop_i, drop_h=drop_h)
    model = SequenceModel(task, layer, out_features, drop_x=drop_x, drop_o=drop_o, tied=tied)
    with torch.no_grad():
        for p in model.parameters():
            nn.init.uniform_(p, -init_scale, init_scale)
    rhn = layer.rhn if isinstance(layer, HSG) else layer
    if isinstance(rhn, RHN):
        rhn.set_transform_bias(t_bias)
    if isinstance(layer, HSG):
        layer.set_gate_bias(hsg_bias)
    return model
