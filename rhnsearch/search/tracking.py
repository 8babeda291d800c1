"""MLflow records for a sweep: one parent run per sweep, one nested child run per trial.

A Ray Tune callback (`MLflowTracker`) turns trial events into records: the trial's params when
it starts, that epoch's metrics (step = epoch) and where it ran when it reports, its status
tags and end when it ends. A record is appended to a journal on disk first (a killed driver
loses none), then sent to MLflow by a background thread (`Sender`): Tune's event loop never
waits on the network. A sweep whose storage is a bucket journals on the driver's disk and
copies the records MLflow has not taken to the bucket while they wait, so that a resume on
another machine sends them. Every record can be sent twice without effect, so a request that timed
out but reached the server does no harm: a trial's run is looked up by its trial-id tag before
one is created, metrics keep their timestamps (MLflow keeps one copy of an identical metric),
epochs MLflow already has are not sent again, and runs end with their recorded end time.
"""

import itertools
import json
import logging
import os
import queue
import threading
import time
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient
from ray.tune import Callback

from ..data.recorded import dataset_input
from ..errors import first_line
from ..provenance import provenance_tags
from ..tracking_store import artifact_root
from . import storage
from .layout import PENDING_FILE, SENT_FILE, SweepPaths
from .record import ParentRun
from .trial import TrialSpec

log = logging.getLogger(__name__)
QUEUE_SIZE = 1000  # records held in memory for the sender; the journal holds them all
BATCH = 500  # records sent at once at most: one request per trial among them
BACKOFF_SECONDS = (1, 2, 5, 10, 30)  # between attempts while the store does not answer
DRAIN_SECONDS = 30  # after the trials: how long an unreachable store is waited for
MIRROR_SECONDS = 10  # while the store does not answer: how often waiting records are copied
SKIP_RESULT_KEYS = {
    "status",
    "epoch",
    "done",
    "training_iteration",
    "trial_id",
    "date",
    "timestamp",
    "pid",
    "hostname",
    "node_ip",
    "config",
    "time_since_restore",
    "iterations_since_restore",
    "checkpoint_dir_name",
    "should_checkpoint",
    "n_params",  # a param of the run (TrialSpec.mlflow_params)
}
PLACEMENT_KEYS = {
    "hostname": "host",
    "node_ip": "node_ip",
    "node_id": "node_id",
    "device": "device",
    "gpu_ids": "gpu_ids",
    "torch_version": "torch_version",
}  # result key -> run tag: where it trained


