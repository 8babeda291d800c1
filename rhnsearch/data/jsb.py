"""JSB Chorales: JSON split file -> 88-key piano rolls -> padded, masked (T, B, 88) batches."""

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import UserError

LOW, HIGH = 21, 108  # MIDI pitches of the 88 piano keys
KEYS = HIGH - LOW + 1
SPLITS = ("train", "valid", "test")


@dataclass
class JSBData:
    """Piano rolls per split, each a (T_i, 88) float tensor."""

    train: list
    valid: list
    test: list
    name: str = "jsb"

    def split(self, name: str) -> list:
        return getattr(self, name)


def piano_roll(chorale, where: str) -> torch.Tensor:
    roll = torch.zeros(len(chorale), KEYS)
    for t, step in enumerate(chorale):
        for pitch in step:
            if not isinstance(pitch, (int, float)) or not LOW <= pitch <= HIGH:
                raise UserError(
                    f"{where}, step {t}: pitch {pitch!r} is outside the piano "
                    f"range {LOW}..{HIGH}; the file is not JSB Chorales data"
                )
            roll[t, int(pitch) - LOW] = 1.0
    return roll


def load_jsb(path: Path) -> JSBData:
    """Read the JSON {train, valid, test} file (no pickle: it is unsafe to load)."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(
            f"cannot read JSB Chorales from {path}: {exc}; delete it and run "
            "`rhnsearch data fetch jsb`"
        ) from None
    if not isinstance(raw, dict) or any(s not in raw for s in SPLITS):
        raise UserError(f"{path} must be a JSON object with keys {', '.join(SPLITS)}")
    splits = {}
    for split in SPLITS:
        chorales = [c for c in raw[split] if len(c) >= 2]
        if not chorales:
            raise UserError(f"{path}: split {split!r} has no chorale of 2 or more steps")
        splits[split] = [piano_roll(c, f"{path} {split}[{i}]") for i, c in enumerate(chorales)]
    return JSBData(**splits)


def batches(rolls: list, batch_size: int, generator: torch.Generator | None = None):
    """Yield (inputs, targets, mask): next-step prediction, padded to the batch's longest.

    inputs/targets are (T, B, 88), mask is (T, B) with 1 at real steps. Order is shuffled
    when a generator is given, else kept.
    """
    order = (
        torch.randperm(len(rolls), generator=generator).tolist()
        if generator is not None
        else range(len(rolls))
    )
    order = list(order)
    for start in range(0, len(order), batch_size):
        chunk = [rolls[i] for i in order[start : start + batch_size]]
        steps = max(len(r) for r in chunk) - 1
        inputs = torch.zeros(steps, len(chunk), KEYS)
        targets = torch.zeros(steps, len(chunk), KEYS)
        mask = torch.zeros(steps, len(chunk))
        for b, roll in enumerate(chunk):
            n = len(roll) - 1
            inputs[:n, b], targets[:n, b], mask[:n, b] = roll[:-1], roll[1:], 1.0
        yield inputs, targets, mask
