"""The curve of docs/scale.md: what `benchmarks/scale.py` measured, against the number of
trials: the driver's CPU milliseconds per trial-epoch, its peak RSS, and the seconds of the
results commands on the finished sweep, one line per labelled series of runs.

    python benchmarks/scale_plot.py LABEL=LOG[,LOG...] [LABEL=LOG...] --out docs/scale.png

Each LOG is scale.py's output (its last line is the JSON of its sizes); the logs of one label
are one series (e.g. `before=b500.log,b2000.log after=a500.log,a2000.log`).
"""

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = [  # (title, [(key, line label, line style)]): a series' colour, a command's style
    ("driver CPU per trial-epoch (ms)", [("driver_cpu_ms_per_trial_epoch", "", "-")]),
    ("driver peak RSS (MB)", [("driver_peak_rss_mb", "", "-")]),
    (
        "results commands on the finished sweep (s)",
        [("report_s", "report", "-"), ("export_s", "export", "--"), ("table_s", "table", ":")],
    ),
]


def read_series(spec: str) -> tuple[str, list[dict], str]:
    """(label, its sizes in order of trials, the run's setting) of LABEL=LOG[,LOG...]."""
    label, _, logs = spec.partition("=")
    sizes, setting = [], ""
    for log in logs.split(","):
        run = json.loads(Path(log).read_text().strip().splitlines()[-1])
        sizes += run["sizes"]
        setting = f"{run['search']} search, {run['store']} store, storage in a {run['storage']}"
    return label, sorted(sizes, key=lambda s: s["trials"]), setting


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("series", nargs="+", help="LABEL=LOG[,LOG...]")
    p.add_argument("--out", type=Path, default=Path("docs/scale.png"))
    args = p.parse_args()
    series = [read_series(spec) for spec in args.series]
    settings = list(dict.fromkeys(s for _, _, s in series))  # the first's, then others' marks
    marks = {s: "*" * i for i, s in enumerate(settings)}
    series = [(label + marks[s], sizes, s) for label, sizes, s in series]
    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 5.5))
    for ax, (title, keys) in zip(axes, PANELS):
        for colour, (label, sizes, _) in enumerate(series):
            trials = [s["trials"] for s in sizes]
            for key, name, style in keys:
                ax.plot(
                    trials,
                    [s[key] for s in sizes],
                    marker="o",
                    linestyle=style,
                    color=plt.cm.tab20(colour % 20),
                    label=f"{label} {name}".strip(),
                )
        ax.set(xscale="log", xlabel="trials", title=title)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    others = "".join(f"; {marks[s]} {s}" for s in settings[1:])
    fig.suptitle(f"benchmarks/scale.py: {settings[0]}{others}")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
