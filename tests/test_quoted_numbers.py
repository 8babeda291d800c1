"""Every measured number a document quotes from a committed example is that example's.

The documents: README.md, docs/*.md, results/examples/README.md and each example's README.md
(results/examples/NAME/, NAME one of the folders with a run.json; historical/ is left out).
A document quotes an example where it names it: its path (`results/examples/jsb_cpu/`), a link
to its folder or its bare folder name. In an example's own README every line quotes that
example. A sentence is attributed to the examples it names, else to those its paragraph (or
table row) names, else, in an example's README, to that example.

Each quote found there is checked against what the example's generated files hold:

- a decimal number (a loss, a perplexity, a gap, a setting) against every number of its
  table.md, finding.md, confirmed.md and space.json: equal after rounding, so that 2.41 matches
  2.414 and 2.42 does not (a generated number shown with fewer than 4 significant digits was
  cut by `:.4g` and is taken to 4);
- an interval `[a, b]` against the intervals of those files, both ends of one interval;
- a value right before an interval (`+0.52 [0.25, 0.79]`) against one line of those files
  that holds both;
- a wall time (`2 h 16 min 58 s`, `137 minutes`) against run.json's `wall_seconds`, to the
  quoted unit;
- a version (`torch 2.13`) against the versions trials.parquet records;
- a number computed from those files (a difference, a percentage, a p-value, a sum over
  trials.parquet) against its computation, listed in DERIVED with what it is.

Not checked, by rule: integers that are not wall times (counts, depths, widths, epochs,
seeds, years, section numbers: none is a loss, a perplexity, an interval or a time); the
tests' levels (`95% interval`, `at 5%`); the left side of `a -> b` (the value before a change,
another run's); a sentence (of a table row: of a cell) that names a commit other than its
examples' own (run.json's `commit`): it quotes that commit's run, which no committed file
holds; inline code and link targets. Not checked, by name: the few quotes in
UNCHECKED and the paragraphs in NOT_QUOTES, each with its reason; an entry that no longer
matches fails, so that the lists cannot outlive what they excuse.
"""

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import ROOT

EXAMPLES = ROOT / "results" / "examples"
NAMES = sorted(p.name for p in EXAMPLES.iterdir() if (p / "run.json").is_file())
GENERATED = ("table.md", "finding.md", "confirmed.md")
DOCUMENTS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    EXAMPLES / "README.md",
    *(EXAMPLES / name / "README.md" for name in NAMES),
]

NUM = r"[+\-−]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[+\-]\d+)?"
# A number: not part of a word, a commit or a longer number; a sign only where it is not a
# range's dash (`0.8-0.95`); `1.5M` a million and a half; `1.08x`, `10%` kept with their unit.
NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>(?<![\w.)\]])[+\-−](?=\d))?"
    r"(?P<digits>\d+(?:,\d{3})*(?:\.\d+)?(?:e[+\-]\d+)?)(?P<unit>[kMx%])?(?![\w])"
)
INTERVAL = re.compile(rf"\[\s*({NUM})\s*,\s*({NUM})\s*\]")
PAIR = re.compile(rf"(?<![\w.])({NUM})(?:[^\d\[\]|]{{0,40}}?)(\[\s*{NUM}\s*,\s*{NUM}\s*\])")
WALL = re.compile(
    r"(?<![\w.,])(?:(?P<h>\d+)\s+h(?:\s+(?P<hm>\d+)\s+min(?:\s+(?P<hms>\d+)\s+s)?)?"
    r"|(?P<m>\d+)\s+min(?:utes)?(?:\s+(?P<ms>\d+)\s+s)?|(?P<s>\d+(?:,\d{3})*)\s+s"
    r"|(?P<hours>\d+(?:\.\d+)?)\s+hours?)(?![\w])"
)
VERSION = re.compile(r"\b(?P<package>torch|Ray|MLflow|Optuna)\s+(?P<version>\d+\.\d+(?:\.\d+)?)")
COMMIT = re.compile(r"(?<![\w.])(?:(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}|\d{7})(?![\w])")
LEVELS = re.compile(r"\b95%\s+(?=(?:t-|Welch\s+|bootstrap\s+)?intervals?\b)|\bat\s+5%")
ARROW = re.compile(rf"(?<![\w.])({NUM})(?=\s+->\s)")
SENTENCE_END = re.compile(r"(?<!e\.g\.)(?<!i\.e\.)(?<=[.!?])[\"')*]*\s+(?=[A-Z*`(\[])")


