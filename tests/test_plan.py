"""`rhnsearch sweep plan`: the expected trial-epochs of ASHA checked against hand-computed
cases, and the plan of a real space timed on the real JSB data."""

import json

import pytest

from rhnsearch.search import plan as plan_module
from rhnsearch.search.plan import CellPlan, expected_epochs, kept_fractions, wall_seconds
from rhnsearch.search.space import load_space

from conftest import JSB_SPACE, ROOT, free_port, rhnsearch_main


def test_asha_keeps_the_only_trial_and_half_of_two():
    """One trial is always kept (it is the first at each rung); of two, the second goes on
    when it is better than the first, half of the time: 3 of 4 trials go on."""
    assert kept_fractions(1, [2, 6], 3) == [1.0, 1.0]
    assert kept_fractions(2, [2], 3)[0] == pytest.approx(0.75, abs=0.03)


def test_expected_epochs_follow_the_rungs():
    space = load_space(JSB_SPACE, preset="cpu")  # 40 epochs, rungs at 2, 6 and 18
    assert expected_epochs(space, "fifo", 10) == 400
    kept = kept_fractions(10, [2, 6, 18], 3)
    assert 0 < kept[2] < kept[1] < kept[0] < 1
    assert expected_epochs(space, "cell_asha", 10) == pytest.approx(
        10 * (2 + kept[0] * 4 + kept[1] * 12 + kept[2] * 22)
    )


def test_wall_time_gives_each_trial_to_the_first_free_slot():
    rows = [CellPlan("a", 1, 10.0, 2, 2, 2), CellPlan("b", 1, 30.0, 1, 1, 1)]  # 10+10, 30
    assert wall_seconds(rows, 1) == 50
    assert wall_seconds(rows, 2) == 30  # a1 | b, then a2 after a1
    assert wall_seconds(rows, 8) == 30


def test_plan_of_the_jsb_smoke_preset(tmp_path, data_dir):
    plan_smoke = ("sweep", "plan", JSB_SPACE, "--preset", "smoke", "--data-dir", data_dir)
    proc = rhnsearch_main(*plan_smoke, "--cpus", "2", "--confirm", "2", "3", "--json", cwd=tmp_path)
    plan = json.loads(proc.stdout)
    space = load_space(JSB_SPACE, preset="smoke")
    assert [c["cell"] for c in plan["cells"]] == list(space.cells())
    for cell in plan["cells"]:
        assert cell["epoch_seconds"] > 0
        assert cell["fifo_epochs"] == space.samples * space.epochs
        assert cell["expected_epochs"] < cell["fifo_epochs"]  # ASHA stops some
        # `sweep confirm --top 2 --seeds 3`: 6 trials a cell, every epoch
        assert cell["confirm_epochs"] == 2 * 3 * space.epochs
        assert cell["trials"] == space.samples + 6
        assert cell["seconds"] == pytest.approx(
            cell["epoch_seconds"] * (cell["expected_epochs"] + cell["confirm_epochs"])
        )
    assert plan["trial_seconds"] == pytest.approx(sum(c["seconds"] for c in plan["cells"]))
    # two 1-CPU trials at once: about half the trials' time, never less (but for rounding:
    # the slots add the same seconds in another order; CI once saw half exactly, 2 ulp under)
    half = plan["trial_seconds"] / 2
    assert half * (1 - 1e-12) <= plan["wall_seconds"] < plan["trial_seconds"]
    assert "timing rhn d1" in proc.stderr
    for confirm, says in (
        (["3", "2"], "confirm 1 to 2 setting(s) a cell"),
        (["1", "1"], "at least 2 seeds"),
    ):
        proc = rhnsearch_main(
            *plan_smoke, "--cpus", "2", "--confirm", *confirm, cwd=tmp_path, check=False
        )
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert says in proc.stderr


@pytest.mark.slow  # times every cell of a PTB-sized plan
def test_ptb_without_its_text_is_timed_on_random_tokens_of_its_size(tmp_path):
    """Where PTB's text cannot be had (its download refused here), a PTB space's cells are
    timed on random tokens of PTB's size and vocabulary, and the plan says so."""
    space = ROOT / "spaces" / "ptb_budget.yaml"
    settings = ["--set", "dataset=ptb", "--set", "depths=[1,4]", "--set", "tied=[true]"]
    proc = rhnsearch_main(
        "sweep",
        "plan",
        space,
        "--preset",
        "smoke",
        *settings,
        "--data-dir",
        tmp_path / "no-data",
        "--cpus",
        "2",
        "--json",
        cwd=tmp_path,
        env={"RHNSEARCH_DATA_MIRROR": f"http://127.0.0.1:{free_port()}"},
    )
    plan = json.loads(proc.stdout)
    assert plan["data"] == "random tokens of PTB's size"
    assert "with random tokens of PTB's size" in proc.stderr
    cells = load_space(
        space, preset="smoke", overrides=[s for s in settings if s != "--set"]
    ).cells(10000)
    assert [(c["cell"], c["params"]) for c in plan["cells"]] == [
        (label, cell.params) for label, cell in cells.items()
    ]
    assert all(c["epoch_seconds"] > 0 for c in plan["cells"])
    assert not list((tmp_path / "no-data").rglob("*.txt"))


def test_plan_on_gpus_for_a_space_of_cpu_trials_is_one_line(tmp_path, data_dir):
    proc = rhnsearch_main(
        "sweep",
        "plan",
        JSB_SPACE,
        "--preset",
        "smoke",
        "--gpus",
        "4",
        "--data-dir",
        data_dir,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "resources.gpu is 0" in proc.stderr


def test_a_settings_seeds_share_its_expected_epochs(monkeypatch):
    """ASHA compares settings, each run with all its seeds: with 3 seeds a cell runs 3 times
    the trial-epochs of 1 seed (its 2 settings compared, not 6 trials)."""
    monkeypatch.setattr(plan_module, "epoch_seconds", lambda config, data: 1.0)
    params = "params={lr: {loguniform: [0.05, 0.5]}}"

    def cells(seeds: int) -> list:
        space = load_space(JSB_SPACE, preset="smoke", overrides=[params, f"seeds={seeds}"])
        return plan_module.plan(space, None)

    for one, three in zip(cells(1), cells(3)):
        assert three.trials == 3 * one.trials == 6
        assert three.expected_epochs == pytest.approx(3 * one.expected_epochs)
        assert one.expected_epochs == expected_epochs(
            load_space(JSB_SPACE, preset="smoke"), "cell_asha", 2
        )
