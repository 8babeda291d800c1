"""The Python API example in README.md runs as written (from a directory holding the
project's spaces/), on the real JSB data and a local Ray."""

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Python API") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
@pytest.mark.cluster  # the example runs a sweep on a local Ray
def test_readme_python_example_runs(tmp_path, data_dir):
    code = readme_example()
    assert 8 <= len(code.strip().splitlines()) <= 14
    (tmp_path / "spaces").symlink_to(ROOT / "spaces")
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RHNSEARCH_DATA_DIR": str(data_dir)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"test loss \d+\.\d\d nats per time step", lines[0]), lines
    assert lines[1] == "{'transform': (10, 4, 3, 32), 'hsg': (10, 3, 32)}", lines
    assert "rhn d1" in proc.stdout and "completed" in proc.stdout
    assert (tmp_path / "results" / "mlflow.db").exists()
