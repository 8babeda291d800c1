"""Exports, plots and tables read from the MLflow stores of the real smoke sweeps, each command
run in a fresh process (`rhnsearch results ...`) and checked against the store itself."""

import logging
import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from conftest import HSG_SMOKE_DEPTHS, OWN_CELL, SmokeSweep, rhnsearch_main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def results(sweep: SmokeSweep, *args, check=True):
    """`rhnsearch results ARGS` on the sweep's store (no sweep object: the store alone)."""
    return rhnsearch_main(
        "results", *args, "--tracking-uri", sweep.tracking_uri, cwd=sweep.cwd, check=check
    )


def svg_texts(path) -> list[str]:
    """The text of an SVG drawn by `results plot` (its text is kept as text)."""
    return ["".join(t.itertext()) for t in ET.parse(path).iter("{http://www.w3.org/2000/svg}text")]


def md_table(text: str) -> pd.DataFrame:
    """The Markdown table printed by `results table`, as strings."""
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|")
    ]
    return pd.DataFrame(rows[2:], columns=rows[0])


def one_line_error(proc, *words):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rhnsearch: error: "), proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


# -- export ---------------------------------------------------------------------------------
def test_export_writes_one_row_per_trial_in_every_format(jsb_smoke, tmp_path):
    runs = {r.info.run_id: r for r in jsb_smoke.child_runs()}
    for suffix in (".parquet", ".csv", ".md", ".tex"):
        results(
            jsb_smoke,
            "export",
            "--experiment",
            "jsb_optimization",
            "--out",
            tmp_path / f"trials{suffix}",
        )
    frame = pd.read_parquet(tmp_path / "trials.parquet")
    table = pq.read_table(tmp_path / "trials.parquet")
    assert len(frame) == table.num_rows == len(runs) == jsb_smoke.summary["trials"]
    assert set(frame["run_id"]) == set(table.column("run_id").to_pylist()) == set(runs)
    # the schema keeps the types: ints, floats, booleans, strings, UTC timestamps
    assert str(frame["params.depth"].dtype) == "Int64"
    assert str(frame["params.tied"].dtype) == "boolean"
    assert frame["params.lr"].dtype == np.float64
    assert str(table.schema.field("params.depth").type) == "int64"
    assert str(table.schema.field("params.tied").type) == "bool"
    assert str(table.schema.field("status").type) == "string"
    assert str(table.schema.field("start_time").type) == "timestamp[us, tz=UTC]"
    for _, row in frame.iterrows():
        run = runs[row["run_id"]]
        assert row["status"] == run.data.tags["status"]
        assert row["trial_id"] == run.data.tags["trial_id"]
        assert row["parent_run_id"] == run.data.tags["mlflow.parentRunId"]
        assert row["params.depth"] == int(run.data.params["depth"])
        assert row["params.lr"] == float(run.data.params["lr"])
        for key, value in run.data.metrics.items():
            got = row[f"metrics.{key}"]
            assert got == value or (math.isnan(value) and math.isnan(got)), (key, got, value)
        if row["status"] == "stopped":
            assert row["stopped_at_epoch"] == int(run.data.tags["stopped_at_epoch"])
    csv = pd.read_csv(tmp_path / "trials.csv")
    assert list(csv["run_id"]) == list(frame["run_id"])
    assert np.allclose(csv["metrics.best_valid_loss"], frame["metrics.best_valid_loss"])
    md = (tmp_path / "trials.md").read_text().splitlines()
    rows = [line for line in md if line.startswith("| ")]
    assert len(rows) == 2 + len(frame) and "params.arch" in rows[0]  # header, rule, trials
    assert all(any(r in line for line in rows) for r in runs)
    tex = (tmp_path / "trials.tex").read_text()
    assert r"\begin{tabular}" in tex and r"params.n\_params" in tex
    assert tex.count(r" \\") == len(frame) + 1


