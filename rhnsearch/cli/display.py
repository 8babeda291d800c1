"""A sweep as it runs, on stderr (`sweep run`, `resume`, `extend`, `confirm` and `sweep status
--watch`): on a terminal one display redrawn in place (rich's Live): the trials ended of those
planned by status, the running ones with their epoch, the time elapsed and left, each cell's
best so far; elsewhere (CI, a Slurm output file, a pipe) one plain line per trial that ends."""

import io
import logging
import sys
import threading
import time
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..sweep.progress import Follower, Progress, Trial
from ..sweep.record import SweepRecord

log = logging.getLogger(__name__)

EVERY = 2.0  # seconds between reads of the store, at least
SLOWER = 10  # ... and at least this many times what the last read took
SHOWN_RUNNING = 8  # running trials named on a terminal; the rest counted


def clock(seconds: float | None) -> str:
    """SECONDS as '1h 02m 03s', '2m 05s' or '7s'; '?' where unknown."""
    if seconds is None:
        return "?"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def loss(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def headline(progress: Progress) -> str:
    """'sweep NAME: 12/24 trials ended (5 completed, 6 stopped, 1 diverged, 2 running);
    1m 05s elapsed, ~2m 10s left'."""
    counts = ", ".join(f"{n} {status}" for status, n in progress.statuses().items())
    left = "finished" if progress.finished else f"~{clock(progress.left())} left"
    return (
        f"sweep {progress.name}: {len(progress.ended)}/{progress.planned} trials ended "
        f"({counts or 'none started'}); {clock(progress.elapsed)} elapsed, {left}"
    )


def ended_line(progress: Progress, trial: Trial, count: int) -> str:
    """The plain line of TRIAL, the COUNT-th to end."""
    return (
        f"[{count}/{progress.planned}] {trial.cell}: {trial.status} at epoch {trial.epoch}, "
        f"best valid {loss(trial.best)} (cell best {loss(progress.best()[trial.cell])}); "
        f"{clock(progress.elapsed)} elapsed, ~{clock(progress.left())} left"
    )


def panel(progress: Progress) -> Group:
    """The terminal's display: the headline, the running trials, each cell's best."""
    running = sorted(progress.running, key=lambda t: (t.cell, t.run_id))
    named = ", ".join(f"{t.cell} epoch {t.epoch}" for t in running[:SHOWN_RUNNING])
    more = len(running) - SHOWN_RUNNING
    table = Table(box=None, pad_edge=False, show_edge=False)
    for column, justify in (("cell", "left"), ("ended", "right"), ("best valid", "right")):
        table.add_column(column, justify=justify)
    per_cell = progress.planned // max(len(progress.cells), 1)
    ended = {}
    for trial in progress.ended:
        ended[trial.cell] = ended.get(trial.cell, 0) + 1
    for cell, best in progress.best().items():
        table.add_row(cell, f"{ended.get(cell, 0)}/{per_cell}", loss(best))
    return Group(
        Text(headline(progress)),
        Text("running: " + (named + (f" and {more} more" if more > 0 else "") or "none")),
        table,
    )


class Display:
    """Shows each `Progress` it is given on CONSOLE: redrawn in place on a terminal, else a
    line for each trial that ended since the last."""

    def __init__(self, console: Console):
        self.console = console
        self.live = (  # stdout left alone: Watching may have sent it to driver.log
            Live(console=console, auto_refresh=False, redirect_stdout=False)
            if console.is_terminal
            else None
        )
        self.seen: set[str] = set()

    def __enter__(self) -> "Display":
        if self.live:
            self.live.start()
        return self

    def __exit__(self, *exc):
        if self.live:
            self.live.stop()

    def show(self, progress: Progress):
        if self.live:
            self.live.update(panel(progress), refresh=True)
            return
        fresh = [t for t in progress.ended if t.run_id not in self.seen]
        for trial in sorted(fresh, key=lambda t: (t.ended_at or 0, t.run_id)):
            self.seen.add(trial.run_id)
            line = ended_line(progress, trial, len(self.seen))
            self.console.print(line, highlight=False, soft_wrap=True)


def follow(read, display: Display, stop: threading.Event):
    """Show READ()'s progress on DISPLAY until STOP is set or the sweep has finished, then
    once more: at most every EVERY seconds, and SLOWER times what a read took (a store of
    thousands of runs takes seconds to list). A read that fails is skipped: the display is
    a courtesy, never the sweep's failure."""
    last = False
    while True:
        started = time.monotonic()
        try:
            progress = read()
            display.show(progress)
        except Exception as exc:  # noqa: BLE001 - a busy store: read again at the next tick
            log.debug("could not read the sweep's progress: %s", exc)
            progress = None
        if last or (progress is not None and progress.finished):
            return
        last = stop.wait(max(EVERY, SLOWER * (time.monotonic() - started)))


def console() -> Console:
    """Where a sweep is shown: stderr as it is now (stdout is the summary's and --json's;
    on a terminal the display then stands in for stderr, printing what others write above
    itself)."""
    return Console(file=sys.stderr)


def watch(name: str, storage_path: str | None):
    """Follow the sweep NAME, which another process runs, on stderr until it ends."""
    follower = Follower.of(name, storage_path)
    with Display(console()) as display:
        follow(follower.read, display, threading.Event())


class Tee(io.TextIOBase):
    """Text written to both STREAMS (stdout as it was, and driver.log)."""

    def __init__(self, *streams: TextIO):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self):
        for stream in self.streams:
            stream.flush()


class Watching:
    """The display of the sweep a command runs, from `begin` (the sweep calls it as its trials
    start) to `stop`, in a thread of its own; meanwhile what Tune and Ray print on stdout (its
    status tables, a box a trial) goes to the sweep's driver.log, and with VERBOSE to stdout
    too."""

    def __init__(self, *, verbose: bool = False):
        self.verbose = verbose
        self.start = time.time()
        self.done = threading.Event()
        self.thread: threading.Thread | None = None
        self.stdout: TextIO | None = None  # stdout as it was, while driver.log takes it
        self.log: TextIO | None = None

    def begin(self, record: SweepRecord):
        follower = Follower(record, start=self.start)
        path = record.paths.driver_log
        path.parent.mkdir(parents=True, exist_ok=True)
        self.log = path.open("a", encoding="utf-8")
        self.stdout = sys.stdout
        sys.stdout = Tee(self.stdout, self.log) if self.verbose else self.log

        def shown():
            with Display(console()) as display:
                follow(follower.read, display, self.done)

        self.thread = threading.Thread(target=shown, name="sweep-display", daemon=True)
        self.thread.start()

    def stop(self):
        """Show the sweep once more, as it ended, stop following it and give stdout back."""
        self.done.set()
        if self.thread:
            self.thread.join(timeout=60)
        if self.stdout is not None:
            sys.stdout, self.stdout = self.stdout, None
            self.log.close()