def parse(text: str) -> float:
    return float(text.replace(",", "").replace("−", "-"))


def half_unit(text: str, generated: bool) -> float:
    """Half a unit of TEXT's last digit: how far the value it rounds may lie. A generated
    number of fewer than 4 significant digits (and no exponent) was cut by `:.4g`, so its
    4th digit is a zero; a generated 0 is a zero."""
    mantissa, _, exponent = text.lower().replace(",", "").lstrip("+-−").partition("e")
    decimals = len(mantissa.partition(".")[2])
    unit = 10.0 ** (int(exponent or 0) - decimals)
    value = abs(parse(text))
    if generated and not exponent:  # (`:.4g` prints a zero only for a zero)
        unit = min(unit, 10.0 ** (math.floor(math.log10(value)) - 3)) if value else 0.0
    return unit / 2


@dataclass(frozen=True)
class Value:
    value: float
    half: float
    where: str  # "table.md:7"
    probability: bool = False  # a column of P(...): quoted only where a sentence says so

    def rounds_to(self, quoted: "Value") -> bool:
        slack = 1e-9 * max(1.0, abs(self.value))
        return abs(self.value - quoted.value) <= self.half + quoted.half + slack


@dataclass
class Example:
    """What one example's generated files hold."""

    name: str
    commit: str
    wall: Value
    numbers: list = field(default_factory=list)  # Value
    intervals: list = field(default_factory=list)  # (Value, Value)
    lines: list = field(default_factory=list)  # (where, [Value], [(Value, Value)])
    versions: dict = field(default_factory=dict)  # package -> set of versions
    tables: dict = field(default_factory=dict)  # file -> list of rows (header -> cell)

    @property
    def files(self) -> str:
        made = [f for f in GENERATED if (EXAMPLES / self.name / f).exists()]
        return ", ".join(f"results/examples/{self.name}/{f}" for f in [*made, "space.json"])


def json_numbers(node, path="") -> list:
    if isinstance(node, bool) or node is None or isinstance(node, str):
        return []
    if isinstance(node, (int, float)):
        return [(float(node), path)]
    items = node.items() if isinstance(node, dict) else enumerate(node)
    return [found for key, child in items for found in json_numbers(child, f"{path}.{key}")]


def markdown_rows(text: str) -> list:
    rows, header = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("-: "):
            rows.append(dict(zip(header, cells)))
    return rows


def generated(text: str, where: str, probability: bool) -> Value:
    return Value(parse(text), half_unit(text, True), where, probability)


def load(name: str) -> Example:
    folder = EXAMPLES / name
    run = json.loads((folder / "run.json").read_text())
    example = Example(name, run["commit"], Value(run["wall_seconds"], 0.5, "run.json"))
    for file in GENERATED:
        if not (folder / file).exists():
            continue
        text = (folder / file).read_text()
        example.tables[file] = markdown_rows(text)
        header = None
        for number, line in enumerate(text.splitlines(), 1):
            where = f"{file}:{number}"
            cells = line.strip().strip("|").split("|") if line.startswith("|") else [line]
            header = (header or cells) if line.startswith("|") else None
            values, intervals = [], []
            for column, cell_text in zip(header or [""], cells):
                chance = "P(" in column  # a probability, not a loss, gap or time
                found = re.finditer(rf"(?<![\w.]){NUM}(?![\w])", cell_text)
                values += [generated(m.group(), where, chance) for m in found]
                intervals += [
                    (generated(a, where, chance), generated(b, where, chance))
                    for a, b in INTERVAL.findall(cell_text)
                ]
            example.numbers += values
            example.intervals += intervals
            example.lines.append((where, values, intervals))
    space = json.loads((folder / "space.json").read_text())
    example.numbers += [Value(v, 0.0, f"space.json{path}") for v, path in json_numbers(space)]
    columns = [f"{p.lower()}_version" for p in ("torch", "ray", "mlflow", "optuna")]
    recorded = pq.read_table(folder / "trials.parquet", columns=columns)
    example.versions = {c: set(recorded.column(c).to_pylist()) for c in columns}
    return example


def trials(name: str, columns: list):
    return pq.read_table(EXAMPLES / name / "trials.parquet", columns=columns).to_pandas()


