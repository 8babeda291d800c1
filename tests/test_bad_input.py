"""Bad input, each a one-line error with exit code 2 and nothing written: search spaces (a
table of cases and a property test of random mutations), data files, MLflow URIs, the UI's
port. Security: a checkpoint holding pickled objects is refused unread (that the UI listens
on loopback only: test_ui.py)."""

import functools
import json
import os
import socket
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rhnsearch.cli import main
from rhnsearch.errors import UserError
from rhnsearch.search.space import load_space

from conftest import JSB_SPACE, ROOT, http_file_server, rhnsearch_cli, rhnsearch_main

SPACES = sorted((ROOT / "spaces").glob("*.yaml"))
UNREACHABLE_RAY = ["--address", "127.0.0.1:9"]  # a space that wrongly passed stops here


def files_under(path: Path) -> list[Path]:
    return sorted(path.rglob("*"))


def one_line_error(code: int, err: str, expected: str):
    assert code == 2, err
    assert err.strip().count("\n") == 0 and err.startswith("rhnsearch: error: "), err
    assert expected in err, err


# -- search spaces ---------------------------------------------------------------------------
SPACE_CASES = {  # name: (--set overrides, expected part of the message)
    "unknown nested key": (["scheduler.grace=2"], "scheduler.grace: unknown key"),
    "unknown trial setting": (["fixed.learning_rate=0.1"], "unknown trial setting 'learning_rate'"),
    "unknown hyperparameter": (
        ["params.learning_rate={uniform: [0.1, 1.0]}"],
        "unknown hyperparameter 'learning_rate'",
    ),
    "samples not an int": (["samples=many"], "samples: Input should be a valid integer"),
    "archs not a list": (["archs=rhn"], "archs: Input should be a valid list"),
    "epochs not an int": (["fixed.epochs=ten"], "'ten'"),
    "lr not a float": (["fixed.lr=fast"], "fixed.lr='fast': must be a float"),
    "cpu not a number": (["resources.cpu=lots"], "resources.cpu"),
    "range of strings": (["params.lr={uniform: [a, b]}"], "params.lr.uniform.0"),
    "empty uniform": (["params.lr={uniform: [0.5, 0.5]}"], "uniform range [0.5, 0.5] is empty"),
    "empty randint": (["params.seed={randint: [10, 1]}"], "randint range [10, 1] is empty"),
    "empty choice": (["params.momentum={choice: []}"], "choice needs at least one value"),
    "no archs": (["archs=[]"], "archs: List should have at least 1 item"),
    "loguniform from 0": (
        ["params.lr={loguniform: [0, 1]}"],
        "loguniform bounds must be positive, got 0",
    ),
    "loguniform negative": (
        ["params.lr={loguniform: [-1, 1]}"],
        "loguniform bounds must be positive, got -1",
    ),
    "unknown dataset": (["dataset=mnist"], "unknown dataset 'mnist'"),
    "unknown arch": (["archs=[rhn, gru]"], "unknown arch 'gru'"),
    "unknown scheduler": (["scheduler.name=hyperband"], "scheduler.name"),
    "unknown search": (["search=grid"], "search"),
    "lstm with depth": (["archs=[lstm]"], "lstm has no recurrence depth"),
    "budget too small for depth 6": (
        ["budget={1: 6k, 2: 8k, 4: 12k, 6: 300}"],
        "budget 300 is too small for jsb rhn at depth 6",
    ),
    "budget misses a depth": (["budget={1: 6k}"], "budget has no entry for depth 2"),
    "budget and width": (["width=32"], "give either budget"),
    "depth 0": (["depths=[0, 2]"], "depths must be positive integers"),
    "negative depth": (["depths=[-1]"], "depths must be positive integers"),
    "fractional depth": (["depths=[1.5]"], "depths.0"),
    "depth as a word": (["depths=[two]"], "depths.0"),
    "no depths": (["depths=[]"], "depths: List should have at least 1 item"),
    "grace period past epochs": (["scheduler.grace_period=9"], "must be below fixed.epochs"),
    "override without =": (["samples"], "cannot read override 'samples'"),
}


