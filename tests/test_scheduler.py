"""The per-cell ASHA scheduler: its rule on real Tune trials fed synthetic results, its state
file read back by a scheduler unpickled as `Tuner.restore` unpickles it, and real Tuners (and
a real `Tuner.restore`) on a local Ray with a synthetic learning curve per cell."""

import gc
import json
import os
import pickle
import re
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import ray
from ray import tune
from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler

from rhnsearch.compat import ray as ray_compat
from rhnsearch.errors import UserError
from rhnsearch.files import storage
from rhnsearch.files.layout import SCHEDULER_STATE_FILE
from rhnsearch.search.scheduler import (
    CellASHAScheduler,
    LiveFIFOScheduler,
    decisions_log,
    read_state,
    setting_key,
)
from rhnsearch.search.space import load_space
from rhnsearch.sweep.checkpoints import KeepNewestCheckpoint
from rhnsearch.sweep.ended_trials import ForgetEndedTrialsMetrics
from rhnsearch.sweep.lifecycle import build_scheduler

from conftest import ROOT, wait_until

GO, STOP = CellASHAScheduler.CONTINUE, CellASHAScheduler.STOP


def trial(
    trial_id: str,
    arch: str = "rhn",
    depth: int = 1,
    tied: bool = False,
    *,
    setting: str | None = None,
    seed: int = 0,
) -> Trial:
    """A trial of SETTING (a stand-in for its sampled hyperparameters; None: a setting of its
    own, as every trial of a sweep of one seed a setting) run with SEED."""
    cell = {"arch": arch, "depth": depth, "tied": tied, "width": 8, "params": 1000}
    config = {"cell": cell, "setting": setting or trial_id, "seed": seed}
    return Trial("run_trial", config=config, trial_id=trial_id, stub=True)


def scheduler(state_file=None, mode="min", **kwargs) -> CellASHAScheduler:
    """rf 3, 9 epochs: rungs at epochs 1 and 3; metric and mode set as Tune sets them."""
    s = CellASHAScheduler(
        max_t=9, grace_period=1, reduction_factor=3, state_file=state_file, **kwargs
    )
    assert s.set_search_properties("valid_loss", mode)
    return s


def report(s: CellASHAScheduler, t: Trial, epoch: int, loss) -> str:
    return s.on_trial_result(None, t, {"epoch": epoch, "valid_loss": loss})


# -- the rule --------------------------------------------------------------------------------
def test_a_trial_is_compared_only_with_its_own_cell():
    """A fast cell reaches epoch 1 first. Per cell, the slow cell's best setting goes on and
    a cell of one trial is never stopped; compared globally, both are stopped for the fast
    cell's losses."""
    fast = [trial(f"fast{i}") for i in range(3)]
    slow = [trial(f"slow{i}", "dtrnn", 6) for i in range(2)]
    lone = trial("lone", "rhn", 6, tied=True)
    results = [
        (fast[0], 1.0),
        (fast[1], 1.1),
        (fast[2], 1.2),
        (slow[0], 2.0),
        (slow[1], 2.5),
        (lone, 5.0),
    ]
    per_cell, everyone = scheduler(), scheduler(per_cell=False)
    assert {t.trial_id: report(per_cell, t, 1, loss) for t, loss in results} == {
        "fast0": GO,
        "fast1": STOP,
        "fast2": STOP,
        "slow0": GO,
        "slow1": STOP,
        "lone": GO,
    }
    assert {t.trial_id: report(everyone, t, 1, loss) for t, loss in results} == {
        "fast0": GO,
        "fast1": STOP,
        "fast2": STOP,
        "slow0": STOP,
        "slow1": STOP,
        "lone": STOP,
    }
    assert [report(per_cell, lone, epoch, 5.0) for epoch in range(2, 9)] == [GO] * 7
    assert report(per_cell, lone, 9, 5.0) == STOP  # max_t, as Ray's ASHA
    assert per_cell.debug_string().splitlines() == [
        "Per-cell ASHA: rungs at epochs 1, 3; 3 trials stopped",
        "  dtrnn depth 6: 2 at 1; 1 stopped",
        "  rhn depth 1: 3 at 1; 2 stopped",
        "  rhn depth 6 tied: 1 at 1, 1 at 3; 0 stopped",
    ]
    assert everyone.debug_string().splitlines() == [
        "ASHA: rungs at epochs 1, 3; 5 trials stopped",
        "  all cells: 6 at 1; 5 stopped",
    ]