def cell(example: Example, file: str, column: str, **where) -> float:
    """The number in FILE's column COLUMN of the one row whose cells equal WHERE."""
    rows = [r for r in example.tables[file] if all(r.get(k) == str(v) for k, v in where.items())]
    assert len(rows) == 1, f"{example.name}/{file}: {len(rows)} rows where {where}"
    return parse(rows[0][column].split()[0])


def percent_above(value: float, base: float) -> float:
    return 100 * (value / base - 1)


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p of Fisher's exact test of the table [[a, b], [c, d]] (as scipy's)."""
    row, column, n = a + b, a + c, a + b + c + d

    def p(x):
        return math.comb(column, x) * math.comb(n - column, row - x) / math.comb(n, row)

    seen = p(a)
    low, high = max(0, row + column - n), min(row, column)
    return sum(p(x) for x in range(low, high + 1) if p(x) <= seen * (1 + 1e-7))


def diverged(example: Example, arch: str, depth: int) -> tuple[int, int]:
    rows = [r for r in example.tables["table.md"] if r["arch"] == arch and r["depth"] == str(depth)]
    return int(rows[0]["diverged"]), int(rows[0]["settings"])


def fisher_rise(example: Example, arch: str) -> float:
    """Fisher's exact p of ARCH's diverged settings at depth 1 against depth 6."""
    (d1, n1), (d6, n6) = diverged(example, arch, 1), diverged(example, arch, 6)
    return fisher_exact(d1, n1 - d1, d6, n6 - d6)


def hsg_valid(example: Example, depth: int, hsg: bool) -> float:
    column = "valid w/ HSG (ptb-sample)" if hsg else "valid w/o (ptb-sample)"
    return cell(example, "table.md", column, depth=depth)


def hsg_excess(example: Example) -> list:
    """HSG's valid perplexity over plain RHN's at each depth: the points, then the percents."""
    depths = [int(r["depth"]) for r in example.tables["table.md"] if r["width"] != "–"]
    pairs = [(hsg_valid(example, d, True), hsg_valid(example, d, False)) for d in depths]
    return [h - p for h, p in pairs] + [percent_above(h, p) for h, p in pairs]


def hsg_excess_range(example: Example) -> list:
    percents = hsg_excess(example)[len(hsg_excess(example)) // 2 :]
    return [min(percents), max(percents)]


def ptb_valid(example: Example, depth: int, arch: str = "RHN") -> float:
    return cell(example, "table.md", "valid WT (ptb-sample)", arch=arch, depth=depth)


def median_over_best(example: Example) -> list:
    """The least and the most a cell's median setting lies above its best (table.md)."""
    gaps = [
        parse(r["median best_valid_loss"]) - parse(r["best best_valid_loss"])
        for r in example.tables["table.md"]
    ]
    return [min(gaps), max(gaps)]


def cpu_hours(name: str, round_: str) -> float:
    frame = trials(name, ["round", "metrics.cpu_seconds"])
    return frame.loc[frame["round"].fillna("search") == round_, "metrics.cpu_seconds"].sum() / 3600


def calibration_today(name: str, shapes: tuple) -> list:
    """The least and most false positives, in percent, of the rule before the calibrated one
    (`today`) on the calibration's pairs of NAME's cells of SHAPES (docs/calibration.json)."""
    rows = json.loads((ROOT / "docs" / "calibration.json").read_text())["rows"]
    rates = [
        100 * r["today"]["false_positives"]
        for r in rows
        if r["example"] == name and r["n"] in [list(s) for s in shapes]
    ]
    return [min(rates), max(rates)]


def held_minutes(name: str) -> list:
    """The minutes the search's trials held their workers, summed (trials.parquet)."""
    frame = trials(name, ["round", "metrics.held_seconds"])
    search = frame["round"].fillna("search") == "search"
    return [frame.loc[search, "metrics.held_seconds"].sum() / 60]


def settings_spread(name: str) -> list:
    """The least and the most the best_valid_loss of a cell's settings spread (nats)."""
    frame = trials(name, ["params.arch", "params.depth", "metrics.best_valid_loss"])
    spread = frame.groupby(["params.arch", "params.depth"])["metrics.best_valid_loss"]
    spans = (spread.max() - spread.min()).tolist()
    return [min(spans), max(spans)]