def test_a_quoted_error_is_its_first_line_or_its_type():
    """What a one-line message quotes of another library's error: its first line, cut to a
    length; an error with no message (a bare OSError) is named by its type, not an IndexError."""
    from rhnsearch.errors import first_line

    assert first_line(OSError()) == "OSError"
    assert first_line(ValueError("  \n")) == "ValueError"
    assert first_line(RuntimeError("bucket gone\n  Traceback...")) == "bucket gone"
    assert first_line(RuntimeError("x" * 300)) == "x" * 200
    assert first_line(RuntimeError("x" * 300), 160) == "x" * 160


@pytest.mark.parametrize("case", list(SPACE_CASES))
def test_bad_space_is_one_line_and_writes_nothing(case, tmp_path, monkeypatch, capsys):
    overrides, expected = SPACE_CASES[case]
    monkeypatch.chdir(tmp_path)
    args = [arg for o in overrides for arg in ("--set", o)]
    code = main(["sweep", "run", str(JSB_SPACE), "--preset", "smoke", *args, *UNREACHABLE_RAY])
    one_line_error(code, capsys.readouterr().err, expected)
    assert files_under(tmp_path) == []


@pytest.mark.parametrize(
    "text,preset,expected",
    [
        ("archs: [rhn\n", None, "line 2: not valid YAML"),
        ("- rhn\n- lstm\n", None, "a search space is a YAML mapping of fields"),
        (JSB_SPACE.read_text(), "huge", "no preset 'huge'; this space has paper, cpu, smoke"),
        (None, None, "not found"),
    ],
)
def test_bad_space_file_is_one_line(text, preset, expected, tmp_path, monkeypatch, capsys):
    space = tmp_path / "space.yaml"
    if text is not None:
        space.write_text(text)
    monkeypatch.chdir(tmp_path)
    code = main(
        ["sweep", "run", str(space), *(["--preset", preset] if preset else []), *UNREACHABLE_RAY]
    )
    one_line_error(code, capsys.readouterr().err, expected)
    assert files_under(tmp_path) == ([space] if text is not None else [])


# Random mutations of the shipped spaces: any value where any field was, fields dropped,
# fields added, and `--set` overrides typed by hand. Each must load or be one UserError line.
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 10),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["rhn", "lstm", "asha", "fifo", "32M", "6k", "ptb", "jsb", "1e400"]),
    st.lists(st.one_of(st.integers(-2, 12), st.floats(-1, 2), st.text(max_size=3)), max_size=3),
    st.dictionaries(
        st.one_of(st.text(max_size=6), st.integers(-2, 12)),
        st.one_of(st.integers(-2, 12), st.floats(), st.text(max_size=3)),
        max_size=2,
    ),
)


def key_paths(node, prefix=()) -> list[tuple]:
    """Every path of keys (and list indices) into a YAML document."""
    paths = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            paths += key_paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            paths += key_paths(value, prefix + (i,))
    return paths


@st.composite
def mutated_spaces(draw):
    """(raw YAML document, preset, overrides) near a shipped space."""
    space = draw(st.sampled_from(SPACES))
    doc = yaml.safe_load(space.read_text())
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(key_paths(doc)))
        *parents, last = path
        parent = functools.reduce(lambda node, key: node[key], parents, doc)
        action = draw(st.sampled_from(["set", "set", "drop", "add"]))
        if action == "set":
            parent[last] = draw(VALUES)
        elif action == "drop":
            del parent[last]
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(VALUES)
    dotted = [".".join(map(str, p)) for p in key_paths(doc) if all(isinstance(k, str) for k in p)]
    overrides = draw(
        st.lists(
            st.builds(
                "{}={}".format,
                st.sampled_from(dotted or ["samples"]),
                st.one_of(
                    VALUES.map(
                        lambda v: (
                            yaml.safe_dump(v, default_flow_style=True)
                            .strip()
                            .removesuffix("...")
                            .strip()
                        )
                    ),
                    st.text(max_size=6),
                ),
            ),
            max_size=2,
        )
    )
    preset = draw(st.sampled_from([None, "smoke", "paper"]))
    return doc, preset, overrides


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_spaces())
def test_mutated_spaces_load_or_fail_in_one_line(case):
    doc, preset, overrides = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "space.yaml"
        path.write_text(yaml.safe_dump(doc))
        try:
            load_space(path, preset=preset, overrides=overrides)
        except UserError as exc:
            assert str(exc) and "\n" not in str(exc), str(exc)


