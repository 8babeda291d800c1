"""MLflow records for a sweep: one parent run per sweep, one nested child run per trial.

Everything is logged from the sweep driver by a Ray Tune callback, batched per epoch (no
per-step calls): params when a trial starts, that epoch's metrics (step = epoch) when it
reports, its final status as a tag when it ends. Records that cannot reach the tracking
server are kept in a journal on disk and retried; a trial restored from a checkpoint keeps
its one run.
"""
import json
import logging
import os
import time
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient
from ray.tune import Callback

from ..tracking_store import artifact_root
from .trainable import trial_config

log = logging.getLogger("rhnsearch")
RETRY_SECONDS = 30  # while the store is down, try it again at most this often
SKIP_RESULT_KEYS = {"status", "epoch", "done", "training_iteration", "trial_id", "date",
                    "timestamp", "pid", "hostname", "node_ip", "config", "time_since_restore",
                    "iterations_since_restore", "checkpoint_dir_name", "should_checkpoint",
                    "params"}


def get_experiment(client: MlflowClient, uri: str, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    return client.create_experiment(name, artifact_location=artifact_root(uri, name))


def flat_params(config: dict) -> dict:
    """A trial's Tune config as plain MLflow params (the cell flattened in)."""
    params = {k: v for k, v in config.items() if k not in ("cell", "data_dir")}
    params.update(config.get("cell", {}))
    if "params" in params:
        params["n_params"] = params.pop("params")
    return params


class MLflowTracker(Callback):
    """Ray Tune callback writing the sweep's nested MLflow runs (picklable: no live client).

    Every record goes through a FIFO of pending records; a trial's run is created by its
    first record, so a trial that starts while the store is down is recorded once it is
    back. While records are pending they are also appended to a journal in the sweep dir
    (one JSON line each), so that nothing is lost if the driver dies; `sweep resume` sends
    what the journal holds and MLflow does not.
    """

    def __init__(self, tracking_uri: str, experiment_id: str, parent_run_id: str,
                 sweep_name: str, artifact_dir: str):
        self.tracking_uri, self.experiment_id = tracking_uri, experiment_id
        self.parent_run_id, self.sweep_name = parent_run_id, sweep_name
        self.artifact_dir = artifact_dir
        self._reset()

    def _reset(self):
        self._client = None
        self.runs: dict[str, str | None] = {}  # trial id -> run id (None: not created yet)
        self.logged_epoch: dict[str, int] = {}  # trial id -> last epoch sent or pending
        self.finished: set[str] = set()         # trials whose run ended, sent or pending
        self.pending: list[dict] = []           # records not yet sent, oldest first
        self.journaled = 0                      # how many of them are in the journal
        self.retry_at = 0.0                     # time.monotonic() of the next attempt
        self.warned = False

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_client"] = None
        return state

    @property
    def client(self) -> MlflowClient:
        if self._client is None:
            self._client = MlflowClient(self.tracking_uri)
        return self._client

    @property
    def pending_path(self) -> Path:
        return Path(self.artifact_dir) / "mlflow_pending.jsonl"

    # -- sending, with retry -------------------------------------------------------------
    def _send(self, trial_id, metrics=(), params=(), tags=(), end=None, name=None):
        """Queue a record (JSON-able: it may be saved) and send what the store takes."""
        self.pending.append({"trial_id": trial_id, "name": name, "end": end,
                             "metrics": [[m.key, m.value, m.timestamp, m.step]
                                         for m in metrics],
                             "params": [[p.key, p.value] for p in params],
                             "tags": [[t.key, t.value] for t in tags]})
        self.flush()

    def _create_run(self, trial_id: str, name: str | None) -> str:
        run = self.client.create_run(self.experiment_id, run_name=name, tags={
            "mlflow.parentRunId": self.parent_run_id, "kind": "trial", "trial_id": trial_id,
            "sweep": self.sweep_name, "status": "running"})
        self.runs[trial_id] = run.info.run_id
        return run.info.run_id

    def _journal(self):
        """Append the pending records not yet on disk to the journal, synced."""
        if self.journaled < len(self.pending):
            self.pending_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.pending_path, "a") as out:
                out.writelines(json.dumps(r) + "\n" for r in self.pending[self.journaled:])
                out.flush()
                os.fsync(out.fileno())
            self.journaled = len(self.pending)

    def flush(self, force: bool = False) -> bool:
        """Send what is pending, oldest first. If the store is unreachable, keep the rest in
        the journal and wait RETRY_SECONDS before trying again (unless `force`)."""
        if self.pending and not force and time.monotonic() < self.retry_at:
            self._journal()
            return False
        had_pending = bool(self.pending)
        while self.pending:
            record = self.pending[0]
            try:
                run_id = (self.runs.get(record["trial_id"])
                          or self._create_run(record["trial_id"], record["name"]))
                metrics = [Metric(*m) for m in record["metrics"]]
                for i in range(0, max(len(metrics), 1), 900):  # MLflow's batch limit
                    first = i == 0
                    self.client.log_batch(
                        run_id, metrics=metrics[i:i + 900],
                        params=[Param(*p) for p in record["params"]] if first else [],
                        tags=[RunTag(*t) for t in record["tags"]] if first else [])
                if record["end"]:
                    self.client.set_terminated(run_id, record["end"])
            except Exception as exc:  # network or server errors: keep and retry later
                if not self.warned:
                    log.warning("MLflow at %s is not answering (%s); keeping %d record(s) "
                                "in %s and retrying every %d s", self.tracking_uri,
                                str(exc).splitlines()[0][:160], len(self.pending),
                                self.pending_path, RETRY_SECONDS)
                    self.warned = True
                self.retry_at = time.monotonic() + RETRY_SECONDS
                self._journal()
                return False
            self.pending.pop(0)
            self.journaled = max(self.journaled - 1, 0)
        if had_pending:
            self.pending_path.unlink(missing_ok=True)
            self.journaled = 0
        if self.warned:
            log.warning("MLflow at %s is back: all buffered records sent", self.tracking_uri)
            self.warned = False
        return True

    # -- run bookkeeping -----------------------------------------------------------------
    def setup(self, **info):
        """Find the child runs of this sweep already in MLflow (a resumed sweep reuses them)
        and the records an earlier driver could not send."""
        self._reset()
        for run in self.client.search_runs(
                [self.experiment_id], f"tags.mlflow.parentRunId = '{self.parent_run_id}'",
                max_results=50000):
            trial_id = run.data.tags.get("trial_id")
            if trial_id:
                self.runs[trial_id] = run.info.run_id
                self.logged_epoch[trial_id] = int(run.data.metrics.get("epoch", 0))
                if run.info.status == "FINISHED":
                    self.finished.add(trial_id)
        for record in self._read_journal():
            trial_id = record["trial_id"]
            epochs = [step for key, _, _, step in record["metrics"] if key == "epoch"]
            if epochs and max(epochs) <= self.logged_epoch.get(trial_id, 0):
                record["metrics"] = []  # sent before the earlier driver stopped
            self.runs.setdefault(trial_id, None)
            self.logged_epoch[trial_id] = max([self.logged_epoch.get(trial_id, 0), *epochs])
            if record["end"] == "FINISHED":
                self.finished.add(trial_id)
            self.pending.append(record)
        self.journaled = len(self.pending)
        self.flush(force=True)

    def _read_journal(self) -> list[dict]:
        """The journal's records; a last line cut short by a dying driver is skipped."""
        if not self.pending_path.exists():
            return []
        records = []
        for line in self.pending_path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
        return records

    def start_run(self, trial):
        """Queue the trial's run and params, once per trial (not again on a retry)."""
        if trial.trial_id in self.runs:
            return
        self.runs[trial.trial_id] = None
        self.logged_epoch[trial.trial_id] = 0
        config = trial.config
        cell = config.get("cell", {})
        cfg = trial_config(config)
        params = {**{k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
                  **flat_params(config)}
        self._send(trial.trial_id, name=f"{cell.get('arch')}-d{cell.get('depth')}-"
                   f"{trial.trial_id}", params=[Param(k, str(v)[:6000]) for k, v in
                                               sorted(params.items())])

    def on_trial_start(self, iteration, trials, trial, **info):
        self.start_run(trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.start_run(trial)
        epoch = int(result.get("epoch", result.get("training_iteration", 0)))
        if epoch <= self.logged_epoch.get(trial.trial_id, 0):
            return  # already logged before a restore: no duplicate steps
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, epoch) for k, v in result.items()
                   if k not in SKIP_RESULT_KEYS and isinstance(v, (int, float))
                   and not isinstance(v, bool)]
        metrics.append(Metric("epoch", float(epoch), now, epoch))
        self.logged_epoch[trial.trial_id] = epoch
        self._send(trial.trial_id, metrics=metrics)

    def _end(self, trial, tags, end: str):
        """Queue the trial's final tags and end its run. A trial that finished before a
        driver died may be completed again by the resumed sweep: its run is left as it was
        (a failed one is retried by the resume, and ends again)."""
        if trial.trial_id in self.finished:
            return
        if end == "FINISHED":
            self.finished.add(trial.trial_id)
        self.start_run(trial)
        self._send(trial.trial_id, tags=tags, end=end)

    def on_trial_complete(self, iteration, trials, trial, **info):
        result = trial.last_result or {}
        status = result.get("status", "running")
        tags = [RunTag("status", status if status != "running" else "stopped")]
        if status == "running":
            tags.append(RunTag("stopped_at_epoch", str(result.get("epoch", 0))))
        self._end(trial, tags, "FINISHED")

    def on_trial_error(self, iteration, trials, trial, **info):
        error = str(getattr(trial, "error_msg", "") or "worker error").splitlines()
        self._end(trial, [RunTag("status", "failed"),
                          RunTag("error", (error[-1] if error else "")[:500])], "FAILED")

    def on_experiment_end(self, trials, **info):
        if self.flush(force=True):
            return
        log.warning("MLflow at %s stayed unreachable: %d record(s) could not be sent; they "
                    "are saved in %s and sent by `rhnsearch sweep resume %s`",
                    self.tracking_uri, len(self.pending), self.pending_path, self.sweep_name)
