"""The `rhnsearch` command line: one module per command group, each a thin layer over the
library (argparse and printing live here only); bad input ends in one line, exit code 2."""

import argparse
import logging
import os
import sys

from .. import __version__
from ..errors import UserError
from .analyze import add_analyze
from .data import add_data
from .results import add_results
from .sweep import add_sweep
from .train import add_budget, add_train
from .ui import add_ui

COMMANDS = [add_train, add_budget, add_data, add_sweep, add_analyze, add_results, add_ui]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rhnsearch",
        description="Hyperparameter search for Recurrent Highway Networks "
        "and deep-transition RNNs on Ray Tune, recorded in MLflow.",
    )
    parser.add_argument("--version", action="version", version=f"rhnsearch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(levelname)s: %(message)s")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its retries are not news
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one file at a time
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # MLflow sets its own at import
    try:
        return args.run(args) or 0
    except UserError as exc:
        print(f"rhnsearch: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rhnsearch: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
