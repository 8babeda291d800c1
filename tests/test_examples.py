"""The committed example of the JSB `paper` preset (results/examples/jsb_paper/) is what the
code makes of the trials it ships: its table and its measured finding with the sentences its
intervals make (`claims`), made again here from its trials.parquet (the sweep's `results
export`), in well under 2 seconds."""

import json
import time

import pandas as pd

from conftest import ROOT

EXAMPLE = ROOT / "results" / "examples" / "jsb_paper"


def table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def test_the_jsb_paper_example_is_what_its_trials_make():
    from rhnsearch.results.export import markdown
    from rhnsearch.results.studies import KINDS

    trials = pd.read_parquet(EXAMPLE / "trials.parquet")
    kind = KINDS["optimization"]
    assert len(trials) == 480 and set(trials["params.preset"]) == {"paper"}
    start = time.perf_counter()
    table = kind.table(trials, "best_valid_loss")
    assert table["settings"].astype(int).tolist() == [40] * 12
    assert table_lines(markdown(table)) == table_lines((EXAMPLE / "table.md").read_text())
    measured = kind.measured(trials)
    finding, claims = markdown(measured), kind.claims(measured)
    assert time.perf_counter() - start < 2
    committed = (EXAMPLE / "finding.md").read_text()
    assert table_lines(finding) == table_lines(committed)
    # its sentences are the ones its intervals make, none written by hand
    assert [line[2:] for line in committed.splitlines() if line.startswith("- ")] == claims
    assert [c.split(":")[0] for c in claims] == ["RHN", "DT-RNN", "DT(S)-RNN"]


def test_every_recorded_example_is_what_its_preset_resolves_to_today():
    """An example that records what it ran (run.json: its space file, preset, overrides and
    commit; space.json: the resolved space its parent run logged) is what its command gives
    today: the space file and preset, with its overrides, resolve to the recorded space (read
    by today's model, so that a field added since, at a default that changes nothing it drew,
    does not count). A change to a preset, or to a default it relies on, fails here until the
    example is re-made or moved out of the current examples."""
    from rhnsearch.search.space import Space, load_space

    recorded = sorted((ROOT / "results" / "examples").glob("*/run.json"))
    assert "jsb_paper" in [p.parent.name for p in recorded]
    for path in recorded:
        run = json.loads(path.read_text())
        space = json.loads((path.parent / "space.json").read_text())
        today = load_space(ROOT / run["space"], preset=run["preset"], overrides=run["overrides"])
        assert today.model_dump(mode="json") == Space.model_validate(space).model_dump(
            mode="json"
        ), f"{path.parent.name} is stale: re-make it with its README's command"
        trials = pd.read_parquet(path.parent / "trials.parquet")
        assert set(trials["params.preset"]) == {run["preset"]}
        assert len(trials) == today.num_trials
