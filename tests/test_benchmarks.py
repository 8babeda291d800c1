"""The benchmarks the docs cite (benchmarks/) still run: each at its smallest size, as a
command in a fresh process from the repository's root, what it writes in the test's own
temporary directory; each test reads the numbers the benchmark prints (its table's lines and
its last line's JSON), not only its exit status. The tiers are what the benchmark starts: Ray
(`cluster`), a real sweep (`slow`), PostgreSQL, an MLflow server, moto's S3 server or a
browser (`services`)."""

import importlib.util
import json
import math
import os
import re
import shutil
import sys
import tempfile

import pytest

import tiers
from conftest import ROOT, SHARED_DATA, run_in_group


def tiny_sweep(samples: int = 1) -> list[str]:
    """A sweep's smallest size: two cells of the JSB study's smoke preset, SAMPLES settings
    each, ASHA's one rung at epoch 1 (the preset's grace period) of 2, no model kept."""
    sets = ["archs=[rhn]", "depths=[1, 2]", f"samples={samples}", "fixed.epochs=2"]
    return [word for item in [*sets, "keep_model=none"] for word in ("--set", item)]


NUMBER = r"[-+]?\d+(?:\.\d+)?"


def bench(script: str, *args, tmp_path, timeout: int = 120, check: bool = True):
    """`python benchmarks/SCRIPT ARGS` from the repository's root, its temporary files in
    TMP_PATH (Ray's own where they would be); its whole process group killed if it outlives
    TIMEOUT (no Ray or server left behind)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RHNSEARCH_DATA_DIR": str(SHARED_DATA),
        "TMPDIR": str(tmp_path),
        "RAY_TMPDIR": os.environ.get("RAY_TMPDIR") or tempfile.gettempdir(),
    }
    return run_in_group(
        [sys.executable, f"benchmarks/{script}", *args],
        script,
        cwd=ROOT,
        env=env,
        timeout=timeout,
        check=check,
    )


def last_json(proc) -> dict:
    """The JSON line a benchmark prints last."""
    return json.loads(proc.stdout.strip().splitlines()[-1])


def finite(*values) -> bool:
    return all(isinstance(v, int | float) and math.isfinite(v) for v in values)


def lines(proc, pattern: str) -> list[re.Match]:
    """The lines of PROC's stdout that PATTERN matches whole (Tune's own printing aside)."""
    return [m for line in proc.stdout.splitlines() if (m := re.fullmatch(pattern, line))]


def needs_postgres():
    if shutil.which("pg_lsclusters") is None:
        tiers.missing(
            "Debian's PostgreSQL (no pg_lsclusters)",
            "apt-get install -y postgresql, as .ci/run does",
        )


# -- the fast tier: no Ray, no service -------------------------------------------------------


def test_layer_speed_smoke(tmp_path):
    """One tiny shape, 3 rounds (its least), no epoch timings: a ratio per arch."""
    proc = bench("layer_speed.py", "--smoke", "--rounds", "1", "--threads", "1", tmp_path=tmp_path)
    result = last_json(proc)
    assert result["shapes"] == [{"T": 8, "B": 4, "F": 8, "width": 16, "depth": 2}]
    assert "tokens_per_sec" not in result
    for arch in ("rhn", "hsg", "dtrnn", "dtsrnn"):
        for key in (f"{arch}_over_lstm", f"naive_over_{arch}", f"naive_{arch}_over_lstm"):
            assert len(result[key]) == 1 and finite(*result[key]) and result[key][0] > 0, key
    assert finite(*result["rhn_products_over_lstm"])
    rows = lines(proc, rf"8,4,8,16,2\s+(\w+)\s+\d+\s+({NUMBER})\s+({NUMBER})\s+({NUMBER})\s+.*")
    assert [m[1] for m in rows] == ["rhn", "hsg", "dtrnn", "dtsrnn"]
    assert all(float(m[i]) > 0 for m in rows for i in (2, 3, 4))


def test_calibration_smoke(tmp_path):
    """One size, one example, a few pairs: the rows it prints are the table of the JSON it
    writes, which `--table` prints again."""
    out = tmp_path / "calibration.json"
    proc = bench(
        "calibration.py",
        *("--pairs", 3, "--today-pairs", 2, "--sizes", "20x20", "--examples", "ptb_cpu_search"),
        *("--workers", 1, "--out", out),
        tmp_path=tmp_path,
    )
    run = json.loads(out.read_text())
    assert run["settings"]["pairs"] == 3 and run["settings"]["today_pairs"] == 2
    rows = run["rows"]
    assert len(rows) == 5 and all(r["resolved"] and r["n"] == [20, 20] for r in rows)
    for r in rows:
        assert 0 <= r["false_positives"] <= 1 and 0 <= r["today"]["false_positives"] <= 1
        assert set(r["power"]) == {"0.1", "0.3"} and finite(*r["power"].values())
    printed = [line for line in proc.stdout.splitlines() if line.startswith("| ptb_cpu_search")]
    assert len(printed) == 5
    assert re.fullmatch(
        r"5 rows in \d+ s; every row meets the bounds: (True|False)", proc.stdout.splitlines()[-1]
    )
    table = bench("calibration.py", "--table", out, tmp_path=tmp_path).stdout.splitlines()
    assert table[2:] == printed and table[0].startswith("| example | cells |")


def test_report_scale_smoke(tmp_path):
    """One size of 30 trials: each part's seconds bounded and unbounded, and their ratio."""
    proc = bench("report_scale.py", "--trials", 30, tmp_path=tmp_path)
    rows = lines(proc, rf"\s+30\s+(\w+)\s+({NUMBER})\s+({NUMBER})\s+({NUMBER})")
    assert [m[1] for m in rows] == ["swarm", "parallel", "importance"]
    for m in rows:
        bounded, unbounded, ratio = map(float, m.groups()[1:])
        assert bounded > 0 and unbounded > 0 and math.isfinite(ratio)


