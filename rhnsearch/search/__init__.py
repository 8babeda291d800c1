"""Sweeps: a search space (space.py) run on Ray Tune (sweep.py) as trials (trainable.py),
scheduled early-stopping (scheduler.py), recorded in MLflow (tracking.py), with their state in
the sweep's record (record.py) and files (layout.py) in its storage (storage.py); submitted to
clusters as Ray Jobs (jobs.py) or Slurm (slurm.py)."""
