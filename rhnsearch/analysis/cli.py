"""`rhnsearch analyze ...`: the papers' analyses of a trained model kept in MLflow. Each
writes a figure (PNG and SVG), its numbers (CSV or Parquet) and summary.json to
OUT/RUN_ID/NAME, and logs them to the run as artifacts analysis/NAME plus summary metrics."""
import json
import os
import sys
import time
from pathlib import Path

from ..errors import UserError


def open_run(args):
    """(client, run id, trainer holding the run's model) from RUN_ID or --best."""
    from mlflow.tracking import MlflowClient

    from ..tracking_store import check_store, resolve_tracking_uri
    from .checkpoint import best_run_id, load_trainer

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    if bool(args.run_id) == args.best:
        raise UserError("give either a RUN_ID or --best --experiment NAME")
    if args.best and not args.experiment:
        raise UserError("--best needs --experiment NAME (the sweep's experiment, e.g. "
                        "jsb_optimization)")
    uri = resolve_tracking_uri(args.tracking_uri)
    check_store(uri)
    client = MlflowClient(uri)
    run_id = best_run_id(client, args.experiment) if args.best else args.run_id
    return client, run_id, load_trainer(client, run_id, args.data_dir)


def describe(trainer, run_id: str) -> str:
    c = trainer.config
    return f"{c.arch} depth {c.depth} width {c.width} (run {run_id[:8]})"


def publish(args, client, run_id: str, name: str, fig, tables: dict, metrics: dict,
            text: str, extra: dict | None = None) -> dict:
    """Write the figure, tables and summary; log them and `metrics` to the run; report."""
    from mlflow.entities import Metric

    from ..cli import print_json

    out = Path(args.out) / run_id / name
    out.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "svg"):
        fig.savefig(out / f"{name}.{ext}", dpi=150, bbox_inches="tight")
    for file, table in tables.items():
        (table.to_parquet if file.endswith(".parquet") else table.to_csv)(out / file,
                                                                          index=False)
    metrics = {k: float(v) for k, v in metrics.items()}
    summary = {"analysis": name, "run_id": run_id, **metrics, **(extra or {}),
               "out": str(out.resolve()), "artifact_path": f"analysis/{name}"}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    client.log_artifacts(run_id, str(out), f"analysis/{name}")
    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()])
    print(f"{name}: {text}; written to {out}, logged to run {run_id} as analysis/{name}",
          file=sys.stderr, flush=True)
    if args.json:
        print_json(summary)
    return summary


def run_gates(args):
    from .gates import activity_figure, activity_table, gate_activity
    from .sequences import example_sequences

    client, run_id, trainer = open_run(args)
    inputs, lengths = example_sequences(trainer, args.sequences, args.split)
    activity = gate_activity(trainer, inputs, lengths)
    table = activity_table(activity)
    means = table.groupby("layer").mean_gate.mean()
    fig = activity_figure(activity, f"Transform-gate activity, {describe(trainer, run_id)}, "
                          f"{len(activity)} {args.split} sequences")
    publish(args, client, run_id, "gates", fig, {"gates.csv": table},
            {f"gate_mean_layer{k}": v for k, v in means.items()},
            f"{describe(trainer, run_id)}: mean transform gate per layer 1..{len(means)} "
            + " ".join(f"{v:.3f}" for v in means))


def run_lesion(args):
    from .lesion import lesion, lesion_figure

    client, run_id, trainer = open_run(args)
    table = lesion(trainer)
    unit = trainer.task.loss_unit
    fig = lesion_figure(table, f"Lesioning, {describe(trainer, run_id)}", unit)
    metrics = {f"lesion_delta_layer{r.layer}": r.delta for r in table.itertuples()}
    metrics["lesion_intact_train_loss"] = table.intact_train_loss.iloc[0]
    publish(args, client, run_id, "lesion", fig, {"lesion.csv": table}, metrics,
            f"{describe(trainer, run_id)}: intact training loss "
            f"{table.intact_train_loss.iloc[0]:.4f}, change per lesioned layer 1..{len(table)} "
            + " ".join(f"{d:+.4f}" for d in table.delta))


def run_hsg_gates(args):
    from .gates import hsg_figure, hsg_gate_values
    from .sequences import example_sequences

    client, run_id, trainer = open_run(args)
    inputs, lengths = example_sequences(trainer, args.sequences, args.split)
    values = hsg_gate_values(trainer, inputs, lengths)
    g = values["value"]
    metrics = {"hsg_gate_mean": g.mean(), "hsg_gate_median": g.median(),
               "hsg_gate_above_half": (g > 0.5).mean()}
    fig = hsg_figure(values, f"HSG gate values, {describe(trainer, run_id)}")
    publish(args, client, run_id, "hsg-gates", fig, {"hsg_gates.parquet": values}, metrics,
            f"{describe(trainer, run_id)}: {len(g)} gate values, mean {g.mean():.3f}, median "
            f"{g.median():.3f}, {100 * (g > 0.5).mean():.1f}% above 0.5")