@dataclass(frozen=True)
class Derived:
    """A phrase of DOCUMENT (a regex; each (NUM) a quoted number) whose numbers are WHAT,
    computed from EXAMPLE's generated files by COMPUTE, in the phrase's order."""

    document: str
    example: str
    phrase: str
    what: str
    compute: object

    @property
    def pattern(self) -> re.Pattern:
        number = rf"(?<![\w.]){NUM}(?![\w])"
        phrase = self.phrase.replace("(NUM)", f"({number})").replace(" NUM ", f" {number} ")
        return re.compile(spaced(phrase))


EXAMPLES_README = "results/examples/README.md"
STUDIES = "docs/studies.md"
DERIVED = [
    Derived(
        "results/examples/hsg_cpu/README.md",
        "hsg_cpu",
        r"by (NUM), (NUM) and (NUM) perplexity points at depths 4, 8 and 16:\s+"
        r"(NUM)%, (NUM)% and (NUM)%",
        "valid perplexity with HSG minus without at depths 4, 8, 16 (table.md), and that "
        "as a percent of without",
        hsg_excess,
    ),
    *(
        Derived(
            document,
            "hsg_cpu",
            r"(NUM)-(NUM)% worse than plain RHN",
            "the least and most valid perplexity with HSG exceeds without at a depth, as a "
            "percent of without (table.md)",
            hsg_excess_range,
        )
        for document in (STUDIES, EXAMPLES_README)
    ),
    Derived(
        "results/examples/ptb_cpu/README.md",
        "ptb_cpu",
        r"depth 8 is 27 perplexity\s+points, (NUM)%, above depth 2",
        "the depth-8 trial's valid perplexity over depth 2's, as a percent (table.md)",
        lambda e: [percent_above(ptb_valid(e, 8), ptb_valid(e, 2))],
    ),
    *(
        Derived(
            document,
            "ptb_cpu_search",
            r"(NUM)% below depth 1(?: in validation perplexity)?, (?:and )?depth 4\s+is (NUM)%"
            r" above it",
            "the valid perplexity of the best trial at depth 6 below depth 1's and depth 4's "
            "above it, as percents (table.md)",
            lambda e: [
                -percent_above(ptb_valid(e, 6), ptb_valid(e, 1)),
                percent_above(ptb_valid(e, 4), ptb_valid(e, 1)),
            ],
        )
        for document in ("results/examples/ptb_cpu_search/README.md", STUDIES)
    ),
    Derived(
        STUDIES,
        "ptb_cpu_search",
        r"a cell's 8 settings spread over (NUM)-(NUM) nats",
        "the least and most the best_valid_loss of a cell's settings spread (trials.parquet)",
        lambda e: settings_spread(e.name),
    ),
    *(
        Derived(
            document,
            "jsb_cpu",
            r"median setting is\s+(NUM)-(NUM) nats worse than its best",
            "the least and most a cell's median best_valid_loss lies above its best (table.md)",
            median_over_best,
        )
        for document in ("results/examples/jsb_cpu/README.md", STUDIES)
    ),
    *(
        Derived(
            document,
            "jsb_paper",
            r"Fisher's exact test, p = (NUM)\);[^;]+\(p =\s+(NUM)\)",
            "Fisher's exact test of the diverged settings at depth 1 against depth 6, DT-RNN's "
            "and DT(S)-RNN's (table.md)",
            lambda e: [fisher_rise(e, "DT-RNN"), fisher_rise(e, "DT(S)-RNN")],
        )
        for document in ("results/examples/jsb_paper/README.md", STUDIES)
    ),
    *(
        Derived(
            f"results/examples/{name}/README.md",
            name,
            r"its trials held their cores for (NUM) min in all",
            "the minutes the trials held their workers, summed (trials.parquet's held_seconds)",
            lambda e: held_minutes(e.name),
        )
        for name in ("hsg_cpu", "ptb_cpu")
    ),
    Derived(
        "results/examples/jsb_paper/README.md",
        "jsb_paper",
        r"no gap in (NUM)-(NUM)% of pairs of cells of 40 and 27 settings",
        "the least and most false positives of the permutation test (`today`) on the pairs of "
        "jsb_paper's cells of 40 and of 27 against 40 settings (docs/calibration.json)",
        lambda e: calibration_today(e.name, ([40, 40], [27, 40])),
    ),
    Derived(
        "results/examples/jsb_paper/README.md",
        "jsb_paper",
        r"search: CPU-hours \| NUM \| (NUM) \|",
        "the search trials' CPU-hours: their cpu_seconds summed (trials.parquet)",
        lambda e: [cpu_hours(e.name, "search")],
    ),
    Derived(
        "results/examples/jsb_paper/README.md",
        "jsb_paper",
        r"confirmation: CPU-hours \| NUM \| (NUM) \|",
        "the round's trials' CPU-hours: their cpu_seconds summed (trials.parquet)",
        lambda e: [cpu_hours(e.name, "confirm")],
    ),
]
ROUND_TIME = (
    "the jsb_paper round's wall time: run.json records the search command's alone (the "
    "round's command took 4,113 s, commit 80cf85f's message)"
)
PLAN = "jsb_paper's plan (`sweep plan --confirm 2 3 > plan.json`): plan.json is not committed"
# (document, regex of the quote and enough of its context to place it, why it is not checked)
UNCHECKED = [
    (EXAMPLES_README, r"the round 68 min 33 s", ROUND_TIME),
    (EXAMPLES_README, r"its round 69 min", ROUND_TIME),
    ("results/examples/jsb_paper/README.md", r"205 min, one trial", ROUND_TIME),
    ("results/examples/jsb_paper/README.md", r"the round 68 min 33 s", ROUND_TIME),
    ("results/examples/jsb_paper/README.md", r"search: CPU-hours \| 1\.63", PLAN),
    ("results/examples/jsb_paper/README.md", r"confirmation: CPU-hours \| 1\.12", PLAN),
    ("results/examples/jsb_paper/README.md", r"83 min on 2 cores", PLAN),
    (
        "results/examples/jsb_paper/README.md",
        r"[\d.]+x the plan's trial-epochs in [\d.]+x its CPU-hours, its epochs [\d.]+x",
        PLAN,
    ),
    ("results/examples/jsb_paper/README.md", r"took [\d.]+x its plan", PLAN),
    (STUDIES, r"planned 83 minutes", PLAN),
]
# (document, a phrase, why): the part of the document that begins with the paragraph holding
# the phrase and runs to the next heading or bold-led paragraph names an example without
# quoting it: its numbers are another tool's, measured on the example's trials
NOT_QUOTES = [
    (
        STUDIES,
        "What early stopping costs here",
        "benchmarks/asha.py's (then asha_vs_fifo.py's and asha_replay.py's) sweep at 2a81ec0, "
        "which it says is "
        "not the jsb_cpu example",
    ),
    (
        STUDIES,
        "**How sure a gap is**",
        "the interval's calibration, benchmarks/calibration.py's output on the examples' cells "
        "(docs/calibration.json, which tests/test_calibration.py holds the table to)",
    ),
    (
        "docs/scale-history.md",
        "The forest's own noise, on the committed `jsb_paper` trials",
        "importance fits timed by a benchmark on the example's trials",
    ),
]


