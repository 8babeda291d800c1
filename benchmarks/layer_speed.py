"""Recurrent layer speed: the reference backend (the cells of rhnsearch/models/cells.py, step
by step), the fused backend and nn.LSTM at equal parameter count.

For each shape and arch, times forward + backward of the three, interleaved round by round in
one run (the machine is noisy), and reports ratios of median times; then tokens per second of
a full JSB and a full ptb-sample training epoch (after a warm-up epoch) through
rhnsearch.train.Trainer, for the RHN and an LSTM with as many parameters. Prints a table and,
last, one JSON line with "shapes", "rhn_over_lstm" (fused RHN / nn.LSTM), "naive_over_rhn"
(reference / fused), "naive_rhn_over_lstm" (reference / nn.LSTM), one ratio per shape (null
where the arch is not timed at that shape), the same for every arch, "rhn_products_over_lstm"
(the fused RHN's matrix products alone / nn.LSTM: how far any loop rewrite could go) and
"tokens_per_sec"; with --compile also "compiled_over_{arch}" (the reference backend over a
torch.compile'd cell / fused: whether a compiled loop would beat the hand-written one).
The shapes: the two reference shapes (a JSB-like and a PTB-like layer) and the papers' PTB
shapes (width 830 at depth 10, RHN paper; at depth 40, HSG paper).

    python benchmarks/layer_speed.py [--data-dir DIR] [--rounds 15] [--compile] [--device cuda]
    python benchmarks/layer_speed.py --smoke   # a dry run: one tiny shape, no epoch timings

With --device cuda everything runs on the GPU (nn.LSTM through cuDNN) and the clock waits for
the GPU's queue before each reading.

On a machine shared with other jobs, `--threads 1 --clock thread` times the main thread's CPU
time instead of the wall clock: much less sensitive to the other jobs (one thread only).
"""

import argparse
import json
import statistics
import time

import torch

from rhnsearch.budget import count_params, layer_params, solve_width
from rhnsearch.data import load_dataset
from rhnsearch.models import CELLS, Recurrent
from rhnsearch.models.fused import kernels
from rhnsearch.train import Trainer, TrialConfig

ARCHS = ["rhn", "hsg", "dtrnn", "dtsrnn"]
SHAPES = [
    dict(T=64, B=32, F=88, width=256, depth=6, archs=ARCHS, rounds=1.0),
    dict(T=35, B=20, F=256, width=512, depth=4, archs=ARCHS, rounds=1.0),
    dict(T=35, B=20, F=830, width=830, depth=10, archs=["rhn", "hsg"], rounds=0.4),
    dict(T=35, B=20, F=830, width=830, depth=40, archs=["rhn", "hsg"], rounds=0.2),
]
SMOKE = dict(T=8, B=4, F=8, width=16, depth=2, archs=ARCHS, rounds=1.0)  # --smoke's shape


def lstm_hidden(params: int, input_size: int) -> int:
    """The largest nn.LSTM hidden size with at most `params` parameters."""
    n = 1
    while layer_params("lstm", 1, n + 1, input_size) <= params:
        n += 1
    return n


def make_cell(arch: str, shape: dict, device: torch.device) -> torch.nn.Module:
    """The arch's cell, initialised as build_model does (uniform 0.04, gate biases -2 / -2.5)."""
    cell = CELLS[arch](shape["F"], shape["width"], shape["depth"]).to(device)
    with torch.no_grad():
        for p in cell.parameters():
            p.uniform_(-0.04, 0.04)
        if arch in ("rhn", "hsg"):
            for layer in range(shape["depth"]):
                cell.transform_bias(layer).fill_(-2.0)
        if arch == "hsg":
            cell.gate_new.bias.fill_(-2.5)
    return cell


