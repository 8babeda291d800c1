"""The sweep's searchers without a Ray cluster: the order and settings of the random search per
cell, the rounds of `sweep extend`, an Optuna study per cell with each sampler, fed real
values, and their saved states made to agree with Tune's saved trials before a resume."""

import math
import os
import pickle
import subprocess
import sys

import optuna
import pytest
from ray.tune.search import ConcurrencyLimiter, SearchGenerator

from rhnsearch.compat import ray as ray_compat
from rhnsearch.files.layout import OPTUNA_JOURNAL
from rhnsearch.search import searchers
from rhnsearch.search.searchers import (
    LOCK_GRACE,
    CellSearcher,
    build_searcher,
    load_study,
    optuna_storage,
    round_slots,
    saved_for,
    study_names,
)
from rhnsearch.search.space import load_space

from conftest import JSB_SPACE

CELLS = ["archs=[rhn,dtrnn]", "depths=[1,2]"]


def space_and_cells(*overrides):
    space = load_space(JSB_SPACE, preset="smoke", overrides=[*CELLS, *overrides])
    return space, space.cells()


def suggestions(searcher: CellSearcher, prefix: str = "t") -> list[dict]:
    configs = []
    while (config := searcher.suggest(f"{prefix}{len(configs)}")) != CellSearcher.FINISHED:
        configs.append(config)
    return configs


def setting(config: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in config.items() if k != "seed"))


def test_random_settings_come_a_cell_at_a_time_and_a_round_goes_on_with_the_stream():
    space, cells = space_and_cells("samples=4")
    whole = suggestions(CellSearcher(space, cells, {"epochs": 9}, round_slots(4, 1)))
    assert [c["cell"] for c in whole] == list(cells) * 4  # each cell in turn
    assert len({setting(c) for c in whole}) == 16  # no setting twice
    for config in whole:
        assert ("t_bias" in config) == config["cell"].startswith("rhn"), config
        assert config["epochs"] == 9 and 0.001 <= config["lr"] <= 1.0
    first = suggestions(CellSearcher(space, cells, {}, round_slots(2, 1)))
    later = suggestions(CellSearcher(space, cells, {}, round_slots(4, 1, done=(2, 1))))
    assert first + later == [{k: v for k, v in c.items() if k != "epochs"} for c in whole]
    other = suggestions(CellSearcher(space.model_copy(update={"seed": 1}), cells, {}, [(0, 0)]))
    assert other[0]["lr"] != whole[0]["lr"]


def test_more_seeds_run_the_same_settings_with_the_next_seeds():
    space, cells = space_and_cells("params={lr: {loguniform: [0.01, 1]}}", "seeds=2")
    constants = {"seed": 10}
    first = suggestions(CellSearcher(space, cells, constants, round_slots(2, 2)))
    more = suggestions(CellSearcher(space, cells, constants, round_slots(2, 3, done=(2, 2))))
    assert [c["seed"] for c in first] == [10, 11] * 8
    assert [c["seed"] for c in more] == [12] * 8
    assert [c["lr"] for c in more] == [c["lr"] for c in first[::2]]
    assert len({c["lr"] for c in first}) == 8


@pytest.mark.parametrize("saved", [4, 6])
def test_saved_search_states_made_to_count_the_trials_tune_saved(saved, tmp_path):
    """A driver killed between the uploads of its saved states: the search states count 5
    trials, Tune's experiment state `saved`. Made to agree, the restored search asks for
    slot `saved` next (a trial Tune lacks is asked for again, one it has is not asked twice),
    and the concurrency limiter holds only the live trials Tune has."""
    space, cells = space_and_cells("samples=4")

    def generator() -> SearchGenerator:
        searcher = CellSearcher(space, cells, {}, round_slots(4, 1))
        return SearchGenerator(ConcurrencyLimiter(searcher, max_concurrent=8))

    whole = suggestions(CellSearcher(space, cells, {}, round_slots(4, 1)))
    killed = generator()
    asked, ids = [f"t{i}" for i in range(5)], [f"t{i}" for i in range(saved)]
    for trial_id in asked:
        killed.searcher.suggest(trial_id)
    killed.set_state({"counter": 5, "total_samples": 16, "finished": False, "experiment": None})
    killed.save_to_dir(str(tmp_path), "s")
    search, searcher = ray_compat.newest_search_states(os.listdir(tmp_path))
    for name, align in [(search, ray_compat.search_state_for), (searcher, saved_for)]:
        aligned = align((tmp_path / name).read_bytes(), set(ids))
        (tmp_path / name).write_bytes(aligned)
        assert align(aligned, set(ids)) is None  # agrees now
    resumed = generator()
    resumed.restore_from_dir(str(tmp_path))
    assert resumed.get_state()["counter"] == saved
    assert resumed.searcher.live_trials == set(asked) & set(ids)
    assert resumed.searcher.num_unfinished_live_trials == min(saved, 5)
    assert resumed.searcher.suggest("next") == whole[saved]