@dataclass
class Quote:
    document: str
    line: int
    text: str
    kind: str
    examples: tuple
    probability: bool  # its sentence speaks of a probability: P(...) columns may hold it


def units(text: str):
    """(first line, lines) of each paragraph, list item, heading and table row; fenced code
    left out."""
    fence, lines, start = False, [], 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = not fence
        if fence or stripped.startswith("```"):
            if lines:
                yield start, lines
            lines = []
            continue
        if lines and (not stripped or stripped[0] in "|#" or stripped.startswith("- ")):
            yield start, lines
            lines = []
        if stripped and stripped[0] in "|#":
            yield number, [line]
        elif stripped:
            start = start if lines else number
            lines.append(line)
    if lines:
        yield start, lines


def spaced(pattern: str) -> str:
    """PATTERN with each space free to be a line break (the documents are wrapped)."""
    return pattern.replace(" ", r"\s+")


def blank(match: re.Match) -> str:
    return re.sub(r"[^\n]", " ", match.group())


def named(text: str) -> set:
    return {n for n in NAMES if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w])", text)}


def sentences(paragraph: str):
    """(offset, text) of PARAGRAPH's sentences (a table row's: of each of its cells)."""
    for cell in re.finditer(r"[^|]+" if paragraph.startswith("|") else r".+", paragraph, re.S):
        text = cell.group()
        ends = [m.start() for m in SENTENCE_END.finditer(text)] + [len(text)]
        for a, b in zip([0, *ends[:-1]], ends):
            yield cell.start() + a, text[a:b]


