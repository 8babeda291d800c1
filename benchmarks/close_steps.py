"""What each step of a sweep's close costs, in memory and CPU, on a finished sweep kept by
`scale.py --keep DIR` (its sqlite store): the trials' runs, the histories of every trial, the
summary, the histories' table, the plots and the report, and the report's sections one by
one. Each step's peak RSS is measured from its start (the kernel's peak is reset before it), in
this process, which holds nothing of Tune: what the step itself needs. The close logs the
histories, plots and report on the sweep's parent run again (the kept store gains them).

    python benchmarks/close_steps.py DIR    # e.g. /tmp/keep/random-sqlite-dir-1992
"""

import argparse
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from rhnsearch.results import plots, report
from rhnsearch.sweep.close import summarize
from rhnsearch.tracking import histories, snapshot, store
from rhnsearch.tracking.runs import matching

EXPERIMENT = "scale"  # scale.py's


def rss_mb() -> tuple[float, float]:
    """(RSS, its peak since the last reset_peak) of this process, MB."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


def step(name: str, work):
    """Run WORK, print its RSS before and after, its peak above the start and its CPU s."""
    Path("/proc/self/clear_refs").write_text("5")  # resets the peak (Linux)
    before, cpu = rss_mb()[0], time.process_time()
    out = work()
    after, peak = rss_mb()
    print(
        f"{name:32s} {before:7.0f} {after:7.0f} {peak - before:+8.0f} "
        f"{time.process_time() - cpu:7.1f}",
        flush=True,
    )
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kept", type=Path, help="a size's folder that scale.py --keep kept")
    args = p.parse_args()
    uri = f"sqlite:///{args.kept.resolve() / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = store.open_experiment(EXPERIMENT, uri)
    chosen = store.pick_sweep(exp)
    parent = chosen["run_id"]
    print(f"{'step':32s} {'RSS MB':>7s} {'after':>7s} {'peak +MB':>8s} {'CPU s':>7s}")
    print(f"{'(imports)':32s} {rss_mb()[0]:7.0f}")
    runs = step(
        "the trials' runs",
        lambda: matching(uri, client, exp.id, {"mlflow.parentRunId": parent}),
    )
    keys = sorted({k for r in runs for k in r.metrics} - {"epoch"})
    long = step(
        "every trial's history", lambda: histories.read(uri, client, [r.run_id for r in runs], keys)
    )
    step("summary", lambda: summarize(runs, long, chosen["sweep"]))
    step("histories' table logged", lambda: snapshot.log_histories(client, parent, long))
    step("plots drawn", lambda: plots.sweep_figures(exp, chosen["sweep"], runs=runs))
    step("report made", lambda: report.render(exp, chosen["sweep"], runs=runs))
    print(f"{len(runs)} trials, {len(long)} history rows")
    every = step("report: the trials' frame", lambda: store.trials_frame(exp, runs))
    trials = store.search_trials(every)
    run = client.get_run(parent)
    measured = step("report: the finding", lambda: report.measured_finding(chosen, trials))
    sections = {
        "header": lambda: report.header(exp, chosen, trials, run),
        "figure": lambda: report.study_figure(chosen, trials, measured),
        "table": lambda: report.study_table(chosen, trials, measured),
        "confirmed": lambda: report.confirmed_section(chosen, every),
        "curves": lambda: plots.curves(chosen, trials, exp, 5),
        "parallel": lambda: report.parallel(chosen, trials),
        "importance": lambda: report.importances(trials),
        "provenance": lambda: report.provenance(exp, chosen, run, runs),
    }
    for name, work in sections.items():
        step(f"report: {name}", work)


if __name__ == "__main__":
    main()
