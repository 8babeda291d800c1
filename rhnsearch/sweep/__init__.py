"""A sweep's life: run, resume and extend it on Ray Tune (lifecycle.py) and close it (close.py);
its typed record (record.py) and every file it keeps in its storage (layout.py); a trial on a
worker (trainable.py) and its checkpoints (checkpoints.py); and its progress (status.py).
docs/architecture.md draws it."""