def test_export_history_has_every_epoch_of_every_trial(jsb_smoke, tmp_path):
    client = jsb_smoke.client()
    out = tmp_path / "history.parquet"
    results(jsb_smoke, "export", "--experiment", "jsb_optimization", "--history", "--out", out)
    frame = pd.read_parquet(out)
    assert pq.read_table(out).num_rows == len(frame)
    expected = 0
    for run in jsb_smoke.child_runs():
        rows = frame[frame["run_id"] == run.info.run_id].sort_values("epoch")
        history = sorted(
            client.get_metric_history(run.info.run_id, "train_loss"), key=lambda m: m.step
        )
        expected += len(history)
        assert list(rows["epoch"]) == [m.step for m in history]
        assert np.allclose(rows["metrics.train_loss"], [m.value for m in history], equal_nan=True)
        assert (rows["params.arch"] == run.data.params["arch"]).all()
        tested = rows["metrics.test_loss"].notna()
        if run.data.tags["status"] == "completed":  # test loss on the last epoch only
            assert list(tested) == [False] * (len(rows) - 1) + [True]
        else:
            assert not tested.any()
    assert len(frame) == expected


def test_export_errors_are_one_line_and_nothing_is_overwritten(jsb_smoke, tmp_path):
    one_line_error(
        results(
            jsb_smoke,
            "export",
            "--experiment",
            "no_such_study",
            "--out",
            tmp_path / "x.csv",
            check=False,
        ),
        "no_such_study",
        "jsb_optimization",
    )
    empty_store = f"sqlite:///{tmp_path / 'empty.db'}"
    MlflowClient(empty_store).create_experiment("empty_study")
    proc = rhnsearch_main(
        "results",
        "export",
        "--experiment",
        "empty_study",
        "--tracking-uri",
        empty_store,
        "--out",
        tmp_path / "x.csv",
        cwd=tmp_path,
        check=False,
    )
    one_line_error(proc, "empty_study", "no trial runs")
    one_line_error(
        results(
            jsb_smoke,
            "export",
            "--experiment",
            "jsb_optimization",
            "--out",
            tmp_path / "x.xlsx",
            check=False,
        ),
        ".parquet",
    )
    out = tmp_path / "kept.csv"
    out.write_text("precious\n")
    one_line_error(
        results(jsb_smoke, "export", "--experiment", "jsb_optimization", "--out", out, check=False),
        "--force",
    )
    assert out.read_text() == "precious\n"
    results(jsb_smoke, "export", "--experiment", "jsb_optimization", "--out", out, "--force")
    assert len(pd.read_csv(out)) == jsb_smoke.summary["trials"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "kept.csv"]


# -- plots ----------------------------------------------------------------------------------
def test_swarm_draws_every_setting_on_its_axis(jsb_smoke, jsb_diverging, tmp_path):
    """Each setting is one marker at its best_valid_loss (the quantity of the table and the
    finding): completed filled, stopped early hollow, every one that did not diverge inside
    the axis (log-scaled where the losses span more than LOG_SPAN), diverged ones crosses in
    one row above them."""
    from rhnsearch.results import plots
    from rhnsearch.tracking import store

    scales = set()
    for sweep in (jsb_smoke, jsb_diverging):
        experiment, runs = sweep.experiment, sweep.child_runs()
        diverged = sum(r.data.tags["status"] == "diverged" for r in runs)
        drawn = {
            r.data.metrics["best_valid_loss"]: r.data.tags["status"]
            for r in runs
            if r.data.tags["status"] in ("completed", "stopped")
        }
        for suffix in (".png", ".svg"):
            results(
                sweep,
                "plot",
                "swarm",
                "--experiment",
                experiment,
                "--out",
                tmp_path / f"{experiment}{suffix}",
            )
        assert (tmp_path / f"{experiment}.png").read_bytes()[:8] == PNG_MAGIC

        chosen, trials = store.sweep_trials(store.open_experiment(experiment, sweep.tracking_uri))
        ax = plots.swarm(chosen, trials).axes[0]
        kinds = {
            gid: [c for c in ax.collections if c.get_gid() == gid] for gid in ("shown", "diverged")
        }
        assert sum(map(len, kinds.values())) == len(ax.collections)
        xy = {
            gid: np.concatenate([c.get_offsets() for c in cs]) if cs else np.empty((0, 2))
            for gid, cs in kinds.items()
        }
        assert sorted(xy["shown"][:, 1]) == pytest.approx(sorted(drawn))  # every one, at it
        assert len(xy["diverged"]) == diverged
        for collection in kinds["shown"]:  # hollow if and only if stopped early
            for face, (_, loss) in zip(collection.get_facecolors(), collection.get_offsets()):
                stopped = [s for value, s in drawn.items() if value == pytest.approx(loss)]
                assert (tuple(face) == (1, 1, 1, 1)) == (stopped == ["stopped"])
        log = max(drawn) > plots.LOG_SPAN * min(drawn)
        assert ax.get_yscale() == ("log" if log else "linear")
        scales.add(ax.get_yscale())
        low, high = ax.get_ylim()
        assert low < min(drawn) and max(drawn) < high
        if diverged:  # one row, above every setting that did not diverge
            assert len(set(xy["diverged"][:, 1])) == 1
            assert max(drawn) < xy["diverged"][0, 1] < high

        texts = svg_texts(tmp_path / f"{experiment}.svg")
        count = {s: sum(v == s for v in drawn.values()) for s in ("completed", "stopped")}
        assert f"filled: completed ({count['completed']})" in texts
        assert f"hollow: stopped early by ASHA ({count['stopped']})" in texts
        assert f"diverged (at top): {diverged} of {len(runs)}" in texts
        assert not any(t.startswith("above ") for t in texts)  # nothing parked at an edge
        assert "JSB Chorales" in " ".join(texts) and "RHN" in " ".join(texts)
        assert any("best_valid_loss" in t for t in texts)
    assert diverged > 0  # the diverging sweep has the finding to show
    assert "log" in scales  # and its losses span enough for a log axis


