"""The papers' tables from one sweep's MLflow runs, measured values next to the published ones."""

import numpy as np
import pandas as pd

from . import arch_label, arch_order, dataset_label, published, uncertainty

TABLE_OUT = (".md", ".tex", ".csv")
FINISHED = ("completed", "stopped")


def finished(trials: pd.DataFrame, metric: str) -> pd.Series:
    """Trials that ended normally (completed, or stopped early by ASHA) with a finite METRIC."""
    return trials["status"].isin(FINISHED) & np.isfinite(trials[f"metrics.{metric}"])


def cell_status(run: pd.Series) -> str:
    if run["status"] == "stopped":
        return f"stopped at epoch {run['stopped_at_epoch']}"
    return run["status"]


def best_per_cell(trials: pd.DataFrame, key: str) -> pd.DataFrame:
    """Per (KEY, depth): the trial with the best batched validation loss, as the authors chose
    their epoch (a cell whose trials all diverged or failed keeps one of them, without
    perplexities). Its valid and test perplexities are those of its best epoch on the whole
    text as one stream (`full_valid_loss`, `test_loss`), as the authors reported theirs; a
    trial stopped early has none. The interval is over the cell's batched best losses."""
    ok = finished(trials, "best_valid_loss")
    ranked = trials.assign(_bad=~ok).sort_values(["_bad", "metrics.best_valid_loss"])
    best = ranked.groupby([key, "params.depth"], sort=True).head(1)
    has_test = ok[best.index] & best["status"].eq("completed")
    losses = trials[ok].groupby([key, "params.depth"])["metrics.best_valid_loss"]
    intervals = [
        uncertainty.best_interval(losses.get_group(cell)) if cell in losses.groups else None
        for cell in zip(best[key], best["params.depth"])
    ]
    return pd.DataFrame(
        {
            "key": best[key],
            "depth": best["params.depth"],
            "width": best["params.width"],
            "params": best["params.n_params"],
            "valid": np.exp(one_stream_valid(best)).where(has_test),
            "test": np.exp(best["metrics.test_loss"]).where(has_test),
            "interval": [
                uncertainty.shown(None if b is None else tuple(np.exp(b))) for b in intervals
            ],
            "trials": trials.groupby([key, "params.depth"])
            .size()
            .loc[list(zip(best[key], best["params.depth"]))]
            .to_numpy(),
            "status": best.apply(cell_status, axis=1),
        }
    ).reset_index(drop=True)


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


def ptb_budget(trials: pd.DataFrame) -> pd.DataFrame:
    """The authors' README table: depth, units, params, best valid and test perplexity,
    untied and WT, each measured column followed by the published one; then a row per depth
    of each baseline arch of the sweep (the LSTM), as the paper's Table 1 puts RHN beside
    its "directly comparable baseline"."""
    swept = swept_in_depth(trials)
    rows = [budget_rows(swept, published.PTB_BUDGET)]
    for _, baseline in trials.drop(swept.index).groupby("params.arch"):
        rows.append(budget_rows(baseline, published.PTB_BUDGET.iloc[:0]))
    return pd.concat(rows, ignore_index=True)


def budget_rows(trials: pd.DataFrame, pub: pd.DataFrame) -> pd.DataFrame:
    """`ptb_budget`'s rows of one arch, beside the published numbers PUB (none: no column
    filled)."""
    ds, paper = sweep_dataset(trials), "PTB, paper"
    cells = best_per_cell(trials, "params.tied")
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
            "batched valid: 95% interval": untied["interval"],
            f"valid ({paper})": pub["valid"],
            f"test ({ds})": untied["test"],
            f"test ({paper})": pub["test"],
            "status": untied["status"],
            "params WT": tied["params"].astype("Int64"),
            f"valid WT ({ds})": tied["valid"],
            "batched valid WT: 95% interval": tied["interval"],
            f"valid WT ({paper})": pub["valid_wt"],
            f"test WT ({ds})": tied["test"],
            f"test WT ({paper})": pub["test_wt"],
            "status WT": tied["status"],
        }
    ).reset_index(drop=True)


def ptb_hsg(trials: pd.DataFrame) -> pd.DataFrame:
    """The HSG paper's Table 1: valid and test perplexity per depth, with and without HSG."""
    ds, paper = sweep_dataset(trials), "PTB, paper"
    cells = best_per_cell(trials, "params.arch")
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
            "batched valid w/ HSG: 95% interval": hsg["interval"],
            f"valid w/ HSG ({paper})": pub["valid_hsg"],
            f"valid w/o ({ds})": rhn["valid"],
            "batched valid w/o: 95% interval": rhn["interval"],
            f"valid w/o ({paper})": pub["valid"],
            f"test w/ HSG ({ds})": hsg["test"],
            f"test w/ HSG ({paper})": pub["test_hsg"],
            f"test w/o ({ds})": rhn["test"],
            f"test w/o ({paper})": pub["test"],
            "status w/ HSG": hsg["status"],
            "status w/o": rhn["status"],
        }
    ).reset_index(drop=True)


def jsb_optimization(trials: pd.DataFrame, metric: str = "best_valid_loss") -> pd.DataFrame:
    """Per (arch, depth): settings tried, how each ended, best and median METRIC of the
    settings that did not diverge or fail."""
    rows = []
    for (_, arch, depth), group in trials.assign(
        _order=trials["params.arch"].map(arch_order)
    ).groupby(["_order", "params.arch", "params.depth"]):
        counts = group["status"].value_counts()
        loss = group.loc[finished(group, metric), f"metrics.{metric}"]
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
                "best: 95% interval": uncertainty.shown(uncertainty.best_interval(loss)),
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


