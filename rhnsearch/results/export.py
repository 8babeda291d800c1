"""Write a results frame to a file by extension (.parquet, .csv, .md, .tex), atomically: to a
temp file beside it, then renamed; an existing file is kept unless `force`."""

import json
import math
import os
import uuid
from contextlib import contextmanager
from html import escape
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import UserError
from ..tracking import store

TABLE_FORMATS = (".parquet", ".csv", ".md", ".tex")
ARROW_TYPES = {
    "Int64": pa.int64(),
    "float64": pa.float64(),
    "boolean": pa.bool_(),
    "str": pa.string(),
}
TEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "–": "--",
}


def check_out(path, formats, force: bool) -> Path:
    """The output path, if its extension is one of FORMATS and it may be written."""
    path = Path(path)
    if path.suffix.lower() not in formats:
        raise UserError(
            f"cannot write {path.name}: use one of {', '.join(formats)} as the file extension"
        )
    if path.exists() and not force:
        raise UserError(f"{path} already exists: pass --force to overwrite it")
    if not path.parent.is_dir():
        raise UserError(f"directory {path.parent} does not exist: create it first")
    return path


@contextmanager
def atomic(path: Path):
    """Yield a fresh temp path beside PATH; rename it onto PATH if the block succeeds."""
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:12]}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def arrow_schema(frame: pd.DataFrame) -> pa.Schema:
    """An explicit Arrow type per column (int64, float64, bool, string, timestamp[UTC])."""

    def arrow_type(dtype):
        if isinstance(dtype, pd.DatetimeTZDtype):
            return pa.timestamp(dtype.unit, tz=str(dtype.tz))
        return ARROW_TYPES[str(dtype)]

    return pa.schema([pa.field(c, arrow_type(t)) for c, t in frame.dtypes.items()])


def cell(value, digits: int = 4) -> str:
    """A table cell: floats to DIGITS significant digits, missing values as an en dash."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e6 else f"{value:.3e}"
    if isinstance(value, pd.Timestamp):
        return value.isoformat(timespec="seconds")
    return str(value)


def _numeric(frame: pd.DataFrame) -> list:
    return [
        pd.api.types.is_numeric_dtype(t) and not pd.api.types.is_bool_dtype(t) for t in frame.dtypes
    ]


def markdown(frame: pd.DataFrame, caption: str | None = None) -> str:
    """A GitHub Markdown table (numbers right-aligned), with an optional caption line."""

    def row(values):
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    lines = [f"{caption}\n"] if caption else []
    lines += [row(frame.columns), row("---:" if n else "---" for n in _numeric(frame))]
    lines += [row(cell(v) for v in values) for values in frame.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def html_table(frame: pd.DataFrame, caption: str | None = None, table_id: str | None = None) -> str:
    """An HTML table (numbers right-aligned), every cell escaped, with an optional caption."""
    numeric = _numeric(frame)

    def row(tag, values):
        return (
            "<tr>"
            + "".join(
                f"<{tag}{' class=num' if n else ''}>{escape(str(v))}</{tag}>"
                for v, n in zip(values, numeric)
            )
            + "</tr>"
        )

    lines = [f'<table id="{escape(table_id)}">' if table_id else "<table>"]
    lines += [f"<caption>{escape(caption)}</caption>"] if caption else []
    lines += ["<thead>" + row("th", frame.columns) + "</thead>", "<tbody>"]
    lines += [row("td", (cell(v) for v in values)) for values in frame.itertuples(index=False)]
    return "\n".join(lines + ["</tbody></table>"]) + "\n"


def tex(text) -> str:
    """TEXT with LaTeX's special characters escaped."""
    return "".join(TEX_SPECIAL.get(c, c) for c in str(text))


def latex(frame: pd.DataFrame, caption: str | None = None) -> str:
    """A LaTeX table (booktabs rules), every cell escaped."""
    align = "".join("r" if n else "l" for n in _numeric(frame))
    lines = [r"\begin{table}[htbp]", r"\centering"]
    lines += [rf"\caption{{{tex(caption)}}}"] if caption else []
    lines += [
        rf"\begin{{tabular}}{{{align}}}",
        r"\toprule",
        " & ".join(tex(c) for c in frame.columns) + r" \\",
        r"\midrule",
    ]
    lines += [
        " & ".join(tex(cell(v)) for v in values) + r" \\"
        for values in frame.itertuples(index=False)
    ]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def write_frame(
    frame: pd.DataFrame, path: Path, caption: str | None = None, metadata: dict | None = None
):
    """Write FRAME to PATH in the format of its extension (checked by check_out)."""
    with atomic(path) as tmp:
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            table = pa.Table.from_pandas(frame, schema=arrow_schema(frame), preserve_index=False)
            meta = {
                **(table.schema.metadata or {}),
                b"rhnsearch": json.dumps(metadata or {}).encode(),
            }
            pq.write_table(table.replace_schema_metadata(meta), tmp)
        elif suffix == ".csv":
            frame.to_csv(tmp, index=False)
        elif suffix == ".md":
            tmp.write_text(markdown(frame, caption))
        else:
            tmp.write_text(latex(frame, caption))


def export(
    experiment: str,
    out,
    tracking_uri: str | None = None,
    sweep: str | None = None,
    with_history: bool = False,
    force: bool = False,
) -> tuple[Path, int]:
    """Export the trials (or, with history, the trials' epochs) of an experiment to OUT;
    return the path and the number of rows written."""
    out = check_out(out, TABLE_FORMATS, force)
    exp = store.open_experiment(experiment, tracking_uri)
    if sweep is not None:
        store.pick_sweep(exp, sweep)
    frame = store.trials(exp, sweep)
    if with_history:
        frame = store.history(exp, frame)
    kind = "history" if with_history else "trials"
    write_frame(
        frame,
        out,
        caption=f"{experiment}: {kind} ({len(frame)} rows)",
        metadata={
            "experiment": experiment,
            "tracking_uri": exp.tracking_uri,
            "sweep": sweep,
            "kind": kind,
        },
    )
    return out, len(frame)
