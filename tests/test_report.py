"""`rhnsearch results report` on the real smoke sweeps' store: one self-contained HTML page per
sweep, its numbers checked against the store and against Optuna run independently here, and
its sections rendered in headless Chromium (screenshots kept in $RHNSEARCH_TEST_ARTIFACTS,
default results/test-artifacts/)."""

import base64
import html
import io
import json
import math
import os
import re
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import optuna
import pytest
from PIL import Image

import tiers
from conftest import OWN_CELL, ROOT, SmokeSweep, rhnsearch_cli, rhnsearch_main

ARTIFACTS = Path(os.environ.get("RHNSEARCH_TEST_ARTIFACTS", ROOT / "results" / "test-artifacts"))

SECTIONS = [
    "header",
    "figure",
    "table",
    "confirmed",
    "curves",
    "parallel",
    "importance",
    "provenance",
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NOT_SETTINGS = {"seed", "width", "n_params", "cell"}


class Page(HTMLParser):
    """The parts of a report page the tests read: element ids (and the section each lies in),
    image sources per section, tables by id (rows of cell texts), and every src/href."""

    def __init__(self, text: str):
        super().__init__()
        self.ids, self.images, self.tables, self.links = [], {}, {}, []
        self.section, self.table, self.row = None, None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.append(attrs["id"])
        if tag in ("header", "section") and "id" in attrs:
            self.section = attrs["id"]
        self.links += [attrs[k] for k in ("src", "href") if k in attrs]
        if tag == "img":
            self.images.setdefault(self.section, []).append(attrs["src"])
        elif tag == "table":
            self.table = attrs.get("id")
            self.tables[self.table] = []
        elif tag == "tr":
            self.row = []
            self.tables[self.table].append(self.row)
        elif tag in ("td", "th"):
            self.row.append("")

    def handle_data(self, data):
        if self.row is not None and self.row and self.table is not None:
            self.row[-1] += data

    def handle_endtag(self, tag):
        if tag == "tr":
            self.row = None

    def table_rows(self, table_id: str) -> list[dict]:
        header, *rows = self.tables[table_id]
        return [dict(zip(header, row)) for row in rows]


def figures(page: Page) -> list[str]:
    """The sections that must show a figure: importance only where some arch had enough
    finished trials for a table (the HSG smoke sweep's two a arch have none)."""
    ranked = any(t and t.startswith("importance-") for t in page.tables)
    return ["figure", "curves", "parallel"] + ["importance"] * ranked


def results(sweep: SmokeSweep, *args, check=True):
    return rhnsearch_main(
        "results", *args, "--tracking-uri", sweep.tracking_uri, cwd=sweep.cwd, check=check
    )


def one_line_error(proc, *words):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rhnsearch: error: "), proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture(scope="module")
def pages(jsb_smoke, jsb_diverging, ptb_budget_smoke, ptb_hsg_smoke, tmp_path_factory):
    """The report of each smoke sweep: the JSB one written by the command in a fresh process,
    the others as each sweep logged its own on its parent run when it finished."""
    out = tmp_path_factory.mktemp("reports")
    path = out / "jsb_optimization.html"
    proc = rhnsearch_cli(
        "results",
        "report",
        "--experiment",
        "jsb_optimization",
        "--top",
        "3",
        "--out",
        path,
        "--tracking-uri",
        jsb_smoke.tracking_uri,
        cwd=jsb_smoke.cwd,
    )
    assert proc.stderr.strip().splitlines()[-1] == f"wrote {path}"
    made = {"jsb_optimization": path}
    for sweep in (jsb_diverging, ptb_budget_smoke, ptb_hsg_smoke):
        client = sweep.client()
        experiment = client.get_experiment_by_name(sweep.experiment).experiment_id
        (parent,) = client.search_runs([experiment], "tags.kind = 'sweep'")
        logged = client.download_artifacts(
            parent.info.run_id, "report/report.html", str(out / sweep.experiment)
        )
        made[sweep.experiment] = Path(logged)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "report_jsb_optimization.html").write_bytes(made["jsb_optimization"].read_bytes())
    return made


