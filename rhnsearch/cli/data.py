"""`rhnsearch data fetch`: download a dataset ahead of its first use."""

from ..data import DATASETS


def add_data(sub):
    p = sub.add_parser(
        "data",
        help="fetch and check datasets",
        description="Download datasets from their public sources (sha256 "
        "checked, written atomically).",
    )
    dsub = p.add_subparsers(dest="data_command", required=True)
    f = dsub.add_parser(
        "fetch",
        help="download a dataset into the data dir",
        description="Download a dataset into the data dir and check it.",
    )
    f.add_argument("dataset", choices=list(DATASETS))
    f.add_argument("--data-dir", help="data dir (default: $RHNSEARCH_DATA_DIR or user cache)")
    f.set_defaults(run=run_fetch)


def run_fetch(args):
    from ..data import data_dir, fetch

    for path in fetch(args.dataset, data_dir(args.data_dir)):
        print(path)