def test_depth_plot_overlays_the_published_curve_and_names_ptb_sample(ptb_budget_smoke, tmp_path):
    from rhnsearch.results import plots, published, studies
    from rhnsearch.tracking import store

    out = tmp_path / "depth.svg"
    results(ptb_budget_smoke, "plot", "depth", "--experiment", "ptb_budget", "--out", out)
    results(
        ptb_budget_smoke,
        "plot",
        "depth",
        "--experiment",
        "ptb_budget",
        "--out",
        tmp_path / "depth.png",
    )
    assert (tmp_path / "depth.png").read_bytes()[:8] == PNG_MAGIC
    texts = svg_texts(out)
    measured = [t for t in texts if "(measured)" in t]
    assert measured == ["untied, ptb-sample (measured)", "WT, ptb-sample (measured)"]
    assert "untied, PTB (published at a larger weight decay)" in texts
    # the like-for-like point
    assert "WT, PTB (published; weight decay 1e-07 from the authors' code)" in texts
    assert not any(
        re.search(r"\bPTB\b", t)
        and "published" not in t
        and "paper" not in t.lower()
        and "Zilly" not in t
        for t in texts
    )

    chosen, trials = store.sweep_trials(
        store.open_experiment("ptb_budget", ptb_budget_smoke.tracking_uri)
    )
    valid_ax = plots.depth_curves(chosen, trials, studies.BUDGET).axes[0]
    lines = {line.get_label(): line for line in valid_ax.get_lines()}
    published_wt = lines["WT, PTB (published at a larger weight decay)"]
    assert list(published_wt.get_ydata()) == list(published.PTB_BUDGET["valid_wt"])
    star = lines["WT, PTB (published; weight decay 1e-07 from the authors' code)"]
    assert (list(star.get_xdata()), list(star.get_ydata())) == ([10], [67.9])
    runs = ptb_budget_smoke.child_runs()
    assert {r.data.tags["status"] for r in runs} == {"completed"}  # one trial per cell
    for run in runs:
        line = lines[
            ("WT" if run.data.params["tied"] == "True" else "untied") + ", ptb-sample (measured)"
        ]
        at = list(line.get_xdata()).index(int(run.data.params["depth"]))
        assert line.get_ydata()[at] == pytest.approx(  # the whole text, one stream
            math.exp(run.data.metrics["full_valid_loss"])
        )


def test_hsg_plot_overlays_table_1(ptb_hsg_smoke, tmp_path):
    from rhnsearch.results import plots, published, studies
    from rhnsearch.tracking import store

    out = tmp_path / "hsg.svg"
    results(ptb_hsg_smoke, "plot", "depth", "--experiment", "ptb_hsg", "--out", out)
    texts = svg_texts(out)
    assert "w/ HSG, ptb-sample (measured)" in texts and "w/o HSG, PTB (published)" in texts
    chosen, trials = store.sweep_trials(
        store.open_experiment("ptb_hsg", ptb_hsg_smoke.tracking_uri)
    )
    test_ax = plots.depth_curves(chosen, trials, studies.HSG).axes[1]
    lines = {line.get_label(): line for line in test_ax.get_lines()}
    assert list(lines["w/ HSG, PTB (published)"].get_ydata()) == list(published.PTB_HSG["test_hsg"])
    assert list(lines["w/ HSG, ptb-sample (measured)"].get_xdata()) == HSG_SMOKE_DEPTHS


