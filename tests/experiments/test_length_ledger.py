"""The length experiment's ledger read back (``results/<run>.json``, `bdh.experiments.length.records`) and what it
checks before its first training step (`bdh.experiments.length.preflight`): damaged records named, never counted."""

from __future__ import annotations

import json

import pytest

from bdh.errors import UserError
from bdh.experiments.length.records import RecordError, read_record

ROW = {"length": 64, "read": "state", "status": "ok", "accuracy": 0.5, "low": 0.4, "high": 0.6}
RECORD = {"model": "bdh", "task": "recall_gap", "seed": 0, "params": 10, "rows": [ROW]}


def _written(tmp_path, data: bytes):
    path = tmp_path / "out" / "results" / "bdh-recall_gap-s0.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return path


def test_a_record_as_written_reads_back(tmp_path):
    path = _written(tmp_path, json.dumps(RECORD).encode())
    assert read_record(path.parent.parent, "bdh", "recall_gap", 0) == RECORD
    assert read_record(path.parent.parent, "bdh", "recall_gap", 1) is None  # no record: a run to make


@pytest.mark.parametrize(
    "data, said",
    [
        (json.dumps(RECORD).encode()[:40], "is not JSON"),
        (b"", "is not JSON"),
        (b"[]", "JSON list, not an object"),
        (b"{}", "has no model, task, seed, rows"),
        (b"\x89PNG\r\n\x1a\n\xff\xfe", "is not text"),
        (json.dumps({**RECORD, "rows": [ROW, ROW]}).encode(), "a second time"),
        (json.dumps({**RECORD, "rows": [{**ROW, "accuracy": float("nan")}]}).encode(), "not a finite number"),
        (json.dumps({**RECORD, "rows": [{**ROW, "accuracy": 5.0}]}).encode(), "not a fraction"),
        (json.dumps({**RECORD, "rows": [{**ROW, "accuracy": 1e308}]}).encode(), "not a fraction"),
        (json.dumps({**RECORD, "rows": [{**ROW, "accuracy": "0.5"}]}).encode(), "not a finite number"),
        (json.dumps({**RECORD, "rows": ["x"]}).encode(), "not a read row"),
        (json.dumps({**RECORD, "rows": {}}).encode(), "not a list"),
        (json.dumps({**RECORD, "seed": 1}).encode(), "record of bdh-recall_gap-s1"),
    ],
)
def test_a_damaged_record_is_one_line_with_the_command_that_rebuilds_it(tmp_path, data, said):
    path = _written(tmp_path, data)
    with pytest.raises(RecordError) as info:
        read_record(path.parent.parent, "bdh", "recall_gap", 0)
    message = str(info.value)
    assert isinstance(info.value, UserError) and "\n" not in message
    assert said in message and str(path) in message
    assert f"bdh experiment length --out {tmp_path / 'out'} --resume" in message and "--quick" in message


def test_rows_at_other_counts_of_facts_are_not_repeats(tmp_path):
    rows = [ROW, {**ROW, "facts": 2}, {**ROW, "facts": 4}]
    path = tmp_path / "out" / "results" / "bdh-recall_gap-D4-s0.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**RECORD, "facts": 4, "rows": rows}))
    assert read_record(path.parent.parent, "bdh", "recall_gap", 0, facts=4)["rows"] == rows
    path.rename(path.with_name("bdh-recall_gap-s0.json"))  # another run's record under this run's name
    with pytest.raises(RecordError, match="record of bdh-recall_gap-D4-s0, not of bdh-recall_gap-s0"):
        read_record(path.parent.parent, "bdh", "recall_gap", 0)


def test_the_presets_pass_the_checks_before_training():
    """No false refusal: the CPU default and the quick preset are checked (every run's config and model) and pass."""
    from bdh.experiments.length import Config, check_before_training

    for name in (None, "quick"):
        check_before_training(Config.preset(name))


def test_a_text_model_is_loaded_through_the_verified_door(tmp_path, monkeypatch):
    """The checks before training and the text recall load a text model as every command does (checksums)."""
    from bdh.experiments.length import Config, check_before_training
    from bdh.train.run import model as run_model

    seen = []
    real = run_model.load_run_model
    monkeypatch.setattr(run_model, "load_run_model", lambda *a, **k: seen.append(a[0]) or real(*a, **k))
    folder = _text_model(tmp_path)
    check_before_training(Config.preset("quick", text_models=(str(folder),)))
    assert seen == [str(folder)]


def _text_model(tmp_path):
    import torch

    from bdh import BDH, BDHConfig

    torch.manual_seed(0)
    return BDH(BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64)).save_pretrained(tmp_path / "text")
