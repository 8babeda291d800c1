"""The options that several `rhnsearch sweep` commands share, each declared here once with its
one help text, and how they become the space's overrides."""

import json

STORAGE_HELP = (
    "where Tune's state and the checkpoints go: a directory every node sees or a "
    "bucket URI (s3://, gs://); default $RHNSEARCH_STORAGE, else results/sweeps "
    "with a local Ray"
)


def add_space(p):
    p.add_argument("space", help="search space YAML, e.g. spaces/jsb_optimization.yaml")


def add_preset_and_overrides(p):
    p.add_argument("--preset", help="a preset of the space: paper or smoke")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a space field, e.g. --set samples=4 --set fixed.epochs=20",
    )


def add_scheduler(p):
    p.add_argument(
        "--scheduler",
        choices=["cell_asha", "asha", "fifo"],
        help="cell_asha stops a trial worse than the others of its (arch, depth) "
        "cell, asha one worse than any others; fifo runs every trial to the end "
        "(default: the space's)",
    )


def add_data_dir(p, use: str = ""):
    """--data-dir; USE, what the command does with it, ends its help's parenthesis."""
    p.add_argument("--data-dir", help=f"data dir (default: $RHNSEARCH_DATA_DIR or user cache{use})")


def add_sweep_name(p):
    p.add_argument("name", help="the sweep's name (see results/sweeps/)")


def add_address(p):
    p.add_argument("--address", help="Ray cluster address to join (HOST:PORT or auto)")


def add_storage_path(p):
    p.add_argument("--storage-path", help=STORAGE_HELP)


def add_json(p, what: str = "summary"):
    p.add_argument("--json", action="store_true", help=f"print the {what} as JSON")


def add_verbose(p):
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also print Tune's status tables and a box a trial, which always go to the "
        "sweep's driver.log (by default: one live display on a terminal, else a line a trial)",
    )


def add_run_options(p):
    """What `sweep run` and `sweep submit` share: the space and how the sweep runs it."""
    add_space(p)
    p.add_argument(
        "--plan",
        metavar="FILE",
        help="the plan of `sweep plan SPACE --json > FILE`: recorded with the sweep, so that "
        "`sweep status` and the report show device-hours spent next to planned",
    )
    add_preset_and_overrides(p)
    p.add_argument("--search", choices=["random", "optuna"], help="default: the space's")
    p.add_argument(
        "--sampler",
        choices=["tpe", "gp", "cmaes"],
        help="each cell's Optuna sampler with --search optuna (--set sampler=...; default: "
        "the space's, else tpe)",
    )
    add_scheduler(p)
    add_data_dir(p, "; with submit, a path on the cluster")
    p.add_argument(
        "--tracking-uri", help="MLflow tracking URI (default: sqlite:///results/mlflow.db)"
    )
    p.add_argument("--experiment", help="MLflow experiment (default: the space's file name)")
    p.add_argument("--name", help="sweep name (default: STUDY-PRESET-TIMESTAMP)")
    add_storage_path(p)
    add_run_overrides(p)


def add_run_overrides(p):
    """The options that are shorthands for --set (see `overrides`)."""
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="run one trial at a time (--set max_concurrent=1): the trials reach "
        "each rung in the searcher's order, so the seed fixes which trials early "
        "stopping stops too, not only each trial's settings and curve (the "
        "JSB smoke preset's trials: 1.3x the time on 2 cores; up to Nx where N "
        "trials would run at once)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        metavar="N",
        help="run each setting N times, with seeds fixed.seed to fixed.seed+N-1 "
        "(--set seeds=N): a study of one setting per cell then gets an interval "
        "per cell; ASHA judges the setting, so its N runs go on or stop together",
    )
    p.add_argument(
        "--register-model",
        metavar="NAME",
        help="register the sweep's best model in the MLflow Model Registry as a "
        "new version of NAME (--set register_model=NAME)",
    )


def overrides(args) -> list[str]:
    """The --set overrides, then those of --seeds, --sampler, --deterministic and
    --register-model."""
    return (
        args.overrides
        + ([f"seeds={args.seeds}"] if args.seeds is not None else [])
        + ([f"sampler={args.sampler}"] if args.sampler else [])
        + (["max_concurrent=1"] if args.deterministic else [])
        + ([f"register_model={json.dumps(args.register_model)}"] if args.register_model else [])
    )
