"""What the command line prints besides plain text: one JSON line."""

import json
import math


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def print_json(obj):
    """Print one JSON line (non-finite floats become null, so the line is valid JSON)."""
    print(json.dumps(_finite(obj), default=str), flush=True)
