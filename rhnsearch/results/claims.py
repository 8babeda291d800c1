"""The JSB optimization finding in words: each of the paper's claims, worded from the interval
it rests on (`uncertainty.verdict`: holds, does not hold, not resolved, consistent with), never
by hand, so that a sentence says no more than its numbers."""

import pandas as pd

WORDS = {
    "holds": "holds",
    "does not hold": "does not hold",
    "not resolved": "is not resolved",
    "consistent with": "is consistent with the numbers, not shown by them",
}


def optimization_claims(finding: pd.DataFrame) -> list[str]:
    """One sentence per architecture of FINDING (`tables.jsb_finding`): its change with depth,
    and beside RHN its gap to RHN at the deepest depth, each with its claim's verdict."""
    shallow, deep = (c.split()[-1] for c in finding.columns if c.startswith("best at depth"))
    sentences = []
    for _, row in finding.iterrows():
        grows = "does not grow" if row["arch"] == "RHN" else "grows"
        parts = [
            said(
                f"that its expected best loss {grows} from depth {shallow} to {deep}", row, "change"
            )
        ]
        if row["gap: paper's claim"] != "–":
            parts.append(said(f"that it is worse than RHN at depth {deep}", row, "gap"))
        sentences.append(f"{row['arch']}: the claim " + "; the claim ".join(parts) + ".")
    return sentences


def said(claim: str, row: pd.Series, name: str) -> str:
    """CLAIM with the verdict of comparison NAME of ROW and the numbers it rests on."""
    value = row[
        "change with depth"
        if name == "change"
        else next(c for c in row.index if c.startswith("gap to RHN"))
    ]
    verdict = row[f"{name}: paper's claim"].split(": ", 1)[1]
    if pd.isna(row[f"{name}: k"]):
        return f"{claim} {WORDS[verdict]}: a cell has no setting that did not diverge"
    return (
        f"{claim} {WORDS[verdict]}: {value:+.3f} nats in the expected best of "
        f"{row[f'{name}: k']} settings, 95% interval {row[f'{name}: 95% interval']}"
    )
