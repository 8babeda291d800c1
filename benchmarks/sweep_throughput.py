"""Smoke JSB sweep throughput with 1 and 2 concurrent trials on this machine.

Runs the real `rhnsearch sweep run spaces/jsb_optimization.yaml --preset smoke` twice (in
temp dirs, fresh local Ray each), with max_concurrent 1 and 2, and prints trials per minute
and the sweep's overhead: wall time of the trials phase against the sum of the trials'
training time (epoch_seconds summed from MLflow), divided by the concurrency. Last line: JSON.

    python benchmarks/sweep_throughput.py [--data-dir DIR] [--set samples=1 ...]

--set overrides the preset as `sweep run --set` does (a smaller sweep for a dry run).
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(concurrency: int, data_dir: str, sets: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as cwd:
        start = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "rhnsearch.cli",
                "sweep",
                "run",
                str(ROOT / "spaces/jsb_optimization.yaml"),
                "--preset",
                "smoke",
                *(["--data-dir", data_dir] if data_dir else []),
                *(option for item in sets for option in ("--set", item)),
                "--set",
                f"max_concurrent={concurrency}",
                "--name",
                "bench",
                "--json",
            ],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        )
        total = time.monotonic() - start
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    wall, train = summary["wall_seconds"], summary["train_seconds"]
    return {
        "concurrency": concurrency,
        "trials": summary["trials"],
        "command_seconds": round(total, 1),
        "trials_seconds": wall,
        "train_seconds": train,
        "trials_per_minute": round(60 * summary["trials"] / wall, 1),
        "overhead": round(wall / (train / concurrency), 2),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="default: $RHNSEARCH_DATA_DIR or the user cache")
    parser.add_argument("--set", action="append", default=[], help="a space override")
    args = parser.parse_args()
    rows = [run(c, args.data_dir, args.set) for c in (1, 2)]
    print(
        f"{'conc':>4} {'trials':>6} {'command s':>9} {'trials s':>8} {'train s':>7} "
        f"{'trials/min':>10} {'overhead':>8}"
    )
    for r in rows:
        print(
            f"{r['concurrency']:>4} {r['trials']:>6} {r['command_seconds']:>9} "
            f"{r['trials_seconds']:>8} {r['train_seconds']:>7} {r['trials_per_minute']:>10} "
            f"{r['overhead']:>7}x"
        )
    print(
        json.dumps(
            {
                "sweeps": rows,
                "speedup_2_over_1": round(rows[0]["trials_seconds"] / rows[1]["trials_seconds"], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