def test_trials_asked_after_the_searchers_saved_state_are_told_to_their_studies(tmp_path):
    """A driver killed between the uploads of its saved states, the searcher's older than
    Tune's experiment state: the resumed searcher was never saved with the last two trials it
    asked for, which Tune restores and runs to their end. Their outcomes reach the Optuna
    trials asked for them (found by the Tune trial id each carries), not only the others'."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space, cells = space_and_cells("search=optuna")
    slots = round_slots(2, 1)
    killed = build_searcher(space, cells, {}, slots, "optuna", str(tmp_path), "s")
    configs = {f"t{i}": killed.suggest(f"t{i}") for i in range(2)}
    path = tmp_path / "searcher.pkl"
    killed.save(str(path))  # the searcher's state, uploaded before t2 and t3 were asked for
    configs |= {f"t{i}": killed.suggest(f"t{i}") for i in range(2, 4)}
    path.write_bytes(saved_for(path.read_bytes(), set(configs)))  # Tune's state has all four
    resumed = build_searcher(space, cells, {}, slots, "optuna", str(tmp_path), "s")
    resumed.restore(str(path))
    for i, trial_id in enumerate(configs):
        resumed.on_trial_complete(trial_id, {"status": "completed", "best_valid_loss": 10.0 + i})
    told = {
        t.params["lr"]: t.value
        for label in cells
        for t in load_study(str(tmp_path), f"s/{label}").trials
        if t.state.name == "COMPLETE"
    }
    assert told == {configs[f"t{i}"]["lr"]: 10.0 + i for i in range(4)}


@pytest.mark.parametrize("sampler", ["tpe", "gp", "cmaes"])
def test_each_cell_has_its_own_study_told_each_trials_outcome(sampler, tmp_path):
    """Twelve trials a cell, the loss a real function of the setting: each cell's study has
    its own trials (no t_bias for DT-RNN), told the best valid loss, inf for a diverged trial
    and a failure for an errored one. A searcher restored from its saved state (a resumed
    driver) tells the trials it had asked for and draws no setting again."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space, cells = space_and_cells(
        "params={lr: {loguniform: [0.001, 1]}, t_bias: "
        "{uniform: [-5, -1]}, momentum: {uniform: [0, 0.95]}}",
        f"sampler={sampler}",
        "search=optuna",
    )
    searcher = build_searcher(space, cells, {}, round_slots(12, 1), "optuna", str(tmp_path), "s")

    def loss(config):
        return (math.log10(config["lr"]) + 1) ** 2 + (config["momentum"] - 0.9) ** 2

    for i in range(40):
        config = searcher.suggest(f"t{i}")
        outcome = {"status": "diverged" if i == 5 else "completed", "best_valid_loss": loss(config)}
        searcher.on_trial_complete(f"t{i}", outcome, error=i == 6)
        if i == 20:  # the driver is killed and resumed: the searcher's state is saved, read
            path = tmp_path / "searcher.pkl"
            searcher.save(str(path))
            searcher = build_searcher(
                space, cells, {}, round_slots(12, 1), "optuna", str(tmp_path), "s"
            )
            searcher.restore(str(path))
    rest = suggestions(searcher, prefix="r")
    for i, config in enumerate(rest):
        searcher.on_trial_complete(
            f"r{i}", {"status": "completed", "best_valid_loss": loss(config)}
        )
    assert len(rest) == 8  # 48 in all
    assert sorted(study_names(str(tmp_path))) == sorted(f"s/{c}" for c in cells)
    for label in cells:
        study = load_study(str(tmp_path), f"s/{label}")
        trials = study.trials
        assert len(trials) == 12 and all(t.state.is_finished() for t in trials)
        assert all(("t_bias" in t.params) == label.startswith("rhn") for t in trials)
        assert len({tuple(sorted(t.params.items())) for t in trials}) == 12
        for t in trials:
            if t.state.name == "COMPLETE" and math.isfinite(t.value):
                assert t.value == pytest.approx(loss(t.params))
    states = [
        t.state.name for label in cells for t in load_study(str(tmp_path), f"s/{label}").trials
    ]
    assert states.count("FAIL") == 1
    values = [t.value for label in cells for t in load_study(str(tmp_path), f"s/{label}").trials]
    assert values.count(math.inf) == 1
    assert (
        type(searcher.study(next(iter(cells))).sampler).__name__
        == {"tpe": "TPESampler", "gp": "GPSampler", "cmaes": "CmaEsSampler"}[sampler]
    )


