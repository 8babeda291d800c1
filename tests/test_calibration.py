"""The gap interval's calibration on the study's own cells (benchmarks/calibration.py): its
committed run, docs/calibration.json, meets the bounds in every row and was made with today's
rule; docs/studies.md's table is the one that run makes; and the benchmark still runs."""

import importlib.util
import json

from conftest import ROOT

COMMITTED = ROOT / "docs" / "calibration.json"
START = (
    "<!-- calibration table: made by python benchmarks/calibration.py --table "
    "docs/calibration.json -->\n"
)
END = "<!-- end of calibration table -->"


def benchmark():
    spec = importlib.util.spec_from_file_location(
        "calibration", ROOT / "benchmarks" / "calibration.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_calibration_meets_the_bounds_with_today_s_rule():
    """Every row: false positives at most 6% and coverage at least 93%, or no interval (too
    few settings); made with today's level, k, minimum and resamples (a change to the rule
    fails here until the benchmark is run again and committed)."""
    from rhnsearch.results import uncertainty

    run = json.loads(COMMITTED.read_text())
    calibration = benchmark()
    assert run["settings"] == {
        "pairs": run["settings"]["pairs"],
        "today_pairs": run["settings"]["today_pairs"],
        "bootstrap_level": uncertainty.BOOTSTRAP_LEVEL,
        "settings_per_k": uncertainty.SETTINGS_PER_K,
        "min_settings": uncertainty.MIN_SETTINGS,
        "resamples": uncertainty.RESAMPLES,
    }
    rows = run["rows"]
    assert len(rows) == sum(len(c[1]) for c in calibration.COMPARISONS.values()) * len(
        calibration.SIZES
    )
    failing = [
        (r["example"], r["first"], r["second"], r["n"]) for r in rows if not calibration.meets(r)
    ]
    assert not failing, failing
    resolved = [r for r in rows if r["resolved"]]
    assert resolved and all(r["pairs"] >= 1000 for r in resolved)
    assert all(min(r["n"]) >= uncertainty.MIN_SETTINGS for r in resolved)


def test_the_doc_s_calibration_table_is_the_committed_run_s():
    text = (ROOT / "docs" / "studies.md").read_text()
    assert START in text and END in text, "docs/studies.md lost its calibration table's markers"
    shown = text.split(START, 1)[1].split(END, 1)[0]
    made = benchmark().table(json.loads(COMMITTED.read_text())["rows"])
    assert shown == made, (
        "docs/studies.md's calibration table is not docs/calibration.json's: paste the output "
        "of `python benchmarks/calibration.py --table docs/calibration.json`"
    )


def test_the_calibration_benchmark_runs_a_row():
    """Its smallest run: one row of a few pairs, with and without an interval."""
    calibration = benchmark()
    example, (best_of, pairs) = next(iter(calibration.COMPARISONS.items()))
    for size in ((10, 10), (20, 20)):
        row = calibration.row((example, best_of, *pairs[0], size, 4, 2))
        assert row["resolved"] == (size == (20, 20)) and calibration.meets(row) in (True, False)
        assert row["today"]["pairs"] == 2 and 0 <= row["today"]["false_positives"] <= 1
        assert calibration.table([row]).count("\n") == 3
