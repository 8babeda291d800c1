"""The fused time loop of DTRNNCell and DTSRNNCell: an autograd Function with a hand-written
backward (the same scheme as rhn.py)."""

import torch
from torch.autograd.function import once_differentiable

from .kernels import WORKSPACE, Linear, weight_grad


class DTRNNLoop(torch.autograd.Function):
    """All T steps of a DT-RNN cell (a DT(S)-RNN cell when `shortcuts`).

    forward(p (T, B, n) or, with shortcuts, (T, B, 2n) = [W x; V x], y0 (B, n), mask (B, n) or
    None, depth, shortcuts, R_1..R_L, b_1..b_L[, U]) -> outputs (T, B, n).
    Each unit computes tanh(a) as 2 σ(2a) - 1: one sigmoid fused into the product by oneDNN,
    about 3x cheaper than a tanh on CPU.
    """

    @staticmethod
    def forward(ctx, p, y0, mask, depth, shortcuts, *params):
        (T, B, _), n, L = p.shape, y0.shape[1], depth
        weights, biases = params[:L], [2 * b for b in params[L : 2 * L]]
        direct = (2 * (p[..., :n] + params[L])).unbind(0)
        if shortcuts:
            shortcut = Linear(2 * params[-1], B)
            via_shortcut = (2 * p[..., n:]).unbind(0)
        lins = [Linear(2 * w, B) for w in weights]
        need_grad = any(ctx.needs_input_grad)
        inputs = WORKSPACE.take(p, T, B, n)  # y[t-1] as the step sees it (masked)
        hidden = WORKSPACE.take(p, L - 1, T, B, n)  # z_1..z_{L-1} of every step
        out = p.new_empty(T, B, n)  # z_L = y
        dst = hidden.view((L - 1) * T, B, n).unbind(0) + out.unbind(0)
        y = y0
        for t in range(T):
            x = y if mask is None else torch.mul(y, mask, out=inputs[t])
            z = x
            for layer in range(L):
                if layer == 0:
                    u = lins[0](x, other=direct[t], act="sigmoid")
                elif layer == L - 1 and shortcuts:
                    u = lins[layer](z, biases[layer], shortcut(x, other=via_shortcut[t]), "sigmoid")
                else:
                    u = lins[layer](z, biases[layer], act="sigmoid")
                z = torch.add(-1, u, alpha=2, out=dst[layer * T + t])
            y = z
        if not need_grad:
            WORKSPACE.give(inputs, hidden)
            return out
        if mask is None:
            inputs[0] = y0
            inputs[1:] = out[:-1]
        slopes = WORKSPACE.take(p, L, T, B, n)  # 1 - z_l^2 of every unit
        torch.mul(hidden, hidden, out=slopes[:-1])
        torch.mul(out, out, out=slopes[-1])
        slopes.neg_().add_(1)
        WORKSPACE.give_when_freed(ctx, inputs, hidden, slopes)
        ctx.depth, ctx.shortcuts = L, shortcuts
        ctx.save_for_backward(mask, slopes, inputs, hidden, *weights, *params[2 * L :])
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        L, shortcuts = ctx.depth, ctx.shortcuts
        mask, slopes, inputs, hidden, *weights = ctx.saved_tensors
        T, B, n = inputs.shape
        grad_pre = WORKSPACE.take(slopes, L, T, B, n)  # d loss / d a_l, layer-major
        back = [Linear(w.t(), B) for w in weights[:L]]
        if shortcuts:
            back_shortcut = Linear(weights[L].t(), B)
        carry = None
        for step in reversed(range(T)):
            g = grad_out[step] if carry is None else grad_out[step] + carry
            for layer in reversed(range(L)):
                da = torch.mul(g, slopes[layer, step], out=grad_pre[layer, step])
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
        grad_w += [weight_grad(grad_flat[layer], layer_inputs[layer - 1]) for layer in range(1, L)]
        grad_p = torch.cat([grad_pre[0], grad_pre[-1]], -1) if shortcuts else grad_pre[0].clone()
        extra = [weight_grad(grad_flat[-1], step_inputs)] if shortcuts else []
        grads = (grad_p, carry, None, None, None, *grad_w, *grad_flat.sum(1).unbind(0), *extra)
        WORKSPACE.give(grad_pre)
        return grads
