"""Sends a sweep's journaled records to MLflow from a background thread, so that Tune's event
loop never waits on the network. Every record can be sent twice without effect, so a request
that timed out but reached the server does no harm: a trial whose create failed has its run
looked up by its trial-id tag before it is created again, metrics keep their timestamps
(MLflow keeps one copy of an identical metric), epochs MLflow already has are not sent again,
and runs end with their recorded end time."""

import itertools
import logging
import os
import queue
import threading
import time
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from ..errors import UserError, first_line
from ..files.parent_run import ParentRun
from ..provenance import provenance_tags
from . import schema
from .datasets import dataset_input
from .journal import Journal, Record
from .runs import StoredRun, matching
from .uris import is_server

log = logging.getLogger(__name__)
QUEUE_SIZE = 1000  # records held in memory for the sender; the journal holds them all
BATCH = 500  # records sent at once at most: one request per trial among them
BACKOFF_SECONDS = (1, 2, 5, 10, 30)  # between attempts while the store does not answer
DRAIN_SECONDS = 30  # after the trials: how long an unreachable store is waited for
WAIT_VARIABLE = "RHNSEARCH_MLFLOW_WAIT"  # seconds, in place of DRAIN_SECONDS
MIRROR_SECONDS = 10  # while the store does not answer: how often waiting records are copied
SERVER_THREADS = 4  # through a server: trials sent at once (its workers answer side by side)