def test_curves_show_the_top_k_trials_valid_loss_per_epoch(jsb_smoke, tmp_path):
    from rhnsearch.results import plots
    from rhnsearch.tracking import store

    results(
        jsb_smoke,
        "plot",
        "curves",
        "--experiment",
        "jsb_optimization",
        "--top",
        "3",
        "--out",
        tmp_path / "curves.png",
    )
    assert (tmp_path / "curves.png").read_bytes()[:8] == PNG_MAGIC
    exp = store.open_experiment("jsb_optimization", jsb_smoke.tracking_uri)
    chosen, trials = store.sweep_trials(exp)
    lines = plots.curves(chosen, trials, exp, top=3).axes[0].get_lines()
    client = jsb_smoke.client()
    runs = sorted(
        (r for r in jsb_smoke.child_runs() if r.data.tags["status"] in ("completed", "stopped")),
        key=lambda r: r.data.metrics["best_valid_loss"],
    )[:3]
    assert len(lines) == 3
    for line, run in zip(lines, runs):
        assert run.data.tags["trial_id"] in line.get_label()
        history = sorted(
            client.get_metric_history(run.info.run_id, "valid_loss"), key=lambda m: m.step
        )
        assert list(line.get_ydata()) == pytest.approx([m.value for m in history])


def test_plot_errors_are_one_line(jsb_smoke, tmp_path):
    one_line_error(
        results(
            jsb_smoke,
            "plot",
            "depth",
            "--experiment",
            "jsb_optimization",
            "--out",
            tmp_path / "d.png",
            check=False,
        ),
        "no published depth curve",
    )
    one_line_error(
        results(
            jsb_smoke,
            "plot",
            "swarm",
            "--experiment",
            "jsb_optimization",
            "--out",
            tmp_path / "s.pdf",
            check=False,
        ),
        ".png",
    )
    one_line_error(
        results(
            jsb_smoke,
            "plot",
            "swarm",
            "--experiment",
            "jsb_optimization",
            "--metric",
            "nope",
            "--out",
            tmp_path / "s.png",
            check=False,
        ),
        "nope",
        "train_loss",
    )
    assert not list(tmp_path.iterdir())


# -- tables ---------------------------------------------------------------------------------
def test_ptb_budget_table_puts_measured_next_to_published(ptb_budget_smoke, tmp_path):
    text = results(ptb_budget_smoke, "table", "--study", "ptb_budget").stdout
    table = md_table(text)
    assert list(table.columns[:10]) == [
        "arch",
        "depth",
        "units",
        "units (paper)",
        "params",
        "valid (ptb-sample)",
        "batched valid: expected best ± std",
        "valid (PTB, paper)",
        "test (ptb-sample)",
        "test (PTB, paper)",
    ]
    assert {
        "valid WT (ptb-sample)",
        "batched valid WT: expected best ± std",
        "test WT (PTB, paper)",
        "status WT",
    } <= set(table.columns)
    assert "over 20 streams" in text  # smoke: final_streams
    assert "a weight decay the paper does not give" in text and "1e-07 in the authors' code" in text
    rows = table.set_index("depth")
    assert list(rows.index) == [str(d) for d in range(1, 11)] and set(table["arch"]) == {"RHN"}
    assert (
        rows.loc["1", "units (paper)"] == "1275" and rows.loc["10", "test WT (PTB, paper)"] == "66"
    )
    for run in ptb_budget_smoke.child_runs():  # one trial per (depth, tied) cell
        wt = " WT" if run.data.params["tied"] == "True" else ""
        row = rows.loc[run.data.params["depth"]]
        assert row[f"status{wt}"].split()[0] == run.data.tags["status"]
        assert run.data.tags["status"] == "completed"  # one trial per cell: ASHA stops none
        assert row[f"batched valid{wt}: expected best ± std"] == "– (< 2 trials)"
        assert float(row[f"valid{wt} (ptb-sample)"]) == pytest.approx(
            math.exp(run.data.metrics["full_valid_loss"]), rel=1e-3
        )
        assert float(row[f"test{wt} (ptb-sample)"]) == pytest.approx(
            math.exp(run.data.metrics["test_loss"]), rel=1e-3
        )
        assert row[f"params{wt}"] == run.data.params["n_params"]
        if not wt:
            assert row["units"] == run.data.params["width"]
    for suffix in (".tex", ".csv", ".md"):
        results(
            ptb_budget_smoke, "table", "--study", "ptb_budget", "--out", tmp_path / f"t{suffix}"
        )
    csv = pd.read_csv(tmp_path / "t.csv")
    assert list(csv.columns) == list(table.columns) and len(csv) == 10
    assert r"valid (PTB, paper)" in (tmp_path / "t.tex").read_text()
    assert (tmp_path / "t.md").read_text() == text


