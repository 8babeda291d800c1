"""Trainer: real JSB and ptb-sample runs, seeds, divergence, resume, lr schedule, CLI."""

import dataclasses
import json
import math
import subprocess
import sys

import pytest
import torch

from rhnsearch.errors import UserError
from rhnsearch.train import Trainer, TrialConfig, epoch_reports


def small(**kw):
    base = dict(
        dataset="jsb",
        arch="rhn",
        depth=2,
        width=24,
        epochs=2,
        lr=0.3,
        momentum=0.9,
        batch_size=32,
        threads=1,
        seed=3,
    )
    return TrialConfig(**{**base, **kw})


def losses(history):
    return [(m["train_loss"], m["valid_loss"]) for m in history]


def test_jsb_loss_falls_and_metrics_reach_the_callback(jsb):
    seen = []
    trainer = Trainer(small(epochs=3, drop_i=0.2), jsb)
    result = trainer.fit(seen.append)
    assert [m["epoch"] for m in seen] == [1, 2, 3]
    assert [m["status"] for m in seen] == ["running", "running", "completed"]
    for key in ["train_loss", "valid_loss", "epoch_seconds", "steps_per_sec", "grad_norm", "lr"]:
        assert all(math.isfinite(m[key]) for m in seen), key
    assert seen[-1]["valid_loss"] < seen[0]["valid_loss"] < 88 * math.log(2)
    assert result["status"] == "completed" and math.isfinite(result["test_loss"])
    assert result["best_valid_loss"] == min(m["valid_loss"] for m in seen)
    trainer.model.load_state_dict(trainer.best_state)  # the training objective it reached:
    assert result["best_train_loss"] == trainer.evaluate("train")  # whole set, no dropout


@pytest.mark.slow  # 30 epochs of a width-128 RHN
def test_defaults_train_a_jsb_rhn_within_30_epochs(jsb):
    """Only arch, depth and width given: the defaults reach the band where the JSB models
    learn the chorales' structure (a model of the keys' marginal frequencies ends near 11)."""
    config = TrialConfig(arch="rhn", depth=2, width=128, threads=1)
    assert config.epochs <= 30
    assert Trainer(config, jsb).fit()["best_valid_loss"] <= 8.8


def test_same_seed_same_losses_other_seed_differs(jsb):
    a = Trainer(small(drop_i=0.2, drop_h=0.2), jsb)
    a.fit()
    b = Trainer(small(drop_i=0.2, drop_h=0.2), jsb)
    b.fit()
    c = Trainer(small(drop_i=0.2, drop_h=0.2, seed=4), jsb)
    c.fit()
    assert losses(a.history) == losses(b.history)
    assert losses(a.history) != losses(c.history)


def test_resume_from_checkpoint_equals_uninterrupted_run(jsb, tmp_path):
    cfg = small(epochs=3, drop_i=0.3, drop_h=0.2, drop_o=0.2)
    full = Trainer(cfg, jsb)
    full_result = full.fit()
    first = Trainer(cfg, jsb)
    first.run_epoch()
    first.save(tmp_path)
    resumed = Trainer(cfg, jsb).load(tmp_path)
    assert resumed.epoch == 1
    result = resumed.fit()
    assert losses(resumed.history) == losses(full.history)
    assert result["test_loss"] == full_result["test_loss"]


def test_a_checkpoints_best_weights_are_its_best_epochs_on_the_cpu(jsb, tmp_path):
    """`Trainer.best_weights`: what the sweep keeps as its best model (sweep/close.py): the
    config and the weights of the best valid epoch, not the latest; before any epoch, the
    latest."""
    cfg = small(epochs=4, lr=2.0)
    trainer = Trainer(cfg, jsb)
    trainer.save(tmp_path)
    config, weights = Trainer.best_weights(tmp_path)
    assert config == dataclasses.asdict(cfg)
    latest = trainer.model.state_dict()
    assert all(torch.equal(weights[k], latest[k].cpu()) for k in latest)
    for _ in range(4):
        trainer.run_epoch()
    trainer.save(tmp_path)
    _, weights = Trainer.best_weights(tmp_path)
    assert weights.keys() == trainer.best_state.keys()
    assert all(torch.equal(weights[k], trainer.best_state[k].cpu()) for k in weights)
    assert all(w.device.type == "cpu" for w in weights.values())
    assert (trainer.best_epoch, trainer.epoch) == (2, 4)  # lr 2: the latest is not the best
    latest = trainer.model.state_dict()
    assert any(not torch.equal(weights[k], latest[k].cpu()) for k in weights)


