"""Where trials run: a local Ray or a cluster joined by address (connect.py), a sweep sent as a
Ray Job (jobs.py) or as a Slurm job (slurm.py), and the storage every node reads, a shared
directory or a bucket (storage.py); the driver's malloc arenas capped (malloc.py)."""