def test_cuda_graphs_smoke(tmp_path):
    """On a GPU its smallest run (one shape, 2 rounds); without one, one line that says so."""
    import torch

    usage = bench("cuda_graphs.py", "--help", tmp_path=tmp_path)
    assert "--rounds" in usage.stdout and "--shapes" in usage.stdout
    proc = bench("cuda_graphs.py", "--rounds", 2, "--shapes", 0, tmp_path=tmp_path, check=False)
    if not torch.cuda.is_available():
        assert proc.returncode == 1 and proc.stdout == ""
        assert proc.stderr.strip().splitlines() == [
            "cuda_graphs.py needs a CUDA device: torch sees none here"
        ]
        return
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = last_json(proc)["rows"]
    assert [r["arch"] for r in rows] == ["rhn", "hsg", "dtrnn", "dtsrnn"]
    assert all(finite(r["ours"], r["lstm"]) and r["ours"] > 0 for r in rows)


# -- Ray, a sweep, services ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.cluster
def test_asha_smoke(tmp_path):
    """`asha.py fifo` on a two-cell sweep run with per-cell ASHA and with FIFO, then `asha.py
    replay` of two ASHA settings in two arrival orders on the FIFO sweep it left."""
    work = tmp_path / "asha"
    proc = bench(
        "asha.py",
        *(
            "fifo",
            "--preset",
            "smoke",
            *tiny_sweep(2),
            "--data-dir",
            SHARED_DATA,
            "--workdir",
            work,
        ),
        tmp_path=tmp_path,
        timeout=600,
    )
    swept = {
        m[1]: int(m[2])
        for m in lines(proc, r"\s*(cell_asha-g1-rf3|fifo): (\d+) trial-epochs in \d+ s; .*")
    }
    result = last_json(proc)
    assert swept == {
        "cell_asha-g1-rf3": result["asha_trial_epochs"],
        "fifo": result["fifo_trial_epochs"],
    }
    assert 0 < result["asha_trial_epochs"] <= result["fifo_trial_epochs"] <= 4 * 2
    assert 0 < result["ratio"] <= 1 and -1 <= result["kendall_tau"] <= 1
    assert sorted(result["fifo_ranking"]) == sorted(result["asha_ranking"]) == ["rhn d1", "rhn d2"]
    assert finite(result["fifo_halves_tau"], result["fifo_halves_same"])
    proc = bench(
        "asha.py",
        *("replay", "--workdir", work, "--grace", 1, "--rf", 2, 3, "--orders", 2),
        tmp_path=tmp_path,
    )
    replayed = last_json(proc)
    assert replayed["fifo_trial_epochs"] == result["fifo_trial_epochs"]
    rows = replayed["replays"]
    assert [(r["grace"], r["rf"]) for r in rows] == [(1, 2.0), (1, 3.0)]
    for r in rows:
        low, high = r["ratio_range"]
        assert 0 < low <= r["ratio"] <= high <= 1 and r["orders"] == 2
        assert -1 <= r["kendall_tau"] <= 1 and 0 <= r["same_in"] <= 2
    assert len(lines(proc, rf"grace 1 rf [23]: {NUMBER} of FIFO's \d+ trial-epochs, .*")) == 2


