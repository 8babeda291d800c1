"""The papers' tables from one sweep's MLflow runs, measured values next to the published ones."""

import numpy as np
import pandas as pd

from ..errors import UserError
from ..tracking import schema
from . import arch_label, arch_order, dataset_label, published, uncertainty
from .expected_best import BEST_OF, expected_best

TABLE_OUT = (".md", ".tex", ".csv")


def check_metric(trials: pd.DataFrame, sweep: str, metric: str):
    """A one-line UserError unless the TRIALS of SWEEP logged METRIC."""
    if f"metrics.{metric}" not in trials:
        logged = [c.removeprefix("metrics.") for c in trials if c.startswith("metrics.")]
        raise UserError(
            f"no metric {metric!r} in sweep {sweep}: "
            + (f"use one of {', '.join(logged)}" if logged else "its trials logged none")
        )


def finished(trials: pd.DataFrame, metric: str) -> pd.Series:
    """Trials that ended normally (completed, or stopped early by ASHA) with a finite METRIC."""
    return trials["status"].isin(schema.FINISHED) & np.isfinite(trials[f"metrics.{metric}"])


def cell_status(run: pd.Series) -> str:
    if run["status"] == "stopped":
        return f"stopped at epoch {run['stopped_at_epoch']}"
    return run["status"]


def best_per_cell(trials: pd.DataFrame, key: str, best_of: int = BEST_OF) -> pd.DataFrame:
    """Per (KEY, depth): the trial with the best batched validation loss, as the authors chose
    their epoch (a cell whose trials all diverged or failed keeps one of them, without
    perplexities). Its valid and test perplexities are those of its best epoch on the whole
    text as one stream (`full_valid_loss`, `test_loss`), as the authors reported theirs; a
    trial stopped early has none. `spread` is over the cell's batched best perplexities.

    Args:
        best_of: the study's K (`spread`).
    """
    ok = finished(trials, "best_valid_loss")
    ranked = trials.assign(_bad=~ok).sort_values(["_bad", "metrics.best_valid_loss"])
    best = ranked.groupby([key, "params.depth"], sort=True).head(1)
    has_test = ok[best.index] & best["status"].eq("completed")
    losses = trials[ok].groupby([key, "params.depth"])["metrics.best_valid_loss"]
    return pd.DataFrame(
        {
            "key": best[key],
            "depth": best["params.depth"],
            "width": best["params.width"],
            "params": best["params.n_params"],
            "valid": np.exp(one_stream_valid(best)).where(has_test),
            "test": np.exp(best["metrics.test_loss"]).where(has_test),
            "spread": [
                spread(np.exp(losses.get_group(cell)) if cell in losses.groups else [], best_of)
                for cell in zip(best[key], best["params.depth"])
            ],
            "trials": trials.groupby([key, "params.depth"])
            .size()
            .loc[list(zip(best[key], best["params.depth"]))]
            .to_numpy(),
            "status": best.apply(cell_status, axis=1),
        }
    ).reset_index(drop=True)


def spread(values, best_of: int) -> str:
    """The expected best of k of VALUES (k the fewer of BEST_OF and their count) ± its std,
    or a dash for fewer than two."""
    if len(values) < 2:
        return uncertainty.shown(None)
    k = min(best_of, len(values))
    mean, std = expected_best(values, [k])
    return f"{mean[0]:.4g} ± {std[0]:.2g} (best of {k})"


def one_stream_valid(trials: pd.DataFrame) -> pd.Series:
    """Each trial's final valid loss on the whole text as one stream; a sweep of rhnsearch
    0.2, which validated in batches only, gives its batched best instead (`caption` says)."""
    return trials.get("metrics.full_valid_loss", trials["metrics.best_valid_loss"])


def sweep_dataset(trials: pd.DataFrame) -> str:
    return dataset_label(", ".join(sorted(trials["params.dataset"].unique())))


