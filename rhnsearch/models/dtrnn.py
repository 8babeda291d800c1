"""Deep-transition RNNs (Pascanu et al. 2013): DT-RNN and DT(S)-RNN, tanh units, no gates.

DT-RNN:    z_1 = f(W x[t] + R_1 y[t-1] + b_1), z_l = f(R_l z_{l-1} + b_l), y[t] = z_L.
DT(S)-RNN: the last layer also sees the input and the previous state through shortcuts,
           y[t] = f(R_L z_{L-1} + U y[t-1] + V x[t] + b_L) (for depth >= 2; depth 1 is DT-RNN).

`forward` runs the whole time loop in `DTRNNLoop`, an autograd Function with a hand-written
backward (see `RHNLoop`); benchmarks/naive_cells.py holds the plain autograd reference.
"""
import torch
from torch import nn
from torch.autograd.function import once_differentiable

from .dropout import apply_mask, variational_mask
from .kernels import WORKSPACE, Linear, linear, weight_grad


class DTRNNLoop(torch.autograd.Function):
    """All T steps of a DT-RNN layer (a DT(S)-RNN when `shortcuts`).

    forward(x (T, B, F) after input dropout, y0 (B, n), mask_h (B, n) or None, depth,
    shortcuts, input_weight ([W] or [W; V]), R_1..R_L, b_1..b_L[, U]) -> outputs (T, B, n).
    Each unit computes tanh(a) as 2 sigm(2 a) - 1 (see `RHNLoop`); with gradients needed the
    forward also stores each unit's slope 1 - z^2, a step's layers at once.
    """

    @staticmethod
    def forward(ctx, x, y0, mask, depth, shortcuts, input_weight, *params):
        T, B, _ = x.shape
        n, L = y0.shape[1], depth
        weights, biases = params[:L], [2 * b for b in params[L:2 * L]]
        bias = biases[0]
        if shortcuts:
            bias = torch.cat([bias, bias.new_zeros(n)])
        projected = linear(x.reshape(T * B, -1), 2 * input_weight, bias).view(T, B, -1)
        direct = projected[..., :n].contiguous().unbind(0)
        if shortcuts:
            shortcut = Linear(2 * params[-1], B)
            via_shortcut = projected[..., n:].contiguous().unbind(0)
        lins = [Linear(2 * w, B) for w in weights]
        minus_one, one = x.new_tensor(-1.0), x.new_tensor(1.0)
        need_grad = any(ctx.needs_input_grad)
        if need_grad:
            slopes = WORKSPACE.take(x, T, L, B, n)
        inputs = WORKSPACE.take(x, T, B, n)  # (masked) y[t-1], the input of every step
        hidden = WORKSPACE.take(x, L - 1, T, B, n)  # z_1..z_{L-1} of every step
        out = x.new_empty(T, B, n)  # z_L = y
        input_of = inputs.unbind(0)
        dst = hidden.view((L - 1) * T, B, n).unbind(0) + out.unbind(0)
        y = y0
        for t in range(T):
            x_t = y if mask is None else torch.mul(y, mask, out=input_of[t])
            z = x_t
            for layer in range(L):
                if layer == 0:
                    u = lins[0](x_t, other=direct[t], act="sigmoid")
                elif layer == L - 1 and shortcuts:
                    u = lins[layer](z, biases[layer], shortcut(x_t, other=via_shortcut[t]),
                                    "sigmoid")
                else:
                    u = lins[layer](z, biases[layer], act="sigmoid")
                z = torch.add(minus_one, u, alpha=2, out=dst[layer * T + t])
            if need_grad:
                torch.addcmul(one, hidden[:, t], hidden[:, t], value=-1, out=slopes[t, :-1])
                torch.addcmul(one, z, z, value=-1, out=slopes[t, -1])
            y = z
        WORKSPACE.give_when_freed(ctx, inputs, hidden)
        if not need_grad:
            return out
        WORKSPACE.give_when_freed(ctx, slopes)
        if mask is None:
            inputs[0] = y0
            inputs[1:] = out[:-1]
        ctx.depth, ctx.shortcuts = L, shortcuts
        ctx.save_for_backward(x, mask, slopes, inputs, hidden, input_weight, *weights,
                              *params[2 * L:])
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        L, shortcuts = ctx.depth, ctx.shortcuts
        x, mask, slopes, inputs, hidden, input_weight, *weights = ctx.saved_tensors
        T, B, n = inputs.shape
        grad_pre = WORKSPACE.take(slopes, L * T, B, n)
        slope_of, grad_of = slopes.view(T * L, B, n).unbind(0), grad_pre.unbind(0)
        back = [Linear(w.t(), B) for w in weights[:L]]
        if shortcuts:
            back_shortcut = Linear(weights[L].t(), B)
        grad_outs = grad_out.unbind(0)
        carry = None
        for step in reversed(range(T)):
            g = grad_outs[step] if carry is None else grad_outs[step] + carry
            for layer in reversed(range(L)):
                da = torch.mul(g, slope_of[step * L + layer], out=grad_of[layer * T + step])
                if layer == L - 1 and shortcuts:
                    g_x = back_shortcut(da)
                if layer > 0:
                    g = back[layer](da)
                else:
                    g = back[0](da, other=g_x if shortcuts else None)
            carry = g if mask is None else g.mul_(mask)
        grad_flat = grad_pre.view(L, T * B, n)
        step_inputs, layer_inputs = inputs.view(T * B, n), hidden.view(L - 1, T * B, n)
        grad_w = [weight_grad(grad_flat[0], step_inputs)]
        grad_w += [weight_grad(grad_flat[layer], layer_inputs[layer - 1])
                   for layer in range(1, L)]
        grad_projected, extra = grad_flat[0], []
        if shortcuts:
            grad_projected = torch.cat([grad_flat[0], grad_flat[-1]], 1)
            extra = [weight_grad(grad_flat[-1], step_inputs)]
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = linear(grad_projected, input_weight.t()).view(T, B, -1)
        grads = (grad_x, carry, None, None, None,
                 weight_grad(grad_projected, x.reshape(T * B, -1)), *grad_w,
                 *grad_flat.sum(1).unbind(0), *extra)
        WORKSPACE.give(grad_pre)
        return grads


