"""`rhnsearch analyze ...`: the papers' analyses of a trained model kept in MLflow. Each
writes a figure (PNG and SVG), its numbers (CSV or Parquet) and summary.json to
OUT/RUN_ID/NAME, and logs them to the run as artifacts analysis/NAME plus summary metrics."""

import sys

from .output import print_json

ANALYSES = {
    "gates": (
        "mean transform-gate activity per layer over time (RHN Fig. 5b)",
        "Heatmaps (highway layers x time steps) of the transform gates averaged over "
        "units, one per sequence, for an rhn or hsg model.",
    ),
    "lesion": (
        "training-loss change when each highway layer only carries",
        "For each highway layer of an rhn or hsg model, set its transform-gate bias "
        "to -100 (the layer carries its input) and measure the training-set loss "
        "change: bar chart and table.",
    ),
    "hsg-gates": (
        "histogram of the HSG gate values (HSG paper Fig. 7)",
        "Histogram of every HSG gate value g at the real steps of a few sequences, "
        "for an hsg model.",
    ),
    "spectrum": (
        "eigenvalues and Gersgorin discs of dy[t]/dy[t-1]",
        "Eigenvalues of the temporal Jacobian dy[t]/dy[t-1] (autograd) at sampled "
        "steps, in the complex plane with the Jacobians' Gersgorin discs and the "
        "unit circle, and spectral radius statistics; --compare draws a second run "
        "beside it (e.g. a dtrnn of the same depth).",
    ),
}


def add_analyze(sub):
    p = sub.add_parser(
        "analyze",
        help="gate activity, lesioning, HSG gates or Jacobian spectrum of a trained model",
        description="Analyses of a trained model kept in MLflow (a sweep keeps "
        "its best trial's model): figures and numbers go to OUT/RUN_ID/NAME "
        "and to the run's artifacts analysis/NAME.",
    )
    asub = p.add_subparsers(dest="analysis", required=True)
    for name, (text, description) in ANALYSES.items():
        q = asub.add_parser(name, help=text, description=description)
        q.add_argument(
            "run_id",
            nargs="?",
            metavar="RUN_ID",
            help="MLflow run id of a trial with a kept model, or a registered "
            "version models:/NAME/VERSION",
        )
        q.add_argument(
            "--best",
            action="store_true",
            help="analyze the best trial of --experiment's sweeps instead",
        )
        q.add_argument("--experiment", help="MLflow experiment for --best, e.g. jsb_optimization")
        q.add_argument(
            "--tracking-uri",
            help="MLflow tracking URI (default: "
            "$MLFLOW_TRACKING_URI, else sqlite:///results/mlflow.db)",
        )
        q.add_argument("--data-dir", help="data dir (default: $RHNSEARCH_DATA_DIR or user cache)")
        q.add_argument(
            "--out",
            default="results/analysis",
            help=f"write to OUT/RUN_ID/{name} (default results/analysis)",
        )
        q.add_argument("--json", action="store_true", help="print the summary as one JSON line")
        if name != "lesion":
            q.add_argument(
                "--sequences", type=int, default=4, help="how many sequences to run (default 4)"
            )
            q.add_argument(
                "--split",
                choices=["train", "valid", "test"],
                default="valid",
                help="where the sequences come from (default valid)",
            )
        if name == "spectrum":
            q.add_argument(
                "--steps", type=int, default=8, help="time steps sampled per sequence (default 8)"
            )
            q.add_argument(
                "--compare",
                metavar="RUN_ID",
                help="a second run to draw beside it, e.g. a dtrnn of the same depth",
            )
        q.set_defaults(run=run_analysis)


def run_analysis(args):
    from ..analysis import run
    from ..analysis.checkpoint import load_trainer

    client, run_id, trainer = run.open_run(
        args.run_id, args.best, args.experiment, args.tracking_uri, args.data_dir
    )
    if args.analysis == "lesion":
        analysis = run.lesioning(trainer, run_id)
    elif args.analysis == "spectrum":
        compare = (
            (args.compare, load_trainer(client, args.compare, args.data_dir))
            if args.compare
            else None
        )
        analysis = run.spectrum(trainer, run_id, args.sequences, args.split, args.steps, compare)
    else:
        analyze = run.gates if args.analysis == "gates" else run.hsg_gates
        analysis = analyze(trainer, run_id, args.sequences, args.split)
    summary = run.publish(analysis, client, run_id, args.out)
    print(
        f"{analysis.name}: {analysis.text}; written to {summary['out']}, logged to run "
        f"{run_id} as {summary['artifact_path']}",
        file=sys.stderr,
        flush=True,
    )
    if args.json:
        print_json(summary)
