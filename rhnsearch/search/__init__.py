"""Sweeps: a search space (space.py) run on Ray Tune (sweep.py) as trials (trainable.py),
scheduled early-stopping (scheduler.py), recorded in MLflow (tracking.py), with their state in
the sweep's storage (storage.py); submitted to clusters as Ray Jobs (jobs.py)."""
