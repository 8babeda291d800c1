"""A sweep's MLflow records on the driver's disk before they are sent: appended (a killed
driver loses none: the kernel holds what was written) and put on the disk by the sender, off
Tune's event loop, before each batch it sends and each retry (a machine that goes down loses
the records that came after the sender's last batch or retry), numbered, with the number of
the last one MLflow has taken; a bucket sweep copies the waiting ones to its bucket, so that
a resume on another machine sends them (`files.layout`: PENDING_FILE, SENT_FILE)."""

import json
import os
import re
import shutil
import threading
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..files import storage
from ..files.layout import PENDING_FILE, SENT_FILE

COMPACT_BYTES = 4 << 20  # a journal this large is rewritten with its unsent records only
NUMBER = re.compile(rb'"seq": (\d+)}$')  # a line's number: `append` writes it last


@dataclass
class Record:
    """What the MLflow callback has to log of one trial at one event, as the journal keeps it
    (a JSON object a line, its number `seq` last): the metrics (key, value, timestamp, step),
    params (key, value) and tags (key, value) to log on the trial's run, the run's name and
    dataset where given, and its end (FINISHED, FAILED) and end time where it ended."""

    trial_id: str
    name: str | None = None
    end: str | None = None
    dataset: str | None = None  # (absent from records journaled before datasets were logged)
    end_time: int | None = None
    metrics: list = field(default_factory=list)
    params: list = field(default_factory=list)
    tags: list = field(default_factory=list)
    seq: int = 0  # its number in the journal: given as it is appended

    @classmethod
    def from_json(cls, data: dict) -> "Record":
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    def line(self) -> str:
        return json.dumps(asdict(self)) + "\n"


def lines(records: list[Record]) -> str:
    """Records as the journal keeps them: one JSON object a line."""
    return "".join(r.line() for r in records)


def parse(text: str) -> list[Record]:
    """A journal's records; a line cut short by a dying driver ends the list."""
    found = []
    for line in text.splitlines():
        try:
            found.append(Record.from_json(json.loads(line)))
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
        # how far the journal is known: (the file's inode, a number N, the offset before which
        # every line is numbered N or less), so that a read or an acknowledgement after N
        # reads on from there
        self.cursor = (None, 0, 0)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._cut_torn_line()
        self.last = max([self.sent(), *(r.seq for r in self.records(self.sent()))])
        left = parse(storage.read_text(mirror) or "") if mirror else []
        for record in left:
            if record.seq > self.last:  # left by a driver on another machine
                self.append(record, record.seq)
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

    def records(self, after: int = 0, limit: int | None = None) -> list[Record]:
        """The journal's records numbered above AFTER, the first LIMIT of them (None: all).
        Read on from the cursor (`_start`: a sender working through a long journal reads each
        line about once), the lines numbered up to AFTER skipped unparsed (a sent line that is
        damaged hides nothing after it). A line cut short (by a dying driver, or still being
        appended) ends the list."""
        found = []
        try:
            journal = open(self.path, "rb")
        except FileNotFoundError:
            return found
        with journal:
            inode = os.fstat(journal.fileno()).st_ino
            offset = self._start(journal, inode, after)
            while limit is None or len(found) < limit:
                line = journal.readline()
                if not line.endswith(b"\n"):
                    break
                try:
                    record = Record.from_json(json.loads(line))
                except ValueError:
                    break
                offset += len(line)
                if record.seq > after:
                    found.append(record)
                    self.cursor = (inode, record.seq, offset)
        return found

    def _start(self, journal, inode: int, after: int) -> int:
        """Seek JOURNAL to its first line numbered above AFTER, or the first whose number is
        not at its end; returns the offset. The scan goes on from the cursor where it is in
        this file and not past AFTER (the sender's reads and acknowledgements move forward:
        each line is scanned about once), else from the start; lines skipped are not parsed."""
        known, seen, offset = self.cursor
        if known != inode or seen > after:
            offset = 0
        journal.seek(offset)
        for line in journal:
            number = NUMBER.search(line.rstrip(b"\n"))
            if number is None or int(number[1]) > after or not line.endswith(b"\n"):
                break
            offset += len(line)
        self.cursor = (inode, after, offset)
        return journal.seek(offset)

    def append(self, record: Record, seq: int | None = None) -> Record:
        """RECORD numbered (SEQ, else the next number) and appended."""
        with self.lock:
            self.last = seq or self.last + 1
            record.seq = self.last
            with open(self.path, "a") as out:
                out.write(record.line())
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
        """Record that MLflow has every record up to SEQ; drop the file once it has all. A file
        grown past COMPACT_BYTES is rewritten with the lines after SEQ once they are no more
        than the lines sent (a sweep whose sender never quite catches up would keep every
        record it ever made): each line is copied at most as often as the file halves, so a
        sender working through a long journal copies it in time linear in its length."""
        tmp = self.sent_path.with_suffix(".tmp")
        tmp.write_text(str(seq))
        os.replace(tmp, self.sent_path)
        with self.lock:
            if seq == self.last:
                self.path.unlink(missing_ok=True)
                self.cursor = (None, 0, 0)  # a file made again may take the same inode
                return
            try:
                journal = open(self.path, "rb")
            except FileNotFoundError:
                return
            with journal:
                stat = os.fstat(journal.fileno())
                if stat.st_size <= COMPACT_BYTES:
                    return
                start = self._start(journal, stat.st_ino, seq)
                if start < stat.st_size - start:
                    return
                kept = self.path.with_suffix(".tmp")
                with open(kept, "wb") as out:
                    shutil.copyfileobj(journal, out)
                    out.flush()
                    os.fsync(out.fileno())
            os.replace(kept, self.path)
            self.cursor = (os.stat(self.path).st_ino, seq, 0)