class Sender:
    """Sends a journal's records to MLflow in order, from a background thread, those waiting
    together: one request per trial among them, so a store that falls behind gets fewer,
    larger requests. Records come through a bounded queue; those that did not fit (or that an
    earlier driver left) are read back from the journal. Through a server, SERVER_THREADS
    trials' requests are in flight at once: one at a time, a server of several workers on
    loopback took some 15 runs a second, each request waiting on the last."""

    def __init__(self, run: ParentRun, journal: Journal):
        self.uri, self.experiment_id, self.parent = run.tracking_uri, run.experiment_id, run.run_id
        self.sweep = run.sweep
        self.journal, self.queue = journal, queue.Queue(QUEUE_SIZE)
        self.delivered = journal.sent()
        self.done = threading.Condition()
        self.runs: dict[str, str] = {}  # trial id -> run id
        self.max_epoch: dict[str, int] = {}  # trial id -> last epoch MLflow has
        self.finished: set[str] = set()  # trials whose run ended FINISHED
        self.unsure: set[str] = set()  # trials whose create failed: it may have reached MLflow
        self.failing_since = None  # time.monotonic() of the first failure in a row
        self.mirrored_at = 0.0  # time.monotonic() of the last copy to the journal's mirror
        self.client = None
        self.trouble = threading.Lock()  # a failure's bookkeeping, one thread at a time
        self.threads = SERVER_THREADS if is_server(self.uri) else 1  # a file or database: one
        threading.Thread(target=self._run, name="rhnsearch-mlflow", daemon=True).start()

    def put(self, record: Record):
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            pass  # it is in the journal; the sender reads it back from there

    def drain(self, timeout: float = DRAIN_SECONDS) -> bool:
        """Wait until every journaled record is in MLflow; give up once the store has not
        answered for `timeout` seconds. True if everything was sent."""
        with self.done:
            while self.delivered < self.journal.last:
                failing = self.failing_since
                if failing is not None and time.monotonic() - failing > timeout:
                    self._mirror()
                    return False
                self.done.wait(1.0)
        return True

    def _mirror(self):
        """Copy the waiting records to the bucket, if the journal has a mirror there."""
        try:
            self.journal.copy_to_mirror()
            self.mirrored_at = time.monotonic()
        except OSError as exc:
            log.warning(
                "could not copy the waiting MLflow records to %s (%s)",
                self.journal.mirror,
                first_line(exc, 160),
            )

    def _run(self):
        self._attempt(self._load)
        while True:
            records = self._next()
            if records:
                self._deliver(records)

    def _next(self) -> list[dict]:
        """The records after the last one delivered, in order, up to BATCH of them: those
        waiting in the queue, or from the journal where the queue lacks some; [] when none
        came for a second."""
        try:
            records = [self.queue.get(timeout=1.0)]
        except queue.Empty:
            records = []
        while records and len(records) < BATCH:
            try:
                records.append(self.queue.get_nowait())
            except queue.Empty:
                break
        records = [r for r in records if r.seq > self.delivered]
        seqs = [r.seq for r in records]
        if seqs != list(range(self.delivered + 1, self.delivered + 1 + len(seqs))) or (
            not records and self.delivered < self.journal.last
        ):
            records = self.journal.records(self.delivered, BATCH)  # the queue missed some
        return records

    def _deliver(self, records: list[Record]):
        """Put RECORDS (consecutive) on the disk, send them a request per trial (several
        trials at once through a server), then mark them sent."""
        self.journal.sync()
        trials: dict[str, list[Record]] = {}
        for record in records:
            trials.setdefault(record.trial_id, []).append(record)
        groups = [merged(group) for group in trials.values()]

        def send(some: list[Record]):
            for record in some:
                self._attempt(lambda record=record: self._send(record))

        ways = min(self.threads, len(groups))
        shares = [groups[i::ways] for i in range(ways)]
        # daemon threads, as the sender's own: a store that never answers keeps no exit waiting
        helpers = [threading.Thread(target=send, args=(s,), daemon=True) for s in shares[1:]]
        for thread in helpers:
            thread.start()
        send(shares[0])
        for thread in helpers:
            thread.join()
        self.journal.ack(records[-1].seq)
        if self.journal.mirrored and records[-1].seq == self.journal.last:
            self._mirror()  # every record is in MLflow: the copy goes
        with self.done:
            self.delivered = records[-1].seq
            self.done.notify_all()

    def _attempt(self, action):
        """Run `action` until it succeeds, waiting longer after each failure."""
        for attempt in itertools.count():
            try:
                action()
                break
            except Exception as exc:  # noqa: BLE001 - network and server errors alike
                with self.trouble:
                    self.client = None
                    if self.failing_since is None:
                        self.failing_since = time.monotonic()
                        log.warning(
                            "MLflow at %s is not answering (%s); records wait in %s and are "
                            "retried",
                            self.uri,
                            first_line(exc, 160),
                            self.journal.path,
                        )
                    self.journal.sync()  # the records that came meanwhile wait on the disk
                    if time.monotonic() - self.mirrored_at > MIRROR_SECONDS:
                        self._mirror()
                time.sleep(BACKOFF_SECONDS[min(attempt, len(BACKOFF_SECONDS) - 1)])
        with self.trouble:
            if attempt and self.failing_since is not None:  # (another thread's may go on)
                log.warning("MLflow at %s is back: sending the waiting records", self.uri)
                self.failing_since = None

    def _mlflow(self) -> MlflowClient:
        if self.client is None:
            self.client = MlflowClient(self.uri)
        return self.client

    def _load(self):
        """What MLflow already has of this sweep (a resumed sweep reuses its runs): from a
        database store's tables, which a resume at thousands of trials reads in seconds where
        MlflowClient takes a minute."""
        tags = {schema.PARENT_RUN: self.parent}
        for run in matching(self.uri, self._mlflow(), self.experiment_id, tags):
            self._know(run)

    def _know(self, run: StoredRun):
        trial_id = run.tags.get(schema.TRIAL_ID)
        if trial_id:
            self.runs[trial_id] = run.run_id
            self.max_epoch[trial_id] = int(run.metrics.get("epoch", 0))
            if run.status == "FINISHED":
                self.finished.add(trial_id)

    def _run_id(self, trial_id: str, name: str | None) -> str:
        """The trial's run: known (the runs MLflow had when the sender started, and those it
        created since), found by its tag where a create of it failed (it may have reached the
        server), or created. A search per new trial would cost the store a query over the
        sweep's runs at every trial."""
        if trial_id not in self.runs:
            found = trial_id in self.unsure and self._mlflow().search_runs(
                [self.experiment_id],
                f"tags.{schema.PARENT_RUN} = '{self.parent}' "
                f"and tags.{schema.TRIAL_ID} = '{trial_id}'",
                max_results=1,
            )
            if found:
                self._know(StoredRun.of(found[0]))
            else:
                self.unsure.add(trial_id)
                run = self._mlflow().create_run(
                    self.experiment_id,
                    run_name=name,
                    tags={
                        **provenance_tags(),
                        schema.PARENT_RUN: self.parent,
                        schema.KIND: "trial",
                        schema.TRIAL_ID: trial_id,
                        schema.SWEEP: self.sweep,
                        schema.STATUS: schema.RUNNING,
                    },
                )
                self.runs[trial_id] = run.info.run_id
                self.unsure.discard(trial_id)
        return self.runs[trial_id]

    def _send(self, record: Record):
        trial_id = record.trial_id
        # epochs MLflow has were sent before a restore or by a dead driver
        known = self.max_epoch.get(trial_id, 0)
        metrics = [Metric(*m) for m in record.metrics if m[3] > known]
        finished = trial_id in self.finished  # a resumed sweep may end it again: leave it
        tags = [] if finished else [RunTag(*t) for t in record.tags]
        params = [Param(*p) for p in record.params]
        if not (metrics or tags or params or record.dataset or (record.end and not finished)):
            return
        run_id = self._run_id(trial_id, record.name)
        if record.dataset:  # MLflow links a dataset to a run once, however often it is sent
            self._mlflow().log_inputs(run_id, [dataset_input(record.dataset)])
        for i in range(0, max(len(metrics), 1), 900):  # MLflow's batch limit
            self._mlflow().log_batch(
                run_id,
                metrics=metrics[i : i + 900],
                params=params if i == 0 else [],
                tags=tags if i == 0 else [],
            )
        if metrics:
            self.max_epoch[trial_id] = max(m.step for m in metrics)
        if record.end and not finished:
            self._mlflow().set_terminated(run_id, record.end, record.end_time)
            if record.end == "FINISHED":
                self.finished.add(trial_id)


