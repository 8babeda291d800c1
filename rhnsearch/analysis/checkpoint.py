"""Trained models as MLflow artifacts of their trial's run: `model/model.pt`
({"config": TrialConfig as dict, "weights": state_dict}, weights-only loadable) and
`model/config.json`."""
import json
import tempfile
from dataclasses import replace
from pathlib import Path

import torch
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from ..errors import UserError

MODEL_DIR = "model"
MODEL_FILE = "model.pt"


def log_model(client: MlflowClient, run_id: str, config: dict, weights: dict):
    """Log a trial's config and weights as the `model` artifact of its run."""
    with tempfile.TemporaryDirectory() as out:
        torch.save({"config": config, "weights": weights}, Path(out) / MODEL_FILE)
        (Path(out) / "config.json").write_text(json.dumps(config, indent=1))
        client.log_artifacts(run_id, out, MODEL_DIR)


def best_run_id(client: MlflowClient, experiment: str) -> str:
    """The run with the lowest best_valid_loss among the best trials of the experiment's
    sweeps (tag best_run_id of each sweep's parent run)."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        names = [e.name for e in client.search_experiments()]
        raise UserError(f"no MLflow experiment {experiment!r}: use one of "
                        f"{', '.join(names) or 'none (run a sweep first)'}")
    sweeps = client.search_runs([found.experiment_id], "tags.kind = 'sweep'",
                                max_results=10000)
    best = [client.get_run(r.data.tags["best_run_id"]) for r in sweeps
            if "best_run_id" in r.data.tags]
    if not best:
        raise UserError(f"experiment {experiment!r} has no finished sweep with a best run: "
                        "finish a sweep first (`rhnsearch sweep resume NAME`) or pass a RUN_ID")
    return min(best, key=lambda r: r.data.metrics.get("best_valid_loss", float("inf"))).info.run_id


def load_model_state(client: MlflowClient, run_id: str) -> dict:
    """{"config", "weights"} of the run's model artifact."""
    try:
        client.get_run(run_id)
    except MlflowException:
        raise UserError(f"no MLflow run {run_id!r} in {client.tracking_uri}: check the id "
                        "or pass --tracking-uri") from None
    with tempfile.TemporaryDirectory() as out:
        try:
            path = client.download_artifacts(run_id, f"{MODEL_DIR}/{MODEL_FILE}", out)
        except (MlflowException, OSError):
            raise UserError(f"run {run_id} has no {MODEL_DIR}/{MODEL_FILE} artifact: a sweep "
                            "keeps only its best trial's model (space keep_model: best), "
                            "analyze that one with --best --experiment NAME") from None
        return torch.load(path, map_location="cpu", weights_only=True)


def load_trainer(client: MlflowClient, run_id: str, data_dir=None):
    """A `Trainer` (model, config and data) holding the run's logged weights, in eval mode."""
    from ..data import load_dataset
    from ..train import Trainer, TrialConfig

    state = load_model_state(client, run_id)
    config = replace(TrialConfig.from_dict(state["config"]), threads=0)  # all cores here
    trainer = Trainer(config, load_dataset(config.dataset, data_dir))
    trainer.model.load_state_dict(state["weights"])
    trainer.model.eval()
    return trainer
