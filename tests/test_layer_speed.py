"""The fused RHN / HSG / DT-RNN / DT(S)-RNN loops equal the naive reference cells
(benchmarks/naive_cells.py) and the step-by-step autograd path: outputs, final state and
gradients w.r.t. input, state and every parameter, with and without dropout masks, through
the oneDNN products and the plain torch.addmm fallback. Timing lives in
benchmarks/layer_speed.py, not here."""
import importlib.util
from pathlib import Path

import pytest
import torch

from rhnsearch.models import HSG, LAYERS, RHN, kernels

ARCHS = ["rhn", "hsg", "dtrnn", "dtsrnn"]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
_spec = importlib.util.spec_from_file_location(
    "naive_cells", Path(__file__).resolve().parents[1] / "benchmarks" / "naive_cells.py")
naive_cells = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naive_cells)


def make_layer(arch, depth, drop, device="cpu", input_size=7, width=6):
    torch.manual_seed(0)
    layer = LAYERS[arch](input_size, width, depth, drop_i=drop, drop_h=drop)
    with torch.no_grad():
        for p in layer.parameters():
            p.uniform_(-0.5, 0.5)
    return layer.to(device)


def run(layer, x, s0, seed=3, **kwargs):
    """Outputs, final state and all gradients of a fixed nonlinear loss."""
    x, s0 = x.clone().requires_grad_(), s0.clone().requires_grad_()
    torch.manual_seed(seed)  # the dropout masks
    out, state = layer(x, s0, **kwargs)
    (out.sin().sum() + (state * state).sum()).backward()
    return [out, state, x.grad, s0.grad] + [p.grad for p in layer.parameters()]


def assert_all_close(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.fixture(params=[True, False], ids=["onednn", "addmm"])
def backend(request, monkeypatch):
    if request.param and not kernels.ONEDNN:
        pytest.skip("this torch build has no oneDNN")
    monkeypatch.setattr(kernels, "ONEDNN", request.param)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("drop", [0.0, 0.4])
@pytest.mark.parametrize("depth", [1, 2, 4])
@pytest.mark.parametrize("arch", ARCHS)
def test_fused_loop_equals_naive_cell(arch, depth, drop, device, backend):
    layer = make_layer(arch, depth, drop, device).train()
    naive = naive_cells.naive_like(layer)
    x, s0 = torch.randn(9, 5, 7, device=device), torch.randn(5, 6, device=device)
    assert_all_close(run(layer, x, s0), run(naive, x, s0))


@pytest.mark.parametrize("drop", [0.0, 0.4])
@pytest.mark.parametrize("arch", ["rhn", "hsg"])
def test_fused_loop_equals_step_loop(arch, drop, backend):
    """Asking for the gate tensors takes the autograd step loop: same numbers."""
    layer = make_layer(arch, 3, drop).train()
    x, s0 = torch.randn(6, 4, 7), torch.randn(4, 6)
    gates = {"gates": []} if arch == "rhn" else {"gates": [], "hsg_gates": []}
    slow = run(layer, x, s0, **gates)
    assert len(gates["gates"]) == 6 * 3
    assert_all_close(run(layer, x, s0), slow)


@pytest.mark.parametrize("arch", ARCHS)
def test_fused_loop_batch_one_long_sequence_and_no_grad(arch, backend):
    layer = make_layer(arch, 3, 0.0, input_size=3, width=17).eval()
    x, s0 = torch.randn(60, 1, 3), torch.randn(1, 17)
    want = naive_cells.naive_like(layer)(x, s0)
    with torch.no_grad():
        got = layer(x, s0)
    assert_all_close(got, want)


def test_fused_loop_keeps_dropout_draws(backend):
    """The fused path draws the same masks, in the same order, as the step loop."""
    layer = make_layer("hsg", 2, 0.5).train()
    x = torch.randn(4, 3, 7)
    torch.manual_seed(11)
    fused = layer(x)[0]
    after_fused = torch.rand(1)
    torch.manual_seed(11)
    slow = layer(x, gates=[])[0]
    torch.testing.assert_close(fused, slow, rtol=1e-5, atol=1e-6)
    assert torch.equal(torch.rand(1), after_fused)


def test_parameters_and_state_dict_unchanged():
    rhn, hsg = make_layer("rhn", 3, 0.0), make_layer("hsg", 3, 0.0)
    assert isinstance(rhn, RHN) and isinstance(hsg, HSG)
    assert list(rhn.state_dict()) == ["input_weight"] + [
        f"recurrent.{i}.{k}" for i in range(3) for k in ("weight", "bias")]
    assert list(hsg.state_dict())[-3:] == ["gate_state.weight", "gate_new.weight",
                                           "gate_new.bias"]


@pytest.mark.parametrize("arch", ARCHS)
def test_buffers_are_reused_only_once_their_graph_is_gone(arch):
    """Two graphs alive at once, and a graph re-run with retain_graph after other forward
    and backward passes, all get their own buffers and the right gradients."""
    layer = make_layer(arch, 2, 0.0)
    weight = next(layer.parameters())
    x1, x2 = torch.randn(5, 3, 7), torch.randn(5, 3, 7)
    want = [torch.autograd.grad(layer(x)[0].sum(), weight)[0] for x in (x1, x2)]
    outs = [layer(x)[0].sum() for x in (x1, x2)]
    for _ in range(2):
        for out, expected in zip(outs[::-1], want[::-1]):
            got = torch.autograd.grad(out, weight, retain_graph=True)[0]
            torch.testing.assert_close(got, expected)
            layer(x2)[0].sum().backward()
    returned = len(kernels.WORKSPACE.returned)
    del outs, out  # the two graphs go, and their buffers back to the pool
    assert len(kernels.WORKSPACE.returned) >= returned + 4