def run_spectrum(args):
    import pandas as pd

    from .checkpoint import load_trainer
    from .sequences import example_sequences
    from .spectrum import per_jacobian, radius_stats, sample_jacobians, spectra, spectrum_figure

    client, run_id, trainer = open_run(args)
    models = [(run_id, trainer)]
    if args.compare:
        other = load_trainer(client, args.compare, args.data_dir)
        if other.config.dataset != trainer.config.dataset:
            raise UserError(f"--compare run {args.compare} is a {other.config.dataset} model "
                            f"but run {run_id} is a {trainer.config.dataset} one: compare "
                            "models of the same dataset")
        models.append((args.compare, other))
    tables = []
    for rid, model in models:
        inputs, lengths = example_sequences(model, args.sequences, args.split)
        jacobians, index = sample_jacobians(model, inputs, lengths, args.steps)
        tables.append(spectra(jacobians, index, describe(model, rid)))
    table = pd.concat(tables, ignore_index=True)
    steps = per_jacobian(table)
    stats = [radius_stats(steps[steps.model == describe(m, rid)]) for rid, m in models]
    text = "; ".join(f"{describe(m, rid)}: spectral radius mean {s['spectral_radius_mean']:.3f}"
                     f" median {s['spectral_radius_median']:.3f} range "
                     f"{s['spectral_radius_min']:.3f}..{s['spectral_radius_max']:.3f} over "
                     f"{s['jacobians']} steps" for (rid, m), s in zip(models, stats))
    extra = {"compare": {"run_id": args.compare, **stats[1]}} if args.compare else None
    publish(args, client, run_id, "spectrum", spectrum_figure(table, steps),
            {"spectrum.parquet": table, "spectrum_steps.csv": steps}, stats[0], text, extra)


ANALYSES = {
    "gates": (run_gates, "mean transform-gate activity per layer over time (RHN Fig. 5b)",
              "Heatmaps (highway layers x time steps) of the transform gates averaged over "
              "units, one per sequence, for an rhn or hsg model."),
    "lesion": (run_lesion, "training-loss change when each highway layer only carries",
               "For each highway layer of an rhn or hsg model, set its transform-gate bias "
               "to -100 (the layer carries its input) and measure the training-set loss "
               "change: bar chart and table."),
    "hsg-gates": (run_hsg_gates, "histogram of the HSG gate values (HSG paper Fig. 7)",
                  "Histogram of every HSG gate value g at the real steps of a few sequences, "
                  "for an hsg model."),
    "spectrum": (run_spectrum, "eigenvalues and Gersgorin discs of dy[t]/dy[t-1]",
                 "Eigenvalues of the temporal Jacobian dy[t]/dy[t-1] (autograd) at sampled "
                 "steps, in the complex plane with the Jacobians' Gersgorin discs and the "
                 "unit circle, and spectral radius statistics; --compare draws a second run "
                 "beside it (e.g. a dtrnn of the same depth)."),
}


def add_analyze(sub):
    p = sub.add_parser("analyze", help="gate activity, lesioning, HSG gates or Jacobian "
                       "spectrum of a trained model",
                       description="Analyses of a trained model kept in MLflow (a sweep keeps "
                       "its best trial's model): figures and numbers go to OUT/RUN_ID/NAME "
                       "and to the run's artifacts analysis/NAME.")
    asub = p.add_subparsers(dest="analysis", required=True)
    for name, (run, text, description) in ANALYSES.items():
        q = asub.add_parser(name, help=text, description=description)
        q.add_argument("run_id", nargs="?", metavar="RUN_ID",
                       help="MLflow run id of a trial with a model artifact")
        q.add_argument("--best", action="store_true",
                       help="analyze the best trial of --experiment's sweeps instead")
        q.add_argument("--experiment", help="MLflow experiment for --best, e.g. "
                       "jsb_optimization")
        q.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///"
                       "results/mlflow.db)")
        q.add_argument("--data-dir", help="data dir (default: $RHNSEARCH_DATA_DIR or user "
                       "cache)")
        q.add_argument("--out", default="results/analysis",
                       help=f"write to OUT/RUN_ID/{name} (default results/analysis)")
        q.add_argument("--json", action="store_true", help="print the summary as one JSON "
                       "line")
        if name != "lesion":
            q.add_argument("--sequences", type=int, default=4,
                           help="how many sequences to run (default 4)")
            q.add_argument("--split", choices=["train", "valid", "test"], default="valid",
                           help="where the sequences come from (default valid)")
        if name == "spectrum":
            q.add_argument("--steps", type=int, default=8,
                           help="time steps sampled per sequence (default 8)")
            q.add_argument("--compare", metavar="RUN_ID",
                           help="a second run to draw beside it, e.g. a dtrnn of the same "
                           "depth")
        q.set_defaults(run=run)
