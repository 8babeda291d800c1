"""`rhnsearch ui` with MLflow's job runner off (its default) beside on
(MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true): the server's processes, their memory and CPU
seconds once /health answers and SETTLE seconds later, and the seconds to /health.

    python benchmarks/ui_server.py [--settle 40] [--rounds 2]

Each round starts one UI of each kind in turn on an empty sqlite store (in a temporary
folder) and stops it with SIGTERM, as a user's Ctrl-C does.
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from rhnsearch.cli.ui import JOB_RUNNER

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from ports import free_port  # noqa: E402


def group_usage(pid: int) -> tuple[int, float, float]:
    """Processes, resident MB and CPU seconds (children's included) of PID and its tree."""
    root = psutil.Process(pid)
    procs, rss, cpu = 0, 0.0, 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            times, memory = p.cpu_times(), p.memory_info()
        except psutil.NoSuchProcess:
            continue
        procs, rss, cpu = procs + 1, rss + memory.rss / 2**20, cpu + times.user + times.system
    return procs, rss, cpu


def one_ui(job_runner: bool, settle: float) -> dict:
    with tempfile.TemporaryDirectory() as work:
        port = free_port()
        env = {**os.environ, JOB_RUNNER: "true" if job_runner else "false"}
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "rhnsearch.cli", "ui", "--port", str(port)]
            + ["--tracking-uri", f"sqlite:///{Path(work) / 'mlflow.db'}"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).close()
                    break
                except OSError:
                    if proc.poll() is not None:
                        sys.exit(f"rhnsearch ui exited {proc.returncode} before answering")
                    time.sleep(0.2)
            up = time.monotonic() - start
            at_health = group_usage(proc.pid)
            time.sleep(settle)
            procs, rss, cpu = group_usage(proc.pid)
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
    return {
        "health_s": up,
        "cpu_at_health_s": at_health[2],
        "processes": procs,
        "rss_mb": rss,
        "cpu_s": cpu,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settle", type=float, default=40.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rows = {True: [], False: []}
    for _ in range(args.rounds):
        for job_runner in (False, True):
            rows[job_runner].append(one_ui(job_runner, args.settle))
    print(
        f"{'job runner':<11} {'health s':>9} {'CPU s then':>11} {'procs':>6} {'RSS MB':>8} "
        f"{'CPU s':>7}"
    )
    for job_runner, runs in rows.items():
        for r in runs:
            print(
                f"{'on' if job_runner else 'off':<11} {r['health_s']:9.1f} "
                f"{r['cpu_at_health_s']:11.1f} {r['processes']:6d} "
                f"{r['rss_mb']:8.0f} {r['cpu_s']:7.1f}"
            )
    on, off = rows[True], rows[False]
    print(
        f"on / off, {args.settle:.0f} s after /health: RSS "
        f"{sum(r['rss_mb'] for r in on) / sum(r['rss_mb'] for r in off):.1f}x, CPU seconds "
        f"{sum(r['cpu_s'] for r in on) / sum(r['cpu_s'] for r in off):.1f}x"
    )


if __name__ == "__main__":
    main()
