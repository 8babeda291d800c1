"""A sweep's MLflow records on the driver's disk before they are sent: appended (a killed
driver loses none: the kernel holds what was written) and put on the disk by the sender, off
Tune's event loop, before each batch it sends and each retry (a machine that goes down loses
the records that came after the sender's last batch or retry), numbered, with the number of
the last one MLflow has taken; a bucket sweep copies the waiting ones to its bucket, so that
a resume on another machine sends them (`files.layout`: PENDING_FILE, SENT_FILE)."""

import json
import os
import re
import threading
from pathlib import Path

from ..files import storage
from ..files.layout import PENDING_FILE, SENT_FILE

COMPACT_BYTES = 4 << 20  # a journal this large is rewritten with its unsent records only
NUMBER = re.compile(r'"seq": (\d+)}$')  # a line's number: `append` writes it last


def lines(records: list[dict]) -> str:
    """Records as the journal keeps them: one JSON object a line."""
    return "".join(json.dumps(r) + "\n" for r in records)


def parse(text: str) -> list[dict]:
    """A journal's records; a line cut short by a dying driver ends the list."""
    found = []
    for line in text.splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return found


class Journal:
    """Records appended to a file (`sync` puts them on the disk), numbered; the number of
    the last record MLflow has taken is kept beside it. Once everything is sent the file goes.
    With a `mirror` (a file in the bucket), the records not sent are copied there on demand,
    and the ones found there when the journal opens are taken into the file."""

    def __init__(self, directory, mirror: str | None = None):
        self.path = Path(directory) / PENDING_FILE
        self.sent_path = Path(directory) / SENT_FILE
        self.mirror = mirror
        self.lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._cut_torn_line()
        self.last = max([self.sent(), *(r["seq"] for r in self.records(self.sent()))])
        left = parse(storage.read_text(mirror) or "") if mirror else []
        for record in left:
            if record["seq"] > self.last:  # left by a driver on another machine
                self.append(record, record["seq"])
        self.mirrored = bool(left)

    def _cut_torn_line(self):
        """Cut off a last line torn by a machine that went down: the next record appended
        would join it and be lost with it. A last record whole but for its newline gets one.
        A journal that ends with a newline, as it does unless torn, costs one byte read."""
        if not self.path.exists():
            return
        with open(self.path, "rb+") as journal:
            if journal.seek(0, os.SEEK_END) == 0:
                return
            journal.seek(-1, os.SEEK_END)
            if journal.read(1) == b"\n":
                return
            journal.seek(0)
            text = journal.read()
            start = text.rfind(b"\n") + 1
            try:
                json.loads(text[start:])
            except ValueError:  # torn JSON, or torn UTF-8
                journal.truncate(start)
            else:
                journal.write(b"\n")

    def sent(self) -> int:
        return int(self.sent_path.read_text()) if self.sent_path.exists() else 0

    def records(self, after: int = 0, limit: int | None = None) -> list[dict]:
        """The journal's records numbered above `after`, the first `limit` of them (None: all).
        The lines numbered up to `after` are skipped unparsed: a sender that catches up
        with a long journal would otherwise parse it whole for each batch it reads."""
        found = []
        text = self.path.read_text() if self.path.exists() else ""
        for line in text[_unsent_start(text, after) :].splitlines():
            if limit is not None and len(found) == limit:
                break
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                break  # a line cut short by a dying driver ends the list
            if record["seq"] > after:
                found.append(record)
        return found

    def append(self, record: dict, seq: int | None = None) -> dict:
        with self.lock:
            self.last = seq or self.last + 1
            record["seq"] = self.last
            with open(self.path, "a") as out:
                out.write(lines([record]))
        return record

    def sync(self):
        """Put what was appended on the disk (one fsync, however many records: at 10 ms each
        on a plain disk, one per record on Tune's loop would bound the results it takes). Not
        under the lock: appends go on meanwhile."""
        try:
            with open(self.path, "rb") as journal:
                os.fsync(journal.fileno())
        except FileNotFoundError:
            pass  # nothing appended since MLflow took it all

    def copy_to_mirror(self):
        """Copy the records not sent yet to the mirror (remove it once none are left)."""
        if self.mirror is None:
            return
        pending = self.records(self.sent())
        if pending:
            storage.write_text(self.mirror, lines(pending))
        elif self.mirrored:
            storage.delete_file(self.mirror)
        self.mirrored = bool(pending)

    def ack(self, seq: int):
        """Record that MLflow has every record up to `seq`; drop the file once it has all, and
        once it has grown past COMPACT_BYTES, rewrite it with the lines after `seq` (a sweep
        whose sender never quite catches up would keep every record it ever made). It is
        rewritten only once half that much has been sent, so a sender that works through a
        long journal does not copy what is left of it at every batch."""
        tmp = self.sent_path.with_suffix(".tmp")
        tmp.write_text(str(seq))
        os.replace(tmp, self.sent_path)
        with self.lock:
            if seq == self.last:
                self.path.unlink(missing_ok=True)
            elif self.path.exists() and self.path.stat().st_size > COMPACT_BYTES:
                text = self.path.read_text()
                start = _unsent_start(text, seq)
                if start < COMPACT_BYTES // 2:
                    return
                kept = self.path.with_suffix(".tmp")
                with open(kept, "w") as out:
                    out.write(text[start:])
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(kept, self.path)


def _unsent_start(text: str, sent: int) -> int:
    """Where in a journal's TEXT its first line numbered above SENT starts (or the first line
    whose number is not at its end, which is parsed), read without parsing the lines."""
    start = 0
    for line in text.splitlines(keepends=True):
        number = NUMBER.search(line.rstrip("\n"))
        if number is None or int(number[1]) > sent:
            break
        start += len(line)
    return start
