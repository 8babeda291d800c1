"""The Ray Tune trainable: one trial = one `Trainer`, reporting each epoch with a checkpoint."""
import logging
import tempfile

from ray import tune

from ..data import load_dataset
from ..train import Trainer, TrialConfig

_DATA = {}  # dataset cache per worker process: (name, data dir) -> data


def trial_config(config: dict) -> TrialConfig:
    """The TrialConfig of a trial's Tune config (its cell is flattened in)."""
    flat = {**config, **config.get("cell", {})}
    return TrialConfig.from_dict(flat)


def run_trial(config: dict):
    """Train the trial's configuration, `tune.report` per epoch; resumes from Tune's checkpoint.

    The last report of a trial that ends by itself carries status completed or diverged and
    its test numbers; a trial stopped by the scheduler ends on a report with status running.
    """
    logging.getLogger("ray.train").setLevel(logging.WARNING)  # no line per checkpoint
    cfg = trial_config(config)
    key = (cfg.dataset, config["data_dir"])
    if key not in _DATA:
        _DATA[key] = load_dataset(cfg.dataset, config["data_dir"])
    trainer = Trainer(cfg, _DATA[key])
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as directory:
            trainer.load(directory)
    while trainer.epoch < cfg.epochs and trainer.status == "running":
        metrics = trainer.run_epoch()
        if trainer.status != "running" or trainer.epoch >= cfg.epochs:
            final = trainer.finish()
            metrics.update(status=final["status"], test_loss=final["test_loss"],
                           best_epoch=final["best_epoch"])
            if "test_ppl" in final:
                metrics["test_ppl"] = final["test_ppl"]
        metrics["params"] = trainer.params
        with tempfile.TemporaryDirectory() as directory:
            trainer.save(directory)
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(directory))
