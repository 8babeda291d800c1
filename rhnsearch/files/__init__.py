"""What a sweep keeps: the storage it lives on, a shared directory or a bucket (storage.py),
the name of every file it writes there (layout.py) and its typed record (record.py). Low in
the package: train, search, tracking and sweep import it; it imports only compat and errors."""