def test_report_is_one_self_contained_page_with_every_section(pages):
    for experiment, path in pages.items():
        text = path.read_text(encoding="utf-8")
        page = Page(text)
        assert [i for i in page.ids if i in SECTIONS] == SECTIONS, experiment
        assert len(page.ids) == len(set(page.ids))
        # nothing loaded from elsewhere: every src/href is embedded data or a fragment
        assert page.links and all(
            link.startswith(("data:image/png;base64,", "#")) for link in page.links
        ), experiment
        assert "<script" not in text and "url(" not in text and "@import" not in text
        assert not re.search(r"(src|href)\s*=\s*[\"']?\s*(https?:|//|file:)", text)
        for section in figures(page):
            assert page.images.get(section), (experiment, section)
        for sources in page.images.values():
            for src in sources:
                png = base64.b64decode(src.removeprefix("data:image/png;base64,"), validate=True)
                assert png[:8] == PNG_MAGIC
                with Image.open(io.BytesIO(png)) as image:
                    image.verify()
                with Image.open(io.BytesIO(png)) as image:
                    assert image.width > 300 and image.height > 200
                    rgb = image.convert("RGB")
                    assert len(rgb.getcolors(rgb.width * rgb.height)) > 50


def test_header_counts_the_trials_by_status(pages, jsb_smoke, ptb_budget_smoke):
    for sweep in (jsb_smoke, ptb_budget_smoke):
        facts = {
            r["field"]: r["value"]
            for r in Page(pages[sweep.experiment].read_text()).table_rows("header-facts")
        }
        runs = sweep.child_runs()
        statuses = [r.data.tags["status"] for r in runs]
        assert facts["experiment"] == sweep.experiment and facts["sweep"] == sweep.name
        assert facts["study"] == sweep.experiment and facts["preset"] == "smoke"
        assert facts["trials"].startswith(
            f"{len(runs)}: {statuses.count('completed')} "
            f"completed, {statuses.count('stopped')} stopped "
            f"early, {statuses.count('diverged')} diverged"
        )
        minutes, seconds = divmod(round(sweep.summary["wall_seconds"]), 60)
        assert facts["wall time"].startswith(f"{minutes}m {seconds:02d}s")


def test_jsb_report_has_the_jsb_table(pages, jsb_smoke):
    page = Page(pages["jsb_optimization"].read_text())
    rows = page.table_rows("study-table")
    printed = results(jsb_smoke, "table", "--study", "jsb_optimization").stdout
    md = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in printed.splitlines()
        if line.startswith("|")
    ]
    assert [list(r.values()) for r in rows] == md[2:] and list(rows[0]) == md[0]
    runs = jsb_smoke.child_runs()
    assert sum(int(r["settings"]) for r in rows) == len(runs)
    for row in rows:
        code = {"RHN": "rhn", "DT-RNN": "dtrnn", "DT(S)-RNN": "dtsrnn"}[row["arch"]]
        losses = [
            r.data.metrics["best_valid_loss"]
            for r in runs
            if r.data.params["arch"] == code
            and r.data.params["depth"] == row["depth"]
            and r.data.tags["status"] in ("completed", "stopped")
        ]
        best = min(losses) if losses else float("nan")  # a cell whose settings all diverged
        assert float(row["best best_valid_loss"]) == pytest.approx(best, rel=1e-3, nan_ok=True)


def expected_best_of(losses: list, k: int) -> float:
    """The mean best of k draws (with replacement) of LOSSES: the i-th lowest of n is the
    best when every draw is at or above it and not every draw above it."""
    n = len(losses)
    return sum(v * ((n - i) ** k - (n - i - 1) ** k) / n**k for i, v in enumerate(sorted(losses)))


