"""What produced a run: rhnsearch's version and git commit (MLflow's standard source tags, with
a dirty flag), and the versions of the libraries that trained and scheduled it. Every run of a
sweep carries these tags; where each trial trained (node, device, GPUs) is tagged per trial.

A sweep submitted as a Ray Job runs from a copy of the project without its .git: the
submitting machine's commit comes along in the job's environment (RHNSEARCH_GIT_COMMIT,
RHNSEARCH_GIT_DIRTY).
"""

import contextlib
import functools
import os
import subprocess
from importlib import metadata
from pathlib import Path

from . import __version__

LIBRARIES = ("torch", "ray", "mlflow", "optuna")
COMMIT_TAG, DIRTY_TAG = "mlflow.source.git.commit", "git_dirty"
PLACEMENT_TAGS = ("host", "node_ip", "node_id", "device", "gpu_ids", "cpu")  # set per trial
TAGS = (
    COMMIT_TAG,
    DIRTY_TAG,
    "rhnsearch_version",
    *(f"{lib}_version" for lib in LIBRARIES),
    *PLACEMENT_TAGS,
)  # what a run records of its making, in the order tables show it
COMMIT_ENV, DIRTY_ENV = "RHNSEARCH_GIT_COMMIT", "RHNSEARCH_GIT_DIRTY"
SOURCE = Path(__file__).resolve().parent.parent  # the checkout, if rhnsearch runs from one


def _git(*args: str) -> str | None:
    if not (SOURCE / ".git").exists():
        return None
    try:
        return subprocess.run(
            ["git", "-C", str(SOURCE), *args],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit() -> tuple[str | None, bool | None]:
    """(commit, whether the checkout has uncommitted changes) of the code that runs."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV], os.environ.get(DIRTY_ENV) == "true"
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return None, None
    return commit, bool(_git("status", "--porcelain", "--untracked-files=no"))


@functools.cache
def cpu_name() -> str:
    """This machine's CPU model and the instruction set torch's CPU kernels dispatch to, e.g.
    "AMD EPYC (AVX512)": the same seed and config give the same numbers on the same CPU, but
    not bit for bit on another (its kernels sum in another order; a long training amplifies
    that), so a run records it."""
    import torch

    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    return f"{model} ({torch.backends.cpu.get_cpu_capability()})"


@functools.cache
def provenance_tags() -> dict[str, str]:
    """MLflow tags naming the code and libraries of this process."""
    tags = {
        "mlflow.source.name": "rhnsearch",
        "mlflow.source.type": "LOCAL",
        "rhnsearch_version": __version__,
        **{f"{lib}_version": metadata.version(lib) for lib in LIBRARIES},
    }
    commit, dirty = git_commit()
    if commit:
        tags.update({COMMIT_TAG: commit, DIRTY_TAG: str(dirty)})
    return tags
