"""Sweep storage: a directory that every node of the cluster sees, or a URI that pyarrow's
filesystems read (s3://, gs://, file://), pyarrow's query options included
(`s3://BUCKET/PATH?endpoint_override=HOST:PORT&scheme=http`). Tune keeps its state and the
trials' checkpoints there, and the sweep keeps its own small state files beside them, so that
a sweep can be resumed from any machine that reaches the storage.

An S3-compatible server other than AWS is named by the standard AWS variables
(`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`), which pyarrow reads.
Every request to a bucket costs latency and money: a small file is written in one PUT, and no
directory markers are written (see ObjectStore).
"""

import functools
import io
import logging
import math
import os
import re
import socket
import threading
import time
import uuid
import zipfile
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlparse
from urllib.request import url2pathname

import pyarrow as pa
import pyarrow.fs as pafs

from ..compat import ray as ray_compat
from ..errors import first_line

log = logging.getLogger(__name__)


def is_uri(location: str) -> bool:
    return "://" in location


def normalize(location: str) -> str:
    """A local path, or a file:// URI, as an absolute path (every process must name the same
    directory, and Tune writes a path in whole files: split); other URIs as given,
    without a trailing slash."""
    if location.startswith("file://"):
        location = url2pathname(urlparse(location).path)
    elif is_uri(location):
        path, _, query = location.partition("?")
        return path.rstrip("/") + (f"?{query}" if query else "")
    return str(Path(location).expanduser().resolve())


def join(root: str, *parts: str) -> str:
    """`root`/part/...; a URI's query options stay at the end."""
    path, _, query = root.partition("?")
    return "/".join([path.rstrip("/"), *parts]) + (f"?{query}" if query else "")


def parent(location: str) -> str:
    """The folder of LOCATION (a path or URI); a URI's query options stay at the end."""
    path, _, query = location.partition("?")
    return path.rstrip("/").rsplit("/", 1)[0] + (f"?{query}" if query else "")


def split(location: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path) of a location, as Tune takes them (storage_filesystem and a path
    without scheme): a local one writes whole files (WholeFiles), an S3 bucket one small file
    in one request and no directory markers (ObjectStore)."""
    location = normalize(location)
    if location.startswith("s3://"):
        url = urlparse(location)
        store = object_store(url.netloc, url.query)
        return pafs.PyFileSystem(store), f"{url.netloc}{url.path}".rstrip("/")
    fs, path = pafs.FileSystem.from_uri(location)
    return (pafs.PyFileSystem(WholeFiles()) if isinstance(fs, pafs.LocalFileSystem) else fs), path


@functools.cache
def object_store(name: str, query: str) -> "ObjectStore":
    """The ObjectStore of bucket NAME with options QUERY, made once a process: each S3
    filesystem made sets up an S3 client, which costs more CPU than a small PUT."""
    options = dict(parse_qsl(query))
    options.setdefault("allow_delayed_open", "true")  # a small file in one PUT, not three
    fs, _ = pafs.FileSystem.from_uri(f"s3://{name}?{urlencode(options)}")
    return ObjectStore(fs, (name, query))


def read_bytes(location: str) -> bytes | None:
    """The file's bytes, or None if there is no such file. Read as a file of known size, in one
    request to a bucket (a stream is read in 256 kB pieces, a request each)."""
    fs, path = split(location)
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_file(path) as file:
        return file.read()


def read_text(location: str) -> str | None:
    """The file's text, or None if there is no such file."""
    data = read_bytes(location)
    return None if data is None else data.decode()


def write_text(location: str, text: str):
    """Write the whole file at once (write_bytes)."""
    write_bytes(location, text.encode())


def write_bytes(location: str, data: bytes):
    """Write the whole file at once: on a filesystem through a temporary file renamed over
    it, on an object store as one object (whole or not at all, either way)."""
    fs, path = split(location)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as stream:
        stream.write(data)


def delete_file(location: str):
    fs, path = split(location)
    fs.delete_file(path)