def rhn_products(shape: dict, device: torch.device):
    """Forward + backward of the matrix products alone of a fused RHN layer, as its loop
    issues them (the input projection, per step one per highway layer each way, the weight
    gradients): a floor under the fused RHN's time that no loop rewrite goes below."""
    T, B, F, n, L = (shape[k] for k in ("T", "B", "F", "width", "depth"))
    weights = [torch.randn(2 * n, n, device=device) * 0.04 for _ in range(L)]
    w_in, x = torch.randn(2 * n, F, device=device) * 0.04, torch.randn(T * B, F, device=device)
    s, g = torch.randn(B, n, device=device), torch.randn(B, 2 * n, device=device)
    states = torch.randn(T * B, n, device=device)
    grads = torch.randn(T * B, 2 * n, device=device)

    def run():
        kernels.linear(x, w_in)
        forward = [kernels.Linear(w, B) for w in weights]
        backward = [kernels.Linear(w.t(), B) for w in weights]
        for _ in range(T):
            for product in forward:
                product(s, act="sigmoid")
        for _ in range(T):
            for product in backward:
                product(g)
        for _ in weights:
            kernels.weight_grad(grads, states)
        kernels.weight_grad(grads, x)

    return run


def time_layers(
    shape: dict, arch: str, rounds: int, clock, device: torch.device, compiled: bool = False
) -> dict:
    """Median seconds of forward + backward for the reference and fused backends and an
    nn.LSTM of as many parameters, interleaved (for the RHN also its products alone; with
    `compiled` also the reference backend over the torch.compile'd cell)."""
    cell = make_cell(arch, shape, device)
    hidden = lstm_hidden(layer_params(arch, shape["depth"], shape["width"], shape["F"]), shape["F"])
    layers = {
        "naive": Recurrent(cell, backend="reference"),
        "ours": Recurrent(cell, backend="fused"),
        "lstm": torch.nn.LSTM(shape["F"], hidden).to(device),
    }
    if compiled:  # compiled on the warm-up call below
        layers["compiled"] = Recurrent(torch.compile(cell, dynamic=False), backend="reference")
    x = torch.randn(shape["T"], shape["B"], shape["F"], device=device, requires_grad=True)

    def run(layer):
        out = layer(x)[0]
        out.sum().backward()

    runs = {name: (lambda layer=layer: run(layer)) for name, layer in layers.items()}
    if arch == "rhn":
        runs["products"] = rhn_products(shape, device)
    times = {name: [] for name in runs}
    for go in runs.values():  # warm-up
        go()
    for _ in range(rounds):
        for name, go in runs.items():
            start = clock()
            go()
            times[name].append(clock() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    medians["lstm_hidden"] = hidden
    return medians


def epoch_speed(data_dir: str | None, device: torch.device) -> dict:
    """Training tokens per second of one full epoch, after one warm-up epoch (JSB: one token =
    one chorale time step)."""
    runs = {
        "jsb": dict(dataset="jsb", width=256, depth=6, batch_size=32),
        "ptb-sample": dict(dataset="ptb-sample", width=512, depth=4, batch_size=20, bptt=35),
    }
    speeds = {}
    for dataset, options in runs.items():
        data = load_dataset(dataset, data_dir=data_dir)
        for arch in ("rhn", "lstm"):
            config = dict(
                options,
                arch=arch,
                device=device.type,
                epochs=1,
                lr=0.1,
                drop_i=0.25,
                drop_o=0.25,
                drop_h=0.25 if arch == "rhn" else 0.0,
            )
            if arch == "lstm":  # the same parameter count as the RHN
                task = TrialConfig(**config).task
                vocab = len(getattr(data, "vocab", ()))
                budget = count_params(
                    task, "rhn", options["depth"], options["width"], vocab_size=vocab
                )
                config.update(depth=1, width=solve_width(budget, task, "lstm", 1, vocab_size=vocab))
            trainer = Trainer(TrialConfig(**config), data)
            trainer.train_epoch()
            start = time.perf_counter()
            _, _, _, tokens = trainer.train_epoch()
            speeds[f"{dataset}_{arch}"] = tokens / (time.perf_counter() - start)
    return speeds


def gpu_clock() -> float:
    """The wall clock once the GPU's queue is empty: what was issued before it is timed."""
    torch.cuda.synchronize()
    return time.perf_counter()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", help="default: $RHNSEARCH_DATA_DIR or the user cache")
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per shape/arch")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--clock",
        choices=["wall", "thread"],
        default="wall",
        help="thread: CPU time of the main thread (needs --threads 1)",
    )
    parser.add_argument(
        "--shapes",
        default="0,1,2,3",
        help="which shapes, by index (default all: 0,1 reference, 2,3 paper)",
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--no-epochs", action="store_true", help="skip the epoch timings")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a dry run of the script: one tiny shape (T=8, B=4, F=8, n=16, L=2) in place of "
        "--shapes, and no epoch timings",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also time the reference backend over the torch.compile'd cell "
        "(compiling takes about 20 s per shape and arch)",
    )
    args = parser.parse_args(argv)
    if args.clock == "thread" and args.threads != 1:
        parser.error("--clock thread counts one thread only: use it with --threads 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")
    if args.device == "cuda" and args.clock == "thread":
        parser.error("--clock thread counts the CPU's time: use the wall clock with --device cuda")
    device = torch.device(args.device)
    if device.type == "cuda":
        clock = gpu_clock
    else:
        clock = time.thread_time if args.clock == "thread" else time.perf_counter
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    where = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    print(
        f"torch {torch.__version__} on {where}, {args.threads} threads, {args.clock} clock, "
        f"oneDNN products: {kernels.onednn() and device.type == 'cpu'}"
    )
    print(
        f"{'shape (T,B,F,n,L)':<22}{'arch':<8}{'lstm n':>7}{'naive ms':>10}{'ours ms':>9}"
        f"{'lstm ms':>9}{'ours/lstm':>11}{'naive/ours':>12}{'products/lstm':>16}"
        + (f"{'compiled/ours':>15}" if args.compile else "")
    )
    shapes = [SMOKE] if args.smoke else [SHAPES[int(i)] for i in args.shapes.split(",")]
    result = {
        "shapes": [{k: s[k] for k in ("T", "B", "F", "width", "depth")} for s in shapes],
        "device": where,
        "threads": args.threads,
        "clock": args.clock,
    }
    for shape in shapes:
        label = "{T},{B},{F},{width},{depth}".format(**shape)
        for arch in ARCHS:
            if arch not in shape["archs"]:
                for key in (
                    f"{arch}_over_lstm",
                    f"naive_over_{arch}",
                    f"naive_{arch}_over_lstm",
                    *([f"compiled_over_{arch}"] if args.compile else []),
                ):
                    result.setdefault(key, []).append(None)
                continue
            rounds = max(3, round(args.rounds * shape["rounds"]))
            m = time_layers(shape, arch, rounds, clock, device, args.compile)
            over_lstm, naive_over = m["ours"] / m["lstm"], m["naive"] / m["ours"]
            result.setdefault(f"{arch}_over_lstm", []).append(round(over_lstm, 3))
            result.setdefault(f"naive_over_{arch}", []).append(round(naive_over, 3))
            result.setdefault(f"naive_{arch}_over_lstm", []).append(
                round(m["naive"] / m["lstm"], 3)
            )
            products = m.get("products")  # timed for the RHN only
            if products:
                result.setdefault("rhn_products_over_lstm", []).append(
                    round(products / m["lstm"], 3)
                )
            row = (
                f"{label:<22}{arch:<8}{m['lstm_hidden']:>7}{m['naive'] * 1e3:>10.1f}"
                f"{m['ours'] * 1e3:>9.1f}{m['lstm'] * 1e3:>9.1f}{over_lstm:>11.2f}"
                f"{naive_over:>12.2f}"
                + (f"{products / m['lstm']:>16.2f}" if products else f"{'':>16}")
            )
            if args.compile:
                compiled_over = m["compiled"] / m["ours"]
                result.setdefault(f"compiled_over_{arch}", []).append(round(compiled_over, 3))
                row += f"{compiled_over:>15.2f}"
            print(row, flush=True)
    if not (args.no_epochs or args.smoke):
        speeds = epoch_speed(args.data_dir, device)
        for name, speed in speeds.items():
            print(f"training epoch {name}: {speed:,.0f} tokens/s")
        result["tokens_per_sec"] = {k: round(v, 1) for k, v in speeds.items()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