def test_jsb_report_states_the_finding_and_measures_it(pages, jsb_smoke):
    """The paper's statement, then per arch its best valid loss at depth 1 and 6, its change
    with depth and its gap to RHN at depth 6 (of the expected best of k settings), each
    recomputed here from the runs, and a sentence per arch worded from its verdicts."""
    from rhnsearch.results.claims import WORDS

    text = pages["jsb_optimization"].read_text()
    assert "Figure 4" in text and "DT(S)-RNN" in text
    assert text.count("<img") >= 3  # the swarm, the expected best of k settings, and
    assert 'alt="training loss of each setting"' in text  # the swarm of best_train_loss
    cells = {}
    for run in jsb_smoke.child_runs():
        if run.data.tags["status"] in ("completed", "stopped"):
            key = (run.data.params["arch"], int(run.data.params["depth"]))
            cells.setdefault(key, []).append(run.data.metrics["best_valid_loss"])
    best = {key: min(losses) for key, losses in cells.items()}

    def gap(mine: tuple, theirs: tuple) -> float:
        if mine not in cells or theirs not in cells:
            return math.nan
        k = max(1, min(40, len(cells[mine]) // 4, len(cells[theirs]) // 4))  # comparable_k
        return expected_best_of(cells[mine], k) - expected_best_of(cells[theirs], k)

    rows = Page(text).table_rows("finding-table")
    claims = re.search(r"RHN: the claim.*?(?=</p>)", html.unescape(text)).group(0)
    sentences = re.split(r" (?=(?:RHN|DT-RNN|DT\(S\)-RNN): the claim)", claims)
    codes = {"RHN": "rhn", "DT-RNN": "dtrnn", "DT(S)-RNN": "dtsrnn"}
    assert [r["arch"] for r in rows] == ["RHN", "DT-RNN", "DT(S)-RNN"]

    def shown(value: str) -> float:
        return math.nan if value == "–" else float(value)  # a cell with no finished setting

    for row in rows:
        arch = codes[row["arch"]]
        expected = [
            best.get((arch, 1), math.nan),
            best.get((arch, 6), math.nan),
            gap((arch, 6), (arch, 1)),
            gap((arch, 6), ("rhn", 6)),
        ]
        measured = [
            shown(row[k])
            for k in (
                "best at depth 1",
                "best at depth 6",
                "change with depth",
                "gap to RHN at depth 6",
            )
        ]
        assert row["change excludes 0"] in ("yes", "no", "–")
        assert row["change: 95% interval"].startswith(("[", "–"))
        assert row["change: P(deeper setting better)"][:1] in ("0", "1", "–")
        assert measured == pytest.approx(expected, rel=1e-3, abs=2e-3, nan_ok=True), row  # 4 digits
        # the sentence of each arch's claims, worded from the verdict its row shows
        verdict = row["change: paper's claim"].split(": ", 1)[1]
        sentence = next(s for s in sentences if s.startswith(f"{row['arch']}: the claim"))
        assert WORDS[verdict] in sentence.split("; ")[0], (verdict, sentence)


def test_ptb_reports_hold_the_published_numbers(pages):
    from rhnsearch.results import published

    rows = Page(pages["ptb_budget"].read_text()).table_rows("study-table")
    assert [int(r["depth"]) for r in rows] == list(range(1, 11))
    for column, key in (
        ("units (paper)", "units"),
        ("valid (PTB, paper)", "valid"),
        ("test (PTB, paper)", "test"),
        ("valid WT (PTB, paper)", "valid_wt"),
        ("test WT (PTB, paper)", "test_wt"),
    ):
        assert [float(r[column]) for r in rows] == list(published.PTB_BUDGET[key]), column
    assert rows[0]["units (paper)"] == "1275" and rows[9]["test WT (PTB, paper)"] == "66"
    assert published.RHN_PAPER in html.unescape(pages["ptb_budget"].read_text())

    rows = Page(pages["ptb_budget"].read_text()).table_rows("finding-table")
    assert len(rows) == 6 and "gap to depth 1 (nats)" in rows[0]  # depths 1, 2, 10 x tied
    assert all(r["gap: 95% interval"].startswith("–") for r in rows)  # one trial per cell

    rows = Page(pages["ptb_hsg"].read_text()).table_rows("study-table")
    assert [float(r["valid w/ HSG (PTB, paper)"]) for r in rows] == [67.5, 65.6, 64.8, 64.7]
    assert [float(r["test w/o (PTB, paper)"]) for r in rows] == list(published.PTB_HSG["test"])


def expected_importances(sweep: SmokeSweep) -> tuple[dict, dict]:
    """Per arch, each evaluator's importances computed here from the sweep's runs, as the
    page says it does; and for each arch left out, the words the page must give why."""
    runs = sorted(
        (
            r
            for r in sweep.child_runs()
            if r.data.tags["status"] in ("completed", "stopped")
            and math.isfinite(r.data.metrics["best_valid_loss"])
        ),
        key=lambda r: r.data.tags["trial_id"],
    )
    found, skipped = {}, {}
    for arch in {r.data.params["arch"] for r in sweep.child_runs()}:
        mine = [r for r in runs if r.data.params["arch"] == arch]
        names = (
            sorted(
                k
                for k in mine[0].data.params
                if k not in NOT_SETTINGS and len({r.data.params[k] for r in mine}) > 1
            )
            if mine
            else []
        )
        if len(mine) < 4:
            skipped[arch] = f"({arch}): no importance, {len(mine)} finished trial"
            continue
        if not names:
            skipped[arch] = f"({arch}): no importance, no hyperparameter varies"
            continue
        dists = {}
        for name in names:
            raw = [r.data.params[name] for r in mine]
            if set(raw) <= {"True", "False"} or not all(
                re.fullmatch(r"[-+0-9.e]+", v) for v in raw
            ):
                dists[name] = optuna.distributions.CategoricalDistribution(
                    sorted(
                        {v == "True" if set(raw) <= {"True", "False"} else v for v in raw}, key=str
                    )
                )
                continue
            numbers = [float(v) for v in raw]
            log = min(numbers) > 0 and max(numbers) / min(numbers) > 20
            if all(re.fullmatch(r"[-+]?\d+", v) for v in raw):
                dists[name] = optuna.distributions.IntDistribution(
                    int(min(numbers)), int(max(numbers)), log=log
                )
            else:
                dists[name] = optuna.distributions.FloatDistribution(
                    min(numbers), max(numbers), log=log
                )

        def value(name, raw, dists=dists):
            dist = dists[name]
            if isinstance(dist, optuna.distributions.CategoricalDistribution):
                return raw == "True" if raw in ("True", "False") else raw
            return (
                int(raw) if isinstance(dist, optuna.distributions.IntDistribution) else float(raw)
            )

        study = optuna.create_study(direction="minimize")
        for run in mine:
            study.add_trial(
                optuna.trial.create_trial(
                    params={n: value(n, run.data.params[n]) for n in names},
                    distributions=dists,
                    value=run.data.metrics["best_valid_loss"],
                )
            )
        found[arch] = {
            "fANOVA": optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0)
            ),
            "PED-ANOVA": optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator()
            ),
        }
    return found, skipped


