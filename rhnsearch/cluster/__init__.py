"""Where trials run: a local Ray or a cluster joined by address (connect.py), its workers'
imports taken a few at a time a node (worker_start.py), the driver's malloc arenas capped
(malloc.py)."""
