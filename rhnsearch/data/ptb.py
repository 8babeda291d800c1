"""Penn Treebank (Mikolov format) and the ptb-sample corpus: ids, streams, BPTT windows."""

from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import UserError

EOS = "<eos>"
# PTB's published size (Mikolov's split, <eos> counted as a token).
PTB_VOCAB = 10000
PTB_TOKENS = {"train": 929_589, "valid": 73_760, "test": 82_430}


@dataclass
class PTBData:
    """Token ids per split (1-D LongTensors) and the vocabulary."""

    train: torch.Tensor
    valid: torch.Tensor
    test: torch.Tensor
    vocab: list
    name: str = "ptb"

    def split(self, name: str) -> torch.Tensor:
        return getattr(self, name)


def read_lines(path: Path) -> list[list[str]]:
    """Each line's words plus <eos>."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    words = [line.split() + [EOS] for line in lines if line.strip()]
    if not words:
        raise UserError(f"{path} has no text: delete it and fetch the data again")
    return words


def build(name: str, train: list, valid: list, test: list, vocab_from: list) -> PTBData:
    vocab = sorted({w for line in vocab_from for w in line})
    index = {w: i for i, w in enumerate(vocab)}
    unk = index.get("<unk>")

    def ids(lines):
        try:
            return torch.tensor(
                [index[w] if unk is None else index.get(w, unk) for line in lines for w in line],
                dtype=torch.long,
            )
        except KeyError as exc:
            raise UserError(f"{name}: word {exc} is not in the training vocabulary") from None

    return PTBData(ids(train), ids(valid), ids(test), vocab, name)


def load_ptb(root: Path) -> PTBData:
    """The real PTB: vocabulary from ptb.train.txt."""
    train, valid, test = (read_lines(root / f"ptb/ptb.{s}.txt") for s in ("train", "valid", "test"))
    return build("ptb", train, valid, test, vocab_from=train)


def load_ptb_sample(root: Path, train_fraction: float = 0.9) -> PTBData:
    """ptb-sample: train on the first 90% of ptb.valid.txt's lines, validate on the rest,
    test on ptb.test.txt. Its vocabulary is every word of those two files (all of them are
    in PTB's closed 10k vocabulary). Never to be reported as PTB.
    """
    lines = read_lines(root / "ptb/ptb.valid.txt")
    cut = int(len(lines) * train_fraction)
    test = read_lines(root / "ptb/ptb.test.txt")
    return build("ptb-sample", lines[:cut], lines[cut:], test, vocab_from=lines + test)


def ptb_sized(seed: int = 0) -> PTBData:
    """Random token ids in PTB's size and vocabulary: a model's step costs what it costs on
    PTB (which words it reads changes no arithmetic), so a plan can time PTB's cells without
    its text. Never trained on."""
    generator = torch.Generator().manual_seed(seed)
    ids = {
        split: torch.randint(PTB_VOCAB, (n,), generator=generator)
        for split, n in PTB_TOKENS.items()
    }
    return PTBData(**ids, vocab=[f"w{i}" for i in range(PTB_VOCAB)])


def batchify(ids: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Cut the token stream into `batch_size` contiguous streams: (N, B)."""
    n = ids.numel() // batch_size
    if n < 2:
        raise UserError(f"{ids.numel()} tokens are too few for batch size {batch_size}")
    return ids[: n * batch_size].view(batch_size, n).t().contiguous()


def windows(streams: torch.Tensor, bptt: int):
    """Yield (inputs, targets), each (t, B) with t <= bptt, covering the streams in order."""
    for start in range(0, streams.shape[0] - 1, bptt):
        t = min(bptt, streams.shape[0] - 1 - start)
        yield streams[start : start + t], streams[start + 1 : start + 1 + t]
