"""rhnsearch: hyperparameter search for deep-transition recurrent networks.

The Python API, for notebooks and scripts (the `rhnsearch` command line is built on it):

    load_dataset(name, data_dir=...)              JSB Chorales, PTB or ptb-sample
    build_model(task, arch, depth, width, ...)    a model (see docs/models.md)
    TrialConfig(...), Trainer(config, data)       train one configuration
    load_space(path, preset=..., overrides=...)   a validated search space
    run_sweep(path, *, preset, overrides, ...)    a sweep on Ray Tune, recorded in MLflow
    resume_sweep(name, *, address, storage_path)  an interrupted sweep, continued
    extend_sweep(name, *, samples, seeds, ...)    more settings or seeds for a finished sweep
    load_trials(experiment, sweep=...)            a study's trials from MLflow, as a DataFrame

Names are imported on first use, so `import rhnsearch` stays light.
"""

import importlib

__version__ = "0.2.0"

_API = {
    "load_dataset": "rhnsearch.data",
    "build_model": "rhnsearch.models",
    "TrialConfig": "rhnsearch.train",
    "Trainer": "rhnsearch.train",
    "load_space": "rhnsearch.search.space",
    "run_sweep": "rhnsearch.sweep.lifecycle",
    "resume_sweep": "rhnsearch.sweep.lifecycle",
    "extend_sweep": "rhnsearch.sweep.lifecycle",
    "load_trials": "rhnsearch.tracking.store",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'rhnsearch' has no attribute {name!r}")
    return getattr(importlib.import_module(_API[name]), name)
