"""How much of a recurrent layer's GPU time is kernel launches: forward + backward of the fused
backend and of nn.LSTM (cuDNN), each run eagerly and replayed as a CUDA graph
(`torch.cuda.make_graphed_callables`, public API), interleaved round by round in one run.

A graph replays the same kernels without Python or launch overhead, so eager / graphed is what
capturing the time loop (fixed-length windows) could gain. Checks first that the graphed layer
gives the eager layer's outputs and gradients. Needs a CUDA device.

    python benchmarks/cuda_graphs.py [--rounds 20] [--shapes 0,1,2]
"""

import argparse
import copy
import json
import statistics

import torch
from layer_speed import SHAPES, gpu_clock, lstm_hidden, make_cell

from rhnsearch.budget import layer_params
from rhnsearch.models import Recurrent


def forward_backward(layer, x):
    out = layer(x)[0]
    out.sum().backward()
    return out


def timed(go) -> float:
    """Milliseconds of `go()`, the GPU's queue emptied around it (layer_speed's clock)."""
    start = gpu_clock()
    go()
    return 1e3 * (gpu_clock() - start)


def compare(shape: dict, arch: str, rounds: int) -> dict:
    device = torch.device("cuda")
    x = torch.randn(shape["T"], shape["B"], shape["F"], device=device, requires_grad=True)
    params = layer_params(arch, shape["depth"], shape["width"], shape["F"])
    layers = {
        "ours": Recurrent(make_cell(arch, shape, device), backend="fused"),
        "lstm": torch.nn.LSTM(shape["F"], lstm_hidden(params, shape["F"])).to(device),
    }
    result = {}
    for name, layer in layers.items():
        want = forward_backward(layer, x).detach()
        grads = [p.grad.clone() for p in layer.parameters()]
        layer.zero_grad()
        x.grad = None
        try:  # a copy: make_graphed_callables replaces a module's forward in place
            graphed = torch.cuda.make_graphed_callables(copy.deepcopy(layer), (x,))
            got = forward_backward(graphed, x).detach()
        except RuntimeError as exc:  # a layer whose kernels cannot be captured: say why
            print(f"{arch} {name}: not captured ({str(exc).splitlines()[0][:160]})")
            eager = [timed(lambda layer=layer: forward_backward(layer, x)) for _ in range(rounds)]
            result[name] = (statistics.median(eager), None)
            continue
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        for p, g in zip(graphed.parameters(), grads):
            torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-4)
        eager, replay = [], []
        for _ in range(rounds):  # interleaved
            eager.append(timed(lambda layer=layer: forward_backward(layer, x)))
            replay.append(timed(lambda graphed=graphed: forward_backward(graphed, x)))
        result[name] = (statistics.median(eager), statistics.median(replay))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--shapes", default="0,1,2", help="layer_speed.py's shapes, by index")
    args = parser.parse_args()
    if not torch.cuda.is_available():  # one line, no usage: the command line was right
        raise SystemExit("cuda_graphs.py needs a CUDA device: torch sees none here")
    torch.manual_seed(0)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(
        f"{'shape (T,B,F,n,L)':<22}{'arch':<8}{'ours ms':>9}{'graphed':>9}{'gain':>7}"
        f"{'lstm ms':>9}{'graphed':>9}{'gain':>7}{'graphed ours/lstm':>19}"
    )
    rows = []
    for i in args.shapes.split(","):
        shape = SHAPES[int(i)]
        label = "{T},{B},{F},{width},{depth}".format(**shape)
        for arch in shape["archs"]:
            m = compare(shape, arch, args.rounds)
            (ours, ours_g), (lstm, lstm_g) = m["ours"], m["lstm"]
            row = dict(shape=label, arch=arch, ours=ours, ours_graphed=ours_g, lstm=lstm)
            rows.append({**row, "lstm_graphed": lstm_g})
            ours_g, lstm_g = ours_g or float("nan"), lstm_g or float("nan")
            print(
                f"{label:<22}{arch:<8}{ours:>9.2f}{ours_g:>9.2f}{ours / ours_g:>7.2f}"
                f"{lstm:>9.2f}{lstm_g:>9.2f}{lstm / lstm_g:>7.2f}{ours_g / lstm_g:>19.2f}",
                flush=True,
            )
    print(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}))


if __name__ == "__main__":
    main()
