"""Every committed example (results/examples/, but for historical/) is what the code makes of
the trials it ships and what its preset gives today: its table, its measured finding (on the
search and, for jsb_paper, on the confirmation round) with the sentences their intervals make
(`claims`), made again here from its trials.parquet (the sweep's `results export`) in a few
seconds; its resolved space and drawn settings checked against today's preset and searcher."""

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT

EXAMPLE = ROOT / "results" / "examples" / "jsb_paper"


def table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def finding_parts(every: pd.DataFrame, report: str) -> tuple[list[str], list[str]]:
    """The table lines and the sentences of the finding of the trials EVERY of a study of kind
    REPORT, in the order finding.md gives them: the search's, then where there was a
    confirmation round the confirmed settings' in the space's quantity (the training loss),
    then on validation. A kind that measures no finding has none."""
    from rhnsearch.results.claims import CONFIRMED
    from rhnsearch.results.confirmed import confirmed_finding
    from rhnsearch.results.export import markdown
    from rhnsearch.results.studies import KINDS
    from rhnsearch.tracking.store import search_trials

    kind = KINDS[report]
    if kind.measured is None:
        return [], []
    measured = kind.measured(search_trials(every))
    tables = table_lines(markdown(measured))
    sentences = kind.claims(measured) if kind.claims else []
    if "round" in every and (every["round"] == "confirm").any():
        for metric in ("best_train_loss", "best_valid_loss"):
            confirmed = confirmed_finding(every, metric)
            tables += table_lines(markdown(confirmed))
            sentences += kind.claims(confirmed, CONFIRMED)
    return tables, sentences


def test_the_jsb_paper_example_is_what_its_trials_make():
    """480 search trials (40 settings in each of 12 cells) and a confirmation round of 2
    settings a cell with 3 seeds each, all completed; the table and finding they make."""
    from rhnsearch.tracking.store import search_trials

    every = pd.read_parquet(EXAMPLE / "trials.parquet")
    assert len(search_trials(every)) == 480 and set(every["params.preset"]) == {"paper"}
    confirm = every[every["round"] == "confirm"]
    assert len(confirm) == 12 * 2 * 3 and set(confirm["status"]) == {"completed"}
    start = time.perf_counter()
    check_table_and_finding(EXAMPLE, every, "optimization")
    assert time.perf_counter() - start < 5
    claims = finding_parts(every, "optimization")[1]
    assert [c.split(":")[0] for c in claims] == ["RHN", "DT-RNN", "DT(S)-RNN"] * 3


def check_table_and_finding(example: Path, every: pd.DataFrame, report: str):
    """EXAMPLE's table.md and finding.md (where its kind of study REPORT measures one) are
    what its trials EVERY make; the finding's sentences are the ones its intervals make, none
    written by hand."""
    from rhnsearch.results.export import markdown
    from rhnsearch.results.studies import KINDS
    from rhnsearch.tracking.store import search_trials

    trials = search_trials(every)
    table = KINDS[report].table(trials, "best_valid_loss")
    assert table_lines(markdown(table)) == table_lines((example / "table.md").read_text())
    tables, claims = finding_parts(every, report)
    if not tables:
        assert not (example / "finding.md").exists(), example.name
        return
    committed = (example / "finding.md").read_text()
    assert tables == table_lines(committed), example.name
    assert [line[2:] for line in committed.splitlines() if line.startswith("- ")] == claims


def test_every_recorded_example_is_what_its_preset_resolves_to_today():
    """Every example but historical/ records what it ran (run.json: its space file, preset,
    overrides and commit; space.json: the resolved space its parent run logged), and is what
    its command gives today: the space file and preset, with its overrides, resolve to the
    recorded space (read by today's model, so that a field added since, at a default that
    changes nothing it drew, does not count), today's searcher draws its settings, and its
    table and (where its kind of study measures one) its finding are what its trials make. A
    change to a preset, to a default it relies on or to what a sweep draws fails here until
    the example is re-made or moved to historical/."""
    from rhnsearch.search.space import Space, load_space
    from rhnsearch.tracking.store import search_trials

    recorded = sorted((ROOT / "results" / "examples").glob("*/run.json"))
    assert "jsb_paper" in [p.parent.name for p in recorded]
    folders = [p for p in (ROOT / "results" / "examples").iterdir() if p.is_dir()]
    stale = [p.name for p in folders if p.name != "historical" and not (p / "run.json").exists()]
    assert not stale, f"{stale} record no run: re-make them or move them to historical/"
    for path in recorded:
        run = json.loads(path.read_text())
        space = json.loads((path.parent / "space.json").read_text())
        today = load_space(ROOT / run["space"], preset=run["preset"], overrides=run["overrides"])
        assert today.model_dump(mode="json") == Space.model_validate(space).model_dump(
            mode="json"
        ), f"{path.parent.name} is stale: re-make it with its README's command"
        every = pd.read_parquet(path.parent / "trials.parquet")
        trials = search_trials(every)
        assert set(trials["params.preset"]) == {run["preset"]}
        assert len(trials) == today.num_trials
        if run["search"] == "random":
            check_drawn_settings(today, trials)
        check_table_and_finding(path.parent, every, today.report)