def test_hsg_table_has_table_1_layout(ptb_hsg_smoke):
    table = md_table(results(ptb_hsg_smoke, "table", "--study", "ptb_hsg").stdout)
    assert list(table.columns[2:12]) == [
        "valid w/ HSG (ptb-sample)",
        "batched valid w/ HSG: expected best ± std",
        "valid w/ HSG (PTB, paper)",
        "valid w/o (ptb-sample)",
        "batched valid w/o: expected best ± std",
        "valid w/o (PTB, paper)",
        "test w/ HSG (ptb-sample)",
        "test w/ HSG (PTB, paper)",
        "test w/o (ptb-sample)",
        "test w/o (PTB, paper)",
    ]
    assert list(table["depth"]) == ["10", "20", "30", "40"]
    assert list(table["valid w/ HSG (PTB, paper)"]) == ["67.5", "65.6", "64.8", "64.7"]
    assert table.loc[0, "test w/o (PTB, paper)"] == "65.4"
    swept = table["depth"].astype(int).isin(HSG_SMOKE_DEPTHS)
    assert set(table["width"][swept]) == {
        r.data.params["width"] for r in ptb_hsg_smoke.child_runs()
    }
    assert set(table["width"][~swept]) == {"–"}  # depths the smoke sweep did not run


def test_jsb_table_counts_settings_and_divergences(jsb_smoke, jsb_diverging):
    for sweep in (jsb_smoke, jsb_diverging):
        table = md_table(
            results(
                sweep, "table", "--study", "jsb_optimization", "--experiment", sweep.experiment
            ).stdout
        )
        runs = sweep.child_runs()
        assert table["settings"].astype(int).sum() == len(runs)
        assert table["diverged"].astype(int).sum() == sum(
            r.data.tags["status"] == "diverged" for r in runs
        )
        for (arch, depth), row in table.set_index(["arch", "depth"]).iterrows():
            code = {
                "RHN": "rhn",
                "DT-RNN": "dtrnn",
                "DT(S)-RNN": "dtsrnn",
                "MinimalRNNCell": OWN_CELL,
            }[arch]
            cell = [
                r for r in runs if r.data.params["arch"] == code and r.data.params["depth"] == depth
            ]
            assert int(row["settings"]) == len(cell)
            losses = [
                r.data.metrics["best_valid_loss"]
                for r in cell
                if r.data.tags["status"] in ("completed", "stopped")
            ]
            if not losses:  # a cell whose settings all diverged
                assert row["best best_valid_loss"] == row["median best_valid_loss"] == "–"
                continue
            assert float(row["best best_valid_loss"]) == pytest.approx(min(losses), rel=1e-3)
            assert float(row["median best_valid_loss"]) == pytest.approx(
                float(np.median(losses)), rel=1e-3
            )


def test_table_of_an_unknown_experiment_is_a_one_line_error(jsb_smoke):
    one_line_error(
        results(jsb_smoke, "table", "--study", "nosuch", check=False),
        "no experiment 'nosuch'",
        "jsb_optimization",
    )
    one_line_error(results(jsb_smoke, "table", check=False), "--experiment")


