"""Where trials run: a local Ray or a cluster joined by address (connect.py), the driver's
malloc arenas capped (malloc.py)."""
