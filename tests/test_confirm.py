"""A confirmation round without a sweep: the choosing of each cell's best settings and of new
seeds on a hand-made trials frame, the round as a sweep's record keeps it (an old state file
confirmed, written and read back), the searcher yielding its trials, and the confirmed table
with its intervals computed by hand."""

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from rhnsearch.errors import UserError
from rhnsearch.files.layout import STATE_FILE
from rhnsearch.results.confirmed import confirmed_gaps, confirmed_settings
from rhnsearch.search.searchers import ConfirmSearcher
from rhnsearch.search.space import Space
from rhnsearch.search.trial import TrialSpec
from rhnsearch.sweep.confirm import new_seeds, sampled_setting, top_settings
from rhnsearch.sweep.record import Confirmation, Confirmed, Round, read_record, write_record

DATA = Path(__file__).parent / "data"


def frame(rows) -> pd.DataFrame:
    """A trials frame of (trial_id, cell, lr, seed, status, loss[, round, confirms]) rows."""
    out = pd.DataFrame(
        [
            {
                "trial_id": r[0],
                "params.cell": r[1],
                "params.lr": r[2],
                "params.seed": r[3],
                "status": r[4],
                "metrics.best_valid_loss": r[5],
                "round": r[6] if len(r) > 6 else "search",
                "params.confirms": r[7] if len(r) > 7 else None,
                "run_id": f"run-{r[0]}",
            }
            for r in rows
        ]
    )
    return out


SEARCH = [
    ("t1", "a", 0.1, 1, "completed", 3.0),
    ("t2", "a", 0.1, 2, "completed", 2.0),  # the same setting as t1, its best seed
    ("t3", "a", 0.2, 1, "stopped", 2.5),
    ("t4", "a", 0.3, 1, "diverged", 1.0),  # not finished: never chosen
    ("t0", "a", 0.4, 1, "completed", 2.5),  # ties t3: the lower trial id first
    ("t5", "b", 0.5, 1, "completed", float("nan")),
    ("t6", "b", 0.6, 1, "completed", 4.0),
    ("t7", "b", 0.7, 1, "failed", 0.5),
]


def test_top_settings_rank_finished_settings_by_their_best_trial_ties_by_id():
    trials = frame(SEARCH + [("c1", "b", 0.6, 9, "completed", 0.1, "confirm", "t6")])
    chosen = top_settings(trials, ["a", "b"], 1, ["lr", "seed"])
    assert list(chosen["trial_id"]) == ["t2", "t6"]  # a confirmation trial is no setting
    with pytest.raises(UserError, match=r"--top 2: cell b has 1 finished setting\(s\)"):
        top_settings(trials, ["a", "b"], 2, ["lr"])
    chosen = top_settings(frame(SEARCH[:5]), ["a"], 3, ["lr"])
    assert list(chosen["trial_id"]) == ["t2", "t0", "t3"]
    assert new_seeds(trials, 3) == (10, 11, 12)


def test_a_setting_is_read_back_typed_from_its_mlflow_params():
    space = Space.model_validate(
        {
            **json.loads((DATA / "sweep_state_dd9c428.json").read_text())["space"],
            "params": {
                "lr": {"loguniform": [0.01, 1.0]},
                "bptt": {"randint": [10, 30]},
                "optimizer": {"choice": ["sgd", "adam"]},
                "seed": {"randint": [0, 100]},
            },
        }
    )
    lr = float(np.float64(0.123456789012345678))
    params = {"lr": str(lr), "bptt": "20", "optimizer": "adam", "seed": "7", "cell": "x"}
    assert sampled_setting(params, space) == {"lr": lr, "bptt": 20, "optimizer": "adam"}


