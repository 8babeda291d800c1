"""Budgets: the authors' PTB widths, equal JSB budgets across archs, clear errors."""

import json
import subprocess
import sys

import pytest

from rhnsearch.budget import count_params, parse_count, parse_depths, solve_width
from rhnsearch.errors import UserError

AUTHORS_PTB_WIDTHS = [1275, 1180, 1110, 1050, 1000, 960, 920, 890, 860, 830]


@pytest.mark.parametrize("depth", range(1, 11))
def test_ptb_widths_match_the_authors_within_one_percent(depth):
    width = solve_width(32_000_000, "ptb", "rhn", depth)
    authors = AUTHORS_PTB_WIDTHS[depth - 1]
    assert abs(width - authors) / authors <= 0.01, (width, authors)


def test_solver_returns_nearest_width():
    for budget in [5_000, 123_456, 2_000_000]:
        w = solve_width(budget, "jsb", "dtrnn", 4)
        here = abs(count_params("jsb", "dtrnn", 4, w) - budget)
        assert here <= abs(count_params("jsb", "dtrnn", 4, w - 1) - budget)
        assert here <= abs(count_params("jsb", "dtrnn", 4, w + 1) - budget)


@pytest.mark.parametrize("depth,budget", [(1, 300_000), (2, 400_000), (4, 600_000), (6, 800_000)])
def test_jsb_archs_get_equal_counts_at_each_depth(depth, budget):
    counts = [
        count_params("jsb", a, depth, solve_width(budget, "jsb", a, depth))
        for a in ("rhn", "dtrnn", "dtsrnn")
    ]
    assert (max(counts) - min(counts)) / min(counts) <= 0.01, counts


def test_budget_too_small_is_a_clear_error():
    with pytest.raises(UserError, match="too small for jsb rhn at depth 6"):
        solve_width(300, "jsb", "rhn", 6)


def test_parsers():
    assert parse_count("32M") == 32_000_000 and parse_count("1.5k") == 1500
    assert parse_depths("1-3,6") == [1, 2, 3, 6]
    for bad in ["x", "0-2", ""]:
        with pytest.raises(UserError):
            parse_depths(bad)


def test_budget_cli_json_last_line():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rhnsearch.cli",
            "budget",
            "--task",
            "ptb",
            "--arch",
            "rhn",
            "--depths",
            "1-10",
            "--params",
            "32M",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = json.loads(out.strip().splitlines()[-1])
    assert [r["depth"] for r in rows] == list(range(1, 11))
    assert rows[0] == {"depth": 1, "width": 1275, "params": 32_015_050}
    assert set(rows[9]) == {"depth", "width", "params"}
