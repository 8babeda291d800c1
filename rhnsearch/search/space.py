"""Search spaces: one YAML file per study, validated (pydantic) before anything starts.

A space names the dataset, the (arch, depth[, tied]) cells, how wide each cell's model is (a
parameter budget solved per arch, or a fixed width), the fixed trial settings, the sampled
hyperparameters, the scheduler and the resources. Presets (`paper`, `smoke`) are deep-merged
over the base; `--set key.sub=value` overrides any field last.
"""

import copy
import importlib
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..budget import PTB_VOCAB, count_params, parse_count, solve_width
from ..data import DATASETS
from ..errors import UserError
from ..models import ARCHS as BUILT_IN
from ..models import check_arch, resolve_arch
from ..tasks import get_task
from ..train import TrialConfig

TRIAL_FIELDS = set(TrialConfig.__dataclass_fields__)
CELL_FIELDS = {"arch", "depth", "width", "tied", "dataset"}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


class Distribution(Strict):
    """Exactly one of: uniform, loguniform, randint ([low, high]) or choice (list)."""

    uniform: tuple[float, float] | None = None
    loguniform: tuple[float, float] | None = None
    randint: tuple[int, int] | None = None
    choice: list | None = None

    @model_validator(mode="after")
    def one_kind(self):
        given = [
            k
            for k in ("uniform", "loguniform", "randint", "choice")
            if getattr(self, k) is not None
        ]
        if len(given) != 1:
            raise ValueError("give exactly one of uniform, loguniform, randint, choice")
        kind = given[0]
        value = getattr(self, kind)
        if kind == "choice":
            if not value:
                raise ValueError("choice needs at least one value")
        elif not value[0] < value[1]:
            raise ValueError(
                f"{kind} range [{value[0]}, {value[1]}] is empty: low must be below high"
            )
        elif kind == "loguniform" and value[0] <= 0:
            raise ValueError(f"loguniform bounds must be positive, got {value[0]}")
        return self

    @property
    def kind(self) -> str:
        return next(
            k
            for k in ("uniform", "loguniform", "randint", "choice")
            if getattr(self, k) is not None
        )


class Scheduler(Strict):
    """cell_asha: ASHA within each (arch, depth, tied) cell; asha: across all trials; fifo:
    every trial runs to the end."""

    name: Literal["cell_asha", "asha", "fifo"] = "cell_asha"
    grace_period: int = Field(2, ge=1)
    reduction_factor: float = Field(3.0, gt=1)


class Resources(Strict):
    cpu: float = Field(1.0, gt=0)
    gpu: float = Field(0.0, ge=0)


@dataclass(frozen=True)
class Cell:
    """One (arch, depth, tied) cell of a space, at the width its budget solved to, with the
    parameters its model has."""

    arch: str
    depth: int
    tied: bool
    width: int
    params: int

    @property
    def model(self) -> dict:
        """The cell's fields of a TrialConfig."""
        return {k: v for k, v in asdict(self).items() if k != "params"}