class Later:
    """One thread doing the storage work that Tune's event loop must not wait for (on a bucket,
    each request is a round trip): jobs run in the order queued, and a job queued under a key
    already waiting replaces it (a state file queued twice is written once, newest text). A
    job queued with a `gap` runs no sooner than that many seconds after its key's last job ran
    (a state that grows with the trials is written at most so often); `wait` runs every job
    now."""

    def __init__(self):
        self.jobs, self.busy, self.thread, self.flushing = {}, False, None, 0
        self.ran: dict[str, float] = {}  # key with a gap -> when its last job ran
        self.changed = threading.Condition()

    def put(self, key: str, job, *, gap: float = 0.0):
        with self.changed:
            self.jobs.pop(key, None)
            self.jobs[key] = (job, gap)
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._run, name="rhnsearch-storage", daemon=True
                )
                self.thread.start()
            self.changed.notify_all()

    def wait(self):
        """Return once every job queued so far has run, gaps or not."""
        with self.changed:
            self.flushing += 1
            self.changed.notify_all()
            try:
                self.changed.wait_for(lambda: not self.jobs and not self.busy)
            finally:
                self.flushing -= 1

    def _due(self) -> tuple[str | None, float]:
        """The first key whose job may run now (None if none), else the seconds to the
        first that may."""
        now, soonest = time.monotonic(), math.inf
        for key, (_, gap) in self.jobs.items():
            left = self.ran.get(key, -math.inf) + gap - now
            if left <= 0 or self.flushing:
                return key, 0.0
            soonest = min(soonest, left)
        return None, soonest

    def _run(self):
        while True:
            with self.changed:
                while True:
                    key, left = self._due()
                    if key is not None:
                        break
                    self.changed.wait(None if left == math.inf else left)
                (job, gap), self.busy = self.jobs.pop(key), True
                if gap:  # (a key without one is not kept: a trial's checkpoint pruned)
                    self.ran[key] = time.monotonic()
            try:
                job()
            except Exception as exc:  # noqa: BLE001 - a storage error must not end the sweep
                log.warning("storage: %s failed (%s)", key, first_line(exc))
            with self.changed:
                self.busy = False
                self.changed.notify_all()


LATER = Later()


def exists(location: str) -> bool:
    fs, path = split(location)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def listdir(location: str) -> list[str]:
    """Names of the entries of a directory (none if it does not exist)."""
    fs, path = split(location)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return []
    return sorted(info.base_name for info in fs.get_file_info(pafs.FileSelector(path)))


def move(source: str, target: str):
    fs, source_path = split(source)
    fs.move(source_path, split(target)[1])


def is_zip(location: str) -> bool:
    """Whether the file is a whole zip archive (torch.save writes one; a file cut short by a
    killed process is not)."""
    data = read_bytes(location)
    return data is not None and zipfile.is_zipfile(io.BytesIO(data))


class Delegate(pafs.FileSystemHandler):
    """A pyarrow filesystem handler that passes every call to `self.fs`: subclasses change
    the few that differ."""

    fs: pafs.FileSystem

    def __eq__(self, other):
        return type(other) is type(self) and self.fs.equals(other.fs)

    def get_type_name(self):
        return f"rhnsearch-{type(self).__name__}"

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

    def copy_file(self, src, dest):
        self.fs.copy_file(src, dest)

    def open_input_stream(self, path):
        return self.fs.open_input_stream(path)

    def open_input_file(self, path):
        return self.fs.open_input_file(path)

    def open_output_stream(self, path, metadata):
        """Tune's experiment state is stored only if it is one whole state. Tune rewrites that
        file in place (truncated, then written) while its upload of the previous one may still
        be reading it, so an upload can carry an empty or half file, or a whole one with the
        next one's tail; stored, a driver killed before the next upload would leave a sweep
        that cannot be resumed. Dropped, the last whole one stays until the next upload, a few
        seconds later. The check searches the bytes without parsing them: a parse on the
        upload's thread kept memory that grows with the state (docs/scale-history.md). (Tune writes
        every other file it uploads under a temporary name first.)"""
        if ray_compat.is_experiment_state(path.rsplit("/", 1)[-1]):
            return pa.PythonFile(
                _StoredIfWhole(lambda: self.output(path, metadata), path), mode="w"
            )
        return self.output(path, metadata)

    def output(self, path, metadata):
        """How this storage writes a file."""
        return self.fs.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path, metadata):
        return self.fs.open_append_stream(path)