def test_importance_equals_optuna_on_the_stored_trials(
    pages, jsb_smoke, jsb_diverging, ptb_budget_smoke, ptb_hsg_smoke
):
    tables = 0
    for sweep in (jsb_smoke, jsb_diverging, ptb_budget_smoke, ptb_hsg_smoke):
        text = pages[sweep.experiment].read_text()
        page = Page(text)
        expected, skipped = expected_importances(sweep)
        for arch, words in skipped.items():  # too few trials: said so, no numbers
            assert f"importance-{arch}" not in page.tables and words in text
        assert {
            t.removeprefix("importance-") for t in page.tables if t and t.startswith("importance-")
        } == set(expected)
        for arch in expected:
            tables += 1
            rows = page.table_rows(f"importance-{arch}")
            assert sorted(r["hyperparameter"] for r in rows) == sorted(expected[arch]["fANOVA"])
            assert not {r["hyperparameter"] for r in rows} & NOT_SETTINGS
            for row in rows:
                for evaluator, values in expected[arch].items():
                    assert float(row[evaluator]) == pytest.approx(
                        values[row["hyperparameter"]], rel=1e-3, abs=1e-9
                    ), (arch, row)
            assert sum(float(r["fANOVA"]) for r in rows) == pytest.approx(1, abs=1e-3)
    assert tables >= 5  # 3 JSB archs, ptb_budget's RHN, one or more of jsb_diverging's
    rows = Page(pages["jsb_optimization"].read_text()).table_rows("importance-rhn")
    assert {"lr", "depth", "momentum", "init_scale", "clip", "t_bias"} == {
        r["hyperparameter"] for r in rows
    }
    rows = Page(pages["ptb_budget"].read_text()).table_rows("importance-rhn")
    assert {r["hyperparameter"] for r in rows} == {"depth", "tied"}


