"""`rhnsearch results ...`: exports, plots, tables and reports read from the MLflow store
alone."""

import sys

STORE_HELP = "MLflow tracking URI (default: sqlite:///results/mlflow.db)"
SWEEP_HELP = "one sweep of the experiment, by name (default: its latest sweep)"


def _store_options(p, experiment_help: str, required: bool = False):
    p.add_argument("--experiment", required=required, help=experiment_help)
    p.add_argument("--tracking-uri", help=STORE_HELP)
    p.add_argument("--sweep", help=SWEEP_HELP)
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")


def add_results(sub):
    p = sub.add_parser(
        "results",
        help="export runs, draw the papers' plots and tables",
        description="Read a study's runs from the MLflow store and export "
        "them, or draw the papers' figures and tables from them.",
    )
    rsub = p.add_subparsers(dest="results_command", required=True)
    for add in (add_export, add_plot, add_table, add_confirmed, add_report):
        add(rsub)


def add_export(rsub):
    export = rsub.add_parser(
        "export",
        help="write an experiment's trials to .parquet/.csv/.md/.tex",
        description="One row per trial (ids, status tags, params.*, final metrics.*) of "
        "every sweep of the experiment (or of --sweep); with --history, one row per trial "
        "and epoch. The format follows the extension of --out.",
    )
    _store_options(export, "MLflow experiment, e.g. jsb_optimization", required=True)
    export.add_argument("--out", required=True, help="FILE.parquet, .csv, .md or .tex")
    export.add_argument(
        "--history",
        action="store_true",
        help="one row per trial per epoch instead of one per trial",
    )
    export.set_defaults(run=cmd_export)


def add_plot(rsub):
    plot = rsub.add_parser(
        "plot",
        help="draw a figure of a sweep (.png/.svg)",
        description="Draw one of the papers' figures from a sweep's runs.",
    )
    psub = plot.add_subparsers(dest="plot_kind", required=True)
    for kind, text in [
        (
            "swarm",
            "RHN paper Fig. 4: the loss of each setting vs depth, per architecture; "
            "diverged settings at the top, counted",
        ),
        (
            "depth",
            "perplexity vs depth per group (untied and WT, or with and without HSG) "
            "next to the published numbers (RHN paper Fig. 5a, HSG paper Table 1), for a "
            "sweep of a study with a published depth curve",
        ),
        ("curves", "learning curves (valid loss per epoch) of the top-k trials"),
    ]:
        k = psub.add_parser(kind, help=text, description=text[0].upper() + text[1:] + ".")
        _store_options(k, "MLflow experiment, e.g. jsb_optimization", required=True)
        k.add_argument("--out", required=True, help="FILE.png or FILE.svg")
        if kind in ("swarm", "curves"):
            k.add_argument(
                "--metric",
                help="metric to draw (default: "
                f"{'best_valid_loss' if kind == 'swarm' else 'valid_loss'})",
            )
        if kind == "curves":
            k.add_argument(
                "--top",
                type=int,
                default=5,
                help="how many trials, best validation loss first (default 5)",
            )
        k.set_defaults(run=cmd_plot)


def add_table(rsub):
    table = rsub.add_parser(
        "table",
        help="a study's table, measured next to published",
        description="The table of the sweep's kind of study (its space's `report`): for "
        "ptb_budget the authors' README table (depth, units, params, valid, test, and WT), "
        "for ptb_hsg the HSG paper's Table 1, otherwise per (arch, depth) the settings "
        "tried, how they ended, best and median loss. Markdown on stdout, or --out FILE "
        "(.md, .tex, .csv).",
    )
    table.add_argument("--study", help="the study's experiment (as --experiment)")
    _store_options(table, "MLflow experiment, e.g. ptb_budget")
    table.add_argument("--out", help="FILE.md, .tex or .csv (default: Markdown to stdout)")
    table.add_argument(
        "--metric",
        default="best_valid_loss",
        help="jsb_optimization: the loss to summarize (default best_valid_loss, "
        "the swarm's and the finding's)",
    )
    table.set_defaults(run=cmd_table)


def add_confirmed(rsub):
    confirmed = rsub.add_parser(
        "confirmed",
        help="the cells compared on the settings `sweep confirm` trained again",
        description="Per cell, each confirmed setting's mean over its new seeds of the "
        "sweep's quantity (its space's `quantity`, or --metric) with a 95%% t-interval, the "
        "cell's setting chosen on the search (its best valid loss there), and the gap of each "
        "cell's chosen setting to the "
        "best cell's with a 95%% Welch interval. Markdown on stdout.",
    )
    confirmed.add_argument("--experiment", required=True, help="MLflow experiment")
    confirmed.add_argument("--tracking-uri", help=STORE_HELP)
    confirmed.add_argument("--sweep", help=SWEEP_HELP)
    confirmed.add_argument(
        "--metric",
        choices=("best_valid_loss", "best_train_loss"),
        help="the quantity compared (default: the sweep's)",
    )
    confirmed.set_defaults(run=cmd_confirmed)


def add_report(rsub):
    report = rsub.add_parser(
        "report",
        help="one self-contained HTML page of a sweep",
        description="One HTML page (figures embedded, no network) of a sweep: the study's "
        "figure, its measured-vs-published table, top-k learning curves, parallel coordinates "
        "of the settings, each hyperparameter's importance per architecture (Optuna's fANOVA "
        "and PED-ANOVA on the stored trials) and the runs' provenance.",
    )
    _store_options(report, "MLflow experiment, e.g. jsb_optimization", required=True)
    report.add_argument("--out", required=True, help="FILE.html")
    report.add_argument(
        "--top",
        type=int,
        default=5,
        help="learning curves of this many trials, best first (default 5)",
    )
    report.set_defaults(run=cmd_report)


def cmd_export(args):
    from ..results.export import export

    path, rows = export(
        args.experiment, args.out, args.tracking_uri, args.sweep, args.history, args.force
    )
    print(f"wrote {path} ({rows} rows)", file=sys.stderr)


def cmd_plot(args):
    from ..results.plots import plot

    path = plot(
        args.plot_kind,
        args.out,
        args.experiment,
        args.tracking_uri,
        args.sweep,
        getattr(args, "metric", None),
        getattr(args, "top", 5),
        args.force,
    )
    print(f"wrote {path}", file=sys.stderr)


def cmd_table(args):
    from ..errors import UserError
    from ..results.studies import table

    if not (args.experiment or args.study):
        raise UserError("results table needs --experiment NAME (or --study NAME)")
    text = table(
        args.experiment or args.study,
        args.tracking_uri,
        args.sweep,
        args.out,
        args.force,
        args.metric,
    )
    print(text, file=sys.stderr if args.out else sys.stdout, end="" if not args.out else "\n")


def cmd_confirmed(args):
    from ..results.confirmed import confirmed_tables
    from ..results.export import markdown

    sweep, metric, settings, gaps = confirmed_tables(
        args.experiment, args.tracking_uri, args.sweep, args.metric
    )
    print(markdown(settings, f"Sweep {sweep}: confirmed settings ({metric}, mean over seeds)"))
    print(markdown(gaps, "Each cell's best confirmed setting against the best cell's"), end="")


def cmd_report(args):
    from ..results.report import report

    path = report(args.experiment, args.out, args.tracking_uri, args.sweep, args.top, args.force)
    print(f"wrote {path}", file=sys.stderr)