# -- data ------------------------------------------------------------------------------------
JSB_FILE = "jsb_chorales/jsb-chorales-quarter.json"


def truncate(raw: str) -> str:
    return raw[:1000]


def pitch_out_of_range(raw: str) -> str:
    doc = json.loads(raw)
    doc["train"][0][0].append(200)
    return json.dumps(doc)


def empty_valid_split(raw: str) -> str:
    return json.dumps({**json.loads(raw), "valid": []})


@pytest.mark.parametrize(
    "edit,expected,run",
    [
        (None, "not found in data dir", rhnsearch_cli),  # and once in a process of its own
        (truncate, "is corrupt (sha256 differs", rhnsearch_main),
        (pitch_out_of_range, "is corrupt (sha256 differs", rhnsearch_main),
        (empty_valid_split, "is corrupt (sha256 differs", rhnsearch_main),
    ],
)
def test_bad_data_is_one_line_and_writes_nothing(edit, expected, run, tmp_path, data_dir):
    """Through the CLI: the sha256 check catches any edit before the JSON is parsed (the
    parser's own errors are in test_data.py); a missing file with no network is one line."""
    data, work = tmp_path / "data", tmp_path / "work"
    work.mkdir()
    if edit:
        (data / JSB_FILE).parent.mkdir(parents=True)
        (data / JSB_FILE).write_text(edit((data_dir / JSB_FILE).read_text()))
    before = {p: p.read_bytes() for p in files_under(data) if p.is_file()}
    proc = run(
        "sweep",
        "run",
        JSB_SPACE,
        "--preset",
        "smoke",
        "--data-dir",
        data,
        cwd=work,
        check=False,
        env={"RHNSEARCH_DATA_MIRROR": "http://127.0.0.1:9"},
    )
    one_line_error(proc.returncode, proc.stderr, expected)
    assert files_under(work) == []
    assert {p: p.read_bytes() for p in files_under(data) if p.is_file()} == before


# -- addresses -------------------------------------------------------------------------------
@pytest.fixture
def web_server(tmp_path):
    """A plain HTTP file server on loopback: reachable, but not MLflow."""
    root = tmp_path / "www"
    root.mkdir()
    with http_file_server(root) as url:
        yield url


@pytest.mark.parametrize("uri", ["WEB", "ftp://127.0.0.1/mlflow", "nosuch://mlflow"])
def test_wrong_mlflow_uri_is_one_line(uri, web_server, tmp_path, data_dir):
    uri = web_server if uri == "WEB" else uri
    work = tmp_path / "work"
    work.mkdir()
    proc = rhnsearch_main(
        "sweep",
        "run",
        JSB_SPACE,
        "--preset",
        "smoke",
        "--data-dir",
        data_dir,
        "--tracking-uri",
        uri,
        cwd=work,
        check=False,
    )
    one_line_error(proc.returncode, proc.stderr, f"{uri} is not a working MLflow tracking store")
    assert files_under(work) == []


def test_ui_port_in_use_is_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = rhnsearch_main("ui", "--port", port, cwd=tmp_path, check=False)
    one_line_error(proc.returncode, proc.stderr, f"port {port} on 127.0.0.1 is already in use")
    assert files_under(tmp_path) == []


READERS = {  # the commands that only read a store (their output aside)
    "results export": ["results", "export", "--experiment", "jsb_optimization", "--out", "t.csv"],
    "results plot": ["results", "plot", "swarm", "--experiment", "jsb", "--out", "s.png"],
    "results table": ["results", "table", "--study", "jsb_optimization"],
    "results report": ["results", "report", "--experiment", "jsb_optimization", "--out", "r.html"],
    "analyze": ["analyze", "gates", "0123456789abcdef"],
}


@pytest.mark.parametrize("store", ["--tracking-uri", "default"])
@pytest.mark.parametrize("command", list(READERS))
def test_reading_commands_make_no_store(command, store, tmp_path):
    """A command that only reads, on a store that is not there: one line naming it, exit 2,
    and no file made (MLflow would make an empty database and print its migrations)."""
    where = ["--tracking-uri", "sqlite:///missing.db"] if store != "default" else []
    proc = rhnsearch_main(
        *READERS[command], *where, cwd=tmp_path, check=False, env={"MLFLOW_TRACKING_URI": ""}
    )
    one_line_error(proc.returncode, proc.stderr, "no MLflow store at")
    assert files_under(tmp_path) == []