@pytest.mark.parametrize("mode", ["min", "max"])
def test_stopped_when_worse_than_the_rungs_quantile_of_those_before_it(mode):
    """rf 3: a trial goes on if its loss is at most the 1/3 quantile (linear interpolation)
    of the losses recorded before it in its rung, worked out here by hand. With mode max the
    metric is an accuracy (the loss negated): the same decisions."""
    sign = 1 if mode == "min" else -1
    s = scheduler(mode=mode)
    cases = [  # (loss, losses recorded before it, sorted: their 1/3 quantile, decision)
        (4.0, GO),  # nothing recorded: goes on
        (1.0, GO),  # [4]: 4
        (3.0, STOP),  # [1, 4]: 1 + 1/3 * 3 = 2
        (2.0, GO),  # [1, 3, 4]: 1 + 2/3 * 2 = 2.333
        (2.1, STOP),  # [1, 2, 3, 4]: 2
        (1.9, GO),  # [1, 2, 2.1, 3, 4]: 2 + 1/3 * 0.1 = 2.0333
        (1.98, STOP),  # [1, 1.9, 2, 2.1, 3, 4]: 1.9 + 2/3 * 0.1 = 1.9667
    ]
    decisions = [report(s, trial(f"t{i}"), 1, sign * loss) for i, (loss, _) in enumerate(cases)]
    assert decisions == [d for _, d in cases]
    assert s.judge([sign * v for v in (1.0, 2.0, 3.0, 4.0)], sign * 1.99) == GO
    assert s.judge([sign * v for v in (1.0, 2.0, 3.0, 4.0)], sign * 2.01) == STOP


def test_diverged_results_are_not_recorded_in_the_rungs(tmp_path):
    """NaN, inf and missing metrics go on (the trial ends itself as diverged) and leave the
    rung as it was: the next trials are judged on the finite losses alone, and the state
    file stays strict JSON."""
    state_file = tmp_path / "state.json"
    s = scheduler(str(state_file))
    assert report(s, trial("a"), 1, 1.0) == GO
    assert report(s, trial("nan"), 1, float("nan")) == GO
    assert report(s, trial("inf"), 1, float("inf")) == GO
    assert report(s, trial("-inf"), 1, float("-inf")) == GO
    assert s.on_trial_result(None, trial("none"), {"epoch": 1}) == GO
    assert report(s, trial("b"), 1, 0.9) == GO  # [1.0]: 1.0
    assert report(s, trial("c"), 1, 0.95) == STOP  # [0.9, 1.0]: 0.9333 (a NaN would make
    # the quantile NaN and stop nothing; an inf would move it)
    assert [c for line in log_lines(state_file) for c in line if "value" in c]  # strict JSON
    assert saved(state_file)["rungs"] == {"rhn depth 1": {"1": {"a": 1.0, "b": 0.9, "c": 0.95}}}
    assert report(s, trial("nan"), 3, float("nan")) == GO


def test_replicates_of_a_setting_share_its_fate_and_never_compete(tmp_path):
    """Seeds 3: the replicates of settings A and B, and C (one seed), reach epoch 1 in turn.
    A setting's first replicate at a rung is judged on the other settings recorded there, and
    each later replicate gets its setting's decision whatever its loss: A goes on at epoch 1
    (a1 at 5.0 and a2 at 9.0 too), B stops (b1 at 0.5 and b2 at 0.1 too), and at epoch 3 A
    stops, all its replicates. a3 diverged before a0 arrived, and decided nothing. As
    settings of their own (a sweep of one seed a setting), a1 and a2 would stop at epoch 1
    for a0's loss, and b0, b1 and b2 would go on."""
    state_file = tmp_path / "state.json"
    a = [trial(f"a{seed}", setting="A", seed=seed) for seed in range(4)]
    b = [trial(f"b{seed}", setting="B", seed=seed) for seed in range(3)]
    c = trial("c0", setting="C")
    epoch_1 = [(a[3], float("nan")), (a[0], 1.0), (a[1], 5.0), (b[0], 2.0), (b[1], 0.5)]
    epoch_1 += [(a[2], 9.0), (c, 0.9), (b[2], 0.1)]  # c: [1, 2]: 1.333
    s = scheduler(str(state_file))
    assert [report(s, t, 1, loss) for t, loss in epoch_1] == [GO, GO, GO, STOP, STOP, GO, GO, STOP]
    assert [report(s, t, 2, 0.5) for t in (*a[:3], *b, c)] == [GO] * 3 + [STOP] * 3 + [GO]
    assert [report(s, t, 3, loss) for t, loss in ((c, 0.3), (a[1], 0.4), (a[0], 0.1))] == [
        GO,
        STOP,
        STOP,
    ]
    assert report(s, a[2], 3, 0.2) == STOP
    assert [report(s, c, epoch, 0.3) for epoch in range(4, 10)] == [GO] * 5 + [STOP]
    state = saved(state_file)
    assert state["rungs"] == {
        "rhn depth 1": {"1": {"a0": 1.0, "b0": 2.0, "c0": 0.9}, "3": {"c0": 0.3, "a1": 0.4}}
    }
    assert state["settings"] == {
        setting_key(a[0].config): {"1": GO, "3": STOP},
        setting_key(b[0].config): {"1": STOP},
        setting_key(c.config): {"1": GO, "3": GO},
    }
    assert state["stopped"] == {"b0": 1, "b1": 1, "b2": 1, "a1": 3, "a0": 3, "a2": 3}
    assert len({setting_key(t.config) for t in a}) == 1
    assert setting_key(a[0].config).startswith("rhn depth 1 ")

    own = scheduler()  # each trial a setting of its own
    reports = [(trial(t.trial_id, seed=t.config["seed"]), loss) for t, loss in epoch_1]
    assert [report(own, t, 1, loss) for t, loss in reports] == [
        GO,
        GO,
        STOP,  # [1]: 1
        GO,  # [1, 5]: 2.333
        GO,  # [1, 2, 5]: 1.667
        STOP,  # [0.5, 1, 2, 5]: 1
        GO,  # [0.5, 1, 2, 5, 9]: 1.333
        GO,  # [0.5, 0.9, 1, 2, 5, 9]: 0.933
    ]