# -- the sweep's own plots, and help ---------------------------------------------------------
def test_finished_sweeps_log_their_plots_on_the_parent_run(
    jsb_smoke, ptb_budget_smoke, ptb_hsg_smoke
):
    for sweep, plots in (
        (jsb_smoke, {"swarm.png", "curves.png"}),
        (ptb_budget_smoke, {"depth.png", "curves.png"}),
        (ptb_hsg_smoke, {"depth.png", "curves.png"}),
    ):
        client = sweep.client()
        experiment = client.get_experiment_by_name(sweep.experiment)
        (parent,) = client.search_runs([experiment.experiment_id], "tags.kind = 'sweep'")
        logged = {a.path.split("/")[-1] for a in client.list_artifacts(parent.info.run_id, "plots")}
        assert logged == plots
        assert "could not log the sweep's plots" not in sweep.stderr


def test_every_results_command_has_help(capsys):
    from rhnsearch.cli import main

    for args in (
        ["results"],
        ["results", "export"],
        ["results", "plot"],
        *(["results", "plot", k] for k in ("swarm", "depth", "curves")),
        ["results", "table"],
        ["results", "report"],
    ):
        with pytest.raises(SystemExit) as exit_:
            main([*args, "--help"])
        assert exit_.value.code == 0
        text = capsys.readouterr().out
        assert text.startswith("usage: rhnsearch") and "--" in text, args


def test_the_depth_finding_gaps_each_depth_to_the_shallowest_by_hand():
    from rhnsearch.results import tables, uncertainty

    rows = [(1, 5.0), (1, 7.0), (4, 1.0), (4, 3.0), (8, 6.0)]
    lstm = {"params.arch": "lstm", "params.tied": True, "params.depth": 1, "status": "completed"}
    trials = pd.DataFrame(
        [{**lstm, "metrics.best_valid_loss": 0.5}]  # a baseline: not the shallowest RHN
        + [
            {
                "params.arch": "rhn",
                "params.tied": True,
                "params.depth": d,
                "status": "completed",
                "metrics.best_valid_loss": loss,
            }
            for d, loss in rows
        ]
        + [
            {
                "params.arch": "rhn",
                "params.tied": True,
                "params.depth": 8,
                "status": "diverged",
                "metrics.best_valid_loss": np.nan,
            }
        ]
    )
    finding = tables.depth_finding(trials).set_index("depth")
    assert list(finding["trials"]) == [2, 2, 1]  # the diverged trial is not a setting's best
    assert finding.at[4, "best valid perplexity"] == pytest.approx(np.e)
    # k is a quarter of 2 settings, at least 1: the cells' means, 2 against 6
    assert finding.at[4, "gap to depth 1 (nats)"] == pytest.approx(-4.0)
    assert finding.at[4, "gap: k"] == 1
    # 2 trials against 2: too few settings to resolve a gap
    assert finding.at[4, "gap: 95% interval"] == uncertainty.TOO_FEW
    assert finding.at[4, "gap excludes 0"] == "–"
    assert finding.at[8, "gap to depth 1 (nats)"] == 0.0  # best of 1: 6.0 against the mean 6.0
    assert finding.at[8, "gap: 95% interval"].startswith("–")  # one trial: no interval
    assert finding.at[1, "gap: 95% interval"] == "–"


