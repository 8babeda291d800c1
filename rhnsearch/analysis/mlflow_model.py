"""A trained model as an MLflow model: a pyfunc logged from code (`pyfunc_entry.py`) with the
weights as its artifact, linked to its trial's run and metrics, registered on request.
`predict` gives the model's next-step outputs for a batch of sequences."""

import tempfile
from contextlib import contextmanager
from pathlib import Path

import mlflow
import numpy as np
import torch
from mlflow.exceptions import MlflowException
from mlflow.models import Model, ModelSignature
from mlflow.tracking import MlflowClient
from mlflow.types import Schema, TensorSpec

from .. import __version__
from ..tasks import get_task
from ..train import TrialConfig, trial_model
from .checkpoint import MODEL_DIR, MODEL_FILE, WEIGHTS

ENTRY = Path(__file__).with_name("pyfunc_entry.py")


@contextmanager
def tracking_uri(uri: str):
    """MLflow's model logging and registry look models up through the global tracking URI:
    `uri` for the block, as it was after it (unset if it was: MLflow's default, set, would
    also land in $MLFLOW_TRACKING_URI)."""
    before = mlflow.get_tracking_uri() if mlflow.tracking.is_tracking_uri_set() else None
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before)


def build(state: dict) -> torch.nn.Module:
    """The model of a saved {"config", "weights", "vocab_size"}, in eval mode on the CPU."""
    model = trial_model(TrialConfig.from_dict(state["config"]), state["vocab_size"])
    model.load_state_dict(state["weights"])
    return model.eval()


def next_step(model: torch.nn.Module, sequences) -> np.ndarray:
    """Logits (batch, time, outputs) for sequences (batch, time[, 88]): piano rolls as
    floats, word ids as integers; the logits at step t are for step t + 1."""
    x = torch.as_tensor(np.asarray(sequences))
    x = x.float() if model.embedding is None else x.long()
    with torch.no_grad():
        return model(x.transpose(0, 1))[0].transpose(0, 1).numpy()


class NextStepModel(mlflow.pyfunc.PythonModel):
    """The pyfunc: `predict(sequences)` is `next_step` of the logged model."""

    def load_context(self, context):
        state = torch.load(context.artifacts[WEIGHTS], map_location="cpu", weights_only=True)
        self.model = build(state)

    def predict(self, context, model_input: np.ndarray, params: dict | None = None) -> np.ndarray:
        # typed as an array: MLflow then keeps the logged signature, and warns of no hints
        return next_step(self.model, model_input)


def example_input(task, data, bptt: int) -> np.ndarray:
    """Two validation sequences, batch first, cut to the shorter one's length."""
    inputs, lengths = task.examples(data.split("valid"), 2, bptt)
    return inputs[: min(lengths)].transpose(0, 1).numpy()


def log_mlflow_model(client: MlflowClient, run_id: str, config: dict, weights: dict, data) -> str:
    """Log the model as the MLflow model `model` of run `run_id`, linked to the run's
    metrics at its last epoch, with a signature and an input example; returns its id."""
    cfg = TrialConfig.from_dict(config)
    state = {"config": config, "weights": weights, "vocab_size": len(getattr(data, "vocab", ()))}
    example = example_input(get_task(cfg.task), data, cfg.bptt)
    output = next_step(build(state), example)
    signature = ModelSignature(
        Schema([TensorSpec(example.dtype, (-1, -1, *example.shape[2:]))]),
        Schema([TensorSpec(output.dtype, (-1, -1, output.shape[-1]))]),
    )
    run = client.get_run(run_id)
    model = client.create_logged_model(
        run.info.experiment_id, MODEL_DIR, run_id, params=run.data.params
    )  # in the run's experiment
    with tempfile.TemporaryDirectory() as out, tracking_uri(client.tracking_uri):
        torch.save(state, Path(out) / MODEL_FILE)
        Model.log(
            None,
            name=MODEL_DIR,
            flavor=mlflow.pyfunc,
            run_id=run_id,
            python_model=str(ENTRY),
            model_id=model.model_id,
            step=int(run.data.metrics.get("epoch", 0)),
            artifacts={WEIGHTS: str(Path(out) / MODEL_FILE)},
            signature=signature,
            input_example=example,
            pip_requirements=[
                f"rhnsearch=={__version__}",
                f"torch=={torch.__version__.split('+')[0]}",
                f"mlflow=={mlflow.__version__}",
            ],
        )
    return model.model_id


def register(client: MlflowClient, model_id: str, run_id: str, name: str, tags: dict) -> str:
    """A new version of the registered model `name` (made if missing) for the logged model;
    returns the version."""
    try:
        client.create_registered_model(name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    with tracking_uri(client.tracking_uri):  # where the registry looks the model up
        return client.create_model_version(
            name,
            f"models:/{model_id}",
            run_id,
            {k: str(v) for k, v in tags.items()},
            model_id=model_id,
        ).version


def keep_model(
    client: MlflowClient,
    run_id: str,
    config: dict,
    weights: dict,
    data_dir,
    register_as: str | None = None,
    tags: dict | None = None,
) -> str:
    """Log a trial's model (`log_mlflow_model`); with `register_as`, register it with `tags`,
    its cell, its run and the run's final metrics as the version's tags. Returns its id."""
    from ..data import load_dataset

    model_id = log_mlflow_model(
        client, run_id, config, weights, load_dataset(config["dataset"], data_dir=data_dir)
    )
    if register_as:
        c, metrics = TrialConfig.from_dict(config), client.get_run(run_id).data.metrics
        cell = f"{c.arch} d{c.depth} w{c.width}" + (" tied" if c.tied else "")
        register(
            client,
            model_id,
            run_id,
            register_as,
            {
                **(tags or {}),
                "cell": cell,
                "run_id": run_id,
                **{
                    k: metrics[k]
                    for k in ("best_valid_loss", "test_loss", "best_epoch")
                    if k in metrics
                },
            },
        )
    return model_id