@pytest.mark.slow
@pytest.mark.cluster
def test_sweep_throughput_smoke(tmp_path):
    """Two sweeps of two cells, one trial at a time and two: trials per minute and overhead."""
    proc = bench(
        "sweep_throughput.py",
        *("--data-dir", SHARED_DATA, *tiny_sweep()),
        tmp_path=tmp_path,
        timeout=600,
    )
    result = last_json(proc)
    assert [r["concurrency"] for r in result["sweeps"]] == [1, 2]
    for r in result["sweeps"]:
        assert r["trials"] == 2
        assert finite(r["trials_per_minute"], r["overhead"]) and r["overhead"] > 0
    assert finite(result["speedup_2_over_1"]) and result["speedup_2_over_1"] > 0
    rows = lines(proc, rf"\s+([12])\s+2\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}x")
    assert [m[1] for m in rows] == ["1", "2"]


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.services  # it opens the report in headless Chromium where there is one
def test_scale_smoke(tmp_path):
    """12 simulated trials (one a cell) of 3 epochs at most on 2 slots: the driver's row."""
    proc = bench(
        "scale.py",
        *("--trials", 12, "--slots", 2, "--epochs", 3, "--epoch-ms", 1),
        tmp_path=tmp_path,
        timeout=600,
    )
    size = last_json(proc)["sizes"]
    assert len(size) == 1
    size = size[0]
    assert size["trials"] == 12 and size["mlflow_records_lost"] == 0 and size["doubled"] == 0
    assert sum(size[s] for s in ("completed", "stopped", "diverged", "failed")) == 12
    assert 12 <= size["trial_epochs"] <= 12 * 3
    for key in ("driver_cpu_ms_per_trial_epoch", "wall_s_per_trial", "report_s", "export_s"):
        assert finite(size[key]) and size[key] > 0, key
    assert len(lines(proc, rf"\s+12\s+{size['trial_epochs']}\s+{NUMBER}\s+.*")) == 1


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.services
@pytest.mark.parametrize("kill_on", ["ended", "started"])
def test_scale_kill_and_resume_smoke(tmp_path, kill_on):
    """24 simulated trials, the driver SIGKILLed once 4 have ended in MLflow (`--kill-on
    ended`, the default) or 2 have started (`--kill-on started`, the count a lagging server
    needs) and the sweep resumed: the row counts both drivers' trial-epochs (those that ended
    before the kill are read from Tune's state, which the resume takes them out of) and the
    kill's counts of started trials and ended runs, nothing lost or run twice."""
    at = {"ended": 4, "started": 2}[kill_on]
    proc = bench(
        "scale.py",
        *("--trials", 24, "--slots", 2, "--epochs", 3, "--epoch-ms", 1),
        *("--kill-at", at, "--kill-on", kill_on),
        tmp_path=tmp_path,
        timeout=600,
    )
    (size,) = last_json(proc)["sizes"]
    assert size["trials"] == 24 and size["mlflow_records_lost"] == 0
    assert size["doubled"] == 0 and size["run_twice"] == []
    assert 24 <= size["trial_epochs"] <= 24 * 3
    killed = size["killed"]
    assert killed["counted"] == kill_on and killed[f"trials_{kill_on}"] >= at
    assert 0 <= killed["trials_ended"] <= killed["trials_started"] <= 24
    assert finite(killed["cpu_s"], killed["peak_rss_mb"])
    assert killed["peak_rss_mb"] > 100  # a driver with Ray, Tune and MLflow imported
    count = {
        "ended": r"\d+ trials had ended",
        "started": r"\d+ trials had started \(\d+ ended in MLflow\)",
    }[kill_on]
    assert len(lines(proc, rf"  killed once {count} \(\d+ s, its peak RSS .*")) == 1
    if kill_on == "started":  # (a kill at 4 ended runs may come after every trial started)
        assert killed["trials_started"] < 24 and finite(killed["first_trial_s"])


def test_the_docs_table_of_scale_runs_is_what_their_files_say(tmp_path):
    """docs/scale.md's table of rows is `scale.py --table` of the files its comment names:
    a number in it that no run gave, or a run whose file changed, fails here."""
    doc = (ROOT / "docs" / "scale.md").read_text()
    names = re.search(r"<!-- scale.py --table (.+?) -->", doc)[1].split()
    proc = bench("scale.py", "--table", *(f"docs/scale/{n}" for n in names), tmp_path=tmp_path)
    rows = proc.stdout.strip().splitlines()
    assert len(rows) > len(names) + 1 and all(f"(scale/{n})" in proc.stdout for n in names)
    assert f"-->\n{proc.stdout.strip()}\n" in doc


