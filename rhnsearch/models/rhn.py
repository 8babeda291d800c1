"""Recurrent Highway Network layers: RHN (coupled carry gate) and RHN with Highway State Gating.

Both follow the nn.LSTM convention: input (T, B, F), optional state (B, n), return
(outputs (T, B, n), final state (B, n)). The input is projected for all time steps in one
matrix product before the time loop; each highway layer uses one fused (n, 2n) product for
its H and T pre-activations.

`forward` runs the whole time loop in `RHNLoop`, an autograd Function with a hand-written
backward: per step only the products along the recurrence, the weight gradients afterwards in
one product per weight, large arrays from a reused pool (kernels.py). When gate tensors are
asked for (`gates`, `hsg_gates`), the step-by-step autograd loop below (`step`) runs instead.
"""
import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from .dropout import apply_mask, variational_mask
from .kernels import WORKSPACE, Linear, linear, weight_grad


class RHNLoop(torch.autograd.Function):
    """All T steps of an RHN layer; with `hsg` = (W_R, W_F, b_G) also its Highway State Gate.

    forward(x (T, B, F) after input dropout, s0 (B, n), mask_h (B, n) or None, depth, hsg,
    input_weight, W_0..W_{L-1}, b_0..b_{L-1}[, W_R, W_F, b_G]) -> outputs (T, B, n).

    Each layer computes u = sigm(c * a) with c = 2 on the H half and 1 on the T half of the
    pre-activation a, so that [h, t] = [2 u_H - 1, u_T] = [tanh(a_H), sigm(a_T)] with one
    activation (tanh is several times slower than sigmoid on CPU here). When gradients are
    needed, the forward also stores each step's local derivatives, all layers at once while
    they are in cache: d s_l / d [a_H, a_T] = [t (1 - h^2), (h - s) t (1 - t)] and
    d s_l / d s_{l-1} = 1 - t.
    """

    @staticmethod
    def forward(ctx, x, s0, mask, depth, hsg, input_weight, *params):
        T, B, _ = x.shape
        n2, L = input_weight.shape[0], depth
        n = n2 // 2
        weights, biases = params[:L], params[L:2 * L]
        scale = x.new_ones(n2)
        scale[:n] = 2
        shift = x.new_zeros(n2)
        shift[:n] = -1
        steps = linear(x.reshape(T * B, -1), input_weight * scale[:, None], biases[0] * scale)
        steps = steps.view(T, B, n2).unbind(0)
        lins = [Linear(w * scale[:, None], B) for w in weights]
        biases = [b * scale for b in biases]
        if hsg:
            gate_state, gate_new = Linear(params[-3], B), Linear(params[-2], B)
            gate_bias = params[-1]
        ht = x.new_empty(L, B, n2)  # this step's [h, t] and h - s of every layer
        diff = x.new_empty(L, B, n)
        h, gate = ht[..., :n], ht[..., n:]
        ht_of, h_of, gate_of, diff_of = ht.unbind(0), h.unbind(0), gate.unbind(0), diff.unbind(0)
        need_grad = any(ctx.needs_input_grad)
        if need_grad:
            factors = WORKSPACE.take(x, T, L, B, n2)  # d s_l / d [a_H, a_T]
            carries = WORKSPACE.take(x, T, L, B, n)  # d s_l / d s_{l-1} = 1 - t
            one = x.new_ones(())
        inputs = WORKSPACE.take(x, L, T, B, n)  # what each layer's product saw (masked)
        out = x.new_empty(T, B, n)  # RHN: s_L; HSG: the gated state
        last = WORKSPACE.take(x, T, B, n) if hsg else out  # s_L
        gates = WORKSPACE.take(x, T, B, n) if hsg else None  # HSG gate g
        input_of = inputs.view(L * T, B, n).unbind(0)
        # where layer l writes its state: the next layer's input, unless that is masked
        dst = input_of[T:] if mask is None else [None] * ((L - 1) * T)
        dst = list(dst) + list(last.unbind(0))
        s = s0
        for t in range(T):
            s_prev = s
            for layer in range(L):
                k = layer * T + t
                x_l = s if mask is None else torch.mul(s, mask, out=input_of[k])
                if layer == 0:
                    u = lins[0](x_l, other=steps[t], act="sigmoid")
                else:
                    u = lins[layer](x_l, biases[layer], act="sigmoid")
                torch.addcmul(shift, u, scale, out=ht_of[layer])
                d = torch.sub(h_of[layer], s, out=diff_of[layer])
                s = torch.addcmul(s, gate_of[layer], d, out=dst[k])
            if need_grad:
                keep = torch.sub(one, gate, out=carries[t])
                torch.mul(diff, gate * keep, out=factors[t, ..., n:])
                torch.addcmul(gate, gate * h, h, value=-1, out=factors[t, ..., :n])
            if hsg:
                a = gate_new(s, other=gate_state(s_prev, gate_bias))
                s = torch.lerp(s, s_prev, torch.sigmoid(a, out=gates[t]), out=out[t])
        WORKSPACE.give_when_freed(ctx, inputs, *((last, gates) if hsg else ()))
        if not need_grad:
            return out
        WORKSPACE.give_when_freed(ctx, factors, carries)
        if mask is None:
            inputs[0, 0] = s0
            inputs[0, 1:] = out[:-1]
        ctx.depth, ctx.hsg = L, hsg
        ctx.save_for_backward(x, s0, mask, factors, carries, inputs, out, last, gates,
                              input_weight, *weights, *params[2 * L:])
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        L, hsg = ctx.depth, ctx.hsg
        x, s0, mask, factors, carries, inputs, out, last, gates, input_weight, *weights = \
            ctx.saved_tensors
        _, T, B, n = inputs.shape
        grad_pre = WORKSPACE.take(factors, L * T, B, 2, n)
        factor_of = factors.view(T * L, B, 2, n).unbind(0)  # step-major
        grad_of, carry_of = grad_pre.unbind(0), carries.view(T * L, B, n).unbind(0)
        back = [Linear(w.t(), B) for w in weights[:L]]
        if hsg:
            w_r, w_f = weights[L:L + 2]
            gate_state, gate_new = Linear(w_r.t(), B), Linear(w_f.t(), B)
            s_hat_prev = torch.cat([s0.unsqueeze(0), out[:-1]])
            gate_factor = (s_hat_prev - last) * gates * (1 - gates)
            grad_gate = torch.empty_like(gates)
            keep_gate = 1 - gates
        grad_outs = grad_out.unbind(0)
        carry = None
        for step in reversed(range(T)):
            g = grad_outs[step] if carry is None else grad_outs[step] + carry
            if hsg:
                da = torch.mul(g, gate_factor[step], out=grad_gate[step])
                carry_hat = torch.addcmul(gate_state(da), g, gates[step])
                g = torch.addcmul(gate_new(da), g, keep_gate[step])
            for layer in reversed(range(L)):
                k = step * L + layer
                da = torch.mul(factor_of[k], g.unsqueeze(1), out=grad_of[layer * T + step])
                m = back[layer](da.view(B, 2 * n), other=mask, op="mul")
                g = torch.addcmul(m, g, carry_of[k])
            carry = carry_hat.add_(g) if hsg else g
        grad_flat, layer_inputs = grad_pre.view(L, T * B, 2 * n), inputs.view(L, T * B, n)
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = linear(grad_flat[0], input_weight.t()).view(T, B, -1)
        grad_w = [weight_grad(grad_flat[layer], layer_inputs[layer]) for layer in range(L)]
        grads = [grad_x, carry, None, None, None, weight_grad(grad_flat[0], x.reshape(T * B, -1)),
                 *grad_w, *grad_flat.sum(1).unbind(0)]
        if hsg:
            grad_gate = grad_gate.view(T * B, n)
            grads += [weight_grad(grad_gate, s_hat_prev.view(T * B, n)),
                      weight_grad(grad_gate, last.view(T * B, n)), grad_gate.sum(0)]
        WORKSPACE.give(grad_pre)
        return tuple(grads)


