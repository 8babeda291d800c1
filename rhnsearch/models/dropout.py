"""Variational (Gal) dropout: one mask per sequence, reused at every step and layer."""

import torch


def variational_mask(p: float, shape, like: torch.Tensor, training: bool):
    """A scaled Bernoulli keep-mask of `shape`, or None when dropout is off."""
    if not training or p <= 0.0:
        return None
    keep = 1.0 - p
    return torch.empty(shape, device=like.device, dtype=like.dtype).bernoulli_(keep).div_(keep)


def apply_mask(x: torch.Tensor, mask):
    return x if mask is None else x * mask
