"""A sweep's trial as one typed record, `TrialSpec`: the `TrialConfig` it trains and the sweep's
fields it carries (its cell's label and parameter count, the data dir, the preset, the study).

Tune hands a trainable a flat dict of JSON-able values, and saves it with its experiment
state: this module makes that dict (`tune_constants`, `tune_config`), and reads it back
(`TrialSpec.from_tune`), also as sweeps of earlier versions saved it (the same flat dict), for
`sweep resume`. A trial's MLflow params are its spec's (`TrialSpec.mlflow_params`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ..errors import UserError
from ..models import resolve_arch
from ..tasks import get_task
from ..train import TrialConfig
from .space import Cell, Space

CONFIG_FIELDS = {f.name for f in fields(TrialConfig)}
SWEEP_FIELDS = ("cell", "data_dir", "preset", "study", "confirms")  # not TrialConfig's


@dataclass(frozen=True)
class TrialSpec:
    """One trial of a sweep: what it trains and where it belongs."""

    config: TrialConfig
    cell: str  # the cell's label, e.g. "rhn d4 w96"
    n_params: int  # the cell's parameter count
    data_dir: str | None = None  # where the worker reads the data (None: the default)
    preset: str | None = None  # the space's preset ("base" without one)
    study: str | None = None
    confirms: str | None = None  # a confirmation trial: the id of the search trial it repeats

    @classmethod
    def from_tune(cls, config: dict, cells: dict[str, Cell]) -> TrialSpec:
        """The trial of a Tune CONFIG (`tune_config`), its cell looked up by label in CELLS
        (the sweep's). A key that is neither a sweep's field nor a TrialConfig field is a
        UserError, never dropped."""
        values = dict(config)
        sweep = {k: values.pop(k) for k in SWEEP_FIELDS if k in values}
        if "cell" not in sweep or sweep["cell"] not in cells:
            raise UserError(f"trial config names no cell of the sweep: {sweep.get('cell')!r}")
        cell = cells[sweep["cell"]]
        unknown = sorted(set(values) - CONFIG_FIELDS)
        if unknown:
            raise UserError(
                f"trial config has an unknown key {unknown[0]!r}: use the fields of "
                "TrialConfig, cell, data_dir, preset, study or confirms"
            )
        return cls(TrialConfig(**{**values, **cell.model}), n_params=cell.params, **sweep)

    def mlflow_params(self) -> dict[str, str]:
        """The params of the trial's MLflow run: every config field its arch reads, its cell,
        n_params, the preset and study, the search trial a confirmation trial repeats, and the
        task's loss unit (not the data dir, a path on the cluster)."""
        params = {
            **asdict(self.config),
            "cell": self.cell,
            "n_params": self.n_params,
            **{
                k: v
                for k, v in (
                    ("preset", self.preset),
                    ("study", self.study),
                    ("confirms", self.confirms),
                )
                if v is not None
            },
            "loss_unit": get_task(self.config.task).loss_unit,
        }
        for unused in resolve_arch(self.config.arch).unused:
            del params[unused]
        return {k: str(v)[:6000] for k, v in sorted(params.items())}


def tune_constants(space: Space, data_dir: str, preset: str | None) -> dict:
    """What every trial of the sweep of SPACE has in its Tune config: its threads, the
    space's fixed settings and dataset, the data dir, the preset and the study."""
    return {
        "threads": space.threads,
        **space.fixed,
        "dataset": space.dataset,
        "data_dir": data_dir,
        "preset": preset or "base",
        "study": space.study,
    }


def tune_config(constants: dict, cell: str, setting: dict) -> dict:
    """A trial's Tune config: the sweep's CONSTANTS (`tune_constants`), its CELL's label and
    its SETTING (the sampled hyperparameters, and its seed; a confirmation trial's also the
    search trial it repeats, `confirms`)."""
    return {**constants, "cell": cell, **setting}
