"""Results read from the MLflow store alone: exports, the papers' tables and plots.

Labels shared by tables and plots: ptb-sample is always called ptb-sample, never PTB.
"""

ARCH_LABELS = {
    "rhn": "RHN",
    "hsg": "RHN+HSG",
    "dtrnn": "DT-RNN",
    "dtsrnn": "DT(S)-RNN",
    "lstm": "LSTM",
}
DATASET_LABELS = {"jsb": "JSB Chorales", "ptb": "PTB", "ptb-sample": "ptb-sample"}


def arch_label(arch: str) -> str:
    """The papers' name of a built-in arch; a cell of one's own (module:Class) by its class."""
    return ARCH_LABELS.get(arch, arch.rpartition(":")[2])


def dataset_label(dataset: str) -> str:
    return DATASET_LABELS.get(dataset, dataset)


def arch_order(arch: str) -> int:
    """Architectures in the papers' order (RHN first), unknown ones last."""
    return list(ARCH_LABELS).index(arch) if arch in ARCH_LABELS else len(ARCH_LABELS)
