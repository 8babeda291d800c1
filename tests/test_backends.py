"""The fused backend equals the reference one (the cells of cells.py run step by step) for every
arch, task and dropout setting: outputs, final state, gates and the gradients w.r.t. input,
state and every parameter, in float64 to 1e-10 and in float32 to rtol 1e-4 / atol 1e-5 (the
fused loop computes tanh as 2 σ(2a) - 1 and uses oneDNN's products), through oneDNN's products
and through the public torch ops it falls back to. Timing lives in benchmarks/layer_speed.py.
"""

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rhnsearch.compat import torch as torch_compat
from rhnsearch.models import CELLS, Recurrent, build_model
from rhnsearch.models.fused import kernels

DATA = Path(__file__).parent / "data"
TOLERANCE = {torch.float64: dict(rtol=1e-10, atol=1e-12), torch.float32: dict(rtol=1e-4, atol=1e-5)}


@pytest.fixture(params=[True, False], ids=["onednn", "public-ops"])
def products(request, monkeypatch):
    if request.param and not kernels.onednn():
        pytest.skip("oneDNN's products do not work on this torch build")
    monkeypatch.setattr(kernels, "onednn", lambda: request.param)


def layers(arch, depth, drop, dtype=torch.float32, input_size=7, width=6):
    """The same cell (same weights) on the reference and on the fused backend."""
    torch.manual_seed(0)
    cell = CELLS[arch](input_size, width, depth).to(dtype)
    with torch.no_grad():
        for p in cell.parameters():
            p.uniform_(-0.5, 0.5)
    return [Recurrent(cell, drop, drop, backend).train() for backend in ("reference", "fused")]


def run(layer, x, s0, seed=3):
    """Outputs, final state, gates and every gradient of a fixed nonlinear loss."""
    x, s0 = x.clone().requires_grad_(), s0.clone().requires_grad_()
    layer.zero_grad()
    torch.manual_seed(seed)  # the dropout masks
    out, state, gates = layer(x, s0, return_gates=True)
    (out.sin().sum() + (state * state).sum()).backward()
    return [out, state, *gates.values(), x.grad, s0.grad] + [
        p.grad.clone() for p in layer.parameters()
    ]


def assert_all_close(got, want, dtype):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("drop", [0.0, 0.4])
@pytest.mark.parametrize("depth", [1, 2, 4])
@pytest.mark.parametrize("arch", list(CELLS))
def test_fused_equals_reference(arch, depth, drop, dtype, products):
    reference, fused = layers(arch, depth, drop, dtype)
    x = torch.randn(9, 5, 7, dtype=dtype)
    s0 = torch.randn(5, 6, dtype=dtype)
    want = run(reference, x, s0)
    gates = {"rhn": 1, "hsg": 2}.get(arch, 0)  # transform gates, and the HSG gate
    assert len(want) == 4 + gates + len(list(reference.parameters()))
    assert_all_close(run(fused, x, s0), want, dtype)


@pytest.mark.parametrize("arch", ["rhn", "hsg", "dtrnn", "dtsrnn", "lstm"])
@pytest.mark.parametrize("task", ["jsb", "ptb"])
def test_whole_models_agree_on_both_backends(task, arch):
    """Through embedding, word dropout, output dropout, head and loss, with the state carried
    from one window into the next (words)."""
    depth, vocab = (1 if arch == "lstm" else 3), 23
    grads, losses = [], []
    for backend in ("reference", "fused"):
        torch.manual_seed(0)
        model = (
            build_model(
                task,
                arch,
                depth,
                8,
                vocab_size=vocab,
                init_scale=0.3,
                drop_x=0.2,
                drop_i=0.3,
                drop_h=0.0 if arch == "lstm" else 0.3,
                drop_o=0.3,
                backend=backend,
            )
            .double()
            .train()
        )
        gen = torch.Generator().manual_seed(1)
        if task == "jsb":
            windows = [
                (
                    (torch.rand(6, 4, 88, generator=gen) < 0.1).double(),
                    (torch.rand(6, 4, 88, generator=gen) < 0.1).double(),
                )
            ] * 2
        else:
            ids = torch.randint(0, vocab, (13, 4), generator=gen)
            windows = [(ids[:6], ids[1:7]), (ids[6:12], ids[7:13])]
        state, total = None, 0.0
        torch.manual_seed(5)
        for x, y in windows:
            logits, state = model(x, state)
            total = total + model.loss_sum(logits, y)[0]
        total.backward()
        losses.append(total.detach())
        grads.append([p.grad for p in model.parameters()])
    torch.testing.assert_close(losses[1], losses[0], **TOLERANCE[torch.float64])
    assert_all_close(grads[1], grads[0], torch.float64)