def test_a_state_is_written_once_a_gap_its_newest_text_at_wait_and_holds_back_no_other(tmp_path):
    later, state, writes = storage.Later(), tmp_path / "state", []

    def write(text: str):
        writes.append(text)
        state.write_text(text)

    for n in range(20):  # queued as a scheduler queues its state, decision after decision
        later.put("state", lambda n=n: write(str(n)), gap=60)
        time.sleep(0.01)
    wait_until(lambda: writes, "the first write", timeout=30)  # at once, however loaded
    time.sleep(0.2)
    assert len(writes) == 1, writes  # the rest wait out the gap, each replacing the last
    later.wait()
    assert writes[1:] == ["19"] and state.read_text() == "19"
    later.put("state", lambda: write("20"), gap=60)
    later.put("prune", lambda: write("pruned"))  # a job without a gap is not held behind it
    wait_until(lambda: "pruned" in writes, "the pruning", timeout=30)
    assert writes[2:] == ["pruned"], writes
    later.wait()
    assert writes[2:] == ["pruned", "20"]


def saved(state_file: Path) -> dict:
    """The scheduler's state as a restored scheduler reads it from beside STATE_FILE, once
    the storage's thread has appended what was queued."""
    storage.LATER.wait()
    return read_state(str(state_file))[0]


def log_lines(state_file: Path) -> list[list]:
    """The lines of the scheduler's log of changes beside STATE_FILE, each strict JSON."""
    storage.LATER.wait()
    text = (state_file.parent / "decisions.jsonl").read_text()
    return [json.loads(line, parse_constant=pytest.fail) for line in text.splitlines()]


# -- the trial to run -------------------------------------------------------------------------
class Trials:
    """What a scheduler sees of Tune's controller when it chooses a trial to run: every trial
    in the order added (a recovered trial moved to the end and added again, as TuneController
    does), and the live ones, those not terminated."""

    def __init__(self, scheduler: FIFOScheduler):
        self.scheduler, self.trials, self.listed = scheduler, [], 0

    def add(self, t: Trial):
        if t in self.trials:
            self.trials.remove(t)
        self.trials.append(t)
        self.scheduler.on_trial_add(self, t)

    def get_trials(self) -> list[Trial]:
        self.listed += 1
        return self.trials

    def get_live_trials(self) -> set[Trial]:
        return {t for t in self.trials if t.status != Trial.TERMINATED}


