"""The cells compared on their confirmed settings (`sweep confirm`): each confirmed setting's
mean over its new seeds of a quantity (the sweep's `quantity`: best valid loss, or the training
loss of its best-valid weights), with a 95% t-interval over them; each cell's chosen setting
(its confirmed setting with the lowest best valid loss in the search, fixed before the round
ran: settings are chosen on validation whatever the quantity); and the gap of every cell's
chosen setting to the best cell's, with a 95% Welch interval. Chosen on the search's losses,
a setting's mean over the round's fresh seeds is not biased by the choice (chosen on those
seeds' own means it would be the luckiest of the cell's K): the intervals say how much the
seeds move it."""

import numpy as np
import pandas as pd
from scipy import stats

from ..errors import UserError
from ..tracking import schema, store
from . import arch_label, arch_order
from .uncertainty import LEVEL, Gap, excludes_zero, shown, verdict

VALID = "best_valid_loss"  # what settings are chosen on
QUANTITIES = (VALID, "best_train_loss")  # what they can be compared on (Space.quantity)


def confirmation_losses(trials: pd.DataFrame, metric: str = VALID) -> pd.DataFrame:
    """The confirmation trials of TRIALS (store.trials' frame of a sweep) that completed with a
    finite METRIC (one of QUANTITIES): cell, confirms (the search trial they repeat), seed,
    loss (METRIC) and valid (best valid loss); a one-line UserError where the sweep has none."""
    column = f"metrics.{metric}"
    confirm = trials[(trials["round"] == schema.CONFIRM) & (trials["status"] == schema.COMPLETED)]
    if column in confirm:
        confirm = confirm[np.isfinite(confirm[column].astype(float))]
    if column not in confirm or confirm.empty:
        raise UserError(
            f"the sweep has no completed confirmation trials with a {metric}: run "
            "`rhnsearch sweep confirm NAME --top K --seeds N` first"
        )
    return pd.DataFrame(
        {
            "cell": confirm["params.cell"],
            "confirms": confirm["params.confirms"].astype(str),
            "seed": confirm["params.seed"],
            "loss": confirm[column].astype(float),
            "valid": confirm[f"metrics.{VALID}"].astype(float),
        }
    ).reset_index(drop=True)


def t_interval(losses) -> tuple[float, float] | None:
    """The 95% t-interval of the mean of LOSSES, or None for fewer than two."""
    losses = np.asarray(losses, dtype=float)
    if len(losses) < 2:
        return None
    half = stats.t.ppf((1 + LEVEL) / 2, len(losses) - 1) * stats.sem(losses)
    return float(losses.mean() - half), float(losses.mean() + half)


def welch_interval(losses, reference) -> tuple[float, float] | None:
    """The 95% Welch interval of mean(LOSSES) - mean(REFERENCE), or None if either has fewer
    than two."""
    a, b = np.asarray(losses, dtype=float), np.asarray(reference, dtype=float)
    if len(a) < 2 or len(b) < 2:
        return None
    gap = a.mean() - b.mean()
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = np.sqrt(va + vb)
    if se == 0:
        return float(gap), float(gap)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = stats.t.ppf((1 + LEVEL) / 2, df) * se
    return float(gap - half), float(gap + half)


def confirmed_settings(trials: pd.DataFrame, metric: str = VALID) -> pd.DataFrame:
    """One row per confirmed setting of TRIALS' sweep, cell by cell, the best first: its cell,
    the search trial it repeats and that trial's best valid loss, its seeds, their mean METRIC
    and its 95% t-interval, and whether it is its cell's chosen one (`best`: the lowest
    best valid loss in the search, the round's seeds breaking only a tie or a missing one)."""
    losses = confirmation_losses(trials, metric)
    searched = trials.set_index("trial_id")[f"metrics.{VALID}"]
    groups = losses.groupby(["cell", "confirms"], sort=False)
    rows = pd.DataFrame(
        [
            {
                "cell": cell,
                "confirms": trial_id,
                "search": float(searched.get(trial_id, np.nan)),
                "seeds": len(seeds),
                "mean": seeds["loss"].mean(),
                "interval": shown(t_interval(seeds["loss"])),
                "_valid": seeds["valid"].mean(),
            }
            for (cell, trial_id), seeds in groups
        ]
    )
    order = ["cell", "search", "_valid", "confirms"]
    rows = rows.sort_values(order, kind="stable").reset_index(drop=True)
    return rows.assign(best=~rows["cell"].duplicated()).drop(columns="_valid")