def test_the_budget_table_puts_the_baseline_beside_rhn():
    """RHN's rows per depth next to the published ones, then the LSTM's row at its depth,
    each its best trial's one-stream perplexities and the interval over its trials."""
    from rhnsearch.results import tables

    def trial(arch, depth, best, full, test):
        return {"params.arch": arch, "params.depth": depth, "params.tied": True,
                "params.width": 100, "params.n_params": 1000, "params.dataset": "ptb-sample",
                "status": "completed", "stopped_at_epoch": None,
                "metrics.best_valid_loss": best, "metrics.full_valid_loss": full,
                "metrics.test_loss": test}  # fmt: skip

    trials = pd.DataFrame(
        [
            trial("rhn", 1, 5.0, 5.1, 5.2),
            trial("rhn", 2, 4.0, 4.1, 4.2),
            trial("rhn", 2, 4.5, 4.6, 4.7),
            trial("lstm", 1, 4.8, 4.9, 5.0),
            trial("lstm", 1, 6.0, 6.1, 6.2),
        ]  # fmt: skip
    ).astype({"params.depth": "Int64"})
    table = tables.ptb_budget(trials)
    rhn, lstm = table[table["arch"] == "RHN"], table[table["arch"] == "LSTM"]
    assert list(rhn["depth"]) == list(range(1, 11))  # and the published depths
    assert list(lstm["depth"]) == [1] and table.index[-1] == lstm.index[0]
    assert lstm["valid WT (ptb-sample)"].item() == pytest.approx(math.exp(4.9))
    assert lstm["test WT (ptb-sample)"].item() == pytest.approx(math.exp(5.0))
    # the best of 2 draws of exp(4.8) and exp(6.0): the lower with probability 3/4
    mean = 0.75 * math.exp(4.8) + 0.25 * math.exp(6.0)
    std = math.sqrt(0.75 * 0.25) * (math.exp(6.0) - math.exp(4.8))
    assert lstm["batched valid WT: expected best ± std"].item() == (
        f"{mean:.4g} ± {std:.2g} (best of 2)"
    )
    assert rhn.set_index("depth").at[1, "batched valid WT: expected best ± std"].startswith("–")
    assert lstm["valid WT (PTB, paper)"].isna().all()  # no published number of its own
    best_rhn = rhn.set_index("depth").loc[2]
    assert best_rhn["valid WT (ptb-sample)"] == pytest.approx(math.exp(4.1))


def noise_study(rng, shift: float, settings: int = 20) -> pd.DataFrame:
    """The trials of a JSB-like study: 3 archs x depths 1 and 6 x SETTINGS settings, every
    loss drawn from one normal distribution, DT-RNN's at depth 6 moved by SHIFT."""
    rows = [
        {
            "params.arch": arch,
            "params.depth": depth,
            "status": "completed",
            "metrics.best_valid_loss": rng.normal(8.5, 0.3)
            + (shift if (arch, depth) == ("dtrnn", 6) else 0.0),
        }
        for arch in ("rhn", "dtrnn", "dtsrnn")
        for depth in (1, 6)
        for _ in range(settings)
    ]
    return pd.DataFrame(rows).astype({"params.depth": "Int64"})


def test_a_pure_noise_study_reports_its_gaps_as_not_significant():
    from scipy.stats import binom

    from rhnsearch.results import tables

    rng = np.random.default_rng(7)
    noise = [tables.jsb_finding(noise_study(rng, 0.0), best_of=40) for _ in range(40)]
    flagged = [
        row["gap excludes 0"] == "yes"
        for f in noise
        for _, row in f.iterrows()
        if row["arch"] != "RHN"
    ]
    # at most 5% of the null gaps, give or take what 80 allow (binomial, 1 in 1,000)
    assert len(flagged) == 80 and sum(flagged) <= binom.ppf(0.999, 80, 0.05)
    real = [tables.jsb_finding(noise_study(rng, 1.0), best_of=40) for _ in range(40)]
    found = [f.set_index("arch").at["DT-RNN", "gap excludes 0"] == "yes" for f in real]
    assert sum(found) >= 36  # a 1-nat gap (3 spreads) is found at least 90% of the time
    interval = real[0].set_index("arch").at["DT-RNN", "gap: 95% interval"]
    low, high = map(float, interval.strip("[]").split(", "))
    assert low < real[0].set_index("arch").at["DT-RNN", "gap to RHN at depth 6"] < high
    few = tables.jsb_finding(noise_study(rng, 1.0, settings=19), best_of=40).set_index("arch")
    assert few.at["DT-RNN", "gap: paper's claim"] == "worse: too few settings to resolve"


def test_every_run_is_read_past_a_page(tmp_path):
    """A search of more runs than a page holds reads every page (MLflow's page is 50,000 runs:
    a sweep larger than that would be cut short by one call); here pages of 2 of 5 runs."""
    from rhnsearch.tracking.runs import all_runs

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("paged")
    made = {client.create_run(experiment, tags={"kind": "trial"}).info.run_id for _ in range(5)}
    client.create_run(experiment, tags={"kind": "sweep"})
    found = all_runs(client, experiment, "tags.kind = 'trial'", page=2)
    assert len(found) == 5 and {r.info.run_id for r in found} == made


