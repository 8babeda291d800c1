"""A sweep's phases (its search, then each extension or confirmation round) as its parent run
records them: at each round's close the sweep logs its totals on the parent run (`sweep.close`),
at the step of the round's index: the round's wall seconds, and the device-hours and trial-epochs
of every trial so far, which the rounds before it take from. A sweep closed before the steps
were its rounds logged every close at step 0: its closes are taken in the order they came."""

from dataclasses import dataclass

from mlflow.tracking import MlflowClient

from .schema import confirmed_tag

HOURS = ("cpu_hours", "gpu_hours")
CUMULATIVE = (*HOURS, "trial_epochs")  # of every trial so far, at each close


@dataclass(frozen=True)
class Phase:
    """One round of a sweep, as its close logged it."""

    name: str  # "search", "extension 1", "confirmation 2"
    wall_seconds: float | None  # the round's own, from its trials' start to its close
    hours: dict[str, float]  # cpu_hours, gpu_hours its trials held
    trial_epochs: int | None  # the epochs its trials trained; None where not logged
    planned: dict[str, float]  # the plan's cpu_hours, gpu_hours, trial_epochs (--plan)


def phase_name(index: int, tags: dict) -> str:
    if index == 0:
        return "search"
    return f"confirmation {index}" if confirmed_tag(index) in tags else f"extension {index}"


def closes(client: MlflowClient, run_id: str, key: str) -> list[float]:
    """KEY's value at each close of the parent run RUN_ID, round by round: the last value
    logged at each step, or where every close logged at step 0, each value in time order."""
    history = client.get_metric_history(run_id, key)
    if len({m.step for m in history}) > 1 or len(history) <= 1:
        by_step = {}
        for metric in sorted(history, key=lambda m: (m.step, m.timestamp)):
            by_step[metric.step] = metric.value
        return [by_step[step] for step in sorted(by_step)]
    return [m.value for m in sorted(history, key=lambda m: m.timestamp)]


def own(values: list[float], index: int) -> float | None:
    """Round INDEX's share of a total logged at each close (VALUES), None where not logged."""
    if index >= len(values):
        return None
    return values[index] - (values[index - 1] if index else 0.0)


def planned(metrics: dict, phase: str | None) -> dict[str, float]:
    """What the sweep's plan (`sweep run --plan`, logged as planned_search_* and
    planned_confirm_*) expected of its PHASE ("search"; "confirm", the first confirmation round,
    where the plan was made with --confirm; None: nothing). A plan logged before it was split:
    its hours, the search's."""
    if phase is None:
        return {}
    found = {
        key: metrics[f"planned_{phase}_{key}"]
        for key in (*HOURS, "trial_epochs")
        if f"planned_{phase}_{key}" in metrics
    }
    if not found and phase == "search":
        found = {unit: metrics[f"planned_{unit}"] for unit in HOURS if f"planned_{unit}" in metrics}
    return found


def phases(client: MlflowClient, run_id: str) -> list[Phase]:
    """The phases of the sweep whose parent run is RUN_ID that have closed, the search first."""
    run = client.get_run(run_id)
    totals = {key: closes(client, run_id, key) for key in CUMULATIVE}
    found, confirmed = [], False
    for index, wall in enumerate(closes(client, run_id, "wall_seconds")):
        epochs, name = own(totals["trial_epochs"], index), phase_name(index, run.data.tags)
        first_confirmation = name.startswith("confirmation") and not confirmed
        confirmed = confirmed or first_confirmation
        phase = "search" if index == 0 else "confirm" if first_confirmation else None
        found.append(
            Phase(
                name,
                wall,
                {unit: own(totals[unit], index) or 0.0 for unit in HOURS},
                None if epochs is None else round(epochs),
                planned(run.data.metrics, phase),
            )
        )
    return found