def check_drawn_settings(space, trials: pd.DataFrame):
    """Every cell's settings in TRIALS (a random search's) are those today's searcher draws
    from SPACE: a change to the random stream (the searcher, how a setting's seed is made)
    fails here too, not only a change to the space."""
    from rhnsearch.search.searchers import CellSearcher, round_slots

    def value(v):
        return round(float(v), 12) if isinstance(v, (int, float)) else str(v)

    cells = trials.groupby("params.cell")["params.arch"].first()
    searcher = CellSearcher(
        space, {c: {"arch": a} for c, a in cells.items()}, {}, round_slots(space.samples, 1)
    )
    for label, rows in trials.groupby("params.cell"):
        drawn = [searcher.setting("", label, k) for k in range(space.samples)]
        names = sorted(drawn[0])
        expected = sorted(tuple(value(d[n]) for n in names) for d in drawn)
        recorded = sorted(
            tuple(value(row[f"params.{n}"]) for n in names) for _, row in rows.iterrows()
        )
        assert recorded == expected, f"{label}: today's searcher draws other settings"


def first_epochs_to_check(histories: pd.DataFrame) -> pd.DataFrame:
    """The first epoch of one trial per architecture in HISTORIES: of its trials whose first
    epoch gave a finite validation loss (a diverged one's NaN would match any NaN) and, where it
    has any, deeper than one layer (the depth loop is what the models are about), the one whose
    first epoch trained fastest."""
    first = histories[(histories["epoch"] == 1) & np.isfinite(histories["metrics.valid_loss"])]
    deep = first[first["params.depth"] > 1]
    first = pd.concat([deep, first[~first["params.arch"].isin(deep["params.arch"])]])
    return first.sort_values("metrics.epoch_seconds").groupby("params.arch").head(1)


@pytest.mark.slow
def test_each_example_trains_again_to_its_history_on_its_cpu(jsb, ptb_sample):
    """Today's code trains each example's trials to the numbers its run recorded: the first
    epoch of one trial per architecture, from the config and seed its run logged, gives the
    recorded validation loss bit for bit, on the CPU and torch build that made the example
    (another CPU sums in another order: results/examples/README.md). A change to what a trial
    trains (the models, the data order, the evaluation) fails here until the examples are
    re-made: 20-40 epochs make an 8th-digit change at epoch 1 a change in the tables."""
    import torch

    from rhnsearch.provenance import cpu_name
    from rhnsearch.train import Trainer, TrialConfig

    datasets = {data.name: data for data in (jsb, ptb_sample)}
    checked, skipped = [], []
    threads = torch.get_num_threads()
    try:
        for path in sorted((ROOT / "results" / "examples").glob("*/histories.parquet")):
            run = json.loads((path.parent / "run.json").read_text())
            histories = pd.read_parquet(path)
            if run.get("cpu") != cpu_name():
                skipped.append(f"{path.parent.name}: made on {run.get('cpu', 'an unrecorded CPU')}")
                continue
            assert set(histories["torch_version"]) == {torch.__version__}, (
                f"{path.parent.name} was made with torch {set(histories['torch_version'])}, "
                f"this is {torch.__version__}: re-make it"
            )
            for _, row in first_epochs_to_check(histories).iterrows():
                config = TrialConfig.from_dict(
                    {k[7:]: v for k, v in row.items() if k.startswith("params.") and pd.notna(v)}
                )
                valid = Trainer(config, datasets[config.dataset]).run_epoch()["valid_loss"]
                assert valid == row["metrics.valid_loss"], (
                    f"{path.parent.name}: trial {row['trial_id']} ({config.arch}, depth "
                    f"{config.depth}) now gives {valid!r} at epoch 1, its run "
                    f"{row['metrics.valid_loss']!r}: re-make the example"
                )
                checked.append((path.parent.name, config.arch, config.depth))
    finally:
        torch.set_num_threads(threads)
    if not checked:
        pytest.skip(f"no example was made on this CPU ({cpu_name()}): {'; '.join(skipped)}")