def test_parallel_coordinates_draw_every_trial_on_scaled_axes(jsb_diverging):
    from rhnsearch.results import plots
    from rhnsearch.tracking import store

    chosen, trials = store.sweep_trials(
        store.open_experiment("jsb_diverging", jsb_diverging.tracking_uri)
    )
    ax = plots.parallel(chosen, trials).axes[0]
    runs = jsb_diverging.child_runs()
    names = set().union(*(r.data.params for r in runs))  # t_bias: RHN's runs only
    values = {k: [r.data.params[k] for r in runs if k in r.data.params] for k in names}
    varying = {k for k, v in values.items() if len(set(v)) > 1} - NOT_SETTINGS
    logged = {
        k
        for k in varying - {"arch"}
        if max(map(float, values[k])) / min(map(float, values[k])) > 20
    }
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels[:2] == ["arch", "depth"] and labels[-1] == "best_valid_loss"
    assert sorted(labels[2:-1]) == sorted(
        k + " (log)" * (k in logged) for k in varying - {"arch", "depth"}
    )
    assert "lr" in logged and "seed" not in " ".join(labels)
    finished_lines, diverged_lines = (
        next(c for c in ax.collections if c.get_gid() == gid) for gid in ("finished", "diverged")
    )
    statuses = [r.data.tags["status"] for r in runs]
    assert len(finished_lines.get_segments()) == statuses.count("completed") + statuses.count(
        "stopped"
    )
    assert len(diverged_lines.get_segments()) == statuses.count("diverged") > 0
    assert diverged_lines.get_linestyle()[0][1] is not None  # dashed
    lrs = [math.log10(float(v)) for v in values["lr"]]
    at = labels.index("lr (log)")
    drawn = sorted(s[at, 1] for c in (finished_lines, diverged_lines) for s in c.get_segments())
    assert drawn == pytest.approx(sorted((v - min(lrs)) / (max(lrs) - min(lrs)) for v in lrs))
    loss_y = [s[-1, 1] for s in diverged_lines.get_segments()]
    assert min(loss_y) > max(s[-1, 1] for s in finished_lines.get_segments())
    best = [s for s in finished_lines.get_segments() if s[-1, 1] == 0]
    assert len(best) == 1  # the best trial sits at the bottom of the loss axis, drawn last
    assert finished_lines.get_segments()[-1][-1, 1] == 0


def test_a_cell_and_a_study_of_ones_own_are_trained_and_reported(
    jsb_diverging, pages, own_cell_dir, monkeypatch
):
    """The diverging sweep ran a space file outside the project (a study the code does not
    know) and trained OWN_CELL (a file outside the project) beside RHN and DT-RNN: 3 settings
    at each depth, each sized for its depth's budget by counting its parameters. Its report
    (kind `cells`) has the swarm and the table, which name the cell by its class."""
    from rhnsearch.budget import count_params

    monkeypatch.syspath_prepend(own_cell_dir)  # where the sweep's workers found the cell
    runs = jsb_diverging.child_runs()
    own = [r for r in runs if r.data.params["arch"] == OWN_CELL]
    assert sorted(int(r.data.params["depth"]) for r in own) == [1, 1, 1, 6, 6, 6]
    for run in own:
        p = run.data.params
        assert int(p["n_params"]) == count_params("jsb", OWN_CELL, int(p["depth"]), int(p["width"]))
        budget = {"1": 6000, "6": 16000}[p["depth"]]  # the space's budgets
        assert abs(int(p["n_params"]) - budget) < 0.05 * budget
    assert {r.data.tags["status"] for r in own} <= {"completed", "stopped", "diverged"}
    # and it trains: a cell that gave NaN from its first step would pass the lines above
    trained = [
        r
        for r in own
        if r.data.tags["status"] in {"completed", "stopped"}
        and math.isfinite(r.data.metrics.get("best_valid_loss", math.nan))
        and r.data.metrics["best_valid_loss"] < 88 * math.log(2)  # below a coin per key
    ]
    assert trained, [(r.data.tags["status"], r.data.metrics) for r in own]
    page = Page(pages["jsb_diverging"].read_text())
    facts = {r["field"]: r["value"] for r in page.table_rows("header-facts")}
    assert facts["study"] == "lab_study"
    assert page.images.get("figure") and "finding-table" not in page.tables
    assert {r["arch"] for r in page.table_rows("study-table")} == {
        "RHN",
        "DT-RNN",
        "MinimalRNNCell",
    }
    assert "MinimalRNNCell" in html.unescape(pages["jsb_diverging"].read_text())


