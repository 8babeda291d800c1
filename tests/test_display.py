"""A sweep as it runs (rhnsearch.sweep.progress, rhnsearch.cli.display): its counts, time left
and best per cell; the live display on a terminal and one line a trial elsewhere; and, end to
end, a sweep run in a pseudo-terminal while `sweep status --watch` follows it from another
process."""

import io
import os
import pty
import re
import select
import subprocess
import sys
import threading
import time

import pytest
from rich.console import Console

from conftest import JSB_SPACE, rhnsearch_cli


def trial(run_id, cell, status, epoch, best, ended_at=None):
    from rhnsearch.sweep.progress import Trial

    return Trial(run_id, cell, status, epoch, best, ended_at)


def progress(trials, *, planned=8, elapsed=60.0, fraction=None, baseline=0.0, finished=False):
    from rhnsearch.sweep.progress import RUNNING, Progress

    ended = sum(t.status != RUNNING for t in trials)
    return Progress(
        "demo",
        planned,
        ("rhn d1 w19", "rhn d2 w22"),
        tuple(trials),
        elapsed,
        ended / planned if fraction is None else fraction,
        baseline,
        finished,
    )


TRIALS = [
    trial("a", "rhn d1 w19", "completed", 9, 9.5, 1000),
    trial("b", "rhn d1 w19", "stopped", 1, 12.25, 2000),
    trial("c", "rhn d2 w22", "diverged", 2, None, 3000),
    trial("d", "rhn d2 w22", "running", 3, 10.0),
    trial("e", "rhn d1 w19", "running", 0, None),
]


def test_progress_counts_trials_by_status_and_each_cell_s_best():
    """Ended statuses first, then running; a cell's best is over its trials with a loss, a
    running one's so far included; a cell with none has None."""
    shown = progress(TRIALS)
    assert shown.statuses() == {"completed": 1, "stopped": 1, "diverged": 1, "running": 2}
    assert [t.run_id for t in shown.ended] == ["a", "b", "c"]
    assert shown.best() == {"rhn d1 w19": 9.5, "rhn d2 w22": 10.0}
    assert progress([]).best() == {"rhn d1 w19": None, "rhn d2 w22": None}


def test_time_left_is_the_pace_since_the_start_applied_to_what_is_left():
    """3 of 8 trials ended in 60 s: 5 left at 20 s each. From a baseline (a resumed sweep
    already 2/8 done when the command started) the pace counts only what this command did;
    nothing done yet: unknown; finished: none."""
    assert progress(TRIALS).left() == pytest.approx(100.0)
    assert progress(TRIALS, baseline=2 / 8).left() == pytest.approx(300.0)
    assert progress(TRIALS, fraction=0.0).left() is None
    assert progress(TRIALS, finished=True).left() == 0.0
    assert progress(TRIALS, fraction=1.5).left() == 0.0  # more than planned: none left


def test_the_share_done_counts_running_trials_by_their_epochs_or_the_plan_by_its_hours():
    """Without a plan: trials ended, and a running one by its epochs of the most it may run
    (an old sweep's record: 2 trials of up to 9 epochs); with a plan, the device-hours the
    trials have held of those it planned."""
    import json
    from dataclasses import replace

    from rhnsearch.sweep.progress import done_fraction
    from rhnsearch.sweep.record import SweepRecord
    from rhnsearch.tracking.runs import StoredRun

    from conftest import ROOT

    state = json.loads((ROOT / "tests/data/sweep_state_dd9c428.json").read_text())
    record = SweepRecord.from_json(state)
    assert record.trials == 2 and record.space.epochs == 9
    trials = (trial("a", "c", "stopped", 1, 9.0), trial("b", "c", "running", 3, 9.5))
    assert done_fraction(record, [], trials) == pytest.approx((1 + 3 / 9) / 2)
    plan = {"unit": "CPU", "per_trial": 1, "cells": [{"cell": "c", "seconds": 7200.0}]}
    runs = [StoredRun("a", "a", "FINISHED", 0, 1, {}, {"cell": "c"}, {"cpu_seconds": 1800.0})]
    assert done_fraction(replace(record, plan=plan), runs, trials) == pytest.approx(0.25)


def test_the_plain_display_prints_a_line_a_trial_as_it_ends():
    """Off a terminal: each trial once, in the order they ended, numbered, with its cell's
    best and the time; nothing redrawn."""
    from rhnsearch.cli.display import Display, clock, headline

    out = io.StringIO()
    with Display(Console(file=out, force_terminal=False, width=80)) as display:
        display.show(progress(TRIALS[1:2]))
        display.show(progress(TRIALS))
        display.show(progress(TRIALS))  # nothing new: no line
    lines = out.getvalue().splitlines()
    assert lines == [
        "[1/8] rhn d1 w19: stopped at epoch 1, best valid 12.2500 (cell best 12.2500); "
        "1m 00s elapsed, ~7m 00s left",
        "[2/8] rhn d1 w19: completed at epoch 9, best valid 9.5000 (cell best 9.5000); "
        "1m 00s elapsed, ~1m 40s left",
        "[3/8] rhn d2 w22: diverged at epoch 2, best valid – (cell best 10.0000); "
        "1m 00s elapsed, ~1m 40s left",
    ]
    assert "\x1b" not in out.getvalue()
    assert headline(progress(TRIALS)) == (
        "sweep demo: 3/8 trials ended (1 completed, 1 stopped, 1 diverged, 2 running); "
        "1m 00s elapsed, ~1m 40s left"
    )
    assert [clock(s) for s in (7, 125, 3723, None)] == ["7s", "2m 05s", "1h 02m 03s", "?"]


