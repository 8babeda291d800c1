"""Sweep storage: a directory that every node of the cluster sees, or a URI that pyarrow's
filesystems read (s3://, gs://, file://). Tune keeps its state and the trials' checkpoints
there, and the sweep keeps its own small state files beside them, so that a sweep can be
resumed from any machine that reaches the storage.

An S3-compatible server other than AWS is named by the standard AWS variables
(`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`), which pyarrow reads.
"""
import io
import uuid
import zipfile
from pathlib import Path

import pyarrow.fs as pafs


def is_uri(location: str) -> bool:
    return "://" in location


def normalize(location: str) -> str:
    """A local path made absolute (every process must name the same directory); URIs as given,
    without a trailing slash."""
    if is_uri(location):
        return location.rstrip("/")
    return str(Path(location).expanduser().resolve())


def join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


def _filesystem(location: str):
    return pafs.FileSystem.from_uri(normalize(location))


def read_text(location: str) -> str | None:
    """The file's text, or None if there is no such file."""
    fs, path = _filesystem(location)
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as stream:
        return stream.read().decode()


def write_text(location: str, text: str):
    """Write the whole file at once: on a filesystem through a temporary file renamed over
    it, on an object store as one object (whole or not at all, either way)."""
    fs, path = _filesystem(location)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    target = path if not isinstance(fs, pafs.LocalFileSystem) else \
        f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    with fs.open_output_stream(target) as stream:
        stream.write(text.encode())
    if target != path:
        fs.move(target, path)


def exists(location: str) -> bool:
    fs, path = _filesystem(location)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def listdir(location: str) -> list[str]:
    """Names of the entries of a directory (none if it does not exist)."""
    fs, path = _filesystem(location)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return []
    return sorted(info.base_name for info in fs.get_file_info(pafs.FileSelector(path)))


def move(source: str, target: str):
    fs, source_path = _filesystem(source)
    fs.move(source_path, _filesystem(target)[1])


def is_zip(location: str) -> bool:
    """Whether the file is a whole zip archive (torch.save writes one; a file cut short by a
    killed process is not)."""
    fs, path = _filesystem(location)
    if fs.get_file_info(path).type != pafs.FileType.File:
        return False
    with fs.open_input_stream(path) as stream:
        return zipfile.is_zipfile(io.BytesIO(stream.read()))