def test_report_errors_are_one_line_and_nothing_is_overwritten(jsb_smoke, tmp_path):
    one_line_error(
        results(
            jsb_smoke,
            "report",
            "--experiment",
            "no_such_study",
            "--out",
            tmp_path / "r.html",
            check=False,
        ),
        "no_such_study",
        "jsb_optimization",
    )
    one_line_error(
        results(
            jsb_smoke,
            "report",
            "--experiment",
            "jsb_optimization",
            "--out",
            tmp_path / "r.pdf",
            check=False,
        ),
        ".html",
    )
    one_line_error(
        results(
            jsb_smoke,
            "report",
            "--experiment",
            "jsb_optimization",
            "--sweep",
            "nope",
            "--out",
            tmp_path / "r.html",
            check=False,
        ),
        "nope",
        jsb_smoke.name,
    )
    one_line_error(
        results(
            jsb_smoke,
            "report",
            "--experiment",
            "jsb_optimization",
            "--top",
            "0",
            "--out",
            tmp_path / "r.html",
            check=False,
        ),
        "--top",
    )
    out = tmp_path / "kept.html"
    out.write_text("precious\n")
    one_line_error(
        results(jsb_smoke, "report", "--experiment", "jsb_optimization", "--out", out, check=False),
        "--force",
    )
    assert out.read_text() == "precious\n"
    results(jsb_smoke, "report", "--experiment", "jsb_optimization", "--out", out, "--force")
    assert all(f'id="{s}"' in out.read_text() for s in SECTIONS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.html"]


def test_finished_sweeps_log_their_report_on_the_parent_run(
    jsb_smoke, ptb_budget_smoke, ptb_hsg_smoke, tmp_path
):
    for sweep in (jsb_smoke, ptb_budget_smoke, ptb_hsg_smoke):
        client = sweep.client()
        experiment = client.get_experiment_by_name(sweep.experiment)
        (parent,) = client.search_runs([experiment.experiment_id], "tags.kind = 'sweep'")
        assert [a.path for a in client.list_artifacts(parent.info.run_id, "report")] == [
            "report/report.html"
        ]
        path = client.download_artifacts(parent.info.run_id, "report/report.html", str(tmp_path))
        text = open(path, encoding="utf-8").read()
        page = Page(text)
        assert [i for i in page.ids if i in SECTIONS] == SECTIONS
        assert {r["field"]: r["value"] for r in page.table_rows("header-facts")}[
            "sweep"
        ] == sweep.name
        assert all(page.images.get(s) for s in figures(page))
        assert "could not log the sweep's report" not in sweep.stderr


PROBE = """<script>addEventListener("load", () => {
  for (const e of document.querySelectorAll("header[id], section[id]")) {
    const r = e.getBoundingClientRect();
    e.setAttribute("data-box", [r.left + scrollX, r.top + scrollY, r.width, r.height].join(","));
  }
  for (const i of document.images) {
    const r = i.getBoundingClientRect();
    i.setAttribute("data-shown", [i.naturalWidth, r.left + scrollX, r.top + scrollY, r.width,
                                  r.height].join(","));
  }
  document.body.setAttribute("data-height", document.documentElement.scrollHeight);
});</script>"""


def chromium(browser: str, *args, url: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                browser,
                *tiers.HEADLESS_CHROMIUM,
                "--hide-scrollbars",
                "--force-device-scale-factor=1",
                f"--user-data-dir={profile}",
                *args,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=True,
        )


def inked(image: Image.Image) -> tuple[float, int]:
    """The share of pixels that are not near-white, and the number of distinct colours."""
    pixels = np.asarray(image).reshape(-1, 3)
    return float((pixels.min(axis=1) < 200).mean()), len(np.unique(pixels, axis=0))


def test_every_section_renders_in_chromium(pages, tmp_path, browser):
    """Where each section lies comes from a copy of the page with a probe script (the page
    has none); the page itself is then shot in one window as tall as it, and each section's
    region of that screenshot is cropped, kept and checked."""
    for experiment in ("jsb_optimization", "ptb_budget"):
        page = pages[experiment]
        probe = tmp_path / f"probe_{experiment}.html"
        probe.write_text(
            page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8"
        )
        dom = chromium(browser, "--window-size=1280,1000", "--dump-dom", url=probe.as_uri()).stdout
        boxes = {
            key: [float(v) for v in box.split(",")]
            for key, box in re.findall(
                r'<(?:header|section) id="([\w-]+)"[^>]*data-box="([^"]+)"', dom
            )
        }
        assert list(boxes) == SECTIONS
        images = [
            [float(v) for v in s.split(",")] for s in re.findall(r'data-shown="([^"]+)"', dom)
        ]
        assert len(images) >= 4 and all(
            n > 0 and w > 300 and h > 150  # decoded and shown
            for n, _, _, w, h in images
        )
        height = int(re.search(r'data-height="(\d+)"', dom).group(1))
        shot = tmp_path / f"{experiment}.png"
        chromium(browser, f"--window-size=1280,{height}", f"--screenshot={shot}", url=page.as_uri())
        with Image.open(shot) as full:
            assert full.size == (1280, height)
            rgb = full.convert("RGB")
        for key, (x, y, w, h) in boxes.items():
            region = rgb.crop((int(x), int(y), int(x + w), int(y + h)))
            region.save(ARTIFACTS / f"report_{experiment}_{key}.png")
            ink, colours = inked(region)
            assert h > 100 and ink > 0.01 and colours > 20, (experiment, key, ink, colours)
            inside = [i for i in images if y <= i[2] and i[2] + i[4] <= y + h]
            assert bool(inside) == (key in ("figure", "curves", "parallel", "importance"))
            for _, ix, iy, iw, ih in inside:  # each figure drawn, not a broken-image box
                ink, colours = inked(rgb.crop((int(ix), int(iy), int(ix + iw), int(iy + ih))))
                assert ink > 0.015 and colours > 100, (experiment, key, ink, colours)
        (ARTIFACTS / f"report_{experiment}_boxes.json").write_text(json.dumps(boxes))


def drawn_outside(fig) -> list[str]:
    """What FIG draws beyond its edges (a cut title or label), and the legends that cover an
    axes' area, after its layout."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    FigureCanvasAgg(fig).draw()
    edge = fig.bbox.padded(1)
    unseen = {
        id(label)
        for ax in fig.axes
        for axis in (ax.xaxis, ax.yaxis)
        for tick in axis.get_major_ticks() + axis.get_minor_ticks()
        if not min(axis.get_view_interval()) <= tick.get_loc() <= max(axis.get_view_interval())
        for label in (tick.label1, tick.label2)
    }
    texts = [
        t
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and id(t) not in unseen
    ]  # matplotlib keeps, but never draws, ticks out of view
    cut = [
        t.get_text()
        for t in texts
        if not (
            edge.contains(*t.get_window_extent().p0) and edge.contains(*t.get_window_extent().p1)
        )
    ]
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    covering = [
        f"legend over {ax.get_title()!r}"
        for legend in legends
        for ax in fig.axes
        if legend.get_window_extent().overlaps(ax.bbox)
    ]
    return cut + covering


def test_every_figure_of_the_reports_fits_and_no_legend_covers_data(
    jsb_smoke, ptb_budget_smoke, ptb_hsg_smoke
):
    """The figures the reports embed: every title and label inside the figure, every legend
    outside the axes it would cover."""
    from rhnsearch.results import importance, plots, studies
    from rhnsearch.tracking import store

    checked = 0
    for sweep in (jsb_smoke, ptb_budget_smoke, ptb_hsg_smoke):
        exp = store.open_experiment(sweep.experiment, sweep.tracking_uri)
        chosen, trials = store.sweep_trials(exp)
        kind = studies.kind_of(chosen)
        figures = [plots.make(figure, exp) for figure in (kind.figure, "curves")]
        figures.append(plots.parallel(chosen, trials))
        if kind.figure == "swarm":
            figures.append(plots.expected_best_curves(chosen, trials, kind.best_of))
        frame, _ = importance.importances(trials)
        figures += [plots.importance_bars(frame)] if not frame.empty else []
        for fig in figures:
            assert drawn_outside(fig) == [], (sweep.experiment, fig.texts, drawn_outside(fig))
            checked += 1
    assert checked >= 8
