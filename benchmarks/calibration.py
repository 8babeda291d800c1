"""How often a gap interval is wrong on the study's own cells (a plasmode): pairs of cells
drawn from the committed runs' real cells, one moved so that the two cells' expected best of
k differ by a known amount, then compared as the report compares them.

Each row takes two real cells of a committed example (the finding's comparisons: each
architecture's depth 6 against its depth 1 and DT-RNN's and DT(S)-RNN's depth 6 against RHN's
in jsb_paper; each depth against depth 1 and the LSTM against RHN in ptb_cpu_search), treats
each cell's finished settings as its population, moves the first so that both populations'
expected best of k are equal (k as the report chooses it for those sizes), and draws n
settings from each (with replacement), PAIRS times:

- false positives: the share of pairs whose interval excludes 0 (at most 6% asked; 5% is
  nominal);
- coverage: the share whose interval holds the true gap. Both methods are shift-equivariant
  (a cell moved by d moves its interval by d), so a true gap of d is covered exactly when the
  pair drawn at no gap covers 0: coverage is 1 - false positives at every gap (93% asked);
- power at 0.1 and 0.3 nats: the first cell moved that much worse, the share of pairs whose
  interval lies above 0.

"today" is the rule before this benchmark (a permutation test of one distribution inverted,
k the fewer of K and n), "bca" the report's (`rhnsearch.results.uncertainty.gap`). Below
MIN_SETTINGS a cell the report gives no interval ("too few settings to resolve").

    python benchmarks/calibration.py [--pairs 1000] [--today-pairs 400] [--out FILE.json]
    python benchmarks/calibration.py --table FILE.json   # the Markdown table of a run

The committed run is docs/calibration.json; docs/studies.md's table is made from it.
"""

import argparse
import json
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np
import pandas as pd

from rhnsearch.results import uncertainty
from rhnsearch.results.expected_best import BEST_OF, expected_best, weights
from rhnsearch.results.studies import JSB_BEST_OF
from rhnsearch.results.tables import finished
from rhnsearch.tracking.store import search_trials

ROOT = Path(__file__).parents[1]
EXAMPLES = ROOT / "results" / "examples"
COMMITTED = ROOT / "docs" / "calibration.json"
SIZES = ((10, 10), (20, 20), (40, 40), (27, 40))  # n of the first cell, of the second
GAPS = (0.1, 0.3)
COMPARISONS = {  # example: (its K, [(first cell, second cell)])
    "jsb_paper": (
        JSB_BEST_OF,
        [
            (("rhn", 6), ("rhn", 1)),
            (("dtrnn", 6), ("dtrnn", 1)),
            (("dtsrnn", 6), ("dtsrnn", 1)),
            (("dtrnn", 6), ("rhn", 6)),
            (("dtsrnn", 6), ("rhn", 6)),
        ],
    ),
    "ptb_cpu_search": (
        BEST_OF,
        [(("rhn", d), ("rhn", 1)) for d in (2, 4, 6, 8)] + [(("lstm", 1), ("rhn", 6))],
    ),
}
PERMUTATIONS = 2000  # today's rule


def cells(example: str) -> dict[tuple[str, int], np.ndarray]:
    """The finished settings' best_valid_loss of each (arch, depth) of EXAMPLE's search."""
    trials = search_trials(pd.read_parquet(EXAMPLES / example / "trials.parquet"))
    ok = trials[finished(trials, "best_valid_loss")]
    grouped = ok.groupby(["params.arch", "params.depth"])["metrics.best_valid_loss"]
    return {(arch, int(depth)): v.to_numpy() for (arch, depth), v in grouped}


def today_p(a, b, k: int, rng) -> tuple[float, float]:
    """Today's rule at shift 0: the permutation test's p-value and the gap's value."""
    wa, wb = weights(len(a), [k])[0], weights(len(b), [k])[0]
    value = float(np.sort(a) @ wa - np.sort(b) @ wb)
    drawn = np.concatenate([a, b])[rng.random((PERMUTATIONS, len(a) + len(b))).argsort(axis=1)]
    gaps = np.sort(drawn[:, : len(a)], axis=1) @ wa - np.sort(drawn[:, len(a) :], axis=1) @ wb
    spread = float(np.ptp(np.concatenate([a, b]))) or 1.0
    extreme = np.count_nonzero(np.abs(gaps) >= abs(value) - 1e-12 * spread)
    return (1 + extreme) / (PERMUTATIONS + 1), value


