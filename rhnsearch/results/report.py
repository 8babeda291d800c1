"""One self-contained HTML page per sweep, read from the MLflow store alone: the study's
figure, its measured-vs-published table, top-k learning curves, parallel coordinates of the
settings, each hyperparameter's importance per architecture, and the runs' provenance.
Figures are embedded as base64 PNG; the page has no script and loads nothing from elsewhere."""

import base64
import io
from html import escape
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..errors import UserError
from ..provenance import TAGS
from ..tracking import schema, store
from . import arch_label, claims, confirmed, importance, plots, tables
from .export import atomic, check_out, html_table
from .report_header import facts, header
from .studies import Kind, kind_of

REPORT_OUT = (".html",)
SECTIONS = {
    "header": "Sweep",
    "figure": "The study's figure",
    "table": "Measured and published",
    "confirmed": "Confirmed settings",
    "curves": "Learning curves",
    "parallel": "Settings (parallel coordinates)",
    "importance": "Hyperparameter importance",
    "provenance": "Provenance",
}
STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; color: #1a1a1a; margin: 0 auto; max-width: 1200px;
       padding: 0 1.5em 3em; background: #fff; }
nav { padding: .6em 0; border-bottom: 1px solid #ccc; }
nav a { margin-right: 1.2em; color: #0b5394; }
section, header { padding: .5em 0 1em; border-bottom: 1px solid #e4e4e4; }
h1 { font-size: 1.5em; margin: .6em 0 .2em; } h2 { font-size: 1.2em; margin: .8em 0 .4em; }
img { max-width: 100%; height: auto; display: block; margin: .5em 0; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: 13px; }
caption { text-align: left; padding: .3em 0; color: #444; caption-side: top; }
th, td { border: 1px solid #ccc; padding: .2em .5em; text-align: left; }
th { background: #f2f2f2; } .num { text-align: right; font-variant-numeric: tabular-nums; }
#importance table { display: inline-table; vertical-align: top; margin-right: 1.5em; }
.note { color: #555; }
"""


def image(fig: Figure, alt: str) -> str:
    """FIG as an <img> holding its PNG (base64)."""
    buffer = io.BytesIO()
    plots.savefig(fig, buffer, format="png", dpi=100)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{escape(alt)}">'


def note(text: str) -> str:
    return f'<p class="note">{escape(text)}</p>'


def section(key: str, body: str) -> str:
    tag = "header" if key == "header" else "section"
    heading = "" if key == "header" else f"<h2>{SECTIONS[key]}</h2>\n"
    return f'<{tag} id="{key}">\n{heading}{body}</{tag}>\n'


def drawn(draw, alt: str) -> str:
    """The figure DRAW() returns as an image, or a note saying why there is none."""
    try:
        return image(draw(), alt)
    except UserError as exc:
        return note(f"Not drawn: {exc}")


def measured_finding(chosen: pd.Series, trials: pd.DataFrame) -> pd.DataFrame | None:
    """The finding of the sweep's kind of study measured on TRIALS (`Kind.measured`), or None
    where its kind measures none or the sweep has one depth. Measured once a report: the
    figure's sentence and the table share it."""
    kind = kind_of(chosen)
    if kind.measured is None or trials["params.depth"].nunique() < 2:
        return None
    return kind.measured(trials)


def study_figure(chosen: pd.Series, trials: pd.DataFrame, measured: pd.DataFrame | None) -> str:
    """The figure of the sweep's kind of study (studies.py): perplexity vs depth with the
    published numbers, or the swarm of every setting where there are several cells (with the
    gaps of MEASURED, the `measured_finding`)."""
    kind = kind_of(chosen)
    if kind.figure == "depth":
        return drawn(
            lambda: plots.depth_curves(chosen, trials, kind.groups),
            f"{chosen['study']}: perplexity vs depth, published numbers overlaid",
        )
    if trials["params.arch"].nunique() > 1 or trials["params.depth"].nunique() > 1:
        return (
            note(
                "Each point is one setting's best_valid_loss, the quantity the search "
                "selects on and the table and the finding use (filled: completed, hollow: "
                "stopped early by ASHA, X: diverged); every setting that did not diverge "
                "is on the axis (log-scaled where the losses span more than a factor of "
                f"{plots.LOG_SPAN:g})." + gaps_sentence(measured, trials)
            )
            + drawn(lambda: plots.swarm(chosen, trials), "loss of each setting vs depth")
            + note(
                f"The expected best best_valid_loss of k settings drawn at random (with "
                "replacement) from each cell's that did not diverge, exact from their order "
                "statistics, ± 1 std (Dodge et al. 2019): k = 1 is the cell's mean, k = its "
                f"settings nearly its best; the table reads it at K = {kind.best_of}. A setting "
                "stopped early counts at its best loss so far: the curve is an upper bound on "
                "what the settings would give trained to the end."
            )
            + drawn(
                lambda: plots.expected_best_curves(chosen, trials, kind.best_of),
                "expected best loss of k settings vs k",
            )
            + training_swarm(chosen, trials)
        )
    return note("One (architecture, depth) cell: no swarm to draw; see the table.")


def training_swarm(chosen: pd.Series, trials: pd.DataFrame) -> str:
    """The swarm of the training objective beside validation's: each setting's best_train_loss,
    where it has one (trials recorded before it was, and those stopped early, have none)."""
    column = "metrics.best_train_loss"
    if column not in trials or not np.isfinite(trials[column]).any():
        return ""
    return note(
        "Each point is one setting's best_train_loss: the training loss of its best-valid "
        "weights on the whole training set without dropout, the objective an optimization "
        "study asks about. Only settings trained to their end have one: a setting stopped "
        "early is not drawn here."
    ) + drawn(
        lambda: plots.swarm(chosen, trials, "best_train_loss"), "training loss of each setting"
    )


def gaps_sentence(finding: pd.DataFrame | None, trials: pd.DataFrame) -> str:
    """The FINDING's gaps to RHN at the deepest depth with their 95% intervals, as a
    sentence ('' where there is no finding or no RHN)."""
    if finding is None or "rhn" not in set(trials["params.arch"]):
        return ""
    gap = next(c for c in finding.columns if c.startswith("gap to RHN"))
    parts = [
        f"{row['arch']} {row[gap]:+.3f} {row['gap: 95% interval']}"
        + {"yes": " (excludes 0)", "no": " (includes 0)"}.get(row["gap excludes 0"], "")
        for _, row in finding.iterrows()
        if row["arch"] != "RHN"
    ]
    return (
        (
            f" Gaps of each architecture's expected best best_valid_loss of k settings to "
            f"RHN's at depth {gap.split()[-1]}, with their calibrated 95% bootstrap intervals: "
            + "; ".join(parts)
            + "."
        )
        if parts
        else ""
    )


def study_table(chosen: pd.Series, trials: pd.DataFrame, measured: pd.DataFrame | None) -> str:
    """The study's table (MEASURED, the `measured_finding`, next to published), or per (arch,
    depth) counts and losses for a study with no published numbers."""
    kind, finding = kind_of(chosen), ""
    if measured is not None:
        finding = note(kind.finding) + html_table(measured, kind.measured_caption, "finding-table")
        if kind.claims:
            finding += note(" ".join(kind.claims(measured)))
    return finding + html_table(
        kind.table(trials, "best_valid_loss"),
        kind.caption(chosen, trials, "best_valid_loss"),
        "study-table",
    )


def confirmed_section(chosen: pd.Series, every: pd.DataFrame) -> str:
    """The confirmation round's tables (`results/confirmed.py`) in the sweep's quantity and,
    for a study with claims (the JSB optimization study), its finding on them in words, beside
    the same on validation where the quantity is another; or how to run one."""
    if not (every["round"] == schema.CONFIRM).any():
        return note(
            "No confirmation round: `rhnsearch sweep confirm NAME --top K --seeds N` re-trains "
            "each cell's K best settings with N new seeds at the full budget, without early "
            "stopping, and this section then compares the cells on them."
        )
    metric = chosen.get("quantity") or confirmed.VALID
    try:
        settings = confirmed.confirmed_settings(every, metric)
        gaps = confirmed.confirmed_gaps(every, metric)
    except UserError as exc:
        return note(str(exc))
    kind = kind_of(chosen)
    return (
        html_table(
            settings,
            f"Each confirmed setting: the search trial it repeats and that trial's "
            f"best_valid_loss, its new seeds that completed, their mean {metric} (the "
            "sweep's quantity) and its 95% t-interval over the seeds; `best`: its cell's "
            "setting chosen on the search (the lowest best_valid_loss there, fixed before the "
            "round ran).",
            "confirmed-settings",
        )
        + html_table(
            gaps,
            f"Each cell's setting chosen on the search against the best cell's: the gap of their "
            f"mean {metric} with a 95% Welch interval over their seeds.",
            "confirmed-gaps",
        )
        + confirmed_claims(kind, every, metric, "confirmed-finding")
        + (
            confirmed_claims(kind, every, confirmed.VALID, "confirmed-finding-valid")
            if metric != confirmed.VALID
            else ""
        )
    )


def confirmed_claims(kind: Kind, every: pd.DataFrame, metric: str, table_id: str) -> str:
    """The paper's claims measured in METRIC on the confirmed settings, as table TABLE_ID and
    in words ('' for a study without claims, or where the confirmed cells span one depth)."""
    confirm = every[every["round"] == schema.CONFIRM]
    if kind.claims is None or confirm["params.depth"].nunique() < 2:
        return ""
    finding = confirmed.confirmed_finding(every, metric)
    return html_table(
        finding,
        f"The paper's claims on the confirmed settings, in {metric}: per architecture, the "
        "mean over seeds of its cell's setting chosen on the search at the shallowest and deepest "
        "depth, its change with depth and its gap to RHN, each with a 95% Welch interval over "
        "the two settings' seeds and the verdict of the paper's claim there.",
        table_id,
    ) + note(f"In {metric}: " + " ".join(kind.claims(finding, claims.CONFIRMED)))


def parallel(chosen: pd.Series, trials: pd.DataFrame) -> str:
    names = store.hyperparameters(trials)
    if not names:
        return note("No setting varies among the sweep's trials: nothing to compare.")
    logged = [
        n.removeprefix("params.") + (" (log axis)" if store.log_scaled(trials[n]) else "")
        for n in names
    ]
    return note(
        f"One line per trial (of more than {plots.PARALLEL_MAX:,}, that many drawn at "
        f"random), axes: {', '.join(logged)} and best_valid_loss, each "
        "scaled to its range; colour: best_valid_loss; dashed grey: diverged. The "
        "seed, width and parameter count are left out (random, or solved from the "
        "cell's budget)."
    ) + drawn(lambda: plots.parallel(chosen, trials), "parallel coordinates of the settings")


def importances(trials: pd.DataFrame) -> str:
    """The evaluators' bar chart and one table per architecture (id importance-ARCH), and
    the architectures left out with the reason."""
    frame, skipped = importance.importances(trials)
    parts = [
        note(
            "Per architecture, an Optuna study is rebuilt from the trials that "
            "finished (completed or stopped early) with a finite best_valid_loss, its "
            "value; the hyperparameters are the settings that vary among them (not the "
            "seed, width or parameter count). Importances by "
            f"{' and '.join(importance.EVALUATORS)} (optuna.importance), each summing "
            "to 1; with few trials they are rough (PED-ANOVA wants 5 or more trials in "
            f"its top 10%). An architecture with more than {importance.MAX_TRIALS:,} such "
            f"trials is fitted on {importance.MAX_TRIALS:,} of them drawn at random (seed "
            f"{importance.SAMPLE_SEED}), as its table says."
        )
    ]
    if not frame.empty:
        parts.append(image(plots.importance_bars(frame), "importance per architecture"))
        for arch, mine in frame.groupby("arch", sort=False):
            wide = mine.pivot(index="hyperparameter", columns="evaluator", values="importance")
            wide = wide.reindex(
                index=list(dict.fromkeys(mine["hyperparameter"])),
                columns=list(importance.EVALUATORS),
            ).reset_index()
            wide.columns.name = None
            parts.append(
                html_table(
                    wide,
                    f"{arch_label(arch)} ({arch}): {importance.fitted_on(mine.iloc[0])}",
                    f"importance-{arch}",
                )
            )
    for arch, reason in skipped.items():
        parts.append(note(f"{arch_label(arch)} ({arch}): no importance, {reason}."))
    return "\n".join(parts)


def provenance(exp: store.Experiment, chosen: pd.Series, parent, children: list) -> str:
    """Where the numbers come from: the store, the parent run and its settings, and the
    provenance tags of the sweep's runs (the parent and its CHILDREN, StoredRuns; "not
    recorded" when none carries one)."""
    runs = [parent.data.tags, *(run.tags for run in children)]
    keys = sorted(
        {
            k
            for tags in runs
            for k in tags
            if k.startswith("mlflow.source.") or k.endswith("_version")
        }
        | set(TAGS),
        key=lambda k: (k not in TAGS, TAGS.index(k) if k in TAGS else 0, k),
    )
    rows = [
        ("tracking URI", exp.tracking_uri),
        ("experiment id", exp.id),
        ("parent run", chosen["run_id"]),
        ("artifacts", parent.info.artifact_uri),
    ]
    rows += [(f"sweep {key}", value or "none") for key, value in sorted(parent.data.params.items())]
    for key in keys:
        values = pd.Series([tags.get(key) for tags in runs]).dropna().value_counts()
        rows.append(
            (
                key,
                ", ".join(f"{v} ({n} of {len(runs)} runs)" for v, n in values.items())
                or "not recorded",
            )
        )
    return facts(rows, "provenance-facts")


def render(exp: store.Experiment, sweep: str | None = None, top: int = 5, *, runs=None) -> str:
    """The report page of a sweep of EXP (default: its latest), as HTML text.

    Args:
        runs: the sweep's trial runs (StoredRuns), where already read (a closing sweep's).
    """
    chosen = store.pick_sweep(exp, sweep)
    if runs is None:  # read once: listing a sweep's runs through a server is slow
        runs = store.trial_runs(exp, chosen["sweep"])
    every = store.trials_frame(exp, runs, chosen["sweep"])
    trials = store.search_trials(every)
    parent = exp.client.get_run(chosen["run_id"])
    children = [r for r in runs if r.tags.get(schema.PARENT_RUN) == chosen["run_id"]]
    tables.check_metric(trials, chosen["sweep"], "best_valid_loss")
    measured = measured_finding(chosen, trials)
    title = f"{exp.name} · sweep {chosen['sweep']} · {tables.sweep_dataset(trials)}"
    body = {
        "header": header(exp, chosen, trials, parent),
        "figure": study_figure(chosen, trials, measured),
        "table": study_table(chosen, trials, measured),
        "confirmed": confirmed_section(chosen, every),
        "curves": drawn(
            lambda: plots.curves(chosen, trials, exp, top),
            f"valid loss per epoch of the top {top} trials",
        ),
        "parallel": parallel(chosen, trials),
        "importance": importances(trials),
        "provenance": provenance(exp, chosen, parent, children),
    }
    nav = " ".join(f'<a href="#{key}">{name}</a>' for key, name in SECTIONS.items())
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"<nav>{nav}</nav>\n"
        + "".join(section(k, v) for k, v in body.items())
        + "</body>\n</html>\n"
    )


def report(
    experiment: str,
    out,
    tracking_uri: str | None = None,
    sweep: str | None = None,
    top: int = 5,
    force: bool = False,
) -> Path:
    """Write the report page of a sweep of EXPERIMENT (default: its latest) to OUT (.html)."""
    path = check_out(out, REPORT_OUT, force)
    if top < 1:
        raise UserError(f"--top {top}: show at least 1 trial's learning curve")
    text = render(store.open_experiment(experiment, tracking_uri), sweep, top)
    with atomic(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path