def test_a_trial_restored_from_its_last_epoch_still_ends_on_its_final_result(jsb, tmp_path):
    """The trainable's reports (`epoch_reports`): one per epoch, the last with its end; a
    trainer restored from the checkpoint of its last epoch (a resume can restore that one in
    place of an earlier: sweep/checkpoints.py) reports that epoch again with its end, rather
    than nothing, which left the trial's run tagged stopped at the epoch before (seen in CI)."""
    cfg = small(epochs=2)
    trainer = Trainer(cfg, jsb)
    reports = list(epoch_reports(trainer))
    assert [(r["epoch"], r["status"]) for r in reports] == [(1, "running"), (2, "completed")]
    assert "test_loss" not in reports[0] and math.isfinite(reports[-1]["test_loss"])
    trainer.save(tmp_path)
    restored = Trainer(cfg, jsb).load(tmp_path)
    (again,) = epoch_reports(restored)
    assert again == reports[-1]  # the same epoch, status and test numbers
    half = Trainer(cfg, jsb)
    next(epoch_reports(half))
    half.save(tmp_path)
    resumed = [r["epoch"] for r in epoch_reports(Trainer(cfg, jsb).load(tmp_path))]
    assert resumed == [2]


def test_divergence_is_a_result_not_an_exception(jsb):
    seen = []
    trainer = Trainer(
        small(arch="dtrnn", depth=6, lr=500.0, momentum=0.99, clip=0, init_scale=1.0, epochs=5), jsb
    )
    result = trainer.fit(seen.append)
    assert result["status"] == "diverged"
    assert seen[-1]["status"] == "diverged" and len(seen) < 5
    assert math.isfinite(result["train_loss"])


def test_loss_per_window_is_the_authors_sum_over_a_windows_steps(ptb_sample):
    """loss_per=window descends the loss summed over a window's steps and averaged over the
    batch (the RHN authors' PTB cost): one plain SGD step at lr L moves the weights as a
    per-step-mean step at lr L * T, T the window's length."""
    base = dict(
        dataset="ptb-sample",
        arch="rhn",
        depth=2,
        width=16,
        epochs=1,
        bptt=400,
        batch_size=4,
        train_fraction=0.02,
        momentum=0.0,
        clip=0.0,
        threads=1,
        seed=1,
    )
    window = Trainer(TrialConfig(**base, lr=0.01, loss_per="window"), ptb_sample)
    ((x, _, _),) = list(window._batches("train", shuffle=False))  # one window of T steps
    step = Trainer(TrialConfig(**base, lr=0.01 * x.shape[0]), ptb_sample)
    window.train_epoch(), step.train_epoch()
    moved = [
        (a - b).abs().max().item()
        for a, b in zip(window.model.parameters(), step.model.parameters())
    ]
    assert max(moved) < 1e-5 and x.shape[0] > 100
    with pytest.raises(UserError, match="loss_per='window'.*use loss_per step"):
        TrialConfig(loss_per="window").validate()


@pytest.mark.slow  # 3 epochs and a one-stream evaluation of ptb-sample
def test_ptb_sample_reports_perplexity_and_lr_decay(ptb_sample):
    cfg = TrialConfig(
        dataset="ptb-sample",
        arch="rhn",
        depth=2,
        width=32,
        epochs=3,
        lr=1.0,
        lr_decay=2.0,
        lr_decay_start=1,
        batch_size=20,
        bptt=20,
        threads=1,
        t_bias=-2.0,
    )
    seen = []
    result = Trainer(cfg, ptb_sample).fit(seen.append)
    assert [m["lr"] for m in seen] == [1.0, 0.5, 0.25]
    assert seen[0]["valid_ppl"] == pytest.approx(math.exp(seen[0]["valid_loss"]))
    assert seen[-1]["valid_ppl"] < len(ptb_sample.vocab)
    assert "tokens_per_sec" in seen[0] and result["dataset"] == "ptb-sample"
    assert result["test_ppl"] == pytest.approx(math.exp(result["test_loss"]))