def drain_seconds() -> float:
    """How long a sweep whose trials have ended waits for an unreachable store: DRAIN_SECONDS,
    or $RHNSEARCH_MLFLOW_WAIT; a value that is not a number of seconds is one line."""
    text = os.environ.get(WAIT_VARIABLE, "").strip()
    try:
        seconds = float(text) if text else DRAIN_SECONDS
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise UserError(f"${WAIT_VARIABLE}={text!r}: give the seconds to wait for MLflow, e.g. 600")
    return seconds


def merged(records: list[Record]) -> Record:
    """One trial's consecutive records as one: their metrics in order, the last value of each
    param and tag, and the last end."""
    last_end = next((r for r in reversed(records) if r.end), records[-1])
    return Record(
        records[0].trial_id,
        next((r.name for r in records if r.name), None),
        last_end.end,
        next((r.dataset for r in records if r.dataset), None),
        last_end.end_time,
        [m for r in records for m in r.metrics],
        *(
            list({k: [k, v] for r in records for k, v in getattr(r, kind)}.values())
            for kind in ("params", "tags")
        ),
    )


_SENDERS: dict[Path, Sender] = {}  # one sender per journal in this process
_SENDERS_LOCK = threading.Lock()


def sender_for(run: ParentRun) -> Sender:
    """The sender of the sweep of RUN (started on first use). Its journal is in the sweep's
    local folder (`SweepPaths.local`): beside Tune's state if the storage is a directory, else
    in results/sweeps/NAME of the driver's working dir (a resumed driver's own) with a copy in
    the bucket."""
    key = run.paths.local.resolve()
    with _SENDERS_LOCK:
        if key not in _SENDERS:
            _SENDERS[key] = Sender(run, Journal(key, run.paths.journal_mirror))
        return _SENDERS[key]
