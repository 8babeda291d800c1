"""Where a sweep stands, read from its storage and MLflow: its trials by status and, per cell
and in all, the device-hours its trials held beside those its plan expected, and each of its
rounds that has closed apart (`tracking.phases`)."""

from dataclasses import asdict

from mlflow.tracking import MlflowClient

from ..files.layout import sweep_storage
from ..search.plan import planned_hours
from ..tracking import schema
from ..tracking.phases import phases
from ..tracking.uris import existing_store
from .close import HOURS, child_runs, spent
from .record import read_record


def sweep_status(name: str, storage_path: str | None = None) -> dict:
    """{"name", "trials", "statuses": {status: count}, "unit", "cells": [{cell, trials,
    ended, spent, planned}], "spent", "planned", "phases": [{name, wall_seconds, hours,
    trial_epochs, planned}]}: hours in the plan's unit (GPU-hours for a sweep of GPU trials),
    planned None where the sweep was run without --plan; phases, the rounds that closed."""
    record = read_record(sweep_storage(storage_path, None), name)
    client = MlflowClient(existing_store(record.tracking_uri))
    runs = child_runs(client, record.parent_run)
    statuses = {}
    for run in runs:
        status = run.tags.get(schema.STATUS, schema.RUNNING)
        statuses[status] = statuses.get(status, 0) + 1
    plan = planned_hours(record.plan) if record.plan else None
    gpu = record.space.resources.gpu > 0
    unit = plan["unit"] if plan else HOURS[gpu]
    held = spent(runs)["cells"]
    per_cell = record.trials // len(record.cells)
    cells = [
        {
            "cell": label,
            "trials": per_cell,
            "ended": sum(
                r.params.get("cell") == label
                and r.tags.get(schema.STATUS, schema.RUNNING) != schema.RUNNING
                for r in runs
            ),
            "spent": held.get(label, {}).get(unit, 0.0),
            "planned": plan["cells"][label] if plan else None,
        }
        for label in record.cells
    ]
    return {
        "name": name,
        "trials": record.trials,
        "statuses": statuses,
        "unit": unit,
        "cells": cells,
        "spent": sum(c["spent"] for c in cells),
        "planned": plan["total"] if plan else None,
        "phases": [asdict(phase) for phase in phases(client, record.parent_run_id)],
    }
