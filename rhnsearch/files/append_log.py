"""Entries appended to a sweep's file in order, each append costing its own entries and not the
log's: lines of JSON in LOCATION.jsonl on a filesystem, or in a bucket one object per append
under LOCATION/, numbered from 0 (an object cannot be appended to). A reader goes on from where
its last read ended, so reading a log as it grows costs its length once."""

import json
import os

from . import storage


class AppendLog:
    """The log at LOCATION (a path or URI, without a suffix)."""

    def __init__(self, location: str):
        self.location = location
        self.read_to = 0  # whole lines' bytes (a file) or objects (a bucket) read so far

    @property
    def path(self) -> str | None:
        """The file of the log, or None in a bucket."""
        location = storage.normalize(self.location)
        return None if storage.is_uri(location) else f"{location}.jsonl"

    def _object(self, number: int) -> str:
        return storage.join(self.location, f"{number:09d}.json")

    def read(self) -> list:
        """The entries appended since the last read (a line a killed writer left half
        written is not one)."""
        if self.path is None:  # in a bucket: the objects after the last read, by number
            entries = []
            while (text := storage.read_text(self._object(self.read_to))) is not None:
                entries += json.loads(text)
                self.read_to += 1
            return entries
        try:
            with open(self.path, "rb") as f:
                f.seek(self.read_to)
                data = f.read()
        except FileNotFoundError:
            return []
        whole = data[: data.rfind(b"\n") + 1]
        self.read_to += len(whole)
        return [entry for line in whole.splitlines() for entry in json.loads(line)]

    def append(self, entries: list) -> list:
        """Append ENTRIES (JSON values) as one line or one object, after every entry there
        (read first: the numbering, or the lines, follow them). Returns the entries that
        were there unread."""
        unread = self.read()
        if self.path is None:
            storage.write_text(self._object(self.read_to), json.dumps(entries))
            self.read_to += 1
            return unread
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        line = (json.dumps(entries) + "\n").encode()
        with open(self.path, "ab") as f:
            f.truncate(self.read_to)  # a half-written line a killed writer left goes
            f.write(line)
        self.read_to += len(line)
        return unread