def quotes(document: Path, examples: dict, used: set):
    """Every quote of DOCUMENT to check against its examples' files (Quote), and a failure
    (str) for each DERIVED number that is not what it computes; notes in USED each entry of
    DERIVED, UNCHECKED and NOT_QUOTES that matched."""
    relative = document.relative_to(ROOT).as_posix()
    own = document.parent.name if document.parent.parent == EXAMPLES else None
    excused = False
    for first, lines in units(document.read_text()):
        raw = "\n".join(lines)
        if raw.startswith("#") or raw.startswith("**"):
            excused = False
        for doc, phrase, _ in NOT_QUOTES:
            if doc == relative and phrase in raw:
                used.add(("not quote", relative, phrase))
                excused = True
        if excused:
            continue
        paragraph_names = named(raw)
        if not paragraph_names and own is None:
            continue
        # inline code and link targets are not quotes (their names still attribute)
        clean = re.sub(r"`[^`\n]*`", blank, raw)
        clean = re.sub(r"(?<=\])\([^)\s]*\)", blank, clean)
        for derived in DERIVED:
            for m in derived.pattern.finditer(clean) if derived.document == relative else ():
                used.add(("derived", relative, derived.phrase))
                line = first + clean[: m.start()].count("\n")
                yield from check_derived(derived, m, examples, f"{relative}:{line}")
                for group in range(1, len(m.groups()) + 1):  # its numbers, checked
                    start, end = m.span(group)
                    clean = clean[:start] + " " * (end - start) + clean[end:]
        for doc, pattern, _ in UNCHECKED:
            for m in re.finditer(spaced(pattern), clean) if doc == relative else ():
                used.add(("unchecked", relative, pattern))
                clean = clean[: m.start()] + blank(m) + clean[m.end() :]
        for offset, sentence in sentences(clean):
            in_sentence = named(raw[offset : offset + len(sentence)])
            names = in_sentence | {own} if own else in_sentence or paragraph_names
            commits = {examples[n].commit for n in names}
            if names and all(c in commits for c in COMMIT.findall(sentence)):
                line = first + clean[:offset].count("\n")
                yield from sentence_quotes(sentence, relative, line, tuple(sorted(names)))


def sentence_quotes(clause: str, document: str, line: int, names: tuple):
    """The quotes of one sentence (CLAUSE), each consumed as it is found."""

    def at(position: int) -> int:
        return line + clause[:position].count("\n")

    chance = bool(re.search(r"probabilit|P\(", clause))

    def quote(m, kind, group=0):
        return Quote(document, at(m.start(group)), m.group(group), kind, names, chance)

    clause = LEVELS.sub(blank, clause)
    clause = ARROW.sub(blank, clause)
    for pattern, kind in ((VERSION, "version"), (PAIR, "pair")):
        for m in pattern.finditer(clause):
            yield quote(m, kind)
            if kind == "version":
                clause = clause[: m.start()] + blank(m) + clause[m.end() :]
    for pattern, kind in ((INTERVAL, "interval"), (WALL, "wall time")):
        for m in pattern.finditer(clause):
            yield quote(m, kind)
        clause = pattern.sub(blank, clause)
    for m in NUMBER.finditer(clause):
        if "." in m.group("digits") or m.group("unit") in ("x", "%"):
            yield quote(m, "number")


def value_of(text: str) -> Value:
    m = NUMBER.fullmatch(text.strip())
    scale = {"k": 1e3, "M": 1e6}.get(m.group("unit"), 1.0)
    signed = (m.group("sign") or "") + m.group("digits")
    return Value(parse(signed) * scale, half_unit(signed, False) * scale, "")


def seconds_of(m: re.Match) -> Value:
    g = {k: float(v.replace(",", "")) for k, v in m.groupdict().items() if v is not None}
    if "hours" in g:
        return Value(g["hours"] * 3600, half_unit(m.group("hours"), False) * 3600, "")
    if "h" in g:
        total = g["h"] * 3600 + g.get("hm", 0) * 60 + g.get("hms", 0)
        return Value(total, 0.5 if "hms" in g else 30.0 if "hm" in g else 1800.0, "")
    if "m" in g:
        return Value(g["m"] * 60 + g.get("ms", 0), 0.5 if "ms" in g else 30.0, "")
    return Value(g["s"], 0.5, "")