@pytest.mark.parametrize("arch", list(CELLS))
def test_batch_of_one_long_sequence_without_grad(arch, products):
    reference, fused = layers(arch, 3, 0.0, input_size=3, width=17)
    x, s0 = torch.randn(60, 1, 3), torch.randn(1, 17)
    with torch.no_grad():
        want, got = reference.eval()(x, s0), fused.eval()(x, s0)
    assert_all_close(got, want, torch.float32)


def test_hsg_with_closed_gate_equals_its_rhn():
    """ŝ = g ŝ[t-1] + (1 - g) s_L: with g = 0 the HSG cell is its RHN cell, on both backends."""
    reference, fused = layers("hsg", 3, 0.0)
    with torch.no_grad():
        reference.cell.gate_new.bias.fill_(-1e4)
    x, s0 = torch.randn(6, 2, 7), torch.randn(2, 6)
    for layer in (reference, fused):
        rhn = Recurrent(CELLS["rhn"](7, 6, 3), backend=layer.backend)
        rhn.load_state_dict(layer.state_dict(), strict=False)
        want = rhn(x, s0)
        assert all(torch.equal(a, b) for a, b in zip(layer(x, s0), want))
    with torch.no_grad():
        reference.cell.gate_new.bias.fill_(0.0)  # an open gate differs
    assert not torch.allclose(fused(x, s0)[0], want[0])


@pytest.mark.parametrize("arch", list(CELLS))
def test_buffers_are_reused_only_once_their_graph_is_gone(arch):
    """Two graphs alive at once, and a graph re-run with retain_graph after other forward
    and backward passes, all get their own buffers and the right gradients."""
    if not kernels.reuse():
        pytest.skip("this torch is not one the reuse of buffers was tested on")
    _, layer = layers(arch, 2, 0.0)
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
    assert len(kernels.WORKSPACE.returned) >= returned + 2


class BrokenOps:
    """A namespace whose oneDNN ops fail as a changed private API would."""

    def _reorder_linear_weight(self, weight, batch):
        raise RuntimeError("unknown op")


class WrongOps:
    """A namespace whose ops run but compute something else."""

    class _linear_pointwise:  # noqa: N801 - the real op's name
        @staticmethod
        def default(x, weight, bias, act, *args):
            return torch.zeros(x.shape[0], weight.shape[0])

        binary = staticmethod(lambda x, other, weight, bias, op: other)

    def _reorder_linear_weight(self, weight, batch):
        return weight


def test_probe_accepts_working_ops_and_refuses_broken_ones():
    assert torch_compat.probe() == torch.backends.mkldnn.is_available()
    assert not torch_compat.probe(BrokenOps())
    assert not torch_compat.probe(WrongOps())


def test_a_torch_outside_the_tested_range_gets_the_public_ops(monkeypatch, caplog):
    """On a torch that the private ops were not tested on, they are not used: one warning
    line says so, naming the installed version and the tested range."""
    monkeypatch.setattr(torch_compat, "SUPPORTED", "<1")
    assert not torch_compat.onednn_works() and not torch_compat.views_known()
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(lines) == 2 and all("\n" not in line for line in lines)
    installed = importlib.metadata.version("torch")  # without a build's local tag (+cu130)
    assert f"torch {installed} is installed" in lines[0] and "torch<1" in lines[0]
    assert "public torch ops" in lines[0]


def test_fallback_when_onednn_is_off(tmp_path):
    """RHNSEARCH_ONEDNN=0 (or a failed probe) leaves only public torch ops, which agree."""
    script = (
        "from rhnsearch.models.fused import kernels; import torch;"
        "from rhnsearch.models import build_model;"
        "m = build_model('jsb', 'rhn', 2, 64, backend='fused');"
        "r = build_model('jsb', 'rhn', 2, 64, backend='reference');"
        "r.load_state_dict(m.state_dict()); x = torch.rand(5, 40, 88);"
        "torch.testing.assert_close(m(x)[0], r(x)[0], rtol=1e-4, atol=1e-5);"
        "print(kernels.onednn())"
    )
    env = {**os.environ, "RHNSEARCH_ONEDNN": "0"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


def test_checkpoints_from_before_the_cells_still_load():
    """Weights saved by rhnsearch 0.1 (layers without cells; HSG wrapping an RHN module)
    load into today's models and give the logits they gave then."""
    saved = torch.load(DATA / "models_v0.1.pt", weights_only=True)
    assert len(saved) == 10  # every arch, both tasks
    for name, entry in saved.items():
        config = {**entry["config"], "vocab_size": entry["config"]["vocab_size"] or 0}
        for backend in ("reference", "fused"):
            model = build_model(**config, backend=backend).eval()
            model.load_state_dict(entry["weights"])
            with torch.no_grad():
                logits = model(entry["inputs"])[0]
            torch.testing.assert_close(
                logits, entry["logits"], rtol=1e-5, atol=1e-6, msg=f"{name} on {backend}"
            )
