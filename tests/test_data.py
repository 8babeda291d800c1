"""Data: real JSB and ptb-sample, batching, and one-line errors for bad files."""

import json
import shutil

import pytest
import torch

from rhnsearch.data import batches, batchify, load_dataset, windows
from rhnsearch.data.jsb import KEYS, load_jsb
from rhnsearch.errors import UserError

from conftest import http_file_server


def test_jsb_splits_and_piano_roll(jsb, data_dir):
    assert (len(jsb.train), len(jsb.valid), len(jsb.test)) == (229, 76, 77)
    raw = json.loads((data_dir / "jsb_chorales/jsb-chorales-quarter.json").read_text())
    first = raw["train"][0]
    roll = jsb.train[0]
    assert roll.shape == (len(first), KEYS)
    for t, step in enumerate(first):
        assert sorted(torch.nonzero(roll[t]).flatten().add(21).tolist()) == sorted(step)
    assert 25 <= min(len(r) for r in jsb.train) and max(len(r) for r in jsb.train) <= 129


def test_jsb_batches_pad_and_mask(jsb):
    x, y, m = next(batches(jsb.train[:3], 3))
    lengths = [len(r) - 1 for r in jsb.train[:3]]
    assert x.shape == (max(lengths), 3, KEYS) and m.sum() == sum(lengths)
    torch.testing.assert_close(y[: lengths[0] - 1, 0], x[1 : lengths[0], 0])


def test_ptb_sample_is_labelled_and_split(ptb_sample):
    assert ptb_sample.name == "ptb-sample"
    assert ptb_sample.test.numel() == 82430  # README: tokens with <eos>
    assert ptb_sample.train.numel() + ptb_sample.valid.numel() == 73760
    assert "<eos>" in ptb_sample.vocab and "<unk>" in ptb_sample.vocab


def test_batchify_and_windows_cover_the_stream():
    ids = torch.arange(103)
    streams = batchify(ids, 4)
    assert streams.shape == (25, 4) and torch.equal(streams[:, 1], torch.arange(25, 50))
    pairs = list(windows(streams, 10))
    assert [x.shape[0] for x, _ in pairs] == [10, 10, 4]
    torch.testing.assert_close(torch.cat([y for _, y in pairs]), streams[1:])


def copy_jsb(tmp_path, data_dir, edit=None):
    target = tmp_path / "jsb_chorales" / "jsb-chorales-quarter.json"
    target.parent.mkdir(parents=True)
    shutil.copy(data_dir / "jsb_chorales/jsb-chorales-quarter.json", target)
    if edit:
        raw = json.loads(target.read_text())
        edit(raw)
        target.write_text(json.dumps(raw))
    return target


def test_missing_data_names_file_dir_and_fetch_command(tmp_path):
    with pytest.raises(UserError) as err:
        load_dataset("jsb", data_dir=tmp_path)
    msg = str(err.value)
    assert "jsb-chorales-quarter.json" in msg and str(tmp_path) in msg
    assert "rhnsearch data fetch jsb" in msg and "\n" not in msg


def test_corrupt_file_is_a_one_line_error(tmp_path, data_dir):
    copy_jsb(tmp_path, data_dir, edit=lambda raw: raw["train"].pop())
    with pytest.raises(UserError, match="corrupt"):
        load_dataset("jsb", data_dir=tmp_path)


@pytest.mark.parametrize(
    "edit,match",
    [
        (lambda raw: raw["train"][0][0].append(200), "outside the piano range"),
        (lambda raw: raw.update(valid=[]), "split 'valid' has no chorale"),
        (lambda raw: raw.pop("test"), "must be a JSON object with keys"),
    ],
)
def test_bad_jsb_content(tmp_path, data_dir, edit, match):
    with pytest.raises(UserError, match=match):
        load_jsb(copy_jsb(tmp_path, data_dir, edit))


def test_truncated_json(tmp_path, data_dir):
    path = copy_jsb(tmp_path, data_dir)
    path.write_text(path.read_text()[:1000])
    with pytest.raises(UserError, match="cannot read JSB Chorales"):
        load_jsb(path)


def test_data_dir_from_environment(monkeypatch, data_dir):
    monkeypatch.setenv("RHNSEARCH_DATA_DIR", str(data_dir))
    assert load_dataset("jsb").name == "jsb"


def test_fetch_from_unreachable_source_fails_fast_and_writes_nothing(tmp_path):
    """A refused connection (port 9 on loopback; no network needed) is one clear line."""
    import os
    import subprocess
    import sys
    import time

    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rhnsearch.cli",
            "data",
            "fetch",
            "jsb",
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RHNSEARCH_DATA_MIRROR": "http://127.0.0.1:9"},
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "could not download" in lines[0]
    assert time.monotonic() - start < 60
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


@pytest.fixture
def mirror(tmp_path):
    """A real HTTP server on 127.0.0.1 serving a data-dir layout from tmp_path/'mirror'."""
    root = tmp_path / "mirror"
    root.mkdir()
    with http_file_server(root) as url:
        yield root, url


def test_fetch_from_mirror_checks_sha_and_writes_atomically(
    mirror, tmp_path, data_dir, monkeypatch
):
    from rhnsearch.data import fetch

    root, url = mirror
    monkeypatch.setenv("RHNSEARCH_DATA_MIRROR", url)
    served = root / "jsb_chorales" / "jsb-chorales-quarter.json"
    served.parent.mkdir()
    served.write_text(json.dumps({"train": [], "valid": [], "test": []}))  # wrong content
    target_dir = tmp_path / "data"
    with pytest.raises(UserError, match="wrong sha256"):
        fetch("jsb", target_dir)
    assert [p for p in target_dir.rglob("*") if p.is_file()] == []
    shutil.copy(data_dir / "jsb_chorales/jsb-chorales-quarter.json", served)
    (path,) = fetch("jsb", target_dir)
    assert path == target_dir / "jsb_chorales/jsb-chorales-quarter.json"
    assert load_dataset("jsb", data_dir=target_dir).name == "jsb"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left