def test_sweep_status_of_an_unreachable_cluster_writes_nothing(tmp_path):
    proc = rhnsearch_main(
        "sweep",
        "status",
        "rhnsearch-x",
        "--address",
        "http://127.0.0.1:9",
        cwd=tmp_path,
        check=False,
    )
    one_line_error(proc.returncode, proc.stderr, "not reachable")
    assert files_under(tmp_path) == []


# -- security --------------------------------------------------------------------------------
class Payload:
    """Unpickling this runs os.mkdir(marker): what a hostile checkpoint could do."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_checkpoint_with_pickled_code_is_refused_unread(tmp_path, jsb, data_dir):
    from rhnsearch.train import CHECKPOINT_FILE, Trainer, TrialConfig

    marker = tmp_path / "executed"
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    torch.save({"model": Payload(marker), "epoch": 1}, ckpt / CHECKPOINT_FILE)
    saved = (ckpt / CHECKPOINT_FILE).read_bytes()
    trainer = Trainer(TrialConfig(width=8, epochs=1), jsb)
    with pytest.raises(UserError) as err:
        trainer.load(ckpt)
    assert "\n" not in str(err.value) and str(ckpt / CHECKPOINT_FILE) in str(err.value)
    assert not marker.exists()
    proc = rhnsearch_cli(
        "train",
        "--width",
        "8",
        "--epochs",
        "1",
        "--data-dir",
        data_dir,
        "--checkpoint-dir",
        ckpt,
        cwd=tmp_path,
        check=False,
        timeout=300,
    )
    one_line_error(proc.returncode, proc.stderr, "refused")
    assert not marker.exists() and (ckpt / CHECKPOINT_FILE).read_bytes() == saved


# -- cells of one's own ----------------------------------------------------------------------
OWN_CELLS = '''
import torch
from torch import nn


class NotAModule:
    def __init__(self, input_size, width, depth):
        self.input_size, self.width, self.depth = input_size, width, depth


class WrongShapes(nn.Module):
    """Follows the interface but for its step's state: (B, 2n), not (B, n)."""

    def __init__(self, input_size, width, depth):
        super().__init__()
        self.input_size, self.width, self.depth = input_size, width, depth
        self.encode = nn.Linear(input_size, width)

    def project(self, x):
        return self.encode(x)

    def forward(self, z, s, mask=None):
        return torch.cat([s, z], -1), {}
