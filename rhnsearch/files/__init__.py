"""What a sweep keeps: the storage it lives on, a shared directory or a bucket (storage.py),
the name of every file it writes there (layout.py), its MLflow parent run (parent_run.py), and
every older format of its files made current (versions.py). Low in the package: train, search,
tracking and sweep import it; it imports only compat and errors."""
