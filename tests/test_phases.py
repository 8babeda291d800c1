"""A sweep's search and its rounds apart (rhnsearch.tracking.phases), read from a real MLflow
store as the sweep's closes log them, and the plan's share of each (search.plan)."""

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient


def parent_run(tmp_path, closes, *, tags=None, planned=None, step_per_round=True):
    """A parent run in a sqlite store, each of CLOSES ({metric: value}) logged as a round's
    close logs it: at the round's step (or, as before the steps were rounds, at step 0)."""
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.create_run(client.create_experiment("phases"), tags=tags or {})
    run_id = run.info.run_id
    start = run.info.start_time
    metrics = [Metric(k, v, start, 0) for k, v in (planned or {}).items()]
    for index, values in enumerate(closes):
        step = index if step_per_round else 0
        metrics += [Metric(k, v, start + 1000 * (index + 1), step) for k, v in values.items()]
    client.log_batch(run_id, metrics=metrics)
    return client, run_id


CLOSES = [  # the totals of every trial so far, at each close; the round's own wall time
    {"wall_seconds": 100.0, "cpu_hours": 1.0, "gpu_hours": 0.0, "trial_epochs": 50},
    {"wall_seconds": 40.0, "cpu_hours": 1.5, "gpu_hours": 0.0, "trial_epochs": 70},
    {"wall_seconds": 30.0, "cpu_hours": 2.5, "gpu_hours": 0.0, "trial_epochs": 100},
]


@pytest.mark.parametrize("step_per_round", [True, False])
def test_each_round_is_its_close_less_the_one_before(tmp_path, step_per_round):
    """A search, an extension and a confirmation round (its `confirmed_2` tag): each round's
    wall time as logged, its hours and trial-epochs the totals' growth since the round
    before; beside the plan's, the search's and the first confirmation round's. A sweep
    closed before the steps were its rounds (every close at step 0) reads the same."""
    from rhnsearch.tracking.phases import phases

    planned = {
        "planned_cpu_hours": 2.1,
        "planned_search_cpu_hours": 1.2,
        "planned_search_trial_epochs": 60,
        "planned_confirm_cpu_hours": 0.9,
        "planned_confirm_trial_epochs": 25,
    }
    client, run_id = parent_run(
        tmp_path,
        CLOSES,
        tags={"confirmed_2": "the 1 best setting(s) a cell"},
        planned=planned,
        step_per_round=step_per_round,
    )
    rounds = phases(client, run_id)
    assert [r.name for r in rounds] == ["search", "extension 1", "confirmation 2"]
    assert [r.wall_seconds for r in rounds] == [100.0, 40.0, 30.0]
    assert [r.hours["cpu_hours"] for r in rounds] == pytest.approx([1.0, 0.5, 1.0])
    assert [r.trial_epochs for r in rounds] == [50, 20, 30]
    assert [r.planned for r in rounds] == [
        {"cpu_hours": 1.2, "trial_epochs": 60},
        {},
        {"cpu_hours": 0.9, "trial_epochs": 25},
    ]


def test_a_sweep_before_trial_epochs_and_split_plans_reads_what_it_logged(tmp_path):
    """One round, no trial-epochs logged and a plan of one total: the search, its hours
    beside that total; a sweep whose first round has not closed: none."""
    from rhnsearch.tracking.phases import phases

    close = {k: v for k, v in CLOSES[0].items() if k != "trial_epochs"}
    client, run_id = parent_run(tmp_path, [close], planned={"planned_cpu_hours": 2.1})
    (search,) = phases(client, run_id)
    assert search.trial_epochs is None and search.planned == {"cpu_hours": 2.1}
    (tmp_path / "open").mkdir()
    assert phases(*parent_run(tmp_path / "open", [])) == []  # no round has closed yet


def test_a_plan_splits_into_the_search_and_its_confirmation_round():
    """A plan made with --confirm: each cell's epochs of the search (as the scheduler is
    expected to run them) and of the round, at its seconds an epoch."""
    from rhnsearch.search.plan import planned_rounds

    plan = {
        "unit": "CPU",
        "per_trial": 2,
        "cells": [
            {"cell": "a", "epoch_seconds": 36.0, "expected_epochs": 10.0, "confirm_epochs": 20},
            {"cell": "b", "epoch_seconds": 18.0, "expected_epochs": 20.0, "confirm_epochs": 0},
        ],
    }
    assert planned_rounds(plan) == {
        "search": {"cpu_hours": pytest.approx(0.4), "trial_epochs": 30.0},
        "confirm": {"cpu_hours": pytest.approx(0.4), "trial_epochs": 20},
    }
    plan["cells"][0]["confirm_epochs"] = 0
    assert list(planned_rounds(plan)) == ["search"]