def check(q: Quote, examples: dict) -> str | None:
    """None where Q matches one of its examples' files, else what is wrong."""
    chosen = [examples[n] for n in q.examples]
    against = "; ".join(e.files for e in chosen)
    head = f"{q.document}:{q.line}: {q.text!r} ({q.kind}, quoted from {', '.join(q.examples)})"
    if q.kind == "version":
        m = VERSION.match(q.text)
        column = f"{m.group('package').lower()}_version"
        recorded = set().union(*(e.versions[column] for e in chosen))
        if any((v + ".").startswith(m.group("version") + ".") for v in recorded):
            return None
        return f"{head}: trials.parquet records {column} {sorted(recorded)}"
    if q.kind == "wall time":
        wall = seconds_of(WALL.fullmatch(q.text))
        if any(e.wall.rounds_to(wall) for e in chosen):
            return None
        return f"{head}: run.json's wall_seconds is " + ", ".join(
            f"{e.wall.value:.0f} s ({e.name})" for e in chosen
        )

    def fits(v: Value) -> bool:
        return q.probability or not v.probability

    numbers = [v for e in chosen for v in e.numbers if fits(v)]
    intervals = [(a, b) for e in chosen for a, b in e.intervals if fits(a)]
    if q.kind == "interval":
        low, high = (value_of(t) for t in INTERVAL.fullmatch(q.text).groups())
        if any(a.rounds_to(low) and b.rounds_to(high) for a, b in intervals):
            return None
        near = min(
            intervals,
            key=lambda ab: abs(ab[0].value - low.value) + abs(ab[1].value - high.value),
            default=None,
        )
        nearest = f"; nearest [{near[0].value:g}, {near[1].value:g}] at {near[0].where}"
        return f"{head}: no interval of {against} rounds to it{nearest if near else ''}"
    if q.kind == "pair":
        m = PAIR.fullmatch(q.text)
        value = value_of(m.group(1))
        low, high = (value_of(t) for t in INTERVAL.fullmatch(m.group(2)).groups())
        for e in chosen:
            for _, values, pairs in e.lines:
                if any(fits(v) and v.rounds_to(value) for v in values) and any(
                    fits(a) and a.rounds_to(low) and b.rounds_to(high) for a, b in pairs
                ):
                    return None
        return f"{head}: no line of {against} holds both the value and the interval"
    value = value_of(q.text)
    if any(v.rounds_to(value) for v in numbers):
        return None
    near = min(numbers, key=lambda v: abs(v.value - value.value), default=None)
    nearest = f"; nearest {near.value:g} at {near.where}" if near else ""
    return f"{head}: no number of {against} rounds to it{nearest}"


def check_derived(derived: Derived, m: re.Match, examples: dict, where: str):
    computed = derived.compute(examples[derived.example])
    quoted = [value_of(g) for g in m.groups()]
    assert len(computed) == len(quoted), derived.phrase
    for text, q, value in zip(m.groups(), quoted, computed):
        if not Value(value, 0.0, "").rounds_to(q):
            yield (
                f"{where}: {text!r} (computed, from {derived.example}): "
                f"{derived.what} is {value:.4g}"
            )


@pytest.fixture(scope="module")
def examples() -> dict:
    return {name: load(name) for name in NAMES}


def survey(examples: dict):
    """(failures, quotes checked, the entries of DERIVED, UNCHECKED, NOT_QUOTES used)."""
    failures, checked, used = [], [], set()
    for document in DOCUMENTS:
        for found in quotes(document, examples, used):
            if isinstance(found, str):
                failures.append(found)
                continue
            checked.append(found)
            problem = check(found, examples)
            if problem:
                failures.append(problem)
    return failures, checked, used


@pytest.fixture(scope="module")
def surveyed(examples):
    return survey(examples)


def test_every_number_quoted_from_an_example_is_in_its_files(surveyed):
    failures, checked, _ = surveyed
    assert len(checked) > 100, f"{len(checked)} quotes found: the documents or the parsing changed"
    assert not failures, "\n".join(failures)


def test_every_exception_still_excuses_something(surveyed):
    _, _, used = surveyed
    stale = [
        f"DERIVED: {d.document}: {d.phrase!r}"
        for d in DERIVED
        if ("derived", d.document, d.phrase) not in used
    ]
    stale += [
        f"UNCHECKED: {doc}: {pattern!r}"
        for doc, pattern, _ in UNCHECKED
        if ("unchecked", doc, pattern) not in used
    ]
    stale += [
        f"NOT_QUOTES: {doc}: {phrase!r}"
        for doc, phrase, _ in NOT_QUOTES
        if ("not quote", doc, phrase) not in used
    ]
    assert not stale, "entries that match nothing any more:\n" + "\n".join(stale)
