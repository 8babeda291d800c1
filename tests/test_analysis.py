"""Analyses of trained models (`rhnsearch analyze`): models of the real JSB smoke sweep and a
tiny HSG trained here on JSB, loaded back from MLflow; the Jacobian checked against finite
differences and the paper's carry limit (eq. 15); lesioning; the four commands end to end."""

import json
from dataclasses import asdict
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from mlflow.tracking import MlflowClient
from ray.tune import ExperimentAnalysis

from rhnsearch.analysis.checkpoint import load_trainer
from rhnsearch.analysis.gates import activity_table, gate_activity, hsg_gate_values
from rhnsearch.analysis.lesion import LESION_BIAS, lesion
from rhnsearch.analysis.mlflow_model import log_mlflow_model
from rhnsearch.analysis.sequences import example_sequences
from rhnsearch.analysis.spectrum import per_jacobian, sample_jacobians, spectra, temporal_jacobians
from rhnsearch.models import build_layer
from rhnsearch.train import CHECKPOINT_FILE, Trainer, TrialConfig

from conftest import rhnsearch_main


def finished(run) -> bool:
    return run.data.tags.get("status") in ("completed", "stopped")


@pytest.fixture(scope="module")
def smoke_models(jsb_smoke, jsb):
    """Run ids {"rhn", "dtrnn", "hsg"}: the best RHN and DT-RNN of the deepest depth the smoke
    sweep finished both at, their trained weights (Ray checkpoints) logged as model artifacts
    of their runs; and a tiny HSG trained here for 2 epochs, logged to a run of its own."""
    client = jsb_smoke.client()
    runs = [r for r in jsb_smoke.child_runs() if finished(r)]
    depth = max(
        int(r.data.params["depth"])
        for r in runs
        if r.data.params["arch"] == "rhn"
        and any(
            o.data.params["arch"] == "dtrnn" and o.data.params["depth"] == r.data.params["depth"]
            for o in runs
        )
    )
    trials = ExperimentAnalysis(str(jsb_smoke.cwd / "results" / "sweeps" / jsb_smoke.name))
    checkpoints = {t.trial_id: t.checkpoint for t in trials.trials}
    ids = {}
    for arch in ("rhn", "dtrnn"):
        run = min(
            (
                r
                for r in runs
                if r.data.params["arch"] == arch and r.data.params["depth"] == str(depth)
            ),
            key=lambda r: r.data.metrics["best_valid_loss"],
        )
        with checkpoints[run.data.tags["trial_id"]].as_directory() as directory:
            state = torch.load(Path(directory) / CHECKPOINT_FILE, weights_only=True)
        log_mlflow_model(client, run.info.run_id, state["config"], state["best_state"], jsb)
        ids[arch] = run.info.run_id
    hsg = Trainer(
        TrialConfig(
            arch="hsg", depth=3, width=16, epochs=2, lr=0.3, momentum=0.9, batch_size=32, seed=5
        ),
        jsb,
    )
    hsg.fit()
    experiment = client.create_experiment("analysis-tests")
    run = client.create_run(experiment, run_name="hsg-tiny", tags={"arch": "hsg"})
    log_mlflow_model(client, run.info.run_id, asdict(hsg.config), hsg.best_state, jsb)
    client.set_terminated(run.info.run_id)
    ids["hsg"] = run.info.run_id
    return ids


def load(jsb_smoke, data_dir, run_id):
    return load_trainer(jsb_smoke.client(), run_id, data_dir)


def test_logged_model_reproduces_its_runs_best_valid_loss(jsb_smoke, data_dir, smoke_models):
    client = jsb_smoke.client()
    for arch in ("rhn", "dtrnn"):
        trainer = load(jsb_smoke, data_dir, smoke_models[arch])
        assert trainer.config.arch == arch and not trainer.model.training
        want = client.get_run(smoke_models[arch]).data.metrics["best_valid_loss"]
        assert trainer.evaluate("valid") == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("arch", ["rhn", "hsg", "dtrnn", "dtsrnn"])