def test_an_old_state_file_is_confirmed_written_and_read_back(tmp_path):
    (tmp_path / "old").mkdir()
    shutil.copy(DATA / "sweep_state_dd9c428_extended.json", tmp_path / "old" / STATE_FILE)
    old = replace(read_record(str(tmp_path), "old"), storage=str(tmp_path))
    assert old.rounds == (Round(2, 1), Round(3, 1, (2, 1)))  # it still loads, as it was
    confirm = Confirmation((Confirmed("rhn d1 w19", "t_00001", {"lr": 0.25}),), (5, 6), 6)
    record = old.confirmed(confirm)
    assert record.trials == old.trials + 2 and record.space == old.space
    assert record.rounds[-1] == Round(3, 1, (3, 1), confirm)
    write_record(record)
    assert read_record(str(tmp_path), "old") == record
    assert "confirm" not in json.loads((tmp_path / "old" / STATE_FILE).read_text())["rounds"][0]
    assert record.paths.round_dirs[-1] == str(tmp_path / "old" / "extend-2")
    searcher = ConfirmSearcher({"epochs": 99, "seed": 0, "dataset": "jsb"}, confirm)
    configs = [searcher.suggest(str(i)) for i in range(3)]
    assert configs[2] == searcher.FINISHED
    assert [(c["seed"], c["epochs"], c["lr"], c["confirms"]) for c in configs[:2]] == [
        (5, 6, 0.25, "t_00001"),
        (6, 6, 0.25, "t_00001"),
    ]
    spec = TrialSpec.from_tune(configs[0], record.cells)
    assert spec.confirms == "t_00001" and spec.mlflow_params()["confirms"] == "t_00001"


def test_the_confirmed_table_has_a_t_interval_per_setting_and_welch_gaps():
    a1, a2, b1 = [2.0, 2.2, 2.4], [2.5, 2.6, 2.7], [3.0, 3.5, 3.1]
    confirm = [
        (f"c{cell}{i}", cell, 0, 10 + i, "completed", loss, "confirm", of)
        for cell, of, losses in (("a", "t2", a1), ("a", "t0", a2), ("b", "t6", b1))
        for i, loss in enumerate(losses)
    ]
    trials = frame(SEARCH + confirm + [("cx", "b", 0, 13, "diverged", 1.0, "confirm", "t6")])
    table = confirmed_settings(trials)
    assert list(zip(table["cell"], table["confirms"], table["best"])) == [
        ("a", "t2", True),
        ("a", "t0", False),
        ("b", "t6", True),
    ]
    assert list(table["seeds"]) == [3, 3, 3] and list(table["search"]) == [2.0, 2.5, 4.0]
    half = stats.t.ppf(0.975, 2) * np.std(a1, ddof=1) / math.sqrt(3)
    assert table["mean"][0] == pytest.approx(2.2)
    assert table["interval"][0] == f"[{2.2 - half:.4g}, {2.2 + half:.4g}]"
    gaps = confirmed_gaps(trials)
    assert list(gaps["cell"]) == ["a", "b"] and gaps["gap"][1] == pytest.approx(3.2 - 2.2)
    welch = stats.ttest_ind(b1, a1, equal_var=False).confidence_interval(0.95)
    assert gaps["interval"][1] == f"[{welch.low:.4g}, {welch.high:.4g}]"
    assert list(gaps["excludes 0"]) == ["–", "yes"]


def test_a_cell_s_setting_is_chosen_on_the_search_not_on_the_seeds_that_score_it():
    """The round's seeds score the setting the search chose (t2: 2.0 there, t0: 2.5) even
    where the cell's other confirmed setting does better on them: chosen on those seeds, a
    cell's confirmed mean would be the luckiest of its K, biased low."""
    rows = [
        (f"c{of}{i}", "a", 0, 10 + i, "completed", valid, "confirm", of)
        for of, valid in (("t2", 3.0), ("t0", 2.0))
        for i in range(2)
    ]
    table = confirmed_settings(frame(SEARCH + rows))
    assert list(zip(table["confirms"], table["best"], table["mean"])) == [
        ("t2", True, 3.0),
        ("t0", False, 2.0),
    ]