class DTRNN(nn.Module):
    """Deep-transition RNN layer; `shortcuts=True` makes it a DT(S)-RNN."""

    shortcuts = False

    def __init__(self, input_size: int, width: int, depth: int, drop_i: float = 0.0,
                 drop_h: float = 0.0):
        super().__init__()
        self.input_size, self.width, self.depth = input_size, width, depth
        self.drop_i, self.drop_h = drop_i, drop_h
        self.has_shortcuts = self.shortcuts and depth >= 2
        n_in = 2 * width if self.has_shortcuts else width
        self.input_weight = nn.Parameter(torch.empty(n_in, input_size))  # [W; V]
        self.recurrent = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        if self.has_shortcuts:
            self.shortcut = nn.Linear(width, width, bias=False)  # U

    def initial_state(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        return like.new_zeros(batch, self.width)

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None):
        batch = x.shape[1]
        y = self.initial_state(batch, x) if state is None else state
        mask_i = variational_mask(self.drop_i, (batch, self.input_size), x, self.training)
        mask_h = variational_mask(self.drop_h, (batch, self.width), x, self.training)
        params = [lin.weight for lin in self.recurrent] + [lin.bias for lin in self.recurrent]
        if self.has_shortcuts:
            params.append(self.shortcut.weight)
        outputs = DTRNNLoop.apply(apply_mask(x, mask_i), y, mask_h, self.depth,
                                  self.has_shortcuts, self.input_weight, *params)
        return outputs, outputs[-1]


class DTSRNN(DTRNN):
    """DT(S)-RNN: DT-RNN with input and state shortcuts into the last transition layer."""

    shortcuts = True