def test_the_terminal_display_is_redrawn_in_place():
    """On a terminal: one display, redrawn (cursor moved back up, not a new block), with the
    headline, the running trials and their epochs, and each cell's ended count and best."""
    from rhnsearch.cli.display import Display

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    with Display(console) as display:
        display.show(progress(TRIALS[:1]))
        display.show(progress(TRIALS))
    text = out.getvalue()
    assert text.count("sweep demo:") >= 2 and "\x1b[1A" in text  # redrawn: the cursor moved up
    last = text.rsplit("sweep demo:", 1)[1]
    assert "3/8 trials ended" in last and "running: rhn d1 w19 epoch 0, rhn d2 w22 epoch 3" in last
    assert re.search(r"rhn d1 w19\s+2/4\s+9\.5000", last)
    assert re.search(r"rhn d2 w22\s+1/4\s+10\.0000", last)


def test_follow_reads_until_the_sweep_ends_and_survives_a_failed_read():
    """A read that fails is skipped (the store was busy); the display ends by itself once the
    sweep has finished, without being told to stop."""
    from rhnsearch.cli import display

    reads = iter(
        [OSError("database is locked"), progress(TRIALS[:1]), progress(TRIALS, finished=True)]
    )

    def read():
        value = next(reads)
        if isinstance(value, Exception):
            raise value
        return value

    out = io.StringIO()
    saved = display.EVERY
    display.EVERY = 0.01
    try:
        with display.Display(Console(file=out, force_terminal=False)) as shown:
            worker = threading.Thread(target=display.follow, args=(read, shown, threading.Event()))
            worker.start()
            worker.join(5)
    finally:
        display.EVERY = saved
    assert not worker.is_alive() and out.getvalue().count("\n") == 3


def test_verbose_output_goes_to_stdout_and_to_the_log():
    """With --verbose, what Tune prints reaches the terminal and driver.log alike."""
    from rhnsearch.cli.display import Tee

    shown, kept = io.StringIO(), io.StringIO()
    tee = Tee(shown, kept)
    print("Trial status: 2 RUNNING", file=tee)
    tee.flush()
    assert shown.getvalue() == kept.getvalue() == "Trial status: 2 RUNNING\n"


def in_a_terminal(args, cwd, timeout=300) -> tuple[int, str]:
    """Run the rhnsearch command line in a pseudo-terminal; its exit code and all it wrote."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rhnsearch.cli", *map(str, args)],
        cwd=cwd,
        stdin=child,
        stdout=child,
        stderr=child,
        env={**os.environ, "COLUMNS": "120", "LINES": "40", "TERM": "xterm"},
        start_new_session=True,
    )
    os.close(child)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 1)
        if ready:
            try:
                data = os.read(main, 65536)
            except OSError:  # the terminal closed: the command has ended
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(main)
    code = proc.wait(timeout=60)
    return code, b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
@pytest.mark.cluster
def test_a_sweep_on_a_terminal_is_one_live_display_that_a_watch_follows(tmp_path, data_dir):
    """`sweep run` in a pseudo-terminal draws one display and redraws it as trials end, then
    prints the summary; Tune's tables go to the sweep's driver.log. Meanwhile `sweep status
    NAME --watch`, another process with no Ray, follows the sweep from its folder and store, a
    line a trial, and ends when the sweep does."""
    run = (
        *("sweep", "run", JSB_SPACE, "--preset", "smoke", "--data-dir", data_dir),
        *("--set", "archs=[rhn]", "--set", "depths=[1,2]", "--set", "fixed.epochs=3"),
        *("--name", "live"),
    )
    state = tmp_path / "results/sweeps/live/rhnsearch_sweep.json"
    watched = {}

    def watch():
        while not state.exists():
            time.sleep(0.2)
        watched["proc"] = rhnsearch_cli("sweep", "status", "live", "--watch", cwd=tmp_path)

    watcher = threading.Thread(target=watch)
    watcher.start()
    code, screen = in_a_terminal(run, tmp_path)
    watcher.join(120)
    assert code == 0, screen[-3000:]
    drawn = screen.count("sweep live: ")
    assert drawn >= 3 and "\x1b[1A" in screen, screen[-3000:]  # redrawn in place, not a log
    assert "4/4 trials ended" in screen and "sweep live: 4 trials: " in screen
    assert (
        "Trial status" not in screen
        and "Trial status" in (tmp_path / "results/sweeps/live/driver.log").read_text()
    )
    watched = watched["proc"]
    lines = watched.stderr.splitlines()
    assert [line.split("]")[0] for line in lines if line.startswith("[")] == [
        f"[{k}/4" for k in range(1, 5)
    ], watched.stderr
    assert "sweep live: 4 trials (" in watched.stdout  # then its status, as `sweep status`


def test_the_main_job_piped_prints_a_line_a_trial_and_no_warning(jsb_smoke):
    """The README's main job (the JSB smoke preset, 24 trials), its stderr a pipe: a line per
    trial as it ends, numbered 1 to 24, then the summary; no warning, nothing of Tune's
    (its configuration box, status tables and trial boxes are in the sweep's driver.log)."""
    lines = jsb_smoke.stderr.splitlines()
    assert len(lines) < 60, jsb_smoke.stderr
    assert "warning" not in jsb_smoke.stderr.lower(), jsb_smoke.stderr
    numbers = [line.split("]")[0] for line in lines if line.startswith("[")]
    assert numbers == [f"[{k}/24" for k in range(1, 25)], jsb_smoke.stderr
    assert lines[-1].startswith("sweep smoke-jsb: 24 trials: ")
    log = (jsb_smoke.cwd / "results/sweeps/smoke-jsb/driver.log").read_text()
    assert "Configuration for experiment" in log and "Trial status" in log
    assert "Trial status" not in jsb_smoke.stderr
