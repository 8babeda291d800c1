"""A sweep's record reads the state file of a sweep written before it existed (rhnsearch at
dd9c428: tests/data/sweep_state_dd9c428*.json, a smoke sweep as run, then extended to 3
samples) and writes it back with the same values, in today's format (its version); its paths
are the layout's."""

import json
import shutil
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

from rhnsearch.errors import UserError
from rhnsearch.files.layout import STATE_FILE, SweepPaths
from rhnsearch.sweep.record import Round, SweepRecord, read_record, write_record

DATA = Path(__file__).parent / "data"


def stored(tmp_path: Path, fixture: str) -> tuple[SweepRecord, dict]:
    """The record read from FIXTURE laid out as sweep `old` in tmp_path, and the file's JSON."""
    (tmp_path / "old").mkdir()
    shutil.copy(DATA / fixture, tmp_path / "old" / STATE_FILE)
    return read_record(str(tmp_path), "old"), json.loads((DATA / fixture).read_text())


def test_an_old_sweep_reads_and_is_written_back_with_its_values_as_version_2(tmp_path):
    record, old = stored(tmp_path, "sweep_state_dd9c428.json")
    assert "version" not in old and "rounds" not in old
    assert record.rounds == (Round(2, 1, (0, 0)),) and record.overrides == (
        "archs=[rhn]",
        "depths=[1]",
    )
    assert record.parent_run.run_id == old["parent_run_id"]
    with pytest.raises(FrozenInstanceError):
        record.trials = 3
    write_record(replace(record, storage=str(tmp_path)))
    again = json.loads((tmp_path / "old" / STATE_FILE).read_text())
    one_round = [{"samples": 2, "seeds": 1, "done": [0, 0]}]
    assert again == {
        **old,
        "version": 3,
        "storage": str(tmp_path),
        "rounds": one_round,
        "space": {**old["space"], "quantity": "best_valid_loss"},  # a field added since
    }
    assert read_record(str(tmp_path), "old") == replace(record, storage=str(tmp_path))


def test_an_old_extended_sweep_reads_and_extending_writes_what_the_old_code_wrote(tmp_path):
    record, old = stored(tmp_path, "sweep_state_dd9c428_extended.json")
    assert record.rounds == (Round(2, 1), Round(3, 1, (2, 1)))
    here = replace(record, storage=str(tmp_path)).paths
    assert here.round_dirs == [str(tmp_path / "old"), str(tmp_path / "old" / "extend-1")]
    space = {**old["space"], "quantity": "best_valid_loss"}  # a field added since, its default
    assert record.to_json() == {**old, "version": 3, "space": space}
    first = SweepRecord.from_json(json.loads((DATA / "sweep_state_dd9c428.json").read_text()))
    assert first.extended(record.space, old["trials"]) == record


def test_a_state_file_from_before_plans_reads_with_none():
    old = json.loads((DATA / "sweep_state_dd9c428_extended.json").read_text())
    del old["plan"]
    record = SweepRecord.from_json(old)
    assert record.plan is None and record.to_json()["plan"] is None


@pytest.mark.parametrize("version", [4, 0, "2"])
def test_a_record_of_a_version_this_code_does_not_read_is_one_line(tmp_path, version):
    """A newer rhnsearch's record is refused, not read and written back without what it
    added; nothing is written."""
    record, _ = stored(tmp_path, "sweep_state_dd9c428_extended.json")
    path = tmp_path / "old" / STATE_FILE
    path.write_text(json.dumps({**record.to_json(), "version": version}))
    before = path.read_bytes()
    with pytest.raises(UserError, match=rf"{path} is of format version {version!r}, and this "):
        read_record(str(tmp_path), "old")
    assert path.read_bytes() == before


def test_the_sweeps_paths_follow_the_layout(tmp_path):
    paths = SweepPaths("s3://bucket/sweeps?scheme=http", "jsb", rounds=2)
    assert paths.state == "s3://bucket/sweeps/jsb/rhnsearch_sweep.json?scheme=http"
    assert paths.round_dirs[1] == "s3://bucket/sweeps/jsb/extend-1?scheme=http"
    assert paths.journal_mirror == "s3://bucket/sweeps/jsb/mlflow_pending.jsonl?scheme=http"
    assert paths.local == Path("results/sweeps/jsb").resolve()
    assert SweepPaths.of_folder(paths.sweep, "jsb") == replace(paths, rounds=1)
    local = SweepPaths(str(tmp_path), "jsb")
    assert local.local == tmp_path / "jsb" and local.journal_mirror is None
    assert local.slurm_dir == tmp_path / "jsb" / "slurm"


def test_an_unknown_sweep_is_one_line_naming_the_known(tmp_path):
    stored(tmp_path, "sweep_state_dd9c428.json")
    with pytest.raises(UserError, match=r"no sweep named 'nope' .* known sweeps are old \("):
        read_record(str(tmp_path), "nope")


def test_a_record_reads_without_its_own_cells_module_which_running_it_needs(tmp_path):
    """A sweep of a cell of one's own is read (`sweep status`, `--watch`) where its module is
    not importable: its space was checked when it ran. Running it (`cell_modules`, which
    resume, extend and confirm take before Ray starts) needs the module, in one line."""
    record, _ = stored(tmp_path, "sweep_state_dd9c428_extended.json")
    data = record.to_json()
    data["space"]["archs"] = ["nosuchmodule_of_mine:MyCell"]
    (tmp_path / "old" / STATE_FILE).write_text(json.dumps(data))
    mine = read_record(str(tmp_path), "old")
    assert mine.space.archs == ["nosuchmodule_of_mine:MyCell"]
    with pytest.raises(UserError, match=r"nosuchmodule_of_mine:MyCell: cannot import it"):
        _ = mine.space.cell_modules
