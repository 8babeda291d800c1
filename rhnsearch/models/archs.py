"""Architectures by name, resolved in one place that validation, the budget solver and the
model builder share: the built-in cells (cells.py), the LSTM baseline, or a researcher's own
cell class named `module:Class` (e.g. `mylab.cells:MinimalRNNCell`), which follows cells.py's
interface (docs/models.md) and trains on the `reference` backend."""

import functools
import importlib
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import UserError, first_line
from .cells import CELLS, HSGCell, RHNCell

BUILT_IN = (*CELLS, "lstm")
GATED = {"t_bias": RHNCell, "hsg_bias": HSGCell}  # settings only such cells (and kin) read


@dataclass(frozen=True)
class Arch:
    """An architecture: its name and its cell class (None: the LSTM baseline, which has no
    recurrence depth)."""

    name: str
    cell: type | None

    @property
    def label(self) -> str:
        """How tables and plots name it: its class for a cell of one's own."""
        return self.name.rpartition(":")[2]

    @property
    def unused(self) -> set[str]:
        """The trial settings this arch does not read (a T bias without transform gates)."""
        return {s for s, kind in GATED.items() if not (self.cell and issubclass(self.cell, kind))}

    def check(self, depth: int, width: int):
        """A one-line UserError for a depth or width it cannot have."""
        if not (isinstance(depth, int) and isinstance(width, int)) or depth < 1 or width < 1:
            raise UserError(
                f"depth and width must be positive integers, got depth={depth!r} width={width!r}"
            )
        if self.cell is None and depth != 1:
            raise UserError(
                f"{self.name} has no recurrence depth: use depth 1, not {depth} (a space "
                f"gives it its own with arch_depths: {{{self.name}: [1]}})"
            )

    def count(self, input_size: int, width: int, depth: int) -> int:
        """Parameters of its recurrent layer, counted on a cell built on the meta device
        (nothing allocated)."""
        with torch.device("meta"):
            return sum(p.numel() for p in self.cell(input_size, width, depth).parameters())


@functools.cache
def resolve_arch(name: str) -> Arch:
    """The arch NAME: built in, or `module:Class`, imported and checked against the cell
    interface; a one-line UserError where it is neither."""
    if name in BUILT_IN:
        return Arch(name, CELLS.get(name))
    module_name, colon, class_name = name.partition(":")
    if not colon:
        raise UserError(
            f"unknown arch {name!r}: use one of {', '.join(BUILT_IN)}, or a cell class of "
            "your own as module:Class"
        )
    try:
        cell = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise UserError(
            f"arch {name}: cannot import it ({first_line(exc)}): put its module on the "
            "Python path (PYTHONPATH, or run from its directory)"
        ) from None
    check_cell(name, cell)
    return Arch(name, cell)


def check_cell(name: str, cell) -> None:
    """A one-line UserError unless CELL follows the interface of cells.py: built as
    cell(input_size, width, depth), it keeps those three, projects (T, B, input_size) inputs
    for every step at once, and steps as cell(p_t, state (B, n), mask (B, n) or None) ->
    (new state (B, n), a dict of gates)."""
    why = None
    if not (isinstance(cell, type) and issubclass(cell, nn.Module)):
        why = "it is not an nn.Module class"
    else:
        try:
            built = cell(5, 3, 2)
            p = built.project(torch.zeros(4, 2, 5))
            for mask in (None, torch.ones(2, 3)):
                state, gates = built(p[0], torch.zeros(2, 3), mask)
            if (built.input_size, built.width, built.depth) != (5, 3, 2):
                why = "cell(5, 3, 2) has input_size, width, depth other than 5, 3, 2"
            elif tuple(p.shape[:2]) != (4, 2) or tuple(state.shape) != (2, 3):
                why = "project or a step gives tensors of the wrong shape"
            elif not isinstance(gates, dict):
                why = "a step returns (state, gates) with gates not a dict"
        except Exception as exc:  # whatever the user's code raises: the cell is refused
            why = f"{type(exc).__name__}: {first_line(exc)}"
    if why:
        raise UserError(
            f"arch {name} does not follow the cell interface ({why}): see docs/models.md, "
            "'Your own cell'"
        )