@pytest.mark.cluster
def test_scale_restore_smoke(tmp_path):
    """Tune's restore of 5 and 50 ended trials and a live one: the seconds to the live trial,
    all in Tune's state and the live one alone, for each size, and their growth."""
    proc = bench("scale.py", "--restore", 5, 50, tmp_path=tmp_path, timeout=300)
    result = last_json(proc)
    assert [r["ended_trials"] for r in result["restore"]] == [5, 50]
    for row in result["restore"]:
        assert finite(row["all_s"], row["live_only_s"]) and row["live_only_s"] > 0
    assert finite(result["growth_all"], result["growth_live_only"])
    pattern = rf"\s+(5|50) ended trials \({NUMBER} MB of Tune's state\): the live one starts .*"
    assert [m[1] for m in lines(proc, pattern)] == ["5", "50"]


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.services
def test_storage_requests_smoke(tmp_path):
    """The two-cell sweep on a directory and on moto's bucket: only the bucket's requests."""
    if importlib.util.find_spec("moto") is None:
        tiers.missing("moto's S3 server", "pip install -e '.[test]'")
    proc = bench(
        "storage_requests.py",
        *("--data-dir", SHARED_DATA, *tiny_sweep()),
        tmp_path=tmp_path,
        timeout=600,
    )
    result = last_json(proc)
    assert result["directory_requests"] == 0 and result["bucket_requests"] > 0
    assert finite(result["bucket_per_epoch"]) and result["bucket_per_epoch"] > 0
    assert finite(result["bucket_over_directory"]) and result["bucket_over_directory"] > 0
    rows = lines(proc, r"(directory|bucket)\s+round 0: command .*, (\d+) trial-epochs, (\d+) .*")
    assert [m[1] for m in rows] == ["directory", "bucket"]
    assert all(0 < int(m[2]) <= 2 * 2 for m in rows)


@pytest.mark.slow
@pytest.mark.services
def test_export_speed_smoke(tmp_path):
    """5 runs of 3 epochs, one round, from sqlite, PostgreSQL and an MLflow server."""
    needs_postgres()
    proc = bench(
        "export_speed.py",
        *("--runs", 5, "--epochs", 3, "--rounds", 1, "--api-runs", 2),
        *("--store", tmp_path / "store"),
        tmp_path=tmp_path,
        timeout=600,
    )
    result = last_json(proc)
    assert (result["runs"], result["epochs"]) == (5, 3)
    stores = ("sqlite", "postgresql://", "pg server")
    parts = ("runs", "runs/searched", "history", "history/no table", "history/per-run")
    parts += ("cli export", "cli export --history")
    assert set(result["seconds"]) == {f"{s} {p}" for s in stores for p in parts}
    assert all(finite(v) and v >= 0 for v in result["seconds"].values())
    assert (tmp_path / "store" / "mlflow.db").is_file()


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.services
def test_driver_load_smoke(tmp_path):
    """2 trials reporting 3 times each through rhnsearch's driver and plain Tune's: none lost."""
    needs_postgres()
    proc = bench(
        "driver_load.py",
        *("--trials", 2, "--interval", 0.2, "--reports", 3),
        tmp_path=tmp_path,
        timeout=600,
    )
    result = last_json(proc)
    for side in ("rhnsearch", "plain"):
        assert result[f"{side}_results"] == 6 and result[f"{side}_lost"] == 0
        assert finite(result[f"{side}_cpu_per_result"], result[f"{side}_lag_median_s"])
    ratio = result["cpu_per_result_rhnsearch_over_plain"]
    assert finite(ratio) and ratio > 0
    assert [m[1] for m in lines(proc, r"\s+(rhnsearch|plain)\s+.*\s+0")] == ["rhnsearch", "plain"]


@pytest.mark.services
def test_driver_load_backlog_smoke(tmp_path):
    """A journaled backlog of 9 trials of 2 epochs drained through a 4-worker server, one
    trial at a time and four at once: every run in MLflow, ended, with every epoch."""
    needs_postgres()
    proc = bench("driver_load.py", "--backlog", 9, "--reports", 2, tmp_path=tmp_path, timeout=300)
    result = last_json(proc)
    assert [row["threads"] for row in result["rows"]] == [1, 4, 1, 4]
    for row in result["rows"]:
        assert (row["runs"], row["ended"], row["epochs"]) == (9, 9, 18)
        assert finite(row["seconds"], row["sender_cpu_s"])
    assert finite(result["speedup"]) and result["speedup"] > 0
    drained = rf"\s+[14] in flight: +{NUMBER} s, .* MLflow holds 9 runs, 9 ended, 18 epochs"
    assert len(lines(proc, drained)) == 4
