"""Exact parameter counts and the width that fits a parameter budget.

Counts equal `sum(p.numel() for p in build_model(...).parameters())` (tested for every arch);
the formulas follow the cells' definitions (docs/models.md).
"""

from .data.ptb import PTB_VOCAB
from .errors import UserError
from .models import ARCHS, check_arch, resolve_arch
from .tasks import get_task


def layer_params(arch: str, depth: int, width: int, input_size: int) -> int:
    """Parameters of one recurrent layer with `input_size` inputs per step: by formula for
    the built-in archs, counted for a cell of one's own."""
    if arch not in ARCHS:
        return resolve_arch(arch).count(input_size, width, depth)
    n, L, f = width, depth, input_size
    rhn = f * 2 * n + L * (2 * n * n + 2 * n)  # [W_H; W_T], L x ([R_H; R_T], [b_H; b_T])
    dtrnn = f * n + L * (n * n + n)  # W, L x (R, b)
    counts = {
        "rhn": rhn,
        "hsg": rhn + 2 * n * n + n,  # W_R, W_F, b_G
        "dtrnn": dtrnn,
        "dtsrnn": dtrnn + (f * n + n * n if L >= 2 else 0),  # V, U
        "lstm": 4 * n * (f + n) + 8 * n,
    }
    return counts[arch]


def count_params(
    task: str, arch: str, depth: int, width: int, tied: bool = False, vocab_size: int = PTB_VOCAB
) -> int:
    """Parameters of `build_model(task, arch, depth, width, tied=...)`."""
    check_arch(arch, depth, width)
    the_task = get_task(task)
    return layer_params(arch, depth, width, the_task.input_size(width)) + the_task.io_params(
        width, vocab_size, tied
    )


def solve_width(
    budget: int, task: str, arch: str, depth: int, tied: bool = False, vocab_size: int = PTB_VOCAB
) -> int:
    """The width whose parameter count is nearest to `budget`."""

    def count(n):
        return count_params(task, arch, depth, n, tied, vocab_size)

    if count(1) > budget:
        raise UserError(
            f"budget {budget:,} is too small for {task} {arch} at depth {depth}: width 1 "
            f"already has {count(1):,} parameters; raise the budget or lower the depth"
        )
    lo, hi = 1, 2
    while count(hi) <= budget:
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # count(lo) <= budget < count(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count(mid) <= budget else (lo, mid)
    return lo if budget - count(lo) <= count(hi) - budget else hi


def parse_count(text: str) -> int:
    """'32M', '1.5k', '250000' -> int."""
    scale = {"k": 1e3, "m": 1e6, "g": 1e9}
    t = str(text).strip().lower().replace("_", "").replace(",", "")
    try:
        if t and t[-1] in scale:
            return int(round(float(t[:-1]) * scale[t[-1]]))
        return int(float(t))
    except (ValueError, OverflowError):
        raise UserError(
            f"cannot read {text!r} as a parameter count: write e.g. 32M, 250k or 250000"
        ) from None


def parse_depths(text: str) -> list[int]:
    """'1-10' or '1,2,4,6' -> list of positive ints."""
    depths = []
    try:
        for part in str(text).split(","):
            a, _, b = part.strip().partition("-")
            depths.extend(range(int(a), int(b) + 1) if b else [int(a)])
    except ValueError:
        raise UserError(f"cannot read depths {text!r}: write e.g. 1-10 or 1,2,4,6") from None
    if not depths or min(depths) < 1:
        raise UserError(f"depths must be positive integers, got {text!r}")
    return depths
