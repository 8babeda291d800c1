"""On a CUDA device: the fused loops equal the reference cells there and give the CPU's numbers,
whole models (cuDNN's LSTM too) agree with the CPU, and a JSB trial trains there, is
reproducible from its seed, resumes exactly and leaves a checkpoint a machine without a GPU
loads. Skipped where torch sees no CUDA device (as in CI); run them on a GPU machine with
`python -m pytest tests/test_cuda.py tests/test_train.py tests/test_backends.py` (test_train's
trials pick CUDA there by themselves: their device is `auto`)."""

import copy
import math

import pytest
import torch
from test_backends import assert_all_close, layers, run
from test_train import losses, small

from rhnsearch.models import CELLS, build_model
from rhnsearch.train import Trainer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
CUDA = torch.device("cuda")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("drop", [0.0, 0.4])
@pytest.mark.parametrize("depth", [1, 4])
@pytest.mark.parametrize("arch", list(CELLS))
def test_fused_equals_reference_on_cuda(arch, depth, drop, dtype):
    """Outputs, state, gates and every gradient, with the dropout masks drawn on the GPU."""
    reference, fused = (layer.to(CUDA) for layer in layers(arch, depth, drop, dtype))
    x = torch.randn(9, 5, 7, dtype=dtype, device=CUDA)
    s0 = torch.randn(5, 6, dtype=dtype, device=CUDA)
    want = run(reference, x, s0)
    assert all(t.device.type == "cuda" for t in want)
    assert_all_close(run(fused, x, s0), want, dtype)


@pytest.mark.parametrize("arch", list(CELLS))
def test_the_fused_loop_gives_the_cpus_numbers(arch):
    _, on_cpu = layers(arch, 3, 0.0, torch.float64)
    on_gpu = copy.deepcopy(on_cpu).to(CUDA)
    x, s0 = torch.randn(9, 5, 7, dtype=torch.float64), torch.randn(5, 6, dtype=torch.float64)
    got = run(on_gpu, x.to(CUDA), s0.to(CUDA))
    assert_all_close([t.cpu() for t in got], run(on_cpu, x, s0), torch.float64)


@pytest.mark.parametrize("arch", ["rhn", "hsg", "dtrnn", "dtsrnn", "lstm"])
@pytest.mark.parametrize("task", ["jsb", "ptb"])
def test_whole_models_give_the_cpus_loss_and_gradients(task, arch):
    """Embedding, cell (the LSTM through cuDNN), head and loss, with the state carried from
    one window into the next, in float64 without dropout (masks differ between devices)."""
    vocab = 23
    torch.manual_seed(0)
    on_cpu = build_model(task, arch, 1 if arch == "lstm" else 3, 8, vocab_size=vocab).double()
    on_gpu = copy.deepcopy(on_cpu).to(CUDA)
    gen = torch.Generator().manual_seed(1)
    if task == "jsb":
        x = (torch.rand(12, 4, 88, generator=gen) < 0.1).double()
        y = (torch.rand(12, 4, 88, generator=gen) < 0.1).double()
    else:
        x, y = (torch.randint(0, vocab, (12, 4), generator=gen) for _ in range(2))
    totals, grads = [], []
    for model, device in ((on_cpu, "cpu"), (on_gpu, CUDA)):
        state, total = None, 0.0
        for half in (slice(0, 6), slice(6, 12)):
            logits, state = model(x[half].to(device), state)
            total = total + model.loss_sum(logits, y[half].to(device))[0]
        total.backward()
        totals.append(total.detach().cpu())
        grads.append([p.grad.cpu() for p in model.parameters()])
    torch.testing.assert_close(totals[1], totals[0], rtol=1e-10, atol=1e-12)
    assert_all_close(grads[1], grads[0], torch.float64)


def test_a_jsb_trial_trains_on_cuda_reproducibly_and_resumes_exactly(jsb, tmp_path):
    cfg = small(epochs=3, drop_i=0.3, drop_h=0.2, drop_o=0.2, device="cuda")
    full = Trainer(cfg, jsb)
    assert all(p.device.type == "cuda" for p in full.model.parameters())
    result = full.fit()
    assert result["status"] == "completed" and math.isfinite(result["test_loss"])
    valid = [m["valid_loss"] for m in full.history]
    assert valid[-1] < valid[0] < 88 * math.log(2)
    again = Trainer(cfg, jsb)
    again.fit()
    assert losses(again.history) == losses(full.history)
    first = Trainer(cfg, jsb)
    first.run_epoch()
    first.save(tmp_path)
    resumed = Trainer(cfg, jsb).load(tmp_path)
    assert resumed.fit()["test_loss"] == result["test_loss"]
    assert losses(resumed.history) == losses(full.history)


def test_a_checkpoint_saved_on_cuda_loads_and_trains_on_cpu(jsb, tmp_path):
    on_gpu = Trainer(small(device="cuda", drop_i=0.2), jsb)
    on_gpu.run_epoch()
    on_gpu.save(tmp_path)
    on_cpu = Trainer(small(device="cpu", drop_i=0.2), jsb).load(tmp_path)
    assert all(p.device.type == "cpu" for p in on_cpu.model.parameters())
    assert all(t.device.type == "cpu" for t in on_cpu.best_state.values())
    assert on_cpu.evaluate("valid") == pytest.approx(on_gpu.evaluate("valid"), rel=1e-5)
    result = on_cpu.fit()
    assert result["status"] == "completed" and result["epochs"] == 2
    assert math.isfinite(result["test_loss"])