def confirmed_gaps(trials: pd.DataFrame, metric: str = VALID) -> pd.DataFrame:
    """One row per cell: its best confirmed setting's mean METRIC and its gap to the best
    cell's (the lowest mean), with a 95% Welch interval over the two settings' seeds and
    whether it excludes 0; the best cell first, its own row without an interval."""
    losses = confirmation_losses(trials, metric)
    best = confirmed_settings(trials, metric).query("best").sort_values(["mean", "cell"])
    seeds = {
        (cell, trial_id): values.to_numpy()
        for (cell, trial_id), values in losses.groupby(["cell", "confirms"])["loss"]
    }
    reference = seeds[tuple(best.iloc[0][["cell", "confirms"]])]
    rows = []
    for k, (cell, trial_id, mean) in enumerate(zip(best["cell"], best["confirms"], best["mean"])):
        found = welch_gap(seeds[cell, trial_id], reference)
        rows.append(
            {
                "cell": cell,
                "setting": trial_id,
                "mean": mean,
                "gap": mean - best.iloc[0]["mean"],
                "interval": shown(found and found.bounds) if k else "(the best cell)",
                "excludes 0": excludes_zero(found) if k else "–",
            }
        )
    return pd.DataFrame(rows)


def welch_gap(losses, reference) -> Gap | None:
    """mean(LOSSES) - mean(REFERENCE) as a `Gap`: k the fewer seeds and its 95% Welch
    interval; None if either has fewer than two seeds."""
    bounds = welch_interval(losses, reference)
    if bounds is None:
        return None
    return Gap(
        float(np.mean(losses) - np.mean(reference)), min(len(losses), len(reference)), bounds
    )


def confirmed_finding(trials: pd.DataFrame, metric: str = VALID) -> pd.DataFrame:
    """The RHN paper's JSB finding on the confirmed settings (`tables.jsb_finding` on the
    search's), in METRIC: per arch, the mean over seeds of its cell's best confirmed setting at the
    shallowest and the deepest depth, its change with depth and its gap to RHN's at the deepest
    depth, each with its Welch 95% interval over the two settings' seeds, whether it excludes 0
    and the verdict of the paper's claim (`uncertainty.verdict`); `claims.optimization_claims`
    words it."""
    best = confirmed_settings(trials, metric).query("best")
    confirm = trials[trials["round"] == schema.CONFIRM]
    where = confirm.groupby("params.cell")[["params.arch", "params.depth"]].first()
    losses = confirmation_losses(trials, metric)
    seeds = {}
    for cell, trial_id in zip(best["cell"], best["confirms"]):
        arch, depth = where.loc[cell]
        chosen = losses[(losses["cell"] == cell) & (losses["confirms"] == trial_id)]
        seeds[arch, int(depth)] = chosen["loss"].to_numpy()
    archs = sorted({a for a, _ in seeds}, key=arch_order)
    shallow, deep = min(d for _, d in seeds), max(d for _, d in seeds)
    none = np.array([])

    def compared(name: str, mine, reference, claim: str) -> dict:
        found = welch_gap(mine, reference)
        return {
            f"{name}: k": found.k if found else pd.NA,
            f"{name}: 95% interval": shown(found and found.bounds),
            f"{name} excludes 0": excludes_zero(found),
            f"{name}: paper's claim": f"{claim}: {verdict(found, claim)}",
        }

    def mean(values) -> float:
        return float(values.mean()) if len(values) else float("nan")

    rows = []
    for arch in archs:
        mine, first = seeds.get((arch, deep), none), seeds.get((arch, shallow), none)
        rhn = seeds.get(("rhn", deep), none)
        rows.append(
            {
                "arch": arch_label(arch),
                f"confirmed at depth {shallow}": mean(first),
                f"confirmed at depth {deep}": mean(mine),
                "change with depth": mean(mine) - mean(first),
                **compared("change", mine, first, "not worse" if arch == "rhn" else "worse"),
                f"gap to RHN at depth {deep}": mean(mine) - mean(rhn),
                **(
                    compared("gap", mine, rhn, "worse")
                    if arch != "rhn"
                    else {
                        "gap: k": pd.NA,
                        "gap: 95% interval": "–",
                        "gap excludes 0": "–",
                        "gap: paper's claim": "–",
                    }
                ),
            }
        )
    return pd.DataFrame(rows).astype({"change: k": "Int64", "gap: k": "Int64"})


def confirmed_tables(
    experiment: str,
    tracking_uri: str | None = None,
    sweep: str | None = None,
    metric: str | None = None,
) -> tuple[str, str, pd.DataFrame, pd.DataFrame]:
    """The sweep (default: the latest of EXPERIMENT), the quantity compared (METRIC, default
    the sweep's `quantity`), its confirmed settings (`confirmed_settings`) and its cells' gaps
    (`confirmed_gaps`), read from the store."""
    exp = store.open_experiment(experiment, tracking_uri)
    chosen = store.pick_sweep(exp, sweep)
    trials = store.trials(exp, chosen["sweep"])
    metric = metric or chosen["quantity"]
    return (
        chosen["sweep"],
        metric,
        confirmed_settings(trials, metric),
        confirmed_gaps(trials, metric),
    )