def row(task) -> dict:
    """One row: the shares of TASK's pairs (see the module's docstring)."""
    example, best_of, first, second, (na, nb), pairs, today_pairs = task
    pools = cells(example)
    a_pool, b_pool = pools[first], pools[second]
    start = time.perf_counter()
    k = uncertainty.comparable_k(best_of, na, nb)
    moved = a_pool + expected_best(b_pool, [k])[0][0] - expected_best(a_pool, [k])[0][0]
    rng = np.random.default_rng(0)
    declared, above = 0, np.zeros(len(GAPS))
    resolved = min(na, nb) >= uncertainty.MIN_SETTINGS
    for _ in range(pairs if resolved else 0):
        low, high = uncertainty.gap(rng.choice(moved, na), rng.choice(b_pool, nb), best_of).bounds
        declared += low > 0 or high < 0
        above += [low + gap > 0 for gap in GAPS]
    k_today = min(best_of, na, nb)
    to, of = expected_best(b_pool, [k_today])[0][0], expected_best(a_pool, [k_today])[0][0]
    moved = a_pool + to - of
    rng = np.random.default_rng(0)
    today_declared, today_above = 0, np.zeros(len(GAPS))
    for _ in range(today_pairs):
        a, b = rng.choice(moved, na), rng.choice(b_pool, nb)
        today_declared += today_p(a, b, k_today, rng)[0] < 0.05
        for i, gap in enumerate(GAPS):
            p, value = today_p(a + gap, b, k_today, rng)
            today_above[i] += p < 0.05 and value > 0
    return {
        "example": example,
        "first": f"{first[0]} {first[1]}",
        "second": f"{second[0]} {second[1]}",
        "n": [na, nb],
        "k": k,
        "resolved": resolved,
        "pairs": pairs if resolved else 0,
        "false_positives": declared / pairs if resolved else None,
        "power": dict(zip(map(str, GAPS), (above / pairs).tolist())) if resolved else None,
        "today": {
            "k": k_today,
            "pairs": today_pairs,
            "false_positives": today_declared / today_pairs,
            "power": dict(zip(map(str, GAPS), (today_above / today_pairs).tolist())),
        },
        "seconds": round(time.perf_counter() - start, 1),
    }


BOUNDS = {"false_positives": 0.06, "coverage": 0.93}  # what every row must meet


def meets(entry: dict) -> bool:
    """A row meets the bounds: no interval (too few settings) or FP and coverage within."""
    fp = entry["false_positives"]
    return fp is None or (fp <= BOUNDS["false_positives"] and 1 - fp >= BOUNDS["coverage"])


def table(rows: list[dict]) -> str:
    """The Markdown table of a run's ROWS (docs/studies.md holds it as made here)."""

    def share(x):
        return "–" if x is None else f"{x:.1%}"

    lines = [
        "| example | cells | n | k | false positives | coverage | power 0.1 / 0.3 | "
        "today: k, false positives | today: power 0.1 / 0.3 |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        today = r["today"]
        fp = r["false_positives"]
        ours = (
            f"{share(fp)} | {share(1 - fp)} | "
            + " / ".join(share(r["power"][str(g)]) for g in GAPS)
            if r["resolved"]
            else "too few settings | – | –"
        )
        lines.append(
            f"| {r['example']} | {r['first']} vs {r['second']} | {r['n'][0]} vs {r['n'][1]} | "
            f"{r['k']} | {ours} | {today['k']}, {share(today['false_positives'])} | "
            + " / ".join(share(today["power"][str(g)]) for g in GAPS)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--today-pairs", type=int, default=400)
    parser.add_argument("--sizes", nargs="+", default=[f"{a}x{b}" for a, b in SIZES])
    parser.add_argument("--examples", nargs="+", default=list(COMPARISONS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    parser.add_argument("--table", type=Path, help="print the table of a run's JSON and exit")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())["rows"]), end="")
        return
    sizes = [tuple(map(int, s.split("x"))) for s in args.sizes]
    tasks = [
        (example, COMPARISONS[example][0], first, second, size, args.pairs, args.today_pairs)
        for example in args.examples
        for size in sizes
        for first, second in COMPARISONS[example][1]
    ]
    start = time.perf_counter()
    with Pool(args.workers) as pool:
        rows = []
        for done in pool.imap(row, tasks):
            rows.append(done)
            print(table([done]).splitlines()[-1], flush=True)
    print(
        f"{len(rows)} rows in {time.perf_counter() - start:.0f} s; every row meets the bounds:",
        all(map(meets, rows)),
    )
    if args.out:
        settings = {
            "pairs": args.pairs,
            "today_pairs": args.today_pairs,
            "bootstrap_level": uncertainty.BOOTSTRAP_LEVEL,
            "settings_per_k": uncertainty.SETTINGS_PER_K,
            "min_settings": uncertainty.MIN_SETTINGS,
            "resamples": uncertainty.RESAMPLES,
        }
        args.out.write_text(json.dumps({"settings": settings, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