class Space(Strict):
    """A validated search space (after preset and overrides)."""

    study: str
    description: str = ""
    dataset: str
    archs: list[str] = Field(min_length=1)
    depths: list[int] = Field(min_length=1)
    arch_depths: dict[str, list[int]] = {}  # an arch's own depths, e.g. {lstm: [1]}
    tied: list[bool] = [False]
    budget: int | dict[int, int] | None = None  # parameters, per depth or for all depths
    budget_untied: bool = False  # tied cells keep the untied cell's width
    width: int | None = Field(None, ge=1)
    samples: int = Field(1, ge=1)  # settings per cell
    seeds: int = Field(1, ge=1)  # trials per setting: seeds fixed.seed + 0..N-1
    search: Literal["random", "optuna"] = "random"
    sampler: Literal["tpe", "gp", "cmaes"] = "tpe"  # each cell's Optuna sampler
    seed: int = 0  # seeds the searcher: same space, same trials
    fixed: dict = {}
    params: dict[str, Distribution] = {}
    scheduler: Scheduler = Scheduler()
    resources: Resources = Resources()
    max_concurrent: int = Field(0, ge=0)  # 0: as many as resources allow
    keep_model: Literal["best", "none"] = "best"
    # what the study's report is made of: the kinds of results/studies.py
    report: Literal["cells", "optimization", "depth_budget", "hsg_depth"] = "cells"
    # the quantity the finding compares on the confirmed settings (`sweep confirm`, whose
    # trials all train to the end); the search's table and curves use best_valid_loss, the
    # one every setting has (best_train_loss is measured at a trial's end, ASHA's stop has none)
    quantity: Literal["best_valid_loss", "best_train_loss"] = "best_valid_loss"
    register_model: str | None = Field(None, min_length=1)  # registers the kept model

    @field_validator("dataset")
    @classmethod
    def known_dataset(cls, v):
        if v not in DATASETS:
            raise ValueError(f"unknown dataset {v!r}: use one of {', '.join(DATASETS)}")
        return v

    @field_validator("archs")
    @classmethod
    def known_archs(cls, v, info):
        if (info.context or {}).get("stored"):
            return v  # resolved when the sweep ran; a cell of one's own is imported to run it
        for arch in v:
            try:
                resolve_arch(arch)
            except UserError as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("depths")
    @classmethod
    def positive_depths(cls, v):
        if any(d < 1 for d in v):
            raise ValueError(f"depths must be positive integers, got {v}")
        return v

    @field_validator("arch_depths")
    @classmethod
    def positive_arch_depths(cls, v):
        for arch, depths in v.items():
            if not depths or any(d < 1 for d in depths):
                raise ValueError(f"{arch}'s depths must be positive integers, got {depths}")
        return v

    @field_validator("budget", mode="before")
    @classmethod
    def parse_budget(cls, v):
        if isinstance(v, dict):
            try:
                return {int(k): parse_count(x) for k, x in v.items()}
            except TypeError:
                raise ValueError("budget keys are depths (integers)") from None
        return None if v is None else parse_count(v)

    @field_validator("fixed", "params")
    @classmethod
    def known_settings(cls, v, info):
        """fixed and params may name any trial setting but the cell's own fields."""
        settable = TRIAL_FIELDS - CELL_FIELDS
        unknown = set(v) - settable
        if unknown:
            what = "trial setting" if info.field_name == "fixed" else "hyperparameter"
            raise ValueError(
                f"unknown {what} {sorted(unknown, key=str)[0]!r}: use one of "
                f"{', '.join(sorted(settable))}"
            )
        return v

    @model_validator(mode="after")
    def sizes(self):
        if (self.budget is None) == (self.width is None):
            raise ValueError("give either budget (parameters per depth) or width, not both")
        strangers = sorted(set(self.arch_depths) - set(self.archs))
        if strangers:
            raise ValueError(f"arch_depths names {strangers[0]!r}, which is not in archs")
        if isinstance(self.budget, dict):
            missing = [d for a in self.archs for d in self.depths_of(a) if d not in self.budget]
            if missing:
                raise ValueError(f"budget has no entry for depth {missing[0]}: add one")
        epochs = self.fixed.get("epochs")
        if type(epochs) is not int or epochs < 1:
            raise ValueError(
                "fixed.epochs is required, a positive integer (the most epochs a "
                f"trial may run), got {epochs!r}"
            )
        if self.seeds > 1 and self.search != "random":
            raise ValueError(
                "seeds repeats each setting of a random search: use search: "
                "random (--search random) with seeds, or seeds: 1 with optuna"
            )
        if self.seeds > 1 and "seed" in self.params:
            raise ValueError(
                "seeds runs each setting with seeds fixed.seed to fixed.seed + seeds - 1: "
                "drop seed from params, or run with seeds 1"
            )
        if self.scheduler.name != "fifo" and self.scheduler.grace_period >= self.epochs:
            raise ValueError(
                f"scheduler.grace_period ({self.scheduler.grace_period}) must be "
                f"below fixed.epochs ({self.epochs}) for ASHA to stop anything"
            )
        return self

    def depths_of(self, arch: str) -> list[int]:
        """The recurrence depths of ARCH's cells: its arch_depths, else depths."""
        return self.arch_depths.get(arch, self.depths)

    @property
    def epochs(self) -> int:
        return int(self.fixed["epochs"])

    @property
    def task(self) -> str:
        return DATASETS[self.dataset]

    @property
    def threads(self) -> int:
        """The torch threads of one trial: its CPUs, at least one."""
        return max(1, int(self.resources.cpu))

    def cells_for(self, data) -> dict[str, Cell]:
        """The cells, word widths solved for DATA's vocabulary (PTB's where DATA has none or
        is None)."""
        return self.cells(len(getattr(data, "vocab", ())) or PTB_VOCAB)

    def cells(self, vocab_size: int = PTB_VOCAB) -> dict[str, Cell]:
        """The (arch, depth, tied) cells, by label ("rhn d4 w830", "... WT" when tied)."""
        cells = {}
        for arch in self.archs:
            for depth in self.depths_of(arch):
                check_arch(arch, depth)
                for tied in self.tied:
                    get_task(self.task).check(tied)
                    if self.width is not None:
                        width = self.width
                    else:
                        budget = (
                            self.budget[depth] if isinstance(self.budget, dict) else self.budget
                        )
                        width = solve_width(
                            budget,
                            self.task,
                            arch,
                            depth,
                            tied and not self.budget_untied,
                            vocab_size,
                        )
                    label = f"{arch} d{depth} w{width}" + (" WT" if tied else "")
                    params = count_params(self.task, arch, depth, width, tied, vocab_size)
                    cells[label] = Cell(arch, depth, tied, width, params)
        return cells

    @property
    def cell_modules(self) -> list[str]:
        """Where the space's cells of one's own come from: the file or package folder of
        each one's top-level module, for Ray to ship to its workers."""
        found = []
        for arch in self.archs:
            if resolve_arch(arch).name not in BUILT_IN:
                top = importlib.import_module(arch.partition(":")[0].split(".")[0])
                path = top.__path__[0] if hasattr(top, "__path__") else top.__file__
                found += [path] if path not in found else []
        return found

    @property
    def num_trials(self) -> int:
        depths = sum(len(self.depths_of(arch)) for arch in self.archs)
        return depths * len(self.tied) * self.samples * self.seeds


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = (
            deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        )
    return out


