"""Matrix products and reusable buffers for the fused recurrent loops.

On CPU, oneDNN's products are 1.5-3x faster here than `torch.addmm` / `torch.mm` (MKL) for the
recurrent layers' shapes, all the more with the weight packed once per call for the per-step
products. These are private PyTorch ops (compat/torch.py): `onednn()` is True only on a torch
they were tested on and where they were found working, on tiny tensors, with results equal to
the public ops'; otherwise (and on CUDA, in float64, for products under MIN_MACS
multiply-adds, or with RHNSEARCH_ONEDNN=0) everything runs on public torch ops.
"""

import collections
import functools
import math
import os
import threading
import weakref

import torch
from torch.nn import functional as F

from ...compat import torch as torch_compat

MIN_MACS = 1 << 20  # measured break-even: batch 32, 128 -> 256 units


@functools.cache
def onednn() -> bool:
    """Whether oneDNN's products are used: RHNSEARCH_ONEDNN is not 0 and compat finds them
    tested and working. Asked at the first product, so that importing checks nothing."""
    return os.environ.get("RHNSEARCH_ONEDNN", "1") != "0" and torch_compat.onednn_works()


@functools.cache
def reuse() -> bool:
    """Whether the buffers of arrays given back are reused (torch's views are known)."""
    return torch_compat.views_known()


def _onednn(t: torch.Tensor, macs: int) -> bool:
    return onednn() and t.device.type == "cpu" and t.dtype == torch.float32 and macs >= MIN_MACS


def linear(x: torch.Tensor, weight: torch.Tensor, bias=None) -> torch.Tensor:
    """x @ weight.T (+ bias) for 2-D x, as one product (operands may be transposed views)."""
    if _onednn(x, x.shape[0] * weight.numel()):
        return torch_compat.onednn_linear(x, weight, bias)
    return F.linear(x, weight, bias)


def weight_grad(grad: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """grad.T @ inputs for (N, out) and (N, in): the gradient of a linear map's weight.

    The product's left operand gets copied to row-major: make that the narrower one.
    """
    if inputs.shape[1] < grad.shape[1]:
        return linear(inputs.t(), grad.t()).t()
    return linear(grad.t(), inputs.t())


class Linear:
    """Many products x @ weight.T with the same weight and batch size (see __call__)."""

    def __init__(self, weight: torch.Tensor, batch: int):
        self.onednn = _onednn(weight, batch * weight.numel())
        if self.onednn:
            self.weight = torch_compat.pack_weight(weight.contiguous(), batch)
        else:
            self.weight = weight.t()

    def __call__(self, x, bias=None, other=None, act: str = "none", op: str = "add"):
        """(x @ weight.T + bias) `op` other, op "add" or "mul", then the activation."""
        if self.onednn:
            if other is None:
                return torch_compat.onednn_linear(x, self.weight, bias, act)
            y = torch_compat.onednn_linear_with(x, other, self.weight, bias, op)
        elif other is not None and op == "add":
            y = torch.addmm(other, x, self.weight)
            if bias is not None:
                y += bias
        else:
            y = torch.mm(x, self.weight) if bias is None else torch.addmm(bias, x, self.weight)
            if other is not None:
                y *= other
        return y if act == "none" else getattr(y, act + "_")()


class Workspace:
    """Flat buffers handed out as (views of) arrays and given back when done with.

    A fused loop needs a few (L, T, B, n) arrays per call. Fresh ones cost page faults on
    every call (the C allocator hands big freed blocks back to the OS): about a fifth of a
    training step here. `give` may run from a garbage-collection callback at any moment
    (see `give_when_freed`), so it only queues; `take` files the queue under its lock.
    """

    def __init__(self, keep: int = 16):
        self.keep, self.free, self.returned = keep, [], collections.deque()
        self.lock = threading.Lock()

    def take(self, like: torch.Tensor, *shape: int) -> torch.Tensor:
        """An uninitialised array of `shape`, with `like`'s dtype and device."""
        numel, buf = math.prod(shape), None
        with self.lock:
            while self.returned:
                self.free.append(self.returned.popleft())
            self.free.sort(key=torch.Tensor.numel)
            del self.free[: -self.keep]
            for i, b in enumerate(self.free):  # the smallest that fits
                if b.numel() >= numel and b.dtype == like.dtype and b.device == like.device:
                    buf = self.free.pop(i)
                    break
        if buf is None:
            buf = like.new_empty(numel)
        return buf[:numel].view(shape)

    def give(self, *arrays):
        """Return arrays from `take` (None is skipped; kept only where torch's views are known,
        else `take` makes new ones)."""
        if reuse():
            self.returned.extend(torch_compat.view_base(a) for a in arrays if a is not None)

    def give_when_freed(self, owner, *arrays):
        """Return the arrays once `owner` (an autograd ctx: its graph) is garbage."""
        weakref.finalize(owner, self.give, *arrays)


WORKSPACE = Workspace()