@pytest.mark.parametrize("name", ["cell_asha", "fifo"])
def test_the_trial_chosen_to_run_is_fifos_among_the_live_trials_only(name):
    """Over random statuses of 12 trials, some recovered (added again), the sweep's scheduler
    (per-cell ASHA, or `scheduler.name: fifo`) chooses the trial FIFOScheduler chooses (the
    first pending in Tune's order, else the first paused, else none), looking at the live
    trials only; a per-cell ASHA pickled before it kept the order (an older sweep's tuner.pkl)
    chooses as well."""

    def new():
        if name == "cell_asha":
            return scheduler()  # metric and mode set, as Tune sets them
        return build_scheduler(load_space(ROOT / "spaces" / "jsb_optimization.yaml"), name, None)

    rng = np.random.default_rng(0)
    statuses = [Trial.PENDING, Trial.RUNNING, Trial.PAUSED, Trial.TERMINATED, Trial.ERROR]
    schedulers = [new()]
    if name == "cell_asha":  # as in an older sweep's tuner.pkl, pickled before it kept order
        old = new()
        del old._added, old._adds
        schedulers.append(pickle.loads(pickle.dumps(old)))
    for s in schedulers:
        trials = Trials(s)
        made = [trial(f"t{n}") for n in range(12)]
        for t in made:
            trials.add(t)
        chosen = set()
        for _ in range(300):
            for t in rng.choice(made, size=3, replace=False):
                t.set_status(statuses[rng.choice(5, p=[0.1, 0.2, 0.1, 0.5, 0.1])])
            if rng.random() < 0.1:
                trials.add(made[rng.integers(12)])  # recovered: to the end of Tune's list
            fifo = FIFOScheduler().choose_trial_to_run(trials)
            listed = trials.listed
            assert s.choose_trial_to_run(trials) is fifo
            assert trials.listed == listed  # every trial, finished ones included: not read
            chosen.add(fifo.status if fifo else None)
        assert chosen == {Trial.PENDING, Trial.PAUSED, None}


# -- the state across a resume ---------------------------------------------------------------
def test_restored_scheduler_reads_the_state_file_and_keeps_every_decision(tmp_path):
    """The sweep's scheduler records trials in its rungs and writes them to a file (here a
    file:// URI in a dir not made yet); `Tuner.restore` unpickles the scheduler as it was at
    the start. Reading the file on first use, it stops the trials stopped before (also on
    better losses), lets the others go on (also on worse losses), and judges a new trial on
    the rungs of the interrupted sweep."""
    state_file = tmp_path / "sweep" / "scheduler_state.json"
    first = scheduler(f"file://{state_file}")
    pickled = pickle.dumps(first)  # as Tune pickles it into tuner.pkl, before any result
    t1, t2, t3 = trial("t1"), trial("t2"), trial("t3")
    assert [report(first, t, 1, loss) for t, loss in ((t1, 1.0), (t2, 2.0), (t3, 0.5))] == [
        GO,
        STOP,
        GO,
    ]
    assert [report(first, t1, e, 1 / e) for e in (2, 3)] == [GO, GO]
    assert [report(first, t3, e, 0.8) for e in (2, 3)] == [GO, STOP]
    written = saved(state_file)
    assert written["rungs"] == {
        "rhn depth 1": {"1": {"t1": 1.0, "t2": 2.0, "t3": 0.5}, "3": {"t1": 1 / 3, "t3": 0.8}}
    }
    assert written["stopped"] == {"t2": 1, "t3": 3}
    header, *changes = log_lines(state_file)[0]  # the first line says what wrote it
    assert header == {
        "version": 3,
        "per_cell": True,
        "metric": "valid_loss",
        "mode": "min",
        "milestones": [1, 3],
    }
    assert not (state_file.exists() or state_file.parent.joinpath("decisions").exists())
    assert first.debug_string().splitlines() == [
        "Per-cell ASHA: rungs at epochs 1, 3; 2 trials stopped",
        "  rhn depth 1: 3 at 1, 2 at 3; 2 stopped",
    ]

    restored = pickle.loads(pickled)
    assert report(restored, t2, 1, 0.1) == STOP  # stopped at 1 before: stopped again
    assert [report(restored, t3, e, 0.01) for e in (1, 2, 3)] == [GO, GO, STOP]
    assert [report(restored, t1, e, 9.0) for e in (1, 2, 3, 4)] == [GO] * 4
    assert saved(state_file) == written  # re-reports change nothing
    assert report(restored, trial("t4"), 1, 0.9) == STOP  # [0.5, 1, 2]: 0.8333
    assert saved(state_file)["stopped"] == {"t2": 1, "t3": 3, "t4": 1}
    assert report(scheduler(), trial("t4"), 1, 0.9) == GO  # empty rungs (Ray's restore)


