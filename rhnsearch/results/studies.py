"""What a study's report is made of, declared once for each kind of study a space names
(`report: KIND` in the space, recorded as its sweeps' `report` tag): its figure, its table and
the table's caption, and the paper's finding in the paper's words with the table that
measures it. Tables, figures and reports read a sweep's kind, never its study's name: a new
space gets its table, figure and report by naming a kind.

- `cells` (the default): the swarm of every setting per arch and depth; per cell its settings,
  how they ended, their best and median loss and their expected best of K settings.
- `optimization`: the RHN paper's JSB study (Figure 4): `cells` and the expected best of k
  settings vs k, and its finding measured as each arch's change with depth and its gap to RHN
  at the deepest depth, at K = 40 (the settings a cell of the paper's preset draws).
- `depth_budget`: the RHN paper's PTB study (Figure 5a): perplexity vs depth, untied and with
  WT, next to the authors' numbers; its finding as each depth's gap to the shallowest.
- `hsg_depth`: the HSG paper's Table 1: perplexity vs depth with and without HSG, next to it.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import pandas as pd

from ..tracking import store
from . import published, tables, uncertainty
from .claims import optimization_claims
from .expected_best import BEST_OF
from .export import check_out, markdown, write_frame

# Sweeps of rhnsearch 0.2 recorded no kind: their study's, as its space would name it now.
RECORDED_BEFORE = {
    "jsb_optimization": "optimization",
    "ptb_budget": "depth_budget",
    "ptb_hsg": "hsg_depth",
}


@dataclass(frozen=True)
class Groups:
    """The groups a depth figure compares: the trials' column that splits them and, per
    group, its value, its label and the suffix of its published columns; the source of the
    published numbers, what sets them apart from the sweep's (NOTE), and a published point
    like the sweep's (STAR: depth, tied, valid, test, weight_decay)."""

    key: str
    groups: tuple[tuple[object, str, str], ...]
    published: pd.DataFrame
    source: str
    note: str = ""
    star: dict | None = None


@dataclass(frozen=True)
class Kind:
    figure: str  # "swarm" (every setting, per arch and depth) or "depth" (vs published)
    table: Callable[[pd.DataFrame, str], pd.DataFrame]  # (trials, metric) -> the table
    caption: Callable[[pd.Series, pd.DataFrame, str], str]  # (sweep, trials, metric)
    finding: str | None = None  # the paper's finding, in its words
    measured: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    measured_caption: str = ""
    groups: Groups | None = None
    best_of: int = BEST_OF  # the K of its expected best of K settings (tables and figure bind it)
    claims: Callable[..., list[str]] | None = None  # (finding[, measure]) -> it in words


BUDGET = Groups(
    "params.tied",
    ((False, "untied", ""), (True, "WT", "_wt")),
    published.PTB_BUDGET,
    published.RHN_PAPER,
    " at a larger weight decay",
    published.PTB_REDUCED_DECAY,
)
HSG = Groups(
    "params.arch",
    (("rhn", "w/o HSG", ""), ("hsg", "w/ HSG", "_hsg")),
    published.PTB_HSG,
    published.HSG_PAPER,
)

# The paper's preset draws 40 settings a cell; its gaps compare the expected best of at most a
# quarter of them (`uncertainty.comparable_k`), what 40 settings can estimate.
JSB_BEST_OF = 40
GAP_METHOD = (
    "with a 95% interval (a BCa bootstrap of each cell's settings at the 99% level, which "
    "keeps 95% on pairs of the study's own cells: benchmarks/calibration.py; none below "
    f"{uncertainty.MIN_SETTINGS} settings a cell, too few to resolve a gap)"
)
KINDS = {
    "cells": Kind("swarm", tables.jsb_optimization, tables.cells_caption),
    "optimization": Kind(
        "swarm",
        partial(tables.jsb_optimization, best_of=JSB_BEST_OF),
        partial(tables.cells_caption, best_of=JSB_BEST_OF),
        published.JSB_FINDING,
        partial(tables.jsb_finding, best_of=JSB_BEST_OF),
        "Measured on this sweep: each architecture's best best_valid_loss (nats per time step) "
        "at the shallowest and deepest depth, its change with depth (the paper's two claims: "
        "not up for RHN, up for DT-RNN and DT(S)-RNN) and its gap to RHN at the deepest "
        "depth, each the difference of the two cells' expected best of k settings (k: "
        f"{JSB_BEST_OF} or a quarter of the fewer settings that did not diverge, whichever "
        f"is smaller), {GAP_METHOD}, and the probability that a random setting of the first "
        "cell beats one of the second (ties half) with its 95% bootstrap interval; whether "
        "each of the paper's claims holds there, from that interval (each at 5%, "
        "uncorrected for the others).",
        best_of=JSB_BEST_OF,
        claims=optimization_claims,
    ),
    "depth_budget": Kind(
        "depth",
        lambda trials, _: tables.ptb_budget(trials),
        tables.ptb_budget_caption,
        published.PTB_BUDGET_FINDING,
        tables.depth_finding,
        "Measured on this sweep: each depth's best valid perplexity and its gap to the "
        "shallowest depth in best_valid_loss (nats per word; negative: better), the "
        "difference of the two cells' expected best of k trials (k: "
        f"{BEST_OF} or a quarter of the fewer trials, whichever is smaller), {GAP_METHOD}.",
        BUDGET,
    ),
    "hsg_depth": Kind(
        "depth", lambda trials, _: tables.ptb_hsg(trials), tables.ptb_hsg_caption, groups=HSG
    ),
}


def kind_of(sweep: pd.Series) -> Kind:
    """The kind of study a sweep (store.sweeps' row) recorded."""
    name = sweep.get("report") or RECORDED_BEFORE.get(sweep.get("study"), "cells")
    return KINDS[name]


def table(
    experiment: str,
    tracking_uri: str | None = None,
    sweep: str | None = None,
    out=None,
    force: bool = False,
    metric: str = "best_valid_loss",
) -> str:
    """The table of a sweep of EXPERIMENT (default: its latest), as its kind of study
    makes it: written to OUT (.md/.tex/.csv), or returned as Markdown."""
    path = check_out(out, tables.TABLE_OUT, force) if out else None
    exp = store.open_experiment(experiment, tracking_uri)
    chosen, trials = store.sweep_trials(exp, sweep)
    tables.check_metric(trials, chosen["sweep"], metric)
    kind = kind_of(chosen)
    frame, text = kind.table(trials, metric), kind.caption(chosen, trials, metric)
    if path is None:
        return markdown(frame, text)
    write_frame(frame, path, caption=text)
    return f"wrote {path} ({len(frame)} rows)"
