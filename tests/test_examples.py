"""The committed example of the JSB `paper` preset (results/examples/jsb_paper/) is what the
code makes of the trials it ships: its table and its measured finding with the sentences its
intervals make (`claims`), made again here from its trials.parquet (the sweep's `results
export`), in well under 2 seconds."""

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