def get_experiment(client: MlflowClient, uri: str, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    return client.create_experiment(name, artifact_location=artifact_root(uri, name))


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
    """Records appended to a file and synced before they are sent, numbered; the number of
    the last record MLflow has taken is kept beside it. Once everything is sent the file goes.
    With a `mirror` (a file in the bucket), the records not sent are copied there on demand,
    and the ones found there when the journal opens are taken into the file."""

    def __init__(self, directory, mirror: str | None = None):
        self.path = Path(directory) / PENDING_FILE
        self.sent_path = Path(directory) / SENT_FILE
        self.mirror = mirror
        self.lock = threading.Lock()
        self.last = max([self.sent(), *(r["seq"] for r in self.records())])
        left = parse(storage.read_text(mirror) or "") if mirror else []
        for record in left:
            if record["seq"] > self.last:  # left by a driver on another machine
                self.append(record, record["seq"])
        self.mirrored = bool(left)

    def sent(self) -> int:
        return int(self.sent_path.read_text()) if self.sent_path.exists() else 0

    def records(self, after: int = 0) -> list[dict]:
        """The journal's records numbered above `after`."""
        found = parse(self.path.read_text()) if self.path.exists() else []
        return [r for r in found if r["seq"] > after]

    def append(self, record: dict, seq: int | None = None) -> dict:
        with self.lock:
            self.last = seq or self.last + 1
            record["seq"] = self.last
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as out:
                out.write(json.dumps(record) + "\n")
                out.flush()
                os.fsync(out.fileno())
        return record

    def copy_to_mirror(self):
        """Copy the records not sent yet to the mirror (remove it once none are left)."""
        if self.mirror is None:
            return
        pending = self.records(self.sent())
        if pending:
            storage.write_text(self.mirror, "".join(json.dumps(r) + "\n" for r in pending))
        elif self.mirrored:
            storage.delete_file(self.mirror)
        self.mirrored = bool(pending)

    def ack(self, seq: int):
        """Record that MLflow has every record up to `seq`; drop the file once it has all."""
        tmp = self.sent_path.with_suffix(".tmp")
        tmp.write_text(str(seq))
        os.replace(tmp, self.sent_path)
        with self.lock:
            if seq == self.last:
                self.path.unlink(missing_ok=True)


class Sender:
    """Sends a journal's records to MLflow in order, from a background thread, those waiting
    together: one request per trial among them, so a store that falls behind gets fewer,
    larger requests. Records come through a bounded queue; those that did not fit (or that an
    earlier driver left) are read back from the journal."""

    def __init__(self, run: ParentRun, journal: Journal):
        self.uri, self.experiment_id, self.parent = run.tracking_uri, run.experiment_id, run.run_id
        self.sweep = run.sweep
        self.journal, self.queue = journal, queue.Queue(QUEUE_SIZE)
        self.delivered = journal.sent()
        self.done = threading.Condition()
        self.runs: dict[str, str] = {}  # trial id -> run id
        self.max_epoch: dict[str, int] = {}  # trial id -> last epoch MLflow has
        self.finished: set[str] = set()  # trials whose run ended FINISHED
        self.failing_since = None  # time.monotonic() of the first failure in a row
        self.mirrored_at = 0.0  # time.monotonic() of the last copy to the journal's mirror
        self.client = None
        threading.Thread(target=self._run, name="rhnsearch-mlflow", daemon=True).start()

    def put(self, record: dict):
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
        records = [r for r in records if r["seq"] > self.delivered]
        seqs = [r["seq"] for r in records]
        if seqs != list(range(self.delivered + 1, self.delivered + 1 + len(seqs))) or (
            not records and self.delivered < self.journal.last
        ):
            records = self.journal.records(self.delivered)[:BATCH]  # the queue missed some
        return records

    def _deliver(self, records: list[dict]):
        """Send RECORDS (consecutive), one trial's at a time, then mark them sent."""
        trials: dict[str, list[dict]] = {}
        for record in records:
            trials.setdefault(record["trial_id"], []).append(record)
        for group in trials.values():
            self._attempt(lambda group=group: self._send(merged(group)))
        self.journal.ack(records[-1]["seq"])
        if self.journal.mirrored and records[-1]["seq"] == self.journal.last:
            self._mirror()  # every record is in MLflow: the copy goes
        with self.done:
            self.delivered = records[-1]["seq"]
            self.done.notify_all()

    def _attempt(self, action):
        """Run `action` until it succeeds, waiting longer after each failure."""
        for attempt in itertools.count():
            try:
                action()
                break
            except Exception as exc:  # noqa: BLE001 - network and server errors alike
                self.client = None
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                    log.warning(
                        "MLflow at %s is not answering (%s); records wait in %s and are retried",
                        self.uri,
                        first_line(exc, 160),
                        self.journal.path,
                    )
                if time.monotonic() - self.mirrored_at > MIRROR_SECONDS:
                    self._mirror()
                time.sleep(BACKOFF_SECONDS[min(attempt, len(BACKOFF_SECONDS) - 1)])
        if self.failing_since is not None:
            log.warning("MLflow at %s is back: sending the waiting records", self.uri)
            self.failing_since = None

    def _mlflow(self) -> MlflowClient:
        if self.client is None:
            self.client = MlflowClient(self.uri)
        return self.client

    def _load(self):
        """What MLflow already has of this sweep (a resumed sweep reuses its runs)."""
        for run in self._mlflow().search_runs(
            [self.experiment_id], f"tags.mlflow.parentRunId = '{self.parent}'", max_results=50000
        ):
            self._know(run)

    def _know(self, run):
        trial_id = run.data.tags.get("trial_id")
        if trial_id:
            self.runs[trial_id] = run.info.run_id
            self.max_epoch[trial_id] = int(run.data.metrics.get("epoch", 0))
            if run.info.status == "FINISHED":
                self.finished.add(trial_id)

    def _run_id(self, trial_id: str, name: str | None) -> str:
        """The trial's run: known, found by its tag (a create that timed out may have
        reached the server), or created."""
        if trial_id not in self.runs:
            found = self._mlflow().search_runs(
                [self.experiment_id],
                f"tags.mlflow.parentRunId = '{self.parent}' and tags.trial_id = '{trial_id}'",
                max_results=1,
            )
            if found:
                self._know(found[0])
            else:
                run = self._mlflow().create_run(
                    self.experiment_id,
                    run_name=name,
                    tags={
                        **provenance_tags(),
                        "mlflow.parentRunId": self.parent,
                        "kind": "trial",
                        "trial_id": trial_id,
                        "sweep": self.sweep,
                        "status": "running",
                    },
                )
                self.runs[trial_id] = run.info.run_id
        return self.runs[trial_id]

    def _send(self, record: dict):
        trial_id = record["trial_id"]
        # epochs MLflow has were sent before a restore or by a dead driver
        known = self.max_epoch.get(trial_id, 0)
        metrics = [Metric(*m) for m in record["metrics"] if m[3] > known]
        finished = trial_id in self.finished  # a resumed sweep may end it again: leave it
        tags = [] if finished else [RunTag(*t) for t in record["tags"]]
        params = [Param(*p) for p in record["params"]]
        dataset = record.get("dataset")  # absent from records journaled by older versions
        if not (metrics or tags or params or dataset or (record["end"] and not finished)):
            return
        run_id = self._run_id(trial_id, record["name"])
        if dataset:  # MLflow links a dataset to a run once, however often it is sent
            self._mlflow().log_inputs(run_id, [dataset_input(dataset)])
        for i in range(0, max(len(metrics), 1), 900):  # MLflow's batch limit
            self._mlflow().log_batch(
                run_id,
                metrics=metrics[i : i + 900],
                params=params if i == 0 else [],
                tags=tags if i == 0 else [],
            )
        if metrics:
            self.max_epoch[trial_id] = max(m.step for m in metrics)
        if record["end"] and not finished:
            self._mlflow().set_terminated(run_id, record["end"], record["end_time"])
            if record["end"] == "FINISHED":
                self.finished.add(trial_id)


def merged(records: list[dict]) -> dict:
    """One trial's consecutive records as one: their metrics in order, the last value of each
    param and tag, and the last end."""
    last_end = next((r for r in reversed(records) if r["end"]), records[-1])
    return {
        "trial_id": records[0]["trial_id"],
        "name": next((r["name"] for r in records if r["name"]), None),
        "dataset": next((r.get("dataset") for r in records if r.get("dataset")), None),
        "end": last_end["end"],
        "end_time": last_end["end_time"],
        "metrics": [m for r in records for m in r["metrics"]],
        **{
            kind: list({k: [k, v] for r in records for k, v in r[kind]}.values())
            for kind in ("params", "tags")
        },
    }


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


class MLflowTracker(Callback):
    """Ray Tune callback: the sweep's trial events as records for its sender (picklable: the
    sender is found again, or started, by `setup`)."""

    def __init__(self, run: ParentRun, cells: dict):
        self.run, self.cells = run, cells
        self._reset()

    def _reset(self):
        self.sender = None
        self.started: set[str] = set()  # trials whose params were recorded by this driver
        self.epoch: dict[str, int] = {}  # trial id -> last epoch recorded
        self.placement: dict[str, dict] = {}  # trial id -> where it ran last

    def __getstate__(self):
        return {**self.__dict__, "sender": None}

    def __setstate__(self, state: dict):
        if "run" not in state:  # pickled (tuner.pkl) by a version before the sweep's record
            paths = SweepPaths.of_folder(state.pop("experiment"), state.pop("sweep"))
            state["run"] = ParentRun(
                state.pop("tracking_uri"),
                state.pop("experiment_id"),
                state.pop("parent_run_id"),
                paths,
            )
        self.__dict__.update(state)

    def setup(self, **info):
        self._reset()
        self.sender = sender_for(self.run)

    def _record(
        self, trial_id: str, metrics=(), params=(), tags=(), end=None, name=None, dataset=None
    ):
        record = {
            "trial_id": trial_id,
            "name": name,
            "end": end,
            "dataset": dataset,
            "end_time": int(time.time() * 1000) if end else None,
            "metrics": [[m.key, m.value, m.timestamp, m.step] for m in metrics],
            "params": [[p.key, p.value] for p in params],
            "tags": [[t.key, t.value] for t in tags],
        }
        self.sender.put(self.sender.journal.append(record))

    def start_run(self, trial):
        """Record the trial's params (`TrialSpec.mlflow_params`) and dataset, once per trial
        and driver (again after a resume: the same values, which MLflow takes again without
        change)."""
        if trial.trial_id in self.started:
            return
        self.started.add(trial.trial_id)
        spec = TrialSpec.from_tune(trial.config, self.cells)
        self._record(
            trial.trial_id,
            name=f"{spec.config.arch}-d{spec.config.depth}-{trial.trial_id}",
            dataset=spec.config.dataset,
            params=[Param(k, v) for k, v in spec.mlflow_params().items()],
        )

    def on_trial_start(self, iteration, trials, trial, **info):
        self.start_run(trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.start_run(trial)
        epoch = int(result.get("epoch", result.get("training_iteration", 0)))
        if epoch <= self.epoch.get(trial.trial_id, 0):
            return  # reported again after a restore: recorded already
        self.epoch[trial.trial_id] = epoch
        now = int(time.time() * 1000)
        metrics = [
            Metric(k, float(v), now, epoch)
            for k, v in result.items()
            if k not in SKIP_RESULT_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
        metrics.append(Metric("epoch", float(epoch), now, epoch))
        placement = {tag: str(result[key]) for key, tag in PLACEMENT_KEYS.items() if key in result}
        changed = placement != self.placement.get(trial.trial_id)
        self.placement[trial.trial_id] = placement
        self._record(
            trial.trial_id,
            metrics=metrics,
            tags=[RunTag(k, v) for k, v in placement.items()] if changed else [],
        )

    def on_trial_complete(self, iteration, trials, trial, **info):
        result = trial.last_result or {}
        status = result.get("status", "running")
        tags = [RunTag("status", status if status != "running" else "stopped")]
        if status == "running":
            tags.append(RunTag("stopped_at_epoch", str(result.get("epoch", 0))))
        self.start_run(trial)
        self._record(trial.trial_id, tags=tags, end="FINISHED")

    def on_trial_error(self, iteration, trials, trial, **info):
        self.start_run(trial)
        self._record(
            trial.trial_id,
            tags=[RunTag("status", "failed"), RunTag("error", error_line(trial))],
            end="FAILED",
        )


def error_line(trial) -> str:
    """The last line of the error Ray recorded for a failed trial (the exception's own
    message, e.g. "RuntimeError: ..."), from the error file Tune writes beside the trial."""
    path = getattr(trial, "error_file", None)
    lines = Path(path).read_text().strip().splitlines() if path and Path(path).exists() else []
    return (lines[-1].strip() if lines else "the trial's worker failed")[:500]