def test_restored_scheduler_keeps_each_settings_decisions(tmp_path):
    """A scheduler restored as `Tuner.restore` restores it gives a replicate its setting's
    decision made before the driver was restarted, unrecorded: b1 stops for b0 at 0.1, a1
    goes on with a0 at 9.0."""
    state_file = tmp_path / "state.json"
    first = scheduler(str(state_file))
    pickled = pickle.dumps(first)
    a0, a1 = trial("a0", setting="A"), trial("a1", setting="A", seed=1)
    b0, b1 = trial("b0", setting="B"), trial("b1", setting="B", seed=1)
    assert [report(first, a0, 1, 1.0), report(first, b0, 1, 2.0)] == [GO, STOP]
    written = saved(state_file)
    restored = pickle.loads(pickled)
    assert [report(restored, b1, 1, 0.1), report(restored, a1, 1, 9.0)] == [STOP, GO]
    assert saved(state_file) == {**written, "stopped": {"b0": 1, "b1": 1}}


def test_a_state_file_written_before_settings_were_kept_still_reads(tmp_path):
    """tests/data/scheduler_state_76f1c81.json, written by the scheduler of 76f1c81 (rungs and
    stops, no settings; its seeds competed) on these trials: at epoch 1 a0 1.0 went on, a1
    (A's seed 1) 1.5 and b0 2.0 stopped, c0 0.8 went on; at epoch 3 a0 0.5 went on. Read by
    today's scheduler, its trials keep their decisions whatever they report; a new replicate
    of A is judged on the rung as it is, then decides for A's later ones; c0 is judged at
    epoch 3; the file stays as it was, and the changes go to the log beside it."""
    state_file = tmp_path / "sweep" / "state.json"
    state_file.parent.mkdir()
    shutil.copy(ROOT / "tests" / "data" / "scheduler_state_76f1c81.json", state_file)
    text = state_file.read_text()
    old = json.loads(text)
    a0, a1, a2, a3 = (trial(f"a{seed}", setting="A", seed=seed) for seed in range(4))
    b0, c0 = trial("b0", setting="B"), trial("c0", setting="C")
    s = scheduler(f"file://{state_file}")
    assert [report(s, a1, 1, 0.1), report(s, b0, 2, 0.1)] == [STOP, STOP]
    assert [report(s, a0, epoch, 9.0) for epoch in (1, 2, 3, 4)] == [GO] * 4
    assert report(s, a2, 1, 0.9) == GO  # [0.8, 1, 1.5, 2]: 1
    assert report(s, a3, 1, 5.0) == GO  # A went on at epoch 1
    assert report(s, c0, 3, 0.6) == STOP  # [0.5]
    assert "version" not in old
    assert state_file.read_text() == text
    assert saved(state_file) == {
        "rungs": {
            "rhn depth 1": {
                "1": {**old["rungs"]["rhn depth 1"]["1"], "a2": 0.9},
                "3": {"a0": 0.5, "c0": 0.6},
            }
        },
        "settings": {setting_key(a2.config): {"1": GO}, setting_key(c0.config): {"3": STOP}},
        "stopped": {"a1": 1, "b0": 1, "c0": 3},
    }