'''
OWN_CELL_CASES = {  # NAME of the module written -> (the arch, what the error says)
    "missing module": ("nosuch_{m}:Cell", "cannot import it"),
    "missing class": ("{m}:NoSuchCell", "cannot import it"),
    "not an nn.Module": ("{m}:NotAModule", "it is not an nn.Module class"),
    "wrong step shapes": ("{m}:WrongShapes", "project or a step gives tensors of the wrong shape"),
}


@pytest.mark.parametrize(
    "command",
    [
        ["run", *UNREACHABLE_RAY],  # refused before it reaches for the cluster
        ["submit", "--address", "http://127.0.0.1:9"],  # a Ray Job
        ["submit", "--slurm", "--dry-run"],  # a Slurm job's script
    ],
)
def test_a_request_is_checked_alike_however_it_is_sent(command, tmp_path):
    """One check of a sweep's request (`checks.checked_space`) for `sweep run`, a Ray Job and
    a Slurm job: an Optuna search with more than one seed a setting is one line, exit 2,
    nothing written, before a cluster is reached or a script made."""
    proc = rhnsearch_main(
        "sweep",
        command[0],
        ROOT / "spaces" / "ptb_hsg.yaml",  # its settings sample no seed: a random search's
        "--set",  # seeds may repeat them
        "seeds=2",
        "--search",
        "optuna",
        "--tracking-uri",
        "http://127.0.0.1:9",
        "--storage-path",
        tmp_path / "sweeps",
        *command[1:],
        cwd=tmp_path,
        check=False,
    )
    one_line_error(proc.returncode, proc.stderr, "seeds (2) repeats each setting of a random")
    assert files_under(tmp_path) == []


@pytest.mark.parametrize("command", ["run", "check"])
@pytest.mark.parametrize("case", list(OWN_CELL_CASES))
def test_bad_own_cell_is_one_line_before_ray(case, command, tmp_path, monkeypatch):
    """A cell of one's own that is not there, not a class of the module, not an nn.Module,
    or whose step gives the wrong shapes: `sweep run` and `sweep check` refuse it in one
    line, exit 2, no traceback, nothing written, before Ray (run points at an unreachable
    address: a cell that wrongly passed would stop there, not start a sweep)."""
    module = f"owncells_{uuid.uuid4().hex[:8]}"  # a name of its own: imports are cached
    lab, cwd = tmp_path / "lab", tmp_path / "cwd"
    lab.mkdir(), cwd.mkdir()
    (lab / f"{module}.py").write_text(OWN_CELLS)
    monkeypatch.syspath_prepend(str(lab))
    arch, expected = OWN_CELL_CASES[case]
    where = UNREACHABLE_RAY if command == "run" else []
    proc = rhnsearch_main(
        "sweep",
        command,
        JSB_SPACE,
        "--preset",
        "smoke",
        "--set",
        f'archs=[rhn, "{arch.format(m=module)}"]',
        *where,
        cwd=cwd,
        check=False,
    )
    one_line_error(proc.returncode, proc.stderr, expected)
    assert "Traceback" not in proc.stderr and arch.format(m=module) in proc.stderr
    assert os.listdir(cwd) == []  # no results/, no mlflow.db
    for name in [n for n in sys.modules if module in n]:
        monkeypatch.delitem(sys.modules, name)


UNREACHABLE = ["--address", "127.0.0.1:1"]
LEAVE_NO_FILE = {  # the command -> its exit code
    "status of an unknown name": (["sweep", "status", "nosuch"], 2),
    "resume of an unknown name": (["sweep", "resume", "nosuch"], 2),
    "extend of an unknown name": (["sweep", "extend", "nosuch", "--samples", "4"], 2),
    "resume of an unknown name, on a cluster": (
        ["sweep", "resume", "nosuch", *UNREACHABLE, "--storage-path", "{store}"],
        2,
    ),
    "extend of an unknown name, on a cluster": (
        ["sweep", "extend", "nosuch", "--samples", "4", *UNREACHABLE, "--storage-path", "{store}"],
        2,
    ),
    "confirm of an unknown name": (["sweep", "confirm", "nosuch", "--top", "1", "--seeds", "2"], 2),
    "confirm of an unknown name, on a cluster": (
        [
            "sweep",
            "confirm",
            "nosuch",
            "--top",
            "1",
            "--seeds",
            "2",
            *UNREACHABLE,
            "--storage-path",
            "{store}",
        ],
        2,
    ),
    "check": (["sweep", "check", JSB_SPACE, "--preset", "smoke"], 0),
    "plan": (
        [
            "sweep",
            "plan",
            JSB_SPACE,
            "--preset",
            "smoke",
            "--set",
            "archs=[rhn]",
            "--set",
            "depths=[1]",
            "--data-dir",
            "{data}",
        ],
        0,
    ),  # fmt: skip
}


@pytest.mark.parametrize("case", list(LEAVE_NO_FILE))
def test_commands_that_run_no_sweep_leave_the_working_dir_empty(case, tmp_path, data_dir):
    """`sweep status`, `check` and `plan`, and `resume`/`extend`/`confirm` of a name that is not
    there (on a local Ray, and at an unreachable cluster with a storage path): nothing in the
    working dir (no results/, no mlflow.db), nor in the storage; an unknown name is one line."""
    args, code = LEAVE_NO_FILE[case]
    cwd, store = tmp_path / "cwd", tmp_path / "store"
    cwd.mkdir()
    args = [str(a).format(store=store, data=data_dir) for a in args]
    proc = rhnsearch_main(*args, cwd=cwd, check=False, env={"RHNSEARCH_STORAGE": ""})
    if code == 2:
        one_line_error(proc.returncode, proc.stderr, "no sweep named 'nosuch'")
    else:
        assert proc.returncode == 0, proc.stderr
    assert os.listdir(cwd) == [] and not store.exists()


@pytest.mark.parametrize("wait", ["soon", "-1", "inf"])
def test_a_bad_mlflow_wait_is_one_line_before_anything_is_stored(wait, tmp_path, data_dir):
    """$RHNSEARCH_MLFLOW_WAIT (how long a finished sweep waits for an unreachable tracking
    server) that is not a number of seconds: one line, exit 2, nothing written."""
    proc = rhnsearch_main(
        *("sweep", "run", JSB_SPACE, "--preset", "smoke", "--data-dir", data_dir),
        *UNREACHABLE_RAY,
        cwd=tmp_path,
        check=False,
        env={"RHNSEARCH_MLFLOW_WAIT": wait},
    )
    one_line_error(proc.returncode, proc.stderr, "RHNSEARCH_MLFLOW_WAIT")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "command",
    [
        ["report", "--out", "report.html"],
        ["table"],
        ["plot", "swarm", "--out", "swarm.png"],
    ],
)
def test_a_sweep_whose_trials_all_failed_is_one_line_for_the_results(command, tmp_path):
    """Every trial of the sweep failed before its first epoch (a real MLflow store: the parent
    run and three failed trial runs, their params only): the report, table and plot say in
    one line that the trials logged no metric, exit 2, writing nothing (the report was a
    pandas KeyError traceback)."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("failed", artifact_location=(tmp_path / "a").as_uri())
    tags = {"sweep": "s", "study": "jsb_optimization", "report": "optimization"}
    parent = client.create_run(experiment, run_name="s", tags={**tags, "kind": "sweep"})
    for i in range(3):
        run = client.create_run(
            experiment,
            run_name=f"t{i}",
            tags={"mlflow.parentRunId": parent.info.run_id, "sweep": "s", "kind": "trial",
                  "trial_id": f"t{i}", "status": "failed", "error": "RuntimeError: no"},
        )  # fmt: skip
        params = {"arch": "rhn", "depth": 1, "width": 8, "tied": False, "n_params": 100}
        params |= {"cell": "rhn d1 w8", "dataset": "jsb", "lr": 0.1 * (i + 1), "seed": i}
        for key, value in params.items():
            client.log_param(run.info.run_id, key, value)
        client.set_terminated(run.info.run_id, "FAILED")
    client.set_terminated(parent.info.run_id, "FINISHED")
    before = files_under(tmp_path)
    proc = rhnsearch_main(
        "results", *command, "--experiment", "failed", "--tracking-uri", uri,
        cwd=tmp_path, check=False,
    )  # fmt: skip
    one_line_error(proc.returncode, proc.stderr, "no metric 'best_valid_loss' in sweep s: its")
    assert files_under(tmp_path) == before


def test_an_mlflow_the_sweep_cannot_log_with_is_one_line_before_ray(tmp_path, data_dir):
    """An MLflow release outside compat/mlflow.py's SUPPORTED (here one that says it is
    3.19.0): `sweep run`, `resume`, `extend` and `confirm` each refuse in one line, exit 2,
    before Ray starts and before anything is written. (The check was the sender's, at a
    trial's first record: retried as "MLflow is not answering", the sweep logging nothing.)"""
    import ray
    from test_old_layout import unpacked

    from rhnsearch import compat

    real = compat.installed

    def installed(distribution: str) -> str:
        return "3.19.0" if distribution == "mlflow" else real(distribution)

    compat.in_range.cache_clear()
    old = ["--storage-path", None]
    commands = {
        "run": ["run", JSB_SPACE, "--preset", "smoke", "--data-dir", data_dir],
        "resume": ["resume", "old-killed", *old],
        "extend": ["extend", "old-finished", "--samples", "3", *old],
        "confirm": ["confirm", "old-finished", "--top", "1", "--seeds", "2", *old],
    }
    try:
        compat.installed = installed
        with unpacked("dd9c428", data_dir) as root:
            before = sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*"))
            for command, args in commands.items():
                cwd = tmp_path / command
                cwd.mkdir()
                args = [root / "sweeps" if a is None else a for a in args]
                proc = rhnsearch_main("sweep", *args, cwd=cwd, check=False)
                one_line_error(proc.returncode, proc.stderr, "mlflow 3.19.0 is installed")
                assert "install 'mlflow>=3.17,<3.19'" in proc.stderr, proc.stderr
                assert not ray.is_initialized() and os.listdir(cwd) == [], command
            assert sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*")) == before
    finally:
        compat.installed = real
        compat.in_range.cache_clear()
