"""Trained models kept in MLflow, read back: the MLflow model `model` logged from the trial's
run (`mlflow_model.py`; its weights file artifacts/model.pt), or the older layout, the run's
artifacts `model/model.pt` and `model/config.json`. Either file is {"config": TrialConfig as
dict, "weights": state_dict[, "vocab_size"]}, loaded weights-only."""

import tempfile
from dataclasses import replace

import mlflow
import torch
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from ..errors import UserError
from ..tracking import schema

MODEL_DIR = "model"  # the logged model's name, and the older layout's artifact folder
MODEL_FILE = "model.pt"
WEIGHTS = "weights"  # the MLflow model's artifact holding MODEL_FILE


def run_of_model_uri(client: MlflowClient, uri: str) -> str:
    """The trial run of a registered model version `models:/NAME/VERSION`."""
    name, _, version = uri.removeprefix("models:/").rpartition("/")
    try:
        return client.get_model_version(name, version).run_id
    except MlflowException:
        raise UserError(
            f"no registered model version {uri} in {client.tracking_uri}: give "
            "models:/NAME/VERSION of a sweep run with --register-model NAME, "
            "or a run id"
        ) from None


def best_run_id(client: MlflowClient, experiment: str) -> str:
    """The run with the lowest best_valid_loss among the best trials of the experiment's
    sweeps (tag best_run_id of each sweep's parent run)."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        names = [e.name for e in client.search_experiments()]
        raise UserError(
            f"no MLflow experiment {experiment!r}: use one of "
            f"{', '.join(names) or 'none (run a sweep first)'}"
        )
    query = f"tags.{schema.KIND} = 'sweep'"
    sweeps = client.search_runs([found.experiment_id], query, max_results=10000)
    best = [
        client.get_run(r.data.tags[schema.BEST_RUN])
        for r in sweeps
        if schema.BEST_RUN in r.data.tags
    ]
    if not best:
        raise UserError(
            f"experiment {experiment!r} has no finished sweep with a best run: "
            "finish a sweep first (`rhnsearch sweep resume NAME`) or pass a RUN_ID"
        )
    return min(best, key=lambda r: r.data.metrics.get("best_valid_loss", float("inf"))).info.run_id


def load_model_state(client: MlflowClient, run_id: str) -> dict:
    """{"config", "weights"} of the run's kept model, in either layout."""
    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise UserError(
            f"no MLflow run {run_id!r} in {client.tracking_uri}: check the id "
            "or pass --tracking-uri"
        ) from None
    logged = client.search_logged_models(
        [run.info.experiment_id],
        f"source_run_id = '{run_id}' AND name = '{MODEL_DIR}'",
        max_results=1,
        order_by=[{"field_name": "creation_timestamp", "ascending": False}],
    )
    with tempfile.TemporaryDirectory() as out:
        try:
            if logged:
                path = mlflow.artifacts.download_artifacts(
                    f"{logged[0].artifact_location}/artifacts/{MODEL_FILE}",
                    dst_path=out,
                    tracking_uri=client.tracking_uri,
                )
            else:
                path = client.download_artifacts(run_id, f"{MODEL_DIR}/{MODEL_FILE}", out)
        except (MlflowException, OSError):
            raise UserError(
                f"run {run_id} has no kept model: a sweep keeps only its best "
                "trial's model (space keep_model: best), analyze that one with "
                "--best --experiment NAME"
            ) from None
        return torch.load(path, map_location="cpu", weights_only=True)


def load_trainer(client: MlflowClient, run_id: str, data_dir=None):
    """A `Trainer` (model, config and data) holding the run's logged weights, in eval mode."""
    from ..data import load_dataset
    from ..train import Trainer, TrialConfig

    state = load_model_state(client, run_id)
    config = replace(TrialConfig.from_dict(state["config"]), threads=0)  # all cores here
    trainer = Trainer(config, load_dataset(config.dataset, data_dir=data_dir))
    trainer.model.load_state_dict(state["weights"])
    trainer.model.eval()
    return trainer
