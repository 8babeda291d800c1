"""Sweep storage: a directory that every node of the cluster sees, or a URI that pyarrow's
filesystems read (s3://, gs://, file://). Tune keeps its state and the trials' checkpoints
there, and the sweep keeps its own small state files beside them, so that a sweep can be
resumed from any machine that reaches the storage.

An S3-compatible server other than AWS is named by the standard AWS variables
(`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`), which pyarrow reads.
"""
import io
import os
import re
import uuid
import zipfile
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import pyarrow as pa
import pyarrow.fs as pafs


def is_uri(location: str) -> bool:
    return "://" in location


def normalize(location: str) -> str:
    """A local path, or a file:// URI, as an absolute path (every process must name the same
    directory, and Tune writes a path in whole files: tune_filesystem); other URIs as given,
    without a trailing slash."""
    if location.startswith("file://"):
        location = url2pathname(urlparse(location).path)
    elif is_uri(location):
        return location.rstrip("/")
    return str(Path(location).expanduser().resolve())


def join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


def _filesystem(location: str):
    """(filesystem, path); a local one writes whole files (see WholeFiles)."""
    fs, path = pafs.FileSystem.from_uri(normalize(location))
    return (pafs.PyFileSystem(WholeFiles()) if isinstance(fs, pafs.LocalFileSystem) else fs), path


def read_bytes(location: str) -> bytes | None:
    """The file's bytes, or None if there is no such file."""
    fs, path = _filesystem(location)
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as stream:
        return stream.read()


def read_text(location: str) -> str | None:
    """The file's text, or None if there is no such file."""
    data = read_bytes(location)
    return None if data is None else data.decode()


def write_text(location: str, text: str):
    """Write the whole file at once: on a filesystem through a temporary file renamed over
    it, on an object store as one object (whole or not at all, either way)."""
    fs, path = _filesystem(location)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as stream:
        stream.write(text.encode())


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
    data = read_bytes(location)
    return data is not None and zipfile.is_zipfile(io.BytesIO(data))


class WholeFiles(pafs.FileSystemHandler):
    """The local filesystem for Tune, except that each file it writes appears whole or not at
    all: written under a hidden temporary name in the same directory, renamed over the target
    when closed. Tune copies its state and the checkpoints into the storage file by file; a
    driver killed mid-copy would otherwise leave a file cut short, and Tune's resume, failing to
    read it, starts the experiment again from nothing."""

    def __init__(self):
        self.fs = pafs.LocalFileSystem()

    def __eq__(self, other):
        return isinstance(other, WholeFiles)

    def open_output_stream(self, path, metadata):
        return pa.PythonFile(_RenamedWhenClosed(_temporary(path), path), mode="w")

    def copy_file(self, src, dest):
        temporary = _temporary(dest)
        self.fs.copy_file(src, temporary)
        os.replace(temporary, dest)

    def get_type_name(self):
        return "rhnsearch-whole-files"

    def equals(self, other):
        return self == other

    def normalize_path(self, path):
        return self.fs.normalize_path(path)

    def get_file_info(self, paths):
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.fs.get_file_info(selector)

    def create_dir(self, path, recursive):
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self.fs.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        self.fs.delete_dir_contents("/", accept_root_dir=True)

    def delete_file(self, path):
        self.fs.delete_file(path)

    def move(self, src, dest):
        self.fs.move(src, dest)

    def open_input_stream(self, path):
        return self.fs.open_input_stream(path)

    def open_input_file(self, path):
        return self.fs.open_input_file(path)

    def open_append_stream(self, path, metadata):
        return self.fs.open_append_stream(path)


def _temporary(path: str) -> str:
    """A hidden name beside `path`, unique to this write."""
    folder, name = path.rsplit("/", 1)
    return f"{folder}/.{name}.{uuid.uuid4().hex[:8]}.tmp"


def remove_leftovers(location: str):
    """Delete the temporary files that writers killed mid-file left under a local directory
    (call it when nothing writes there: a sweep's driver and trials are gone)."""
    if not is_uri(location):
        for path in Path(location).rglob(".*.tmp"):
            if re.fullmatch(r"\..+\.[0-9a-f]{8}\.tmp", path.name):
                path.unlink()


class _RenamedWhenClosed(io.FileIO):
    def __init__(self, temporary: str, target: str):
        super().__init__(temporary, "w")
        self.temporary, self.target = temporary, target

    def close(self):
        if not self.closed:
            super().close()
            os.replace(self.temporary, self.target)


def tune_filesystem(location: str) -> pafs.FileSystem | None:
    """The filesystem Tune writes the sweep's storage with: whole files on a local or shared
    directory; None (Tune's own choice) for a URI, which Tune resolves itself."""
    return None if is_uri(location) else _filesystem(location)[0]