class Loader(yaml.SafeLoader):
    """YAML as users write numbers: 1e-3 is a float (YAML 1.1 would read it as a string)."""


Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_yaml(text: str):
    return yaml.load(text, Loader=Loader)


def parse_override(text: str) -> tuple[list[str], object]:
    """'fixed.epochs=5' -> (['fixed', 'epochs'], 5), the value read as YAML."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UserError(
            f"cannot read override {text!r}: write key=value, e.g. "
            "--set samples=4 or --set fixed.epochs=20"
        )
    try:
        return key.strip().split("."), load_yaml(value)
    except yaml.YAMLError:
        raise UserError(f"cannot read override {text!r}: its value is not valid YAML") from None


def read_yaml(path: Path) -> dict:
    try:
        raw = load_yaml(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(
            f"search space {path} not found: give a path like spaces/jsb_optimization.yaml"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"{path}{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a search space is a YAML mapping of fields")
    return raw


def resolve(raw: dict, preset: str | None, overrides=(), source: str = "space") -> dict:
    """Apply the preset, then the overrides, to the raw YAML mapping."""
    presets = raw.get("presets") or {}
    if not isinstance(presets, dict) or not all(
        isinstance(p, dict | None) for p in presets.values()
    ):
        raise UserError(f"{source}: presets must map each preset name to a mapping of fields")
    doc = {k: v for k, v in raw.items() if k != "presets"}
    if preset:
        if preset not in presets:
            raise UserError(
                f"{source}: no preset {preset!r}; this space has "
                f"{', '.join(map(str, presets)) or 'none'}"
            )
        doc = deep_merge(doc, presets[preset] or {})
    for text in overrides:
        path, value = parse_override(text)
        target = doc
        for key in path[:-1]:
            target = target.setdefault(key, {})
            if not isinstance(target, dict):
                raise UserError(f"override {text!r}: {key} is not a mapping")
        target[path[-1]] = value
    return doc


def validated(doc: dict, where: str, *, stored: bool = False) -> Space:
    """The Space of DOC (a space's fields, read from WHERE), or a one-line UserError naming
    WHERE and the first field that is wrong. A STORED space (a sweep's record) was checked when
    its sweep ran: its archs are not resolved again, so reading a record needs no cell module
    of one's own (`cell_modules` and the trials import them)."""
    try:
        return Space.model_validate(doc, context={"stored": stored})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]).encode("unicode_escape").decode() or "space"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check its spelling, or see spaces/README.md for the fields)"
        raise UserError(f"{where}: {field}: {msg}") from None


def load_space(path, *, preset: str | None = None, overrides=(), study: str | None = None) -> Space:
    """Read, merge and validate a space file; raise a one-line UserError naming the field.

    Args:
        path: the space's YAML file.
        preset: one of the space's `presets`, merged over its fields first.
        overrides: "KEY=VALUE" texts (`--set`), applied after the preset; KEY may be dotted
            (fixed.epochs).
        study: the study's name, instead of the space's `study` field or its file name.
    """
    path = Path(path)
    doc = resolve(read_yaml(path), preset, overrides, str(path))
    doc.setdefault("study", study or path.stem)
    if study:
        doc["study"] = study
    space = validated(doc, str(path))
    try:
        TrialConfig.from_dict(
            {
                **space.fixed,
                "dataset": space.dataset,
                "arch": space.archs[0],
                "depth": space.depths_of(space.archs[0])[0],
                "width": 1,
            }
        ).validate()
    except UserError as exc:
        raise UserError(f"{path}: fixed.{exc}") from None
    try:
        space.cells()  # budgets too small for a depth fail here, before Ray starts
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    return space