def test_train_cli_prints_progress_and_json(data_dir):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rhnsearch.cli",
            "train",
            "--task",
            "jsb",
            "--arch",
            "rhn",
            "--depth",
            "4",
            "--width",
            "64",
            "--epochs",
            "2",
            "--data-dir",
            str(data_dir),
            "--json",
            # one torch thread: two spin while they wait for a core (8 CPU s alone, 30 beside
            # two busy processes, 63 in a CI run; one thread: 6 alone, 6 beside them)
            "--threads",
            "1",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"status", "train_loss", "valid_loss", "test_loss", "params"} <= set(result)
    assert result["status"] == "completed" and result["params"] == 50264
    progress = [line for line in proc.stderr.splitlines() if line.startswith("epoch ")]
    assert len(progress) == 2
    assert progress[0].endswith(" running") and progress[-1].endswith(" completed")


@pytest.mark.parametrize("supported", [None, "<1"], ids=["tested-torch", "untested-torch"])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, supported):
    """Also on a torch outside compat's tested range (as on a GPU machine's own build): its
    warnings come at the first use of an internal, which bad input never reaches."""
    script = (
        "import runpy, sys; import rhnsearch.compat.torch as t;"
        f"t.SUPPORTED = {supported!r} or t.SUPPORTED;"
        f"sys.argv = ['rhnsearch', 'train', '--arch', 'gru', '--data-dir', {str(tmp_path)!r}];"
        "runpy.run_module('rhnsearch.cli', run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "unknown arch 'gru'" in proc.stderr


def test_final_word_numbers_read_the_whole_text_as_one_stream():
    """The final valid and test losses of a word task are those of the best-valid weights on
    the whole text read as one stream from a zero state (batch 1, the RHN authors' protocol),
    here computed by hand on a tiny text; the batched validation of each epoch is not."""
    import torch
    from torch.nn import functional as F

    from rhnsearch.data import PTBData

    generator = torch.Generator().manual_seed(0)
    data = PTBData(
        *(torch.randint(7, (n,), generator=generator) for n in (400, 61, 83)),
        vocab=[f"w{i}" for i in range(7)],
        name="ptb-sample",
    )
    trainer = Trainer(
        TrialConfig(
            dataset="ptb-sample",
            arch="rhn",
            depth=2,
            width=8,
            epochs=2,
            batch_size=4,
            bptt=10,
            lr=0.5,
            threads=1,
        ),
        data,
    )
    result = trainer.fit()
    trainer.model.load_state_dict(trainer.best_state)
    trainer.model.eval()

    def by_hand(ids):
        ids = ids.to(trainer.device)
        with torch.no_grad():
            logits, _ = trainer.model(ids[:-1].unsqueeze(1))  # one stream, zero state
        return F.cross_entropy(logits[:, 0], ids[1:]).item()

    assert result["test_loss"] == pytest.approx(by_hand(data.test), rel=1e-6)
    assert result["full_valid_loss"] == pytest.approx(by_hand(data.valid), rel=1e-6)
    assert result["full_valid_ppl"] == pytest.approx(math.exp(result["full_valid_loss"]))
    assert trainer.evaluate("test") != pytest.approx(result["test_loss"], rel=1e-6)  # 4 streams
    config = TrialConfig(**{**vars(trainer.config), "final_streams": 3})  # a small preset's
    faster = Trainer(config, data)
    final = faster.fit()
    faster.model.load_state_dict(faster.best_state)
    assert final["test_loss"] == pytest.approx(faster.evaluate("test", 3), rel=1e-6)
