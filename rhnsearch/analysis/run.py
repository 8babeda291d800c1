"""The papers' analyses of a trained model kept in MLflow, each as an `Analysis` (a figure, its
numbers and summary metrics), published to OUT/RUN_ID/NAME and to the run's artifacts
analysis/NAME with the summary metrics."""

import json
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from ..errors import UserError
from ..tracking.uris import existing_store
from .checkpoint import best_run_id, load_trainer, run_of_model_uri
from .gates import activity_figure, activity_table, gate_activity, hsg_figure, hsg_gate_values
from .lesion import lesion, lesion_figure
from .sequences import example_sequences
from .spectrum import per_jacobian, radius_stats, sample_jacobians, spectra, spectrum_figure


@dataclass
class Analysis:
    name: str
    figure: Figure
    tables: dict  # file name (.csv or .parquet) -> DataFrame
    metrics: dict  # summary numbers, logged to the run
    text: str  # one line for people
    extra: dict | None = None


def open_run(
    run_id: str | None,
    best: bool = False,
    experiment: str | None = None,
    tracking_uri: str | None = None,
    data_dir=None,
):
    """(client, run id, trainer holding the run's model) of RUN_ID (or the run of
    models:/NAME/VERSION), or of the best run of the experiment's sweeps with `best`."""
    if bool(run_id) == best:
        raise UserError("give either a RUN_ID or --best --experiment NAME")
    if best and not experiment:
        raise UserError(
            "--best needs --experiment NAME (the sweep's experiment, e.g. jsb_optimization)"
        )
    client = MlflowClient(existing_store(tracking_uri))
    if best:
        run_id = best_run_id(client, experiment)
    elif run_id.startswith("models:/"):
        run_id = run_of_model_uri(client, run_id)
    return client, run_id, load_trainer(client, run_id, data_dir)


def describe(trainer, run_id: str) -> str:
    c = trainer.config
    return f"{c.arch} depth {c.depth} width {c.width} (run {run_id[:8]})"


def gates(trainer, run_id: str, sequences: int = 4, split: str = "valid") -> Analysis:
    """Mean transform-gate activity per layer over time (RHN paper, Figure 5b)."""
    inputs, lengths = example_sequences(trainer, sequences, split)
    activity = gate_activity(trainer, inputs, lengths)
    table = activity_table(activity)
    means = table.groupby("layer").mean_gate.mean()
    fig = activity_figure(
        activity,
        f"Transform-gate activity, {describe(trainer, run_id)}, {len(activity)} {split} sequences",
    )
    return Analysis(
        "gates",
        fig,
        {"gates.csv": table},
        {f"gate_mean_layer{k}": v for k, v in means.items()},
        f"{describe(trainer, run_id)}: mean transform gate per layer "
        f"1..{len(means)} " + " ".join(f"{v:.3f}" for v in means),
    )


def lesioning(trainer, run_id: str) -> Analysis:
    """Training-loss change when each highway layer only carries its input."""
    table = lesion(trainer)
    fig = lesion_figure(table, f"Lesioning, {describe(trainer, run_id)}", trainer.task.loss_unit)
    metrics = {f"lesion_delta_layer{r.layer}": r.delta for r in table.itertuples()}
    metrics["lesion_intact_train_loss"] = table.intact_train_loss.iloc[0]
    return Analysis(
        "lesion",
        fig,
        {"lesion.csv": table},
        metrics,
        f"{describe(trainer, run_id)}: intact training loss "
        f"{table.intact_train_loss.iloc[0]:.4f}, change per lesioned layer "
        f"1..{len(table)} " + " ".join(f"{d:+.4f}" for d in table.delta),
    )


def hsg_gates(trainer, run_id: str, sequences: int = 4, split: str = "valid") -> Analysis:
    """Histogram of the HSG gate values (HSG paper, Figure 7)."""
    inputs, lengths = example_sequences(trainer, sequences, split)
    values = hsg_gate_values(trainer, inputs, lengths)
    g = values["value"]
    metrics = {
        "hsg_gate_mean": g.mean(),
        "hsg_gate_median": g.median(),
        "hsg_gate_above_half": (g > 0.5).mean(),
    }
    fig = hsg_figure(values, f"HSG gate values, {describe(trainer, run_id)}")
    return Analysis(
        "hsg-gates",
        fig,
        {"hsg_gates.parquet": values},
        metrics,
        f"{describe(trainer, run_id)}: {len(g)} gate values, mean {g.mean():.3f}, "
        f"median {g.median():.3f}, {100 * (g > 0.5).mean():.1f}% above 0.5",
    )


def spectrum(
    trainer,
    run_id: str,
    sequences: int = 4,
    split: str = "valid",
    steps: int = 8,
    compare: tuple | None = None,
) -> Analysis:
    """Eigenvalues and Geršgorin discs of dy[t]/dy[t-1]; `compare` = (run id, trainer) of a
    second model of the same dataset, drawn beside it."""
    models = [(run_id, trainer)]
    if compare:
        other_id, other = compare
        if other.config.dataset != trainer.config.dataset:
            raise UserError(
                f"--compare run {other_id} is a {other.config.dataset} model but "
                f"run {run_id} is a {trainer.config.dataset} one: compare models "
                "of the same dataset"
            )
        models.append(compare)
    tables = []
    for rid, model in models:
        inputs, lengths = example_sequences(model, sequences, split)
        jacobians, index = sample_jacobians(model, inputs, lengths, steps)
        tables.append(spectra(jacobians, index, describe(model, rid)))
    table = pd.concat(tables, ignore_index=True)
    per_step = per_jacobian(table)
    stats = [radius_stats(per_step[per_step.model == describe(m, rid)]) for rid, m in models]
    text = "; ".join(
        f"{describe(m, rid)}: spectral radius mean {s['spectral_radius_mean']:.3f}"
        f" median {s['spectral_radius_median']:.3f} range "
        f"{s['spectral_radius_min']:.3f}..{s['spectral_radius_max']:.3f} over "
        f"{s['jacobians']} steps"
        for (rid, m), s in zip(models, stats)
    )
    extra = {"compare": {"run_id": compare[0], **stats[1]}} if compare else None
    return Analysis(
        "spectrum",
        spectrum_figure(table, per_step),
        {"spectrum.parquet": table, "spectrum_steps.csv": per_step},
        stats[0],
        text,
        extra,
    )


def publish(analysis: Analysis, client: MlflowClient, run_id: str, out) -> dict:
    """Write the figure (PNG and SVG), tables and summary.json to OUT/RUN_ID/NAME; log them
    as the run's artifacts analysis/NAME and the metrics to the run; return the summary."""
    name = analysis.name
    directory = Path(out) / run_id / name
    directory.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "svg"):
        analysis.figure.savefig(directory / f"{name}.{ext}", dpi=150, bbox_inches="tight")
    for file, table in analysis.tables.items():
        (table.to_parquet if file.endswith(".parquet") else table.to_csv)(
            directory / file, index=False
        )
    metrics = {k: float(v) for k, v in analysis.metrics.items()}
    summary = {
        "analysis": name,
        "run_id": run_id,
        **metrics,
        **(analysis.extra or {}),
        "out": str(directory.resolve()),
        "artifact_path": f"analysis/{name}",
    }
    (directory / "summary.json").write_text(json.dumps(summary, indent=1))
    client.log_artifacts(run_id, str(directory), f"analysis/{name}")
    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()])
    return summary
