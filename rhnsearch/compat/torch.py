"""PyTorch's private oneDNN products and `Tensor._base`, used by the fused recurrent loops
(models/fused/kernels.py) beside the public ops they stand in for.

On CPU, oneDNN's product (`torch.ops.mkldnn._linear_pointwise`) is 1.5-3x faster there than
`torch.addmm` / `torch.mm` (MKL) for the recurrent layers' shapes, all the more with the
weight packed once per call for the per-step products (`_reorder_linear_weight`). A view's
`_base` is the buffer it was cut from. Callers use these only where `onednn_works()` and
`views_known()` say yes; with a torch outside SUPPORTED, each says so in one warning line and
answers no, and the public ops are used.
"""

import torch

from . import tested

SUPPORTED = ">=2.13,<2.16"
PUBLIC = "using public torch ops instead (slower on CPU)"


def probe(ops=None) -> bool:
    """Whether oneDNN's packed products (in the namespace `ops`, default torch.ops.mkldnn)
    run here and agree with torch.addmm: any error or mismatch says no."""
    if ops is None:
        if not torch.backends.mkldnn.is_available():
            return False
        ops = torch.ops.mkldnn
    gen = torch.Generator().manual_seed(0)
    x, w, b, other = (
        torch.randn(*shape, generator=gen) for shape in [(4, 8), (6, 8), (6,), (4, 6)]
    )
    want = torch.addmm(b, x, w.t())
    try:
        packed = ops._reorder_linear_weight(w, 4)
        plain = ops._linear_pointwise.default(x, packed, b, "sigmoid", [], "")
        added = ops._linear_pointwise.binary(x, other, packed, b, "add")
        multiplied = ops._linear_pointwise.binary(x, other, packed, b, "mul")
    except Exception:  # noqa: BLE001 - a missing or changed private op
        return False
    return all(
        torch.allclose(got, ref, rtol=1e-4, atol=1e-5)
        for got, ref in [(plain, want.sigmoid()), (added, want + other), (multiplied, want * other)]
    )


def onednn_works() -> bool:
    """Whether this torch is one the oneDNN products were tested on and `probe()` finds them
    working here."""
    return tested("torch", SUPPORTED, "oneDNN's private products", PUBLIC) and probe()


def pack_weight(weight: torch.Tensor, batch: int) -> torch.Tensor:
    """`weight` (out, in), contiguous, packed for products with `batch` rows."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, batch)


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias=None, act: str = "none"):
    """act(x @ weight.T + bias) for 2-D x; `weight` plain or packed, act "none" or a
    pointwise function's name ("sigmoid", "tanh", "relu")."""
    return torch.ops.mkldnn._linear_pointwise.default(x, weight, bias, act, [], "")


def onednn_linear_with(x: torch.Tensor, other: torch.Tensor, weight: torch.Tensor, bias, op: str):
    """(x @ weight.T + bias) `op` other, op "add" or "mul"; `weight` plain or packed."""
    return torch.ops.mkldnn._linear_pointwise.binary(x, other, weight, bias, op)


def views_known() -> bool:
    """Whether this torch is one `view_base` was tested on."""
    return tested("torch", SUPPORTED, "Tensor._base", "the fused loops' buffers are not reused")


def view_base(view: torch.Tensor) -> torch.Tensor | None:
    """The tensor that `view` was cut from (None for a tensor that is not a view)."""
    return view._base
