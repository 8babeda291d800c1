"""A sweep's workers import the trainable in turns, a core a turn (cluster/worker_start.py):
at most TURNS processes of a node hold one at once, a failing import is left to the trial,
and a Ray that start_ray started runs the hook in each worker, which starts at niceness 15."""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from rhnsearch.cluster.worker_start import PRELOAD_ENV, node_turn

HOLD = """
import sys, time
from rhnsearch.cluster.worker_start import node_turn
with node_turn(turns={turns}, folder={folder!r}):
    print("held", flush=True)
    time.sleep({seconds})
    print(time.time(), flush=True)
"""


def holder(folder, turns: int, seconds: float) -> subprocess.Popen:
    """A process that holds one of FOLDER's TURNS for SECONDS, once it has printed "held"; it
    prints the time it gave the turn back."""
    code = HOLD.format(turns=turns, folder=str(folder), seconds=seconds)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_a_process_waits_for_a_turn_until_one_is_given_back(tmp_path):
    first = holder(tmp_path, 1, 1.5)
    with node_turn(turns=1, folder=tmp_path):
        entered = time.time()
    given_back = float(first.stdout.readline())
    assert first.wait() == 0
    assert entered >= given_back


def test_as_many_processes_as_turns_hold_one_at_once_and_the_next_waits(tmp_path):
    holders = [holder(tmp_path, 2, 2.0) for _ in range(2)]
    both_held = time.time()
    with node_turn(turns=2, folder=tmp_path):
        entered = time.time()
    given_back = min(float(h.stdout.readline()) for h in holders)
    assert [h.wait() for h in holders] == [0, 0]
    assert both_held < given_back  # the second took a turn while the first held one
    assert entered >= given_back  # the third waited for one of them


def test_preload_imports_what_it_can_and_leaves_a_failing_import_to_the_trial(tmp_path):
    code = textwrap.dedent(
        """
        import sys
        from rhnsearch.cluster.worker_start import preload
        preload()
        print(*(name in sys.modules for name in ("no_such_module_here", "colorsys", "wave")))
        """
    )
    env = {PRELOAD_ENV: "colorsys,no_such_module_here,wave", "TMPDIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True"]


@pytest.mark.cluster
def test_the_workers_of_a_ray_start_ray_started_start_nice_and_import_the_trainable():
    """A task that imports nothing finds the trainable imported in its worker (a sweep's), and
    the worker 15 nicer than the driver though Ray made it no nicer as it connected (Ray's
    setting, 0): it started so, not at the raylet's niceness."""
    code = textwrap.dedent(
        """
        import json, os, ray
        from rhnsearch.cluster.connect import start_ray
        from rhnsearch.sweep.lifecycle import WORKER_IMPORTS
        start_ray(None, preload=WORKER_IMPORTS)
        def seen():
            lowered_by = os.environ.get("RAY_worker_niceness")
            return sorted(__import__("sys").modules), os.nice(0), lowered_by
        modules, niceness, lowered_by = ray.get(ray.remote(seen).remote())
        imported = [name for name in WORKER_IMPORTS if name in modules]
        print(json.dumps([WORKER_IMPORTS, imported, niceness, lowered_by, os.nice(0)]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    asked, imported, niceness, lowered_by, drivers = json.loads(out.stdout.splitlines()[-1])
    assert asked == imported == ["rhnsearch.sweep.trainable"]
    assert (niceness, lowered_by) == (min(drivers + 15, 19), "0")