class RHN(nn.Module):
    """One RHN layer of recurrence depth `depth`: s_l = s_{l-1} + t_l * (h_l - s_{l-1})."""

    def __init__(self, input_size: int, width: int, depth: int, drop_i: float = 0.0,
                 drop_h: float = 0.0):
        super().__init__()
        self.input_size, self.width, self.depth = input_size, width, depth
        self.drop_i, self.drop_h = drop_i, drop_h
        self.input_weight = nn.Parameter(torch.empty(2 * width, input_size))  # [W_H; W_T]
        self.recurrent = nn.ModuleList(nn.Linear(width, 2 * width) for _ in range(depth))

    def transform_bias(self, layer: int) -> torch.Tensor:
        """The transform-gate bias b_T of highway layer `layer` (a view: writable in no_grad)."""
        return self.recurrent[layer].bias[self.width:]

    def set_transform_bias(self, value: float):
        with torch.no_grad():
            for layer in range(self.depth):
                self.transform_bias(layer).fill_(value)

    def initial_state(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        return like.new_zeros(batch, self.width)

    def project_input(self, x: torch.Tensor) -> torch.Tensor:
        """W x[t] for every t at once, with the sequence's input dropout mask."""
        mask = variational_mask(self.drop_i, (x.shape[1], self.input_size), x, self.training)
        return F.linear(apply_mask(x, mask), self.input_weight)

    def state_mask(self, batch: int, like: torch.Tensor):
        return variational_mask(self.drop_h, (batch, self.width), like, self.training)

    def step(self, projected: torch.Tensor, s: torch.Tensor, mask_h, gates=None) -> torch.Tensor:
        """One time step through all highway layers; appends each layer's t_l to `gates`."""
        for layer, recurrent in enumerate(self.recurrent):
            pre = F.linear(apply_mask(s, mask_h), recurrent.weight, recurrent.bias)
            if layer == 0:
                pre = pre + projected
            h, t = pre.chunk(2, dim=-1)
            t = torch.sigmoid(t)
            s = s + t * (torch.tanh(h) - s)
            if gates is not None:
                gates.append(t)
        return s

    def fused(self, x: torch.Tensor, s: torch.Tensor, hsg=()) -> torch.Tensor:
        """Outputs of the whole sequence through `RHNLoop`, with the dropout masks drawn
        as `project_input` and `state_mask` draw them."""
        mask_i = variational_mask(self.drop_i, (x.shape[1], self.input_size), x, self.training)
        mask_h = self.state_mask(x.shape[1], x)
        params = [lin.weight for lin in self.recurrent] + [lin.bias for lin in self.recurrent]
        return RHNLoop.apply(apply_mask(x, mask_i), s, mask_h, self.depth, bool(hsg),
                             self.input_weight, *params, *hsg)

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None, gates=None):
        batch = x.shape[1]
        s = self.initial_state(batch, x) if state is None else state
        if gates is None:
            outputs = self.fused(x, s)
            return outputs, outputs[-1]
        projected, mask_h = self.project_input(x), self.state_mask(batch, x)
        outputs = []
        for t in range(x.shape[0]):
            s = self.step(projected[t], s, mask_h, gates)
            outputs.append(s)
        return torch.stack(outputs), s