def kernel_bytes() -> tuple[int, int]:
    """The bytes this process has read and written through system calls (/proc/self/io)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["rchar"]), int(fields["wchar"])


def test_a_save_costs_its_own_changes_not_the_sweeps(tmp_path):
    """The scheduler's state is a log of changes: a save appends the decisions made since the
    last (one line), so the 3,000th trial's save writes and reads as many bytes as the 30th's
    (the kernel's count), where writing the whole state (as rhnsearch did) cost 100 times
    more. A scheduler pickled mid-sweep reads the log once and decides as the first would."""
    state_file = tmp_path / "sweep" / "scheduler" / "state.json"
    s, rng = scheduler(str(state_file)), np.random.default_rng(0)
    cells = [("rhn", 1), ("dtrnn", 2), ("lstm", 1)]

    def one_trial(n: int) -> tuple[int, int]:
        t = trial(f"t{n}", *cells[n % 3])
        report(s, t, 1, float(rng.uniform(1, 2)))
        read, written = kernel_bytes()
        storage.LATER.wait()  # the save: queued by the decision, made on the storage thread
        after = kernel_bytes()
        return after[0] - read, after[1] - written

    costs = [one_trial(n) for n in range(3000)]
    early, late = np.mean(costs[20:40], axis=0), np.mean(costs[-20:], axis=0)
    whole = len(json.dumps(saved(state_file)))
    assert late[1] < 1.5 * early[1] and late[1] < whole / 50, (early, late, whole)
    assert late[0] < 1.5 * early[0] + 1024, (early, late)
    restored = pickle.loads(pickle.dumps(s))  # pickled mid-sweep: it reads the log again
    for n in range(3000, 3050):  # the same decisions as the first scheduler's
        t, loss = trial(f"t{n}", *cells[n % 3]), float(rng.uniform(1, 2))
        assert report(restored, t, 1, loss) == report(s, t, 1, loss)


def test_the_log_skips_a_half_written_line_and_refuses_a_newer_format(tmp_path):
    """A driver killed in the middle of an append leaves a line without its end: it is no
    change, and the next append writes over it. A log a newer rhnsearch began (version 4) is
    refused in one line, naming it."""
    state_file = tmp_path / "state.json"
    s = scheduler(str(state_file))
    assert [report(s, trial(n), 1, loss) for n, loss in (("a", 1.0), ("b", 2.0))] == [GO, STOP]
    log = tmp_path / "decisions.jsonl"
    storage.LATER.wait()
    with log.open("a") as f:
        f.write('[{"trial": "a", "stop')  # cut short by a SIGKILL
    restored = scheduler(str(state_file))
    assert report(restored, trial("c"), 1, 1.5) == STOP  # on [1.0, 2.0]
    assert saved(state_file)["stopped"] == {"b": 1, "c": 1}
    changes = [c for line in log_lines(state_file) for c in line]  # each line whole
    assert ["version" in changes[0], *(c["trial"] for c in changes[1:])] == [True, "a", "b", "c"]

    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / "decisions.jsonl").write_text('[{"version": 4, "per_cell": true}]\n')
    with pytest.raises(UserError, match=r"decisions is of format version 4, .* versions 1 to 3"):
        report(scheduler(str(newer / "state.json")), trial("a"), 1, 1.0)


def test_the_log_is_beside_the_state_file_in_a_folder_or_a_bucket():
    """The log's location keeps a bucket URI's options at its end."""
    bucket = "s3://lab/sweeps/a/scheduler/state.json?endpoint_override=127.0.0.1:9000"
    assert (
        decisions_log(bucket)
        == "s3://lab/sweeps/a/scheduler/decisions?endpoint_override=127.0.0.1:9000"
    )
    assert (
        decisions_log("/data/sweeps/a/scheduler/state.json") == "/data/sweeps/a/scheduler/decisions"
    )


def test_build_scheduler_follows_the_space(tmp_path):
    space = ROOT / "spaces" / "jsb_optimization.yaml"
    state_file = str(tmp_path / "scheduler_state.json")
    default = build_scheduler(load_space(space, preset="smoke"), "cell_asha", state_file)
    assert default.per_cell and default.milestones == [1, 3]
    assert default.state_file == state_file and default.max_t == 9
    assert load_space(space, preset="smoke").scheduler.name == "cell_asha"
    paper = load_space(space, preset="paper")
    assert build_scheduler(paper, "asha", state_file).milestones == [5, 15, 45]
    assert not build_scheduler(paper, "asha", state_file).per_cell
    assert type(build_scheduler(paper, "fifo", state_file)) is LiveFIFOScheduler


# -- real Tuners -----------------------------------------------------------------------------
EPOCHS = 4  # rungs at epochs 1 and 3
FAST = [{"arch": "rhn", "depth": 1, "tied": False, "q": q} for q in (0.0, 0.5, 0.1)]
SLOW = [{**cell, "arch": "dtrnn", "depth": 6} for cell in FAST]


@pytest.fixture(scope="module")
def local_ray():
    ray_compat.init_on_loopback(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


def learning_curve():
    """A trainable (a local function: the workers need not import this file): loss
    1/epoch + q, the slow cell (dtrnn depth 6) 1 higher. The setting whose q is
    config["fail_q"] fails before its first report until the file config["go"] exists."""

    def trainable(config):
        cell = config["cell"]
        if cell["q"] == config.get("fail_q") and not os.path.exists(config["go"]):
            raise RuntimeError("no go")
        offset = 1.0 if cell["arch"] == "dtrnn" else 0.0
        for epoch in range(1, EPOCHS + 1):
            time.sleep(0.01)
            tune.report({"epoch": epoch, "valid_loss": offset + 1 / epoch + cell["q"]})

    return trainable


def tuner(tmp_path, name: str, settings: list, per_cell: bool = True, **config):
    """One trial per setting, in the order given, one at a time (ASHA depends on the order
    results arrive); the scheduler's state where a sweep keeps it."""
    scheduler = CellASHAScheduler(
        max_t=EPOCHS,
        grace_period=1,
        reduction_factor=3,
        per_cell=per_cell,
        state_file=str(tmp_path / name / SCHEDULER_STATE_FILE),
    )
    return tune.Tuner(
        learning_curve(),
        param_space={"cell": tune.grid_search(settings), **config},
        tune_config=tune.TuneConfig(
            metric="valid_loss",
            mode="min",
            max_concurrent_trials=1,
            reuse_actors=True,
            scheduler=scheduler,
        ),
        run_config=tune.RunConfig(name=name, storage_path=str(tmp_path), verbose=0),
    )


def outcome(results, tmp_path, name: str) -> tuple[dict, dict]:
    """({(arch, q): last epoch reported}, the scheduler's state file)."""
    last = {
        (r.config["cell"]["arch"], r.config["cell"]["q"]): r.metrics.get("epoch") for r in results
    }
    return last, saved(tmp_path / name / SCHEDULER_STATE_FILE)


def test_tuner_cell_asha_stops_only_the_losers_within_each_cell(local_ray, tmp_path):
    """The fast cell runs first. Per cell, each cell's best setting runs to the end and its
    worse ones are stopped (at epoch 1: 1.5 > 1.0; at epoch 3: 0.433 > 0.333); globally,
    every setting of the slow cell is stopped at epoch 1 for the fast cell's losses."""
    results = tuner(tmp_path, "cell", FAST + SLOW).fit()
    assert not results.errors
    per_cell, state = outcome(results, tmp_path, "cell")
    within = {0.0: EPOCHS, 0.5: 1, 0.1: 3}
    assert per_cell == {
        (arch, q): epoch for arch in ("rhn", "dtrnn") for q, epoch in within.items()
    }
    assert sorted(state["stopped"].values()) == [1, 1, 3, 3]
    assert set(state["rungs"]) == {"rhn depth 1", "dtrnn depth 6"}

    results = tuner(tmp_path, "global", FAST + SLOW, per_cell=False).fit()
    assert not results.errors
    everyone, state = outcome(results, tmp_path, "global")
    assert everyone == {
        **{("rhn", q): epoch for q, epoch in within.items()},
        **{("dtrnn", q): 1 for q in within},
    }
    assert sorted(state["stopped"].values()) == [1, 1, 1, 1, 3]


def test_tuner_restore_judges_on_the_rungs_of_the_first_run(local_ray, tmp_path):
    """A sweep ends with one setting failed (q 0.1, before any report); `Tuner.restore`
    runs it again with the scheduler pickled at the start. It is judged on the rungs of the
    first run (it goes on at epoch 1, 1.1 < 1.167, and is stopped at epoch 3, 0.433 >
    0.333; on empty rungs it would run to the end), and its record stays in the state file
    (Tune's restore copies files at the top of the experiment dir and uploads them back
    over newer ones)."""
    go = tmp_path / "go"
    first = tuner(tmp_path, "resumed", FAST, fail_q=0.1, go=str(go)).fit()
    assert len(first.errors) == 1
    last, state = outcome(first, tmp_path, "resumed")
    assert last == {("rhn", 0.0): EPOCHS, ("rhn", 0.5): 1, ("rhn", 0.1): None}
    best, worst = (
        next(r.metrics["trial_id"] for r in first if r.config["cell"]["q"] == q) for q in (0.0, 0.5)
    )
    assert state["stopped"] == {worst: 1}

    go.touch()
    restored = tune.Tuner.restore(str(tmp_path / "resumed"), learning_curve(), restart_errored=True)
    results = restored.fit()
    assert not results.errors
    last, state = outcome(results, tmp_path, "resumed")
    assert last == {("rhn", 0.0): EPOCHS, ("rhn", 0.5): 1, ("rhn", 0.1): 3}
    failed = next(r.metrics["trial_id"] for r in results if r.config["cell"]["q"] == 0.1)
    assert state["stopped"] == {worst: 1, failed: 3}
    assert set(state["rungs"]["rhn depth 1"]["3"]) == {best, failed}


def test_tune_holds_only_the_newest_checkpoint_of_each_trial(local_ray, tmp_path):
    """A sweep's KeepNewestCheckpoint: of the 5 checkpoints a trial registers, the storage
    keeps the newest and so does Tune, in memory (each trial's best checkpoints) and in its
    saved experiment state (with its own num_to_keep off, Tune would hold all 5)."""

    def trainable(config):
        for epoch in range(1, 6):
            with tempfile.TemporaryDirectory() as folder:
                (Path(folder) / "epoch").write_text(str(epoch))
                tune.report({"epoch": epoch}, checkpoint=tune.Checkpoint.from_directory(folder))

    results = tune.Tuner(
        trainable,
        param_space={"x": tune.grid_search([0, 1])},
        run_config=tune.RunConfig(
            name="newest", storage_path=str(tmp_path), verbose=0, callbacks=[KeepNewestCheckpoint()]
        ),
    ).fit()
    storage.LATER.wait()
    assert not results.errors and len(results) == 2
    newest = "checkpoint_000004"
    for result in results:
        assert [c.path.rsplit("/", 1)[-1] for c, _ in result.best_checkpoints] == [newest]
        assert [p.name for p in Path(result.path).glob("checkpoint_*")] == [newest]
    (state,) = (tmp_path / "newest").glob("experiment_state-*.json")
    for _, run in json.loads(state.read_text())["trial_data"]:
        manager = bytes.fromhex(json.loads(run)["checkpoint_manager"]["value"])  # its pickle
        assert set(re.findall(rb"checkpoint_\d{6}", manager)) == {newest.encode()}


def test_tune_keeps_only_the_sweeps_metric_of_an_ended_trial(local_ray, tmp_path):
    """A sweep's ForgetEndedTrialsMetrics: each trial reports 3 metrics for 5 epochs (one
    fails at its third); once it has ended, completed or failed, Tune's record of it holds the
    running statistics of the sweep's metric alone (Tune would hold those of the 3 and of its
    own 8), as its saved experiment state shows; Tune's ExperimentAnalysis still finds the
    best trial by that metric's mean. Each trial's last result keeps every metric."""

    def trainable(config):
        for epoch in range(1, 6):
            if config["x"] == 1 and epoch == 3:
                raise RuntimeError("diverged")
            tune.report({"valid_loss": config["x"] + 1 / epoch, "epoch": epoch, "lr": 0.1})

    results = tune.Tuner(
        trainable,
        param_space={"x": tune.grid_search([0, 1])},
        tune_config=tune.TuneConfig(metric="valid_loss", mode="min"),
        run_config=tune.RunConfig(
            name="ended",
            storage_path=str(tmp_path),
            verbose=0,
            callbacks=[ForgetEndedTrialsMetrics("valid_loss")],
        ),
    ).fit()
    assert len(results) == 2 and len(results.errors) == 1
    assert all({"epoch", "lr", "valid_loss"} <= r.metrics.keys() for r in results)
    (state,) = (tmp_path / "ended").glob("experiment_state-*.json")
    trial_data = json.loads(state.read_text())["trial_data"]
    statuses = sorted(json.loads(info)["status"] for info, _ in trial_data)
    assert statuses == [Trial.ERROR, Trial.TERMINATED]
    for _, run in trial_data:
        run = json.loads(run)
        assert run["metric_analysis"].keys() == run["metric_n_steps"].keys() == {"valid_loss"}
    best = results.get_best_result(scope="avg")
    assert best.config["x"] == 0 and best.metrics["valid_loss"] == 0.2


def test_a_restored_tuner_holds_no_second_copy_of_the_saved_trials(local_ray, tmp_path):
    """Tune's restore builds an ExperimentAnalysis of every saved trial and keeps it through
    the resumed fit, which never reads it: a second copy of each trial (0.1 MB a trial, some
    600 MB of a driver resumed at 6,000 trials). The sweep's restore (compat's
    `restored_tuner`) does not build it; the resumed fit still runs the errored trial again
    and returns every trial's result."""
    from ray.tune import ExperimentAnalysis

    from rhnsearch.compat.ray import restored_tuner

    def trainable(config):
        marker = tmp_path / f"failed-{config['x']}"
        for epoch in range(1, 4):
            if config["x"] == 1 and epoch == 2 and not marker.exists():
                marker.touch()
                raise RuntimeError("failed once")
            tune.report({"valid_loss": config["x"] + 1 / epoch, "epoch": epoch})

    results = tune.Tuner(
        trainable,
        param_space={"x": tune.grid_search([0, 1])},
        tune_config=tune.TuneConfig(metric="valid_loss", mode="min"),
        run_config=tune.RunConfig(name="restored", storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert len(results.errors) == 1
    del results

    # pytest >= 9.2 also captures non-propagating loggers (Ray's): the first fit's "Trial task
    # failed" record keeps its traceback, and so that fit's Tuner and its analysis, alive
    gc.collect()
    before = {id(o) for o in gc.get_objects() if isinstance(o, ExperimentAnalysis)}
    tuner = restored_tuner(str(tmp_path / "restored"), trainable)
    gc.collect()
    assert not [
        o for o in gc.get_objects() if isinstance(o, ExperimentAnalysis) and id(o) not in before
    ]
    results = tuner.fit()
    assert len(results) == 2 and not results.errors
    assert sorted(r.metrics["epoch"] for r in results) == [3, 3]
