"""A sweep's life: run, resume and extend it on Ray Tune (lifecycle.py) and close it (close.py);
a trial on a worker (trainable.py) and its checkpoints (checkpoints.py); its progress
(status.py, progress.py); and a sweep sent to a cluster as a Ray Job (jobs.py) or a Slurm job
(slurm.py). Its files and record are in rhnsearch/files. docs/architecture.md draws it."""