class HSG(nn.Module):
    """An RHN layer wrapped by a Highway State Gate: ŝ[t] = g ŝ[t-1] + (1 - g) s_L[t].

    g = sigm(W_R ŝ[t-1] + W_F s_L[t] + b_G); ŝ feeds the output and the next step's RHN.
    """

    def __init__(self, input_size: int, width: int, depth: int, drop_i: float = 0.0,
                 drop_h: float = 0.0):
        super().__init__()
        self.rhn = RHN(input_size, width, depth, drop_i, drop_h)
        self.width, self.depth = width, depth
        self.gate_state = nn.Linear(width, width, bias=False)  # W_R
        self.gate_new = nn.Linear(width, width)  # W_F, b_G

    def set_gate_bias(self, value: float):
        with torch.no_grad():
            self.gate_new.bias.fill_(value)

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None, gates=None,
                hsg_gates=None):
        batch = x.shape[1]
        s_hat = self.rhn.initial_state(batch, x) if state is None else state
        if gates is None and hsg_gates is None:
            gate = (self.gate_state.weight, self.gate_new.weight, self.gate_new.bias)
            outputs = self.rhn.fused(x, s_hat, gate)
            return outputs, outputs[-1]
        projected, mask_h = self.rhn.project_input(x), self.rhn.state_mask(batch, x)
        outputs = []
        for t in range(x.shape[0]):
            s_new = self.rhn.step(projected[t], s_hat, mask_h, gates)
            g = torch.sigmoid(self.gate_state(s_hat) + self.gate_new(s_new))
            s_hat = s_new + g * (s_hat - s_new)
            if hsg_gates is not None:
                hsg_gates.append(g)
            outputs.append(s_hat)
        return torch.stack(outputs), s_hat