def test_a_database_store_reads_its_runs_as_a_search_does(tmp_path, monkeypatch, caplog):
    """The runs read from a database store's tables are the runs search_runs gives, in its
    order, with the same tags, params and latest metrics (NaN and +-inf included), the deleted
    run and another experiment's left out; the trials frame is the same either way."""
    from dataclasses import replace

    from rhnsearch.compat import mlflow as mlflow_compat
    from rhnsearch.tracking import runs, store
    from rhnsearch.tracking.runs import StoredRun

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("db")
    parent = client.create_run(experiment, tags={"kind": "sweep", "sweep": "s"}).info.run_id
    for i, value in enumerate([0.5, math.nan, math.inf, -math.inf, 2.0]):
        tags = {
            "mlflow.parentRunId": parent,
            "sweep": "s",
            "trial_id": f"t{i}",
            "status": "completed",
        }
        run = client.create_run(experiment, tags=tags, run_name=f"trial {i}").info.run_id
        client.log_param(run, "arch", ["rhn", "lstm"][i % 2])
        client.log_param(run, "depth", str(i + 1))
        for step, loss in enumerate([3.0, value], start=1):
            client.log_metric(run, "best_valid_loss", loss, step=step)
        client.log_metric(run, "epoch", 2, step=2)
        if i < 4:
            client.set_terminated(run)
    client.delete_run(run)  # the last trial: deleted, as drop_lost_runs does
    other = client.create_experiment("other")
    client.create_run(other, tags={"mlflow.parentRunId": parent, "sweep": "s"})

    def comparable(run):  # NaN is not equal to itself
        return replace(run, metrics={k: "NaN" if v != v else v for k, v in run.metrics.items()})

    searched = [comparable(StoredRun.of(r)) for r in runs.all_runs(client, experiment, "")]
    read = [comparable(run) for run in runs.database_runs(uri, experiment, {})]
    assert len(read) == 5 and read == searched  # the parent and four trials, newest first
    assert read[2].metrics["best_valid_loss"] == "NaN" and read[1].metrics["epoch"] == 2
    client.set_tag(parent, "status", "")  # a tag with no value is not "any value"
    for tags, query in [
        ({"mlflow.parentRunId": parent}, f"tags.mlflow.parentRunId = '{parent}'"),
        ({"status": None, "sweep": "s"}, "tags.status != '' and tags.sweep = 's'"),
        ({"trial_id": "t2"}, "tags.trial_id = 't2'"),
        ({"trial_id": "t9"}, "tags.trial_id = 't9'"),
    ]:
        searched = [StoredRun.of(r).run_id for r in runs.all_runs(client, experiment, query)]
        read = [run.run_id for run in runs.database_runs(uri, experiment, tags)]
        assert read == searched and len(read) == {"t2": 1, "t9": 0}.get(tags.get("trial_id"), 4)
    exp = store.open_experiment("db", uri)
    frame = store.trials(exp, "s")
    assert list(frame["trial_id"]) == ["t0", "t1", "t2", "t3"]
    assert np.isnan(frame["metrics.best_valid_loss"][1])
    assert list(frame["metrics.best_valid_loss"][2:]) == [math.inf, -math.inf]
    # on an MLflow outside compat's tested range: one warning line, and the runs searched
    monkeypatch.setattr(mlflow_compat, "SUPPORTED", "<1")
    with caplog.at_level(logging.WARNING):
        pd.testing.assert_frame_equal(store.trials(exp, "s"), frame)
    (line,) = [r.getMessage() for r in caplog.records if "run tables" in r.getMessage()]
    assert "mlflow<1 only" in line and "searching the runs through MlflowClient" in line


def test_the_database_selects_quote_what_mysql_reserves():
    """MySQL reserves `key`: each SELECT on MLflow's tables, compiled for MySQL as a MySQL store
    would run it, quotes it (sqlite and PostgreSQL run them in the tests above and beside)."""
    import re

    from sqlalchemy.dialects import mysql

    from rhnsearch.compat import mlflow as mlflow_compat

    tables = mlflow_compat.run_tables_sql()
    queries = [tables["runs"]({"sweep": "s", "status": None}), mlflow_compat.metric_histories_sql()]
    queries += [tables[name] for name in ("tags", "params", "latest_metrics")]
    for query in queries:
        sql = str(query.compile(dialect=mysql.dialect()))
        assert "`key`" in sql and not re.search(r"(?<![`\w])key(?![`\w])", sql), sql
