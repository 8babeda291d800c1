"""The JSB optimization finding in words: each of the paper's claims, worded from the interval
it rests on (`uncertainty.verdict`: holds, does not hold, not resolved, consistent with), never
by hand, so that a sentence says no more than its numbers."""

import pandas as pd

from .uncertainty import UNRESOLVABLE

WORDS = {
    "holds": "holds",
    "does not hold": "does not hold",
    "not resolved": "is not resolved",
    "consistent with": "is consistent with the numbers, not shown by them",
    UNRESOLVABLE: "is not resolved",
}
UNCORRECTED = "uncorrected"  # each verdict at 5% on its own, not for the finding's claims together


SEARCHED = "the expected best of {k} settings"  # what `tables.jsb_finding` compares
CONFIRMED = "the mean over {k} seeds of each cell's setting chosen on the search"  # confirmed.py's


def optimization_claims(finding: pd.DataFrame, measure: str = SEARCHED) -> list[str]:
    """One sentence per architecture of FINDING (`tables.jsb_finding`, or
    `confirmed.confirmed_finding` with MEASURE = CONFIRMED): its change with depth, and beside
    RHN its gap to RHN at the deepest depth, each with its claim's verdict."""
    shallow, deep = (
        c.split()[-1] for c in finding.columns if c.startswith(("best at depth", "confirmed at"))
    )
    sentences = []
    for _, row in finding.iterrows():
        grows = "does not grow" if row["arch"] == "RHN" else "grows"
        parts = [
            said(f"that its loss {grows} from depth {shallow} to {deep}", row, "change", measure)
        ]
        if row["gap: paper's claim"] != "–":
            parts.append(said(f"that it is worse than RHN at depth {deep}", row, "gap", measure))
        sentences.append(f"{row['arch']}: the claim " + "; the claim ".join(parts) + ".")
    return sentences


def said(claim: str, row: pd.Series, name: str, measure: str) -> str:
    """CLAIM with the verdict of comparison NAME of ROW and the numbers it rests on (in
    MEASURE, of its k)."""
    value = row[
        "change with depth"
        if name == "change"
        else next(c for c in row.index if c.startswith("gap to RHN"))
    ]
    verdict = row[f"{name}: paper's claim"].split(": ", 1)[1]
    if pd.isna(row[f"{name}: k"]):
        return f"{claim} {WORDS[verdict]}: a cell has no setting that did not diverge"
    measured = f"{value:+.3f} nats in {measure.format(k=row[f'{name}: k'])}"
    if verdict == UNRESOLVABLE:
        return f"{claim} {WORDS[verdict]}: {measured}, too few settings a cell for an interval"
    return (
        f"{claim} {WORDS[verdict]}: {measured}, 95% interval "
        f"{row[f'{name}: 95% interval']} ({UNCORRECTED})"
    )
