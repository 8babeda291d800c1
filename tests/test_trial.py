"""A sweep's trial as one typed record (search/trial.py), without Ray: Tune's flat config as
sweeps before the TrialSpec saved it, the params its MLflow run got then, and unknown keys."""

import pytest

from rhnsearch.errors import UserError
from rhnsearch.search.searchers import CellSearcher, round_slots
from rhnsearch.search.space import Cell, load_space
from rhnsearch.search.trial import TrialSpec, tune_constants
from rhnsearch.train import TrialConfig

from conftest import JSB_SPACE

CELLS = {
    "rhn d1 w19": Cell("rhn", 1, False, 19, 5864),
    "dtrnn d1 w29": Cell("dtrnn", 1, False, 29, 6062),
}
# A trial's config in Tune's saved experiment state of a sweep run before the TrialSpec
# (dd9c428: the JSB smoke preset, archs [rhn, dtrnn], depth 1), as `sweep resume` restores it.
OLD_CONFIG = {
    "threads": 1,
    "epochs": 9,
    "batch_size": 32,
    "optimizer": "sgd",
    "nesterov": False,
    "dataset": "jsb",
    "data_dir": "/work/shared/data",
    "preset": "smoke",
    "study": "jsb_optimization",
    "cell": "rhn d1 w19",
    "lr": 0.06675598094054519,
    "momentum": 0.2743186960712581,
    "init_scale": 0.20466096251821317,
    "t_bias": -1.6090158363534286,
    "clip": 1.345318271752653,
    "seed": 804035,
}
# ... and the params of its MLflow run, as that version logged them
OLD_PARAMS = {
    "arch": "rhn",
    "backend": "auto",
    "batch_size": "32",
    "bptt": "35",
    "cell": "rhn d1 w19",
    "clip": "1.345318271752653",
    "dataset": "jsb",
    "depth": "1",
    "device": "auto",
    "drop_h": "0.0",
    "drop_i": "0.0",
    "drop_o": "0.0",
    "drop_x": "0.0",
    "epochs": "9",
    "final_streams": "0",
    "init_scale": "0.20466096251821317",
    "loss_per": "step",
    "loss_unit": "nats per time step",
    "lr": "0.06675598094054519",
    "lr_decay": "1.0",
    "lr_decay_start": "0",
    "max_loss": "0.0",
    "momentum": "0.2743186960712581",
    "n_params": "5864",
    "nesterov": "False",
    "optimizer": "sgd",
    "preset": "smoke",
    "seed": "804035",
    "study": "jsb_optimization",
    "t_bias": "-1.6090158363534286",
    "threads": "1",
    "tied": "False",
    "train_fraction": "1.0",
    "weight_decay": "0.0",
    "width": "19",
}


def test_an_old_sweeps_tune_config_gives_the_trial_and_the_params_it_was_logged_with():
    spec = TrialSpec.from_tune(OLD_CONFIG, CELLS)
    assert spec.config == TrialConfig(
        arch="rhn",
        depth=1,
        width=19,
        tied=False,
        epochs=9,
        batch_size=32,
        lr=OLD_CONFIG["lr"],
        momentum=OLD_CONFIG["momentum"],
        init_scale=OLD_CONFIG["init_scale"],
        t_bias=OLD_CONFIG["t_bias"],
        clip=OLD_CONFIG["clip"],
        seed=804035,
        threads=1,
    )
    assert (spec.cell, spec.n_params, spec.data_dir) == ("rhn d1 w19", 5864, "/work/shared/data")
    assert (spec.preset, spec.study) == ("smoke", "jsb_optimization")
    assert spec.mlflow_params() == OLD_PARAMS


def test_settings_an_arch_does_not_read_are_not_logged():
    config = {**OLD_CONFIG, "cell": "dtrnn d1 w29"}
    params = TrialSpec.from_tune(config, CELLS).mlflow_params()
    assert "t_bias" not in params and "hsg_bias" not in params
    assert (params["arch"], params["n_params"], params["width"]) == ("dtrnn", "6062", "29")


@pytest.mark.parametrize(
    "config, says",
    [
        ({**OLD_CONFIG, "lr_schedule": "cosine"}, "unknown key 'lr_schedule'"),
        ({**OLD_CONFIG, "cell": "lstm d1 w8"}, "no cell of the sweep: 'lstm d1 w8'"),
        ({k: v for k, v in OLD_CONFIG.items() if k != "cell"}, "no cell of the sweep: None"),
    ],
)
def test_an_unknown_key_or_cell_is_an_error_not_dropped(config, says):
    with pytest.raises(UserError, match=says):
        TrialSpec.from_tune(config, CELLS)


def test_every_suggested_config_reads_back_as_a_trial():
    space = load_space(JSB_SPACE, preset="smoke", overrides=["archs=[rhn,dtrnn]", "depths=[1,2]"])
    cells = space.cells()
    constants = tune_constants(space, "/data", None)
    searcher = CellSearcher(space, cells, constants, round_slots(2, 1))
    configs = [searcher.suggest(str(i)) for i in range(len(cells) * 2)]
    for config in configs:
        spec = TrialSpec.from_tune(config, cells)
        spec.config.validate()
        assert (spec.data_dir, spec.preset, spec.study) == ("/data", "base", space.study)
        assert spec.config.threads == space.threads and spec.config.epochs == space.epochs
        assert spec.config.lr == config["lr"] and spec.cell == config["cell"]