def jsb_finding(trials: pd.DataFrame, metric: str = "best_valid_loss") -> pd.DataFrame:
    """The RHN paper's JSB finding, measured: per arch, its best METRIC at the shallowest and
    the deepest depth and the change with depth (the paper's two claims: RHN's does not grow,
    DT-RNN's and DT(S)-RNN's do), and at the deepest depth its gap to the best RHN (positive:
    worse than RHN); each with its 95% bootstrap interval over the two cells' settings and
    whether it excludes 0 (`uncertainty`)."""
    ok = trials[finished(trials, metric)]
    losses = ok.groupby(["params.arch", "params.depth"])[f"metrics.{metric}"]
    best = losses.min().unstack()
    cell = dict(list(losses))  # a cell with no finished setting has no losses: no interval
    shallow, deep = min(best.columns), max(best.columns)
    rows = []
    for arch in sorted(best.index, key=arch_order):
        bounds = (
            uncertainty.gap_interval(cell.get((arch, deep), []), cell.get(("rhn", deep), []))
            if "rhn" in best.index and arch != "rhn"
            else None
        )
        change = uncertainty.gap_interval(cell.get((arch, deep), []), cell.get((arch, shallow), []))
        rows.append(
            {
                "arch": arch_label(arch),
                f"best at depth {shallow}": best.at[arch, shallow],
                f"best at depth {deep}": best.at[arch, deep],
                "change with depth": best.at[arch, deep] - best.at[arch, shallow],
                "change: 95% interval": uncertainty.shown(change),
                "change excludes 0": uncertainty.excludes_zero(change),
                f"gap to RHN at depth {deep}": best.at[arch, deep] - best.at["rhn", deep]
                if "rhn" in best.index
                else float("nan"),
                "gap: 95% interval": uncertainty.shown(bounds) if arch != "rhn" else "–",
                "gap excludes 0": uncertainty.excludes_zero(bounds) if arch != "rhn" else "–",
            }
        )
    return pd.DataFrame(rows)


def depth_finding(trials: pd.DataFrame) -> pd.DataFrame:
    """The RHN paper's PTB finding, measured: per (tied, depth) cell, its best valid
    perplexity and the gap of its best best_valid_loss (nats per word) to the shallowest
    depth's (negative: deeper is better), with the gap's 95% bootstrap interval over both
    cells' trials and whether it excludes 0 (`uncertainty`)."""
    trials = swept_in_depth(trials)
    ok = trials[finished(trials, "best_valid_loss")]
    cell = dict(list(ok.groupby(["params.tied", "params.depth"])["metrics.best_valid_loss"]))
    shallow = min(trials["params.depth"])
    rows = []
    for tied, depth in sorted(cell):
        losses = cell[(tied, depth)]
        reference = cell.get((tied, shallow), pd.Series(dtype=float))  # min() of none: NaN
        bounds = uncertainty.gap_interval(losses, reference) if depth != shallow else None
        rows.append(
            {
                "tied": bool(tied),
                "depth": int(depth),
                "trials": len(losses),
                "best valid perplexity": float(np.exp(losses.min())),
                f"gap to depth {shallow} (nats)": losses.min() - reference.min(),
                "gap: 95% interval": uncertainty.shown(bounds) if depth != shallow else "–",
                "gap excludes 0": uncertainty.excludes_zero(bounds),
            }
        )
    return pd.DataFrame(rows)


def where(sweep: pd.Series, trials: pd.DataFrame) -> str:
    return (
        f"{sweep['study']}, sweep {sweep['sweep']} (preset {sweep['preset']}, {len(trials)} trials)"
    )


def cells_caption(sweep: pd.Series, trials: pd.DataFrame, metric: str) -> str:
    """The caption of `jsb_optimization`'s table, in the trials' loss unit."""
    units = trials.get("params.loss_unit", pd.Series(["nats per time step"])).dropna()
    return (
        f"{where(sweep, trials)}: {metric} in {' / '.join(sorted(set(units)))} on "
        f"{sweep_dataset(trials)}, per architecture and recurrence depth; diverged "
        "settings are counted, not averaged; the interval is a 95% bootstrap over the "
        "cell's settings of its best."
    )


def published_caption(sweep: pd.Series, trials: pd.DataFrame, source: str) -> str:
    """The caption of a table of measured perplexities next to published ones: how they were
    measured, and how sure a gap between cells is."""
    single = trials.groupby(["params.arch", "params.tied", "params.depth"]).size().max() == 1
    spread = (
        "One trial per cell, so no interval: a gap between cells is of unknown "
        "significance (--seeds N repeats each cell's setting N times)."
        if single
        else "The interval is a 95% bootstrap over the cell's trials of its best batched "
        "valid perplexity."
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


def ptb_budget_caption(sweep: pd.Series, trials: pd.DataFrame, metric: str) -> str:
    """`published_caption`, and the weight decay beside the published one's."""
    decay = (
        ", ".join(f"{float(w):g}" for w in sorted(set(trials["params.weight_decay"])))
        if "params.weight_decay" in trials
        else "unrecorded"
    )
    reduced = published.PTB_REDUCED_DECAY
    return (
        published_caption(sweep, trials, published.RHN_PAPER) + " The published Figure "
        "5a numbers were run at a weight decay the paper does not give (it says only that "
        "reducing it further improved the depth-10 WT model); this sweep's is "
        f"{decay}; at depth 10 with WT that reduced decay ({reduced['weight_decay']:g} in the "
        f"authors' code) gave {reduced['valid']} / {reduced['test']}."
    )


def ptb_hsg_caption(sweep: pd.Series, trials: pd.DataFrame, metric: str) -> str:
    return published_caption(sweep, trials, published.HSG_PAPER)
