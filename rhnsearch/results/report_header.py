"""The report's header: the sweep's facts (experiment, study, preset, dataset, when it started,
its trials by status) and its times and device-hours, a sweep of several rounds (extended,
confirmed) with each round apart beside what its plan expected (`tracking.phases`)."""

from html import escape

import pandas as pd

from ..tracking import schema, store
from ..tracking.phases import Phase, phases
from . import tables
from .export import html_table


def facts(rows: list[tuple[str, str]], table_id: str) -> str:
    return html_table(pd.DataFrame(rows, columns=["field", "value"]), table_id=table_id)


def duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def header(exp: store.Experiment, chosen: pd.Series, trials: pd.DataFrame, parent) -> str:
    """Experiment, sweep, study, preset, dataset, times, and trials by status; a sweep of
    several rounds (extended, confirmed) with each round's times beside the search's."""
    metrics, info = parent.data.metrics, parent.info
    counts = trials["status"].value_counts()
    status = [(s, int(counts.get(s, 0))) for s in schema.STATUSES] + [
        (s, int(n)) for s, n in counts.items() if s not in schema.STATUSES
    ]
    rows = [
        ("experiment", exp.name),
        ("sweep", chosen["sweep"]),
        ("study", chosen["study"] or "not recorded"),
        ("preset", chosen["preset"] or "not recorded"),
        ("dataset", tables.sweep_dataset(trials)),
        (
            "started",
            pd.Timestamp(info.start_time, unit="ms", tz="UTC").isoformat(timespec="seconds"),
        ),
    ]
    rounds = phases(exp.client, info.run_id)
    if len(rounds) > 1:  # the search and each round apart, beside what was planned
        rows += phase_rows(rounds)
    else:
        rows += one_round_rows(metrics, info)
    if "train_seconds" in metrics:
        rows.append(("training time (sum over trials)", duration(metrics["train_seconds"])))
    rows.append(trial_counts(trials, status))
    return f"<h1>{title(exp, chosen)}</h1>\n" + facts(rows, "header-facts")


def one_round_rows(metrics: dict, info) -> list[tuple[str, str]]:
    """The header's rows of a sweep of one round: its wall time, trial-epochs and the
    device-hours its trials held, beside the plan's."""
    if "wall_seconds" in metrics:
        wall = f"{duration(metrics['wall_seconds'])} (Tune's run, as the sweep measured it)"
    elif info.end_time:
        wall = f"{duration((info.end_time - info.start_time) / 1000)} (parent run's span)"
    else:
        wall = "not recorded (the sweep has not finished)"
    rows = [("wall time", wall)]
    if "trial_epochs" in metrics:
        planned = metrics.get("planned_search_trial_epochs")
        rows.append(
            (
                "trial-epochs",
                f"{metrics['trial_epochs']:.0f}"
                + ("" if planned is None else f" (planned {planned:.0f})"),
            )
        )
    for unit in ("gpu_hours", "cpu_hours"):  # what the trials held, next to the plan's
        if metrics.get(unit) or f"planned_{unit}" in metrics:
            planned = metrics.get(f"planned_{unit}")
            rows.append(
                (
                    f"{unit[:3].upper()}-hours spent",
                    f"{metrics.get(unit, 0):.3f}"
                    + (
                        f" (planned {planned:.3f})"
                        if planned is not None
                        else " (no plan recorded)"
                    ),
                )
            )
    return rows


def title(exp: store.Experiment, chosen: pd.Series) -> str:
    return f"{escape(exp.name)} · sweep {escape(chosen['sweep'])}"


def trial_counts(trials: pd.DataFrame, status: list[tuple[str, int]]) -> tuple[str, str]:
    return (
        "trials",
        f"{len(trials)}: "
        + ", ".join(f"{n} {'stopped early' if s == 'stopped' else s}" for s, n in status),
    )


def phase_rows(rounds: list[Phase]) -> list[tuple[str, str]]:
    """The header's rows of a sweep of several rounds: each round's wall time, device-hours
    (beside the plan's, where it has one) and trial-epochs, then in all."""
    walls = [r.wall_seconds or 0.0 for r in rounds]
    rows = [
        (
            "wall time",
            "; ".join(f"{r.name} {duration(w)}" for r, w in zip(rounds, walls))
            + f"; in all {duration(sum(walls))}",
        )
    ]
    for unit in ("gpu_hours", "cpu_hours"):
        if not any(r.hours[unit] or unit in r.planned for r in rounds):
            continue
        spent = [
            f"{r.name} {r.hours[unit]:.3f}"
            + (f" (planned {r.planned[unit]:.3f})" if unit in r.planned else " (no plan)")
            for r in rounds
        ]
        total = sum(r.hours[unit] for r in rounds)
        rows.append((f"{unit[:3].upper()}-hours spent", "; ".join(spent) + f"; in all {total:.3f}"))
    if all(r.trial_epochs is not None for r in rounds):
        epochs = "; ".join(
            f"{r.name} {r.trial_epochs}"
            + (f" (planned {r.planned['trial_epochs']:.0f})" if "trial_epochs" in r.planned else "")
            for r in rounds
        )
        rows.append(("trial-epochs", epochs + f"; in all {sum(r.trial_epochs for r in rounds)}"))
    return rows