def test_a_cell_s_best_confirmed_setting_is_chosen_on_validation_whatever_the_quantity():
    """Compared on the training loss, a cell's best confirmed setting is still the one with
    the lowest mean best valid loss (the quantity reports it, never chooses it)."""
    rows = [
        (f"c{of}{i}", "a", 0, 10 + i, "completed", valid, "confirm", of)
        for of, valid in (("t2", 2.0), ("t0", 3.0))
        for i in range(2)
    ]
    trials = frame(SEARCH + rows)
    train = {"t2": [5.0, 5.2], "t0": [1.0, 1.2]}  # the better valid setting trains worse
    trials["metrics.best_train_loss"] = [
        train[of][int(t[-1])] if r == "confirm" else np.nan
        for t, r, of in zip(trials["trial_id"], trials["round"], trials["params.confirms"])
    ]
    table = confirmed_settings(trials, "best_train_loss")
    assert list(zip(table["confirms"], table["best"])) == [("t2", True), ("t0", False)]
    assert list(table["mean"]) == pytest.approx([5.1, 1.1])
    assert list(table["search"]) == [2.0, 2.5]  # the search trial's best valid loss
    with pytest.raises(UserError, match="no completed confirmation trials with a best_train"):
        confirmed_settings(frame(SEARCH + rows), "best_train_loss")  # recorded before it


def test_the_papers_claims_on_confirmed_settings_are_welch_comparisons_in_words():
    """Per arch, the mean over seeds of its cell's best confirmed setting at each end of the
    depths, its change with depth and its gap to RHN's, each with the Welch test's interval
    and the verdict it gives the paper's claim, and the sentence worded from it."""
    from rhnsearch.results.claims import CONFIRMED, optimization_claims
    from rhnsearch.results.confirmed import confirmed_finding

    seeds = {
        ("rhn", 1): [8.0, 8.2, 8.1],
        ("rhn", 2): [7.9, 8.0, 8.2],
        ("dtrnn", 1): [8.5, 8.6, 8.4],
        ("dtrnn", 2): [10.0, 10.4, 10.2],
    }
    rows = [
        {
            "trial_id": f"c-{arch}{depth}-{seed}",
            "params.cell": f"{arch} d{depth}",
            "params.arch": arch,
            "params.depth": depth,
            "params.seed": 10 + seed,
            "status": "completed",
            "metrics.best_valid_loss": loss,
            "round": "confirm",
            "params.confirms": f"s-{arch}{depth}",
            "run_id": f"run-{arch}{depth}-{seed}",
        }
        for (arch, depth), losses in seeds.items()
        for seed, loss in enumerate(losses)
    ]
    rhn, dtrnn = confirmed_finding(pd.DataFrame(rows)).to_dict("records")
    assert rhn["arch"] == "RHN" and dtrnn["arch"] == "DT-RNN"
    for row, arch in ((rhn, "rhn"), (dtrnn, "dtrnn")):
        deep, shallow = np.array(seeds[arch, 2]), np.array(seeds[arch, 1])
        assert row["change with depth"] == pytest.approx(deep.mean() - shallow.mean())
        welch = stats.ttest_ind(deep, shallow, equal_var=False)
        low, high = welch.confidence_interval(0.95)
        assert row["change: 95% interval"] == f"[{low:.4g}, {high:.4g}]"
        assert row["change excludes 0"] == ("yes" if welch.pvalue < 0.05 else "no")
    assert rhn["change: paper's claim"] == "not worse: consistent with"
    assert dtrnn["change: paper's claim"] == "worse: holds" and dtrnn["change: k"] == 3
    assert dtrnn["gap: paper's claim"] == "worse: holds" and rhn["gap: paper's claim"] == "–"
    first, second = optimization_claims(pd.DataFrame([rhn, dtrnn]), CONFIRMED)
    assert first.startswith("RHN: the claim that its loss does not grow from depth 1 to 2 is")
    assert "the mean over 3 seeds of each cell's setting chosen on the search" in second
    assert second.count(" holds: ") == 2