def test_jacobian_matches_finite_differences(arch):
    torch.manual_seed(0)
    layer = build_layer(arch, 5, 4, 3).double().eval()
    with torch.no_grad():
        for p in layer.parameters():
            p.uniform_(-0.8, 0.8)
    x, y = torch.randn(3, 5, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    jac = temporal_jacobians(layer, x, y)
    eps = 1e-6
    with torch.no_grad():
        for j in range(4):
            step = torch.zeros_like(y)
            step[:, j] = eps
            up, down = layer(x[None], y + step)[1], layer(x[None], y - step)[1]
            torch.testing.assert_close(jac[:, :, j], (up - down) / (2 * eps), rtol=0, atol=1e-8)
    assert jac.abs().max() > 0.05  # a real, non-trivial Jacobian


def test_carry_gates_make_every_eigenvalue_one(jsb_smoke, data_dir, smoke_models):
    """RHN paper eq. 15: transform gates closed (c = 1, t = 0) -> J = I, all eigenvalues 1,
    Geršgorin discs shrunk to the point 1; the trained gates give other eigenvalues."""
    trainer = load(jsb_smoke, data_dir, smoke_models["rhn"])
    inputs, lengths = example_sequences(trainer, 3, "valid")
    trained = spectra(*sample_jacobians(trainer, inputs, lengths, 4), "trained")
    assert (trained.eig_abs - 1).abs().min() > 1e-3
    with torch.no_grad():
        for layer in range(trainer.config.depth):
            trainer.model.layer.cell.transform_bias(layer).fill_(LESION_BIAS)
    carry = spectra(*sample_jacobians(trainer, inputs, lengths, 4), "carry")
    assert len(carry) == 3 * 4 * trainer.config.width
    for column, value in [
        ("eig_real", 1.0),
        ("eig_imag", 0.0),
        ("disc_centre", 1.0),
        ("disc_radius", 0.0),
    ]:
        np.testing.assert_allclose(carry[column], value, rtol=0, atol=1e-6)


@pytest.mark.parametrize("arch", ["rhn", "dtrnn"])
def test_eigenvalues_lie_in_the_gersgorin_discs(jsb_smoke, data_dir, smoke_models, arch):
    trainer = load(jsb_smoke, data_dir, smoke_models[arch])
    inputs, lengths = example_sequences(trainer, 2, "test")
    table = spectra(*sample_jacobians(trainer, inputs, lengths, 3), arch)
    n = trainer.config.width
    assert len(per_jacobian(table)) == len(table) // n == 6
    for _, jac in table.groupby(["sequence", "step"]):
        eig = torch.tensor(jac.eig_real.values) + 1j * torch.tensor(jac.eig_imag.values)
        centre = torch.tensor(jac.disc_centre.values, dtype=torch.complex128)
        outside = (eig[:, None] - centre[None]).abs() - torch.tensor(jac.disc_radius.values)
        assert (outside.min(1).values <= 1e-9).all()


def test_lesioning_a_closed_layer_changes_the_loss_by_nothing(jsb_smoke, data_dir, smoke_models):
    trainer = load(jsb_smoke, data_dir, smoke_models["rhn"])
    rhn, closed = trainer.model.layer.cell, trainer.config.depth - 1
    with torch.no_grad():
        rhn.transform_bias(closed).fill_(LESION_BIAS)
    weights = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    table = lesion(trainer)
    assert table.layer.tolist() == list(range(1, trainer.config.depth + 1))
    assert table.delta[closed] == pytest.approx(0.0, abs=1e-9)
    assert (table.delta.drop(closed).abs() > 1e-4).all()  # the open layers do matter
    assert table.intact_train_loss[0] == pytest.approx(trainer.evaluate("train"))
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(value, weights[key]), key  # biases restored after each lesion


def test_gate_heatmap_is_layers_by_steps(jsb_smoke, data_dir, jsb, smoke_models):
    trainer = load(jsb_smoke, data_dir, smoke_models["rhn"])
    inputs, lengths = example_sequences(trainer, 3, "valid")
    activity = gate_activity(trainer, inputs, lengths)
    assert [a.shape for a in activity] == [
        (trainer.config.depth, len(roll) - 1) for roll in jsb.valid[:3]
    ]
    assert all(((a > 0) & (a < 1)).all() for a in activity)
    table = activity_table(activity)
    assert len(table) == trainer.config.depth * sum(lengths)
    assert table.layer.max() == trainer.config.depth


def test_hsg_gate_values_cover_every_unit_and_real_step(jsb_smoke, data_dir, smoke_models):
    trainer = load(jsb_smoke, data_dir, smoke_models["hsg"])
    inputs, lengths = example_sequences(trainer, 2, "valid")
    values = hsg_gate_values(trainer, inputs, lengths)
    assert len(values) == sum(lengths) * trainer.config.width
    assert values.value.between(0, 1).all() and values.value.std() > 0


def analyze(jsb_smoke, data_dir, tmp_path, *args, check=True):
    return rhnsearch_main(
        "analyze",
        *args,
        "--tracking-uri",
        jsb_smoke.tracking_uri,
        "--data-dir",
        data_dir,
        "--out",
        tmp_path,
        "--json",
        cwd=jsb_smoke.cwd,
        check=check,
    )


def outputs_in_mlflow(jsb_smoke, proc, name: str, files: set) -> dict:
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    logged = {
        Path(a.path).name
        for a in jsb_smoke.client().list_artifacts(summary["run_id"], f"analysis/{name}")
    }
    assert files | {f"{name}.png", f"{name}.svg", "summary.json"} <= logged, logged
    return summary


def test_all_four_analyses_from_the_command_line(jsb_smoke, data_dir, smoke_models, tmp_path):
    rhn, dtrnn, hsg = smoke_models["rhn"], smoke_models["dtrnn"], smoke_models["hsg"]
    client = jsb_smoke.client()
    depth = int(client.get_run(rhn).data.params["depth"])

    gates = outputs_in_mlflow(
        jsb_smoke,
        analyze(jsb_smoke, data_dir, tmp_path, "gates", rhn, "--sequences", "4"),
        "gates",
        {"gates.csv"},
    )
    table = pd.read_csv(Path(gates["out"]) / "gates.csv")
    assert table.sequence.nunique() == 4 and table.layer.max() == depth
    assert client.get_run(rhn).data.metrics[f"gate_mean_layer{depth}"] == pytest.approx(
        gates[f"gate_mean_layer{depth}"]
    )

    lesioned = outputs_in_mlflow(
        jsb_smoke, analyze(jsb_smoke, data_dir, tmp_path, "lesion", rhn), "lesion", {"lesion.csv"}
    )
    assert len(pd.read_csv(Path(lesioned["out"]) / "lesion.csv")) == depth

    hist = outputs_in_mlflow(
        jsb_smoke,
        analyze(jsb_smoke, data_dir, tmp_path, "hsg-gates", hsg),
        "hsg-gates",
        {"hsg_gates.parquet"},
    )
    assert 0 < hist["hsg_gate_mean"] < 1

    proc = analyze(
        jsb_smoke,
        data_dir,
        tmp_path,
        "spectrum",
        rhn,
        "--compare",
        dtrnn,
        "--sequences",
        "2",
        "--steps",
        "3",
    )
    spectrum = outputs_in_mlflow(
        jsb_smoke, proc, "spectrum", {"spectrum.parquet", "spectrum_steps.csv"}
    )
    steps = pd.read_csv(Path(spectrum["out"]) / "spectrum_steps.csv")
    assert steps.model.nunique() == 2 and len(steps) == 2 * 2 * 3
    assert spectrum["compare"]["run_id"] == dtrnn
    assert 0 < spectrum["spectral_radius_mean"] and 0 < spectrum["compare"]["spectral_radius_mean"]


def test_best_model_of_the_experiment(jsb_smoke, data_dir, tmp_path):
    """By --best or by the version the sweep registered (--register-model)."""
    for which in (
        ["--best", "--experiment", "jsb_optimization"],
        [f"models:/{jsb_smoke.registered}/1"],
    ):
        proc = analyze(
            jsb_smoke, data_dir, tmp_path, "spectrum", *which, "--sequences", "1", "--steps", "2"
        )
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        assert summary["run_id"] == jsb_smoke.summary["best"]["run_id"]


def test_registered_model_loads_with_pyfunc_and_predicts_as_rhnsearch(jsb_smoke, data_dir, jsb):
    """The sweep's best, as MLflow sees it: a logged model of the best run with the run's
    metrics, the registry's version 1 with the study, cell and metrics as tags, loaded by
    `mlflow.pyfunc.load_model` (from code and a weights-only file, nothing pickled), whose
    predictions on JSB sequences are the logits of the model rhnsearch's loader gives."""
    client, best = jsb_smoke.client(), jsb_smoke.summary["best"]
    experiment = client.get_experiment_by_name("jsb_optimization")
    version = client.get_model_version(jsb_smoke.registered, "1")
    logged = client.get_logged_model(version.source.removeprefix("models:/"))  # Models tab:
    assert logged.model_id in [
        m.model_id for m in client.search_logged_models([experiment.experiment_id])
    ]
    assert version.run_id == logged.source_run_id == best["run_id"]
    assert logged.name == "model" and logged.status == "READY"
    assert {m.key: m.value for m in logged.metrics}["best_valid_loss"] == best["best_valid_loss"]
    p = best["params"]
    assert version.tags["study"] == "jsb_optimization" and version.tags["sweep"] == "smoke-jsb"
    assert version.tags["cell"] == f"{p['arch']} d{p['depth']} w{p['width']}"
    assert float(version.tags["best_valid_loss"]) == best["best_valid_loss"]
    files = [a.path for a in client.list_logged_model_artifacts(logged.model_id)]
    assert not [f for f in files if f.endswith((".pkl", ".pickle", ".cloudpickle"))], files

    mlflow.set_tracking_uri(jsb_smoke.tracking_uri)
    try:
        model = mlflow.pyfunc.load_model(f"models:/{jsb_smoke.registered}/1")
        by_run = mlflow.pyfunc.load_model(f"runs:/{best['run_id']}/model")
    finally:
        mlflow.set_tracking_uri(None)
    signature = model.metadata.signature
    assert tuple(signature.inputs.to_dict()[0]["tensor-spec"]["shape"]) == (-1, -1, 88)
    assert model.metadata.saved_input_example_info is not None
    trainer = load(jsb_smoke, data_dir, best["run_id"])
    inputs, lengths = example_sequences(trainer, 4, "test")
    batch = inputs[: min(lengths)].transpose(0, 1).numpy()  # (sequences, steps, 88)
    with torch.no_grad():
        want = trainer.model(inputs[: min(lengths)])[0].transpose(0, 1).numpy()
    got = model.predict(batch)
    assert got.shape == (4, min(lengths), 88)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(by_run.predict(batch), want, rtol=0, atol=1e-6)


def test_a_model_in_the_older_layout_still_loads(jsb, data_dir, tmp_path):
    """Runs kept before the MLflow model: `model/model.pt` and `model/config.json`."""
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    artifacts = (tmp_path / "artifacts").as_uri()  # not ./mlruns, MLflow's default: the repo's
    run = client.create_run(client.create_experiment("old-layout", artifact_location=artifacts))
    trainer = Trainer(TrialConfig(width=8, epochs=1, seed=11), jsb)
    torch.save(
        {"config": asdict(trainer.config), "weights": trainer.model.state_dict()},
        tmp_path / "model.pt",
    )
    (tmp_path / "config.json").write_text(json.dumps(asdict(trainer.config)))
    for name in ("model.pt", "config.json"):
        client.log_artifact(run.info.run_id, tmp_path / name, "model")
    loaded = load_trainer(client, run.info.run_id, data_dir)
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[key], value), key


@pytest.mark.parametrize(
    "analysis, model, message",
    [
        ("gates", "dtrnn", "gates needs an rhn or hsg model but this run's arch is dtrnn"),
        ("hsg-gates", "rhn", "hsg-gates needs an hsg model but this run's arch is rhn"),
        ("lesion", None, "has no kept model"),
        ("lesion", "models:/no-such-model/1", "no registered model version models:/no-such-"),
        ("gates", "", "give either a RUN_ID or --best --experiment NAME"),
    ],
)
def test_user_errors_are_one_line_exit_2(
    jsb_smoke, data_dir, smoke_models, tmp_path, analysis, model, message
):
    if model is None:  # a finished run whose model the sweep did not keep
        kept = set(smoke_models.values()) | {jsb_smoke.summary["best"]["run_id"]}
        run_id = next(r.info.run_id for r in jsb_smoke.child_runs() if r.info.run_id not in kept)
    else:
        run_id = smoke_models.get(model, model) or None
    proc = analyze(
        jsb_smoke, data_dir, tmp_path, analysis, *([run_id] if run_id else []), check=False
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("rhnsearch: error: ") and message in lines[-1], lines[-3:]
    assert "Traceback" not in proc.stderr