class WholeFiles(Delegate):
    """The local filesystem for Tune, except that each file it writes appears whole or not at
    all: written under a hidden temporary name in the same directory, renamed over the target
    when closed. Tune copies its state and the checkpoints into the storage file by file; a
    driver killed mid-copy would otherwise leave a file cut short, and Tune's resume, failing to
    read it, starts the experiment again from nothing."""

    def __init__(self):
        self.fs = pafs.LocalFileSystem()

    def output(self, path, metadata):
        return pa.PythonFile(_RenamedWhenClosed(_temporary(path), path), mode="w")

    def copy_file(self, src, dest):
        temporary = _temporary(dest)
        self.fs.copy_file(src, temporary)
        os.replace(temporary, dest)


class ObjectStore(Delegate):
    """An S3 bucket for Tune without directory markers. A bucket has no directories (a key's
    prefixes exist once the key does), but pyarrow writes an empty marker object for each level
    of a directory it is asked to create, and Tune asks before every upload: at each sync, for
    every trial's folder (thousands of requests a sweep, for nothing)."""

    def __init__(self, fs: pafs.FileSystem, bucket: tuple[str, str] | None = None):
        self.fs, self.bucket = fs, bucket

    def __reduce__(self):
        """Pickled as the bucket and options it was made for (`object_store`), and unpickled
        as the process's own store of them: Tune unpickles the storage's filesystem with every
        checkpoint a trial reports, and an S3 filesystem unpickled sets up a new S3 client
        (half a bucket sweep's driver CPU went to it: docs/scale-history.md)."""
        if getattr(self, "bucket", None) is None:  # (pickled before stores knew their bucket)
            return ObjectStore, (self.fs,)
        return object_store, self.bucket

    def create_dir(self, path, recursive):
        pass

    def move(self, src, dest):
        """A folder is moved object by object (S3 renames none)."""
        if self.fs.get_file_info(src).type != pafs.FileType.Directory:
            return self.fs.move(src, dest)
        for info in self.fs.get_file_info(pafs.FileSelector(src, recursive=True)):
            if info.type == pafs.FileType.File:
                self.fs.copy_file(info.path, dest + info.path[len(src) :])
        self.fs.delete_dir(src)

    def delete_root_dir_contents(self):
        raise OSError("rhnsearch never empties a whole bucket")


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


class _StoredIfWhole(io.BytesIO):
    def __init__(self, output, path: str):
        super().__init__()
        self.output, self.path = output, path

    def close(self):
        if not self.closed:
            with self.getbuffer() as data:
                if ray_compat.is_whole_experiment_state(data):
                    with self.output() as stream:
                        stream.write(data)
                else:
                    log.debug(
                        "storage: kept the stored %s (the upload read it half written)",
                        self.path,
                    )
            super().close()


class _RenamedWhenClosed(io.FileIO):
    def __init__(self, temporary: str, target: str):
        super().__init__(temporary, "w")
        self.temporary, self.target = temporary, target

    def close(self):
        if not self.closed:
            super().close()
            os.replace(self.temporary, self.target)


def check_reachable(location: str):
    """Raise OSError unless the bucket answers (a connect to its endpoint, if one is named) and
    takes a write (a probe object, written and deleted): a sweep must not start Ray and train
    for an hour before its first checkpoint fails."""
    if not is_uri(location):
        return
    endpoint = (
        dict(parse_qsl(location.partition("?")[2])).get("endpoint_override")
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
    )
    if location.startswith("s3://") and endpoint:
        url = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
        socket.create_connection((url.hostname, url.port or 443), timeout=5).close()
    probe = join(location, f".rhnsearch-probe-{uuid.uuid4().hex[:8]}")
    fs, path = split(probe)
    with fs.open_output_stream(path) as stream:
        stream.write(b"ok")
    fs.delete_file(path)