def swept_in_depth(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials of the arch a depth study sweeps over the most depths (RHN): a baseline
    beside it (the LSTM at depth 1, at the same budget) is not a point of its depth curve."""
    depths = trials.groupby("params.arch")["params.depth"].nunique()
    return trials[trials["params.arch"] == depths.idxmax()]


def ptb_budget(trials: pd.DataFrame, best_of: int = BEST_OF) -> pd.DataFrame:
    """The authors' README table: depth, units, params, best valid and test perplexity,
    untied and WT, each measured column followed by the published one; then a row per depth
    of each baseline arch of the sweep (the LSTM), as the paper's Table 1 puts RHN beside
    its "directly comparable baseline". BEST_OF: the study's K (`spread`)."""
    swept = swept_in_depth(trials)
    rows = [budget_rows(swept, published.PTB_BUDGET, best_of)]
    for _, baseline in trials.drop(swept.index).groupby("params.arch"):
        rows.append(budget_rows(baseline, published.PTB_BUDGET.iloc[:0], best_of))
    return pd.concat(rows, ignore_index=True)


def budget_rows(trials: pd.DataFrame, pub: pd.DataFrame, best_of: int) -> pd.DataFrame:
    """`ptb_budget`'s rows of one arch, beside the published numbers PUB (none: no column
    filled)."""
    ds, paper = sweep_dataset(trials), "PTB, paper"
    cells = best_per_cell(trials, "params.tied", best_of)
    untied = cells[~cells["key"].astype(bool)].set_index("depth")
    tied = cells[cells["key"].astype(bool)].set_index("depth")
    depths = sorted(set(untied.index) | set(tied.index) | set(pub.index))
    untied, tied, pub = (t.reindex(depths) for t in (untied, tied, pub))
    return pd.DataFrame(
        {
            "arch": arch_label(trials["params.arch"].iloc[0]),
            "depth": depths,
            "units": untied["width"].fillna(tied["width"]).astype("Int64"),
            "units (paper)": pub["units"].astype("Int64"),
            "params": untied["params"].astype("Int64"),
            f"valid ({ds})": untied["valid"],
            "batched valid: expected best ± std": untied["spread"],
            f"valid ({paper})": pub["valid"],
            f"test ({ds})": untied["test"],
            f"test ({paper})": pub["test"],
            "status": untied["status"],
            "params WT": tied["params"].astype("Int64"),
            f"valid WT ({ds})": tied["valid"],
            "batched valid WT: expected best ± std": tied["spread"],
            f"valid WT ({paper})": pub["valid_wt"],
            f"test WT ({ds})": tied["test"],
            f"test WT ({paper})": pub["test_wt"],
            "status WT": tied["status"],
        }
    ).reset_index(drop=True)


def ptb_hsg(trials: pd.DataFrame, best_of: int = BEST_OF) -> pd.DataFrame:
    """The HSG paper's Table 1: valid and test perplexity per depth, with and without HSG.
    BEST_OF: the study's K (`spread`)."""
    ds, paper = sweep_dataset(trials), "PTB, paper"
    cells = best_per_cell(trials, "params.arch", best_of)
    hsg = cells[cells["key"] == "hsg"].set_index("depth")
    rhn = cells[cells["key"] == "rhn"].set_index("depth")
    pub = published.PTB_HSG
    depths = sorted(set(hsg.index) | set(rhn.index) | set(pub.index))
    hsg, rhn, pub = (t.reindex(depths) for t in (hsg, rhn, pub))
    return pd.DataFrame(
        {
            "depth": depths,
            "width": rhn["width"].fillna(hsg["width"]).astype("Int64"),
            f"valid w/ HSG ({ds})": hsg["valid"],
            "batched valid w/ HSG: expected best ± std": hsg["spread"],
            f"valid w/ HSG ({paper})": pub["valid_hsg"],
            f"valid w/o ({ds})": rhn["valid"],
            "batched valid w/o: expected best ± std": rhn["spread"],
            f"valid w/o ({paper})": pub["valid"],
            f"test w/ HSG ({ds})": hsg["test"],
            f"test w/ HSG ({paper})": pub["test_hsg"],
            f"test w/o ({ds})": rhn["test"],
            f"test w/o ({paper})": pub["test"],
            "status w/ HSG": hsg["status"],
            "status w/o": rhn["status"],
        }
    ).reset_index(drop=True)


def jsb_optimization(
    trials: pd.DataFrame, metric: str = "best_valid_loss", best_of: int = BEST_OF
) -> pd.DataFrame:
    """Per (arch, depth): settings tried, how each ended, and of the settings that did not
    diverge or fail, the best and median METRIC and the expected best of BEST_OF settings with
    its std (`expected_best`; of all of them in a cell of fewer)."""
    rows = []
    for (_, arch, depth), group in trials.assign(
        _order=trials["params.arch"].map(arch_order)
    ).groupby(["_order", "params.arch", "params.depth"]):
        counts = group["status"].value_counts()
        loss = group.loc[finished(group, metric), f"metrics.{metric}"]
        mean, std = expected_best(loss, [min(best_of, len(loss))]) if len(loss) else ([np.nan],) * 2
        rows.append(
            {
                "arch": arch_label(arch),
                "depth": depth,
                "params": group["params.n_params"].iloc[0],
                "settings": len(group),
                "completed": counts.get("completed", 0),
                "stopped early": counts.get("stopped", 0),
                "diverged": counts.get("diverged", 0),
                "failed": counts.get("failed", 0),
                f"best {metric}": loss.min(),
                f"expected best of {best_of}": mean[0],
                f"best of {best_of}: std": std[0],
                f"median {metric}": loss.median(),
            }
        )
    return pd.DataFrame(rows).astype(
        {
            "params": "Int64",
            "settings": "Int64",
            "completed": "Int64",
            "stopped early": "Int64",
            "diverged": "Int64",
            "failed": "Int64",
        }
    )


def compared(losses, reference, best_of: int, name: str, better: str, claim: str) -> dict:
    """NAME's columns of a comparison of two cells' settings (`uncertainty`): k, the 95%
    interval of the gap of their expected best of k, whether it excludes 0, the probability
    that a setting of the first beats one of the second (P(BETTER)), and whether the paper's
    CLAIM of the gap's sign ('worse': the first cell is; 'not worse') holds there
    (`uncertainty.verdict`)."""
    found = uncertainty.gap(losses, reference, best_of)
    k = min(len(losses), len(reference)) and uncertainty.comparable_k(
        best_of, len(losses), len(reference)
    )
    return {
        f"{name}: k": k if k else pd.NA,
        f"{name}: 95% interval": uncertainty.shown_gap(found),
        f"{name} excludes 0": uncertainty.excludes_zero(found),
        f"{name}: P({better})": uncertainty.shown_improvement(losses, reference) if k else "–",
        f"{name}: paper's claim": f"{claim}: {uncertainty.verdict(found, claim)}",
    }


def gap_of(losses, reference, best_of: int) -> float:
    """The difference of two cells' expected best of k, k as `uncertainty.comparable_k`
    (NaN where either has none)."""
    if not min(len(losses), len(reference)):
        return float("nan")
    k = uncertainty.comparable_k(best_of, len(losses), len(reference))
    return float(expected_best(losses, [k])[0][0] - expected_best(reference, [k])[0][0])


RHN_BEATEN = "setting better than RHN's"


def jsb_finding(
    trials: pd.DataFrame, metric: str = "best_valid_loss", best_of: int = BEST_OF
) -> pd.DataFrame:
    """The RHN paper's JSB finding, measured: per arch, its best METRIC at the shallowest and
    the deepest depth, its change with depth (the paper's two claims: RHN's does not grow,
    DT-RNN's and DT(S)-RNN's do) and at the deepest depth its gap to RHN (positive: worse than
    RHN), each a difference of the two cells' expected best of k settings (k as
    `uncertainty.comparable_k`), with its 95% interval, whether it excludes 0 and the
    probability that a setting of the first cell beats one of the second (`uncertainty`)."""
    ok = trials[finished(trials, metric)]
    losses = ok.groupby(["params.arch", "params.depth"])[f"metrics.{metric}"]
    best = losses.min().unstack()
    cell = {key: group.to_numpy() for key, group in losses}
    none = np.array([])  # a cell with no finished setting: no comparison
    shallow, deep = min(best.columns), max(best.columns)
    rows = []
    for arch in sorted(best.index, key=arch_order):
        mine, first = cell.get((arch, deep), none), cell.get((arch, shallow), none)
        rhn = cell.get(("rhn", deep), none)
        gap = (
            compared(mine, rhn, best_of, "gap", RHN_BEATEN, "worse")
            if arch != "rhn" and "rhn" in best.index
            else {
                "gap: k": pd.NA,
                "gap: 95% interval": "–",
                "gap excludes 0": "–",
                f"gap: P({RHN_BEATEN})": "–",
                "gap: paper's claim": "–",
            }
        )
        rows.append(
            {
                "arch": arch_label(arch),
                f"best at depth {shallow}": best.at[arch, shallow],
                f"best at depth {deep}": best.at[arch, deep],
                "change with depth": gap_of(mine, first, best_of),
                **compared(
                    mine,
                    first,
                    best_of,
                    "change",
                    "deeper setting better",
                    "not worse" if arch == "rhn" else "worse",
                ),
                f"gap to RHN at depth {deep}": gap_of(mine, rhn, best_of),
                **gap,
            }
        )
    return pd.DataFrame(rows).astype({"change: k": "Int64", "gap: k": "Int64"})


def depth_finding(trials: pd.DataFrame, best_of: int = BEST_OF) -> pd.DataFrame:
    """The RHN paper's PTB finding, measured: per (tied, depth) cell, its best valid
    perplexity and its gap to the shallowest depth in best_valid_loss (nats per word;
    negative: deeper is better), the difference of the two cells' expected best of k trials
    (k as `uncertainty.comparable_k`), with its 95% interval and whether it excludes 0
    (`uncertainty`)."""
    trials = swept_in_depth(trials)
    ok = trials[finished(trials, "best_valid_loss")]
    cell = {
        key: group.to_numpy()
        for key, group in ok.groupby(["params.tied", "params.depth"])["metrics.best_valid_loss"]
    }
    shallow = min(trials["params.depth"])
    rows = []
    for tied, depth in sorted(cell):
        losses = cell[(tied, depth)]
        reference = cell.get((tied, shallow), np.array([]))
        found = uncertainty.gap(losses, reference, best_of) if depth != shallow else None
        rows.append(
            {
                "tied": bool(tied),
                "depth": int(depth),
                "trials": len(losses),
                "best valid perplexity": float(np.exp(losses.min())),
                f"gap to depth {shallow} (nats)": gap_of(losses, reference, best_of),
                "gap: k": uncertainty.comparable_k(best_of, len(losses), len(reference))
                if len(reference)
                else pd.NA,
                "gap: 95% interval": uncertainty.shown_gap(found) if depth != shallow else "–",
                "gap excludes 0": uncertainty.excludes_zero(found),
            }
        )
    return pd.DataFrame(rows).astype({"gap: k": "Int64"})


def where(sweep: pd.Series, trials: pd.DataFrame) -> str:
    return (
        f"{sweep['study']}, sweep {sweep['sweep']} (preset {sweep['preset']}, {len(trials)} trials)"
    )


def cells_caption(
    sweep: pd.Series, trials: pd.DataFrame, metric: str, best_of: int = BEST_OF
) -> str:
    """The caption of `jsb_optimization`'s table, in the trials' loss unit."""
    units = trials.get("params.loss_unit", pd.Series(["nats per time step"])).dropna()
    return (
        f"{where(sweep, trials)}: {metric} in {' / '.join(sorted(set(units)))} on "
        f"{sweep_dataset(trials)}, per architecture and recurrence depth; diverged "
        "settings are counted, not averaged. The expected best of "
        f"{best_of} is the mean of the best of {best_of} settings drawn at random (with "
        "replacement) from the cell's that did not diverge, exact from their order "
        "statistics (Dodge et al. 2019; of all of them in a cell of fewer), and its std the "
        "spread of one such best; a setting stopped early counts at its best loss so far, "
        "so it is an upper bound on what the settings would give trained to the end. The "
        "best of all the cell's settings has no interval: a bootstrap of a minimum is "
        "inconsistent."
    )


def published_caption(
    sweep: pd.Series, trials: pd.DataFrame, source: str, best_of: int = BEST_OF
) -> str:
    """The caption of a table of measured perplexities next to published ones: how they were
    measured, and how sure a gap between cells is."""
    single = trials.groupby(["params.arch", "params.tied", "params.depth"]).size().max() == 1
    spread = (
        "One trial per cell, so no interval: a gap between cells is of unknown "
        "significance (--seeds N repeats each cell's setting N times)."
        if single
        else f"Beside each cell's: the expected best batched valid perplexity of {best_of} "
        "of its trials drawn at random (with replacement; of all of them in a cell of "
        "fewer), exact from their order statistics, ± the std of one such best; a cell of "
        "one trial has none."
    )
    streams = pd.to_numeric(trials.get("params.final_streams", pd.Series([0]))).max()
    best = "valid and test perplexity of the cell's best trial (chosen on batched validation)"
    if "metrics.full_valid_loss" not in trials:
        protocol = "best batched valid and test perplexity (a sweep of rhnsearch 0.2)"
    elif streams > 1:
        protocol = (
            f"{best} over {streams} streams of the text, each from a zero state (the "
            "preset's final_streams; the authors read one stream)"
        )
    else:
        protocol = f"{best} on the whole text as one stream, as the authors reported theirs"
    return (
        f"{where(sweep, trials)}: {protocol}, measured on {sweep_dataset(trials)}, next "
        f"to the published numbers on full PTB ({source}); missing for cells whose best "
        "trial was stopped early. " + spread
    )


def ptb_budget_caption(
    sweep: pd.Series, trials: pd.DataFrame, metric: str, best_of: int = BEST_OF
) -> str:
    """`published_caption`, and the weight decay beside the published one's."""
    decay = (
        ", ".join(f"{float(w):g}" for w in sorted(set(trials["params.weight_decay"])))
        if "params.weight_decay" in trials
        else "unrecorded"
    )
    reduced = published.PTB_REDUCED_DECAY
    return (
        published_caption(sweep, trials, published.RHN_PAPER, best_of) + " The published Figure "
        "5a numbers were run at a weight decay the paper does not give (it says only that "
        "reducing it further improved the depth-10 WT model); this sweep's is "
        f"{decay}; at depth 10 with WT that reduced decay ({reduced['weight_decay']:g} in the "
        f"authors' code) gave {reduced['valid']} / {reduced['test']}."
    )


def ptb_hsg_caption(
    sweep: pd.Series, trials: pd.DataFrame, metric: str, best_of: int = BEST_OF
) -> str:
    return published_caption(sweep, trials, published.HSG_PAPER, best_of)
