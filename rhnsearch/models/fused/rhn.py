"""The fused time loop of RHNCell and HSGCell: an autograd Function with a hand-written backward.

Per step it issues only what the recurrence needs (one product per highway layer, fused with
the activation by oneDNN on CPU, and two element-wise ops); everything else is done for all
steps at once: the derivative factors after the forward loop, the weight gradients after the
backward loop (one product per weight). Large arrays come from a reused pool (kernels.py).
"""

import torch
from torch.autograd.function import once_differentiable

from .kernels import WORKSPACE, Linear, weight_grad


def _sigmoid_trick(n: int, like: torch.Tensor):
    """(scale, shift) of length 2n such that, with u = σ(scale · a), shift + scale · u is
    [tanh(a_H), σ(a_T)]: tanh(a) = 2 σ(2a) - 1, so one sigmoid (fused into the product)
    covers both halves. tanh costs about 3x a sigmoid on CPU."""
    scale, shift = like.new_ones(2 * n), like.new_zeros(2 * n)
    scale[:n], shift[:n] = 2, -1
    return scale, shift


class RHNLoop(torch.autograd.Function):
    """All T steps of an RHN cell; with `hsg` also its Highway State Gate.

    forward(p (T, B, 2n) the projected input, s0 (B, n), mask (B, n) or None, depth, hsg,
    keep_gates, R_1..R_L (2n, n), b_1..b_L (2n)[, W_R, W_F, b_G]) -> (outputs (T, B, n),
    transform gates (T, L, B, n) or None, HSG gates (T, B, n) or None).
    Gates are returned (not differentiable) only with `keep_gates`.
    """

    @staticmethod
    def forward(ctx, p, s0, mask, depth, hsg, keep_gates, *params):
        T, B, n2 = p.shape
        n, L = n2 // 2, depth
        weights, biases = params[:L], params[L : 2 * L]
        scale, shift = _sigmoid_trick(n, p)
        steps = ((p + biases[0]) * scale).unbind(0)
        lins = [Linear(w * scale[:, None], B) for w in weights]
        biases = [None] + [b * scale for b in biases[1:]]
        if hsg:
            gate_state, gate_new, gate_bias = (
                Linear(params[-3], B),
                Linear(params[-2], B),
                params[-1],
            )
        need_grad = any(ctx.needs_input_grad)
        # Layouts: per step, layer l's [h_l, t_l] in `ht` (L, B, 2n), overwritten each step;
        # `prev` (L, T, B, n) holds the state each layer started from (layer-major: the
        # weight gradients take one product per layer over all steps), `inputs` the same
        # masked (what the product saw); `factors` (T, L, B, 2n) and `carries` (T, L, B, n)
        # the local derivatives, written once per step while the step is in cache.
        ht = p.new_empty(L, B, n2)
        h_of, t_of = ht[:, :, :n], ht[:, :, n:]
        ht_layers, h_layers, t_layers = ht.unbind(0), h_of.unbind(0), t_of.unbind(0)
        prev = WORKSPACE.take(p, L, T, B, n)
        inputs = prev if mask is None else WORKSPACE.take(p, L, T, B, n)
        prev_of, inputs_of = prev.unbind(1), inputs.view(L * T, B, n).unbind(0)
        out = p.new_empty(T, B, n)  # RHN: s_L; HSG: the gated state ŝ
        last = WORKSPACE.take(p, T, B, n) if hsg else out  # s_L
        gates = p.new_empty(T, B, n) if hsg else None  # HSG gate g
        transform = p.new_empty(T, L, B, n) if keep_gates else None
        # where layer l writes s_l: the next layer's start, the last layer's into `last`
        dst = prev[1:].view((L - 1) * T, B, n).unbind(0) + last.unbind(0)
        if need_grad:
            factors = WORKSPACE.take(p, T, L, B, n2)  # d s_l / d [a_H, a_T]
            carries = WORKSPACE.take(p, T, L, B, n)  # d s_l / d s_{l-1} = 1 - t_l
            diff = p.new_empty(L, B, n)
            one = p.new_ones(())
        s = s0
        for t in range(T):
            s_prev = prev[0, t].copy_(s)
            for layer in range(L):
                k = layer * T + t
                x = s if mask is None else torch.mul(s, mask, out=inputs_of[k])
                u = lins[layer](x, biases[layer], steps[t] if layer == 0 else None, "sigmoid")
                torch.addcmul(shift, u, scale, out=ht_layers[layer])
                s = torch.lerp(s, h_layers[layer], t_layers[layer], out=dst[k])
            if need_grad:  # [t (1 - h^2), (h - s_{l-1}) t (1 - t)] and 1 - t, all layers
                keep = torch.sub(one, t_of, out=carries[t])
                torch.sub(h_of, prev_of[t], out=diff)
                torch.mul(diff, t_of * keep, out=factors[t, ..., n:])
                torch.addcmul(t_of, t_of * h_of, h_of, value=-1, out=factors[t, ..., :n])
            if keep_gates:
                transform[t] = t_of
            if hsg:
                a = gate_new(s, other=gate_state(s_prev, gate_bias))
                s = torch.lerp(s, s_prev, torch.sigmoid(a, out=gates[t]), out=out[t])
        ctx.mark_non_differentiable(*(g for g in (transform, gates) if g is not None))
        pooled = [prev, *((inputs,) if mask is not None else ()), *((last,) if hsg else ())]
        gates_out = (transform, gates if keep_gates else None)
        if not need_grad:
            WORKSPACE.give(*pooled)
            return out, *gates_out
        WORKSPACE.give_when_freed(ctx, factors, carries, *pooled)
        ctx.depth, ctx.hsg = L, hsg
        ctx.save_for_backward(
            s0, mask, factors, carries, inputs, out, last, gates, *weights, *params[2 * L :]
        )
        return out, *gates_out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, _grad_transform, _grad_gates):
        L, hsg = ctx.depth, ctx.hsg
        s0, mask, factors, carries, inputs, out, last, gates, *weights = ctx.saved_tensors
        T, _, B, n2 = factors.shape
        n = n2 // 2
        # d loss / d a_l, layer-major; layer 0's is the gradient of p, returned as it is
        grad_p = factors.new_empty(T, B, n2)
        grad_rest = WORKSPACE.take(factors, L - 1, T, B, n2)
        grad_of = grad_p.unbind(0) + grad_rest.view((L - 1) * T, B, n2).unbind(0)
        halves_of = [g.view(B, 2, n) for g in grad_of]  # the same, as [H; T] halves
        factor_of = factors.view(T * L, B, 2, n).unbind(0)  # step-major
        carry_of, grad_outs = carries.view(T * L, B, n).unbind(0), grad_out.unbind(0)
        back = [Linear(w.t(), B) for w in weights[:L]]
        if hsg:
            w_r, w_f = weights[L : L + 2]
            gate_state, gate_new = Linear(w_r.t(), B), Linear(w_f.t(), B)
            s_hat_prev = torch.cat([s0.unsqueeze(0), out[:-1]])
            gate_factor = (s_hat_prev - last) * gates * (1 - gates)
            grad_gate = torch.empty_like(gates)
            keep_gate = 1 - gates
        carry = None
        for step in reversed(range(T)):
            g = grad_outs[step] if carry is None else grad_outs[step] + carry
            if hsg:
                da = torch.mul(g, gate_factor[step], out=grad_gate[step])
                carry_hat = torch.addcmul(gate_state(da), g, gates[step])
                g = torch.addcmul(gate_new(da), g, keep_gate[step])
            for layer in reversed(range(L)):
                k, j = layer * T + step, step * L + layer
                torch.mul(factor_of[j], g.unsqueeze(1), out=halves_of[k])
                m = back[layer](grad_of[k], other=mask, op="mul")
                g = torch.addcmul(m, g, carry_of[j])
            carry = carry_hat.add_(g) if hsg else g
        grad_flat = [grad_p.view(T * B, n2), *grad_rest.view(L - 1, T * B, n2)]
        layer_inputs = inputs.view(L, T * B, n)
        grads = [
            grad_p,
            carry,
            None,
            None,
            None,
            None,
            *(weight_grad(grad_flat[layer], layer_inputs[layer]) for layer in range(L)),
            *(g.sum(0) for g in grad_flat),
        ]
        if hsg:
            grad_gate = grad_gate.view(T * B, n)
            grads += [
                weight_grad(grad_gate, s_hat_prev.view(T * B, n)),
                weight_grad(grad_gate, last.view(T * B, n)),
                grad_gate.sum(0),
            ]
        WORKSPACE.give(grad_rest)
        return tuple(grads)
