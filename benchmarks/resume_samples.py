"""A resumed driver of `scale.py --kill-at`, second by second: started beside scale.py, it waits
for the resumed driver's process, then prints one JSON line a second until --seconds after the
driver's start (or its end): the seconds since the driver started, its CPU seconds and RSS, the
Ray worker processes started since then and their CPU seconds, and the trials started (lines
of WORK/starts.txt after the driver's start). docs/scale/996-killed-at-500-stop63-samples.json
holds two such runs.

    python benchmarks/scale.py --trials 1000 --kill-at 500 --keep KEEP &
    python benchmarks/resume_samples.py KEEP/random-sqlite-dir-1000 > samples.jsonl
"""

import argparse
import json
import time
from pathlib import Path

import psutil
from scale import STARTS


def resumed_driver() -> psutil.Process:
    """The resumed driver's process, once it has started."""
    while True:
        for proc in psutil.process_iter(["cmdline"]):
            line = proc.info["cmdline"] or []
            if "--driver" in line and "--resume" in line:
                return proc
        time.sleep(0.2)


def workers(since: float) -> list[psutil.Process]:
    """Ray's worker processes started after SINCE (its workers name their task or script)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "create_time"]):
        line = " ".join(proc.info["cmdline"] or [])
        if proc.info["create_time"] >= since - 1 and (
            "default_worker.py" in line or line.startswith("ray::")
        ):
            found.append(proc)
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("work", type=Path, help="the size's folder under scale.py's --keep")
    p.add_argument("--seconds", type=float, default=300)
    args = p.parse_args()
    driver = resumed_driver()
    start = driver.create_time()
    print(json.dumps({"driver": driver.pid, "started": start}), flush=True)
    spent = {}  # worker pid -> its CPU seconds when last seen (it may have exited since)
    while time.time() - start < args.seconds and driver.is_running():
        try:
            cpu = sum(driver.cpu_times()[:2])
            rss = driver.memory_info().rss / 2**20
        except psutil.Error:
            break
        alive = 0
        for proc in workers(start):
            try:
                spent[proc.pid] = sum(proc.cpu_times()[:2])
                alive += 1
            except psutil.Error:
                pass
        starts = args.work / STARTS
        times = [float(t) for t in starts.read_text().split()] if starts.exists() else []
        row = {
            "t": round(time.time() - start, 1),
            "driver_cpu": round(cpu, 1),
            "rss": round(rss),
            "workers": alive,
            "workers_cpu": round(sum(spent.values()), 1),
            "started": sum(1 for t in times if t > start),
        }
        print(json.dumps(row), flush=True)
        time.sleep(1)


if __name__ == "__main__":
    main()