def test_every_cells_study_reads_the_sweeps_journal_through_one_storage(tmp_path, monkeypatch):
    """A journal storage replays and holds every study of its file: with a storage for each
    cell, every trial of the sweep was held once for each cell (0.4 GB more at 10,000
    trials). One storage a searcher, opened again by a restored one; every cell's trials
    reach the journal."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    opened = []

    def counted(sweep_dir):
        opened.append(sweep_dir)
        return optuna_storage(sweep_dir)

    monkeypatch.setattr(searchers, "optuna_storage", counted)
    space, cells = space_and_cells("search=optuna")
    searcher = build_searcher(space, cells, {}, round_slots(3, 1), "optuna", str(tmp_path), "s")
    for i in range(8):
        searcher.suggest(f"t{i}")
        searcher.on_trial_complete(f"t{i}", {"status": "completed", "best_valid_loss": 1.0 + i})
    assert len(cells) == 4 and opened == [str(tmp_path)]
    restored = pickle.loads(pickle.dumps(searcher))  # as Tune's saved experiment holds it
    assert suggestions(restored, prefix="r") and len(opened) == 2
    told = [len(load_study(str(tmp_path), f"s/{label}").trials) for label in cells]
    assert told == [3, 3, 3, 3]


TAKE_LOCK = """
import sys
from optuna.storages.journal import JournalFileOpenLock, JournalFileSymlinkLock
lock = {"file": JournalFileOpenLock, "link": JournalFileSymlinkLock}[sys.argv[2]]
lock(sys.argv[1]).acquire()  # and never released: killed mid-append
"""

OPEN_STUDY = """
import sys, time, optuna
from rhnsearch.search.searchers import optuna_storage
start = time.monotonic()
optuna.create_study(study_name="s/c", storage=optuna_storage(sys.argv[1]), load_if_exists=True)
print(time.monotonic() - start)
"""


@pytest.mark.parametrize("left", ["file", "link"])
def test_a_journal_lock_a_killed_driver_left_in_a_moved_folder_is_taken_over(tmp_path, left):
    """A driver killed while it appends to the studies' journal leaves the journal's lock; the
    sweep's folder is then moved (a disk mounted elsewhere). The resumed driver opens its
    studies: a lock file (rhnsearch's lock) once it has stood LOCK_GRACE s, a symlink (Optuna's
    default lock, which rhnsearch used before, dangling after the move) at once."""
    ran_in, moved = tmp_path / "ran", tmp_path / "moved"
    ran_in.mkdir()
    optuna.create_study(study_name="s/c", storage=optuna_storage(str(ran_in)))
    journal = f"{OPTUNA_JOURNAL}.log"
    subprocess.run([sys.executable, "-c", TAKE_LOCK, str(ran_in / journal), left], check=True)
    ran_in.rename(moved)
    assert os.path.lexists(moved / f"{journal}.lock")
    proc = subprocess.run(
        [sys.executable, "-c", OPEN_STUDY, str(moved)],
        capture_output=True,
        text=True,
        timeout=LOCK_GRACE + 60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    waited = float(proc.stdout)
    assert waited < 5 if left == "link" else LOCK_GRACE <= waited < LOCK_GRACE + 30
    assert study_names(str(moved)) == ["s/c"]
