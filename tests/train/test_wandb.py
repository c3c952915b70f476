"""The optional Weights & Biases logger (``log.wandb``): offline runs hold what metrics.jsonl holds; without
the package a run that asks for it is refused with one line.

W&B runs here in offline mode only (``WANDB_MODE=offline``, every W&B folder under the test's tmp_path): nothing
goes over the network. An offline run is one ``run-<id>.wandb`` file, a LevelDB-style log of protobuf records
(the format ``wandb sync`` uploads); `_history` reads its history rows back.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest
from _train_helpers import set_args, tiny

from bdh.cli import main
from bdh.train import load_config, train
from bdh.train.run.log import WANDB_ID_FILE


def _history(path: Path) -> list[dict[str, float]]:
    """The history rows (``run.log`` calls, merged per step) of an offline ``.wandb`` file."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, parts, rows = 32768, 7, [], []  # 7-byte file header, then 32 KiB blocks of records
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a record header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        parts.append(data[pos + 7 : pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            parts = []
            if record.WhichOneof("record_type") == "history":
                rows.append(
                    {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                )
        elif kind == 0 and length == 0:
            parts = []
    return rows


@pytest.fixture()
def offline(tmp_path, monkeypatch) -> Path:
    """W&B in offline mode with all its folders in tmp_path; returns WANDB_DIR."""
    folder = tmp_path / "wandb-dir"
    for key, value in {
        "WANDB_MODE": "offline",
        "WANDB_DIR": folder,
        "WANDB_CONFIG_DIR": tmp_path / "wandb-config",
        "WANDB_CACHE_DIR": tmp_path / "wandb-cache",
        "WANDB_DATA_DIR": tmp_path / "wandb-data",
        "WANDB_SILENT": "true",
    }.items():
        monkeypatch.setenv(key, str(value))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    folder.mkdir()
    return folder


@pytest.mark.extra  # the wandb extra
def test_offline_run_logs_the_metrics(tmp_path, corpus_file, offline):
    wandb = pytest.importorskip("wandb")
    run = tmp_path / "run"
    config = load_config(
        None,
        tiny(corpus_file, run, "train.max_steps=4", "eval.every=2", "log.wandb=true", "log.wandb_project=bdh-test"),
    )
    try:
        train(config)
    finally:
        wandb.teardown()  # stop W&B's service process now, not at interpreter exit
    run_id = (run / WANDB_ID_FILE).read_text().strip()
    files = list(offline.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(files) == 1, sorted(p.name for p in offline.rglob("*"))
    rows = {int(r["_step"]): r for r in _history(files[0])}
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trains = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert len(trains) == 4 and len(evals) == 2
    for r in trains:  # the same numbers as metrics.jsonl (JSON round trip of the same float)
        assert rows[r["step"]]["train/loss"] == pytest.approx(r["loss"], rel=1e-12)
        assert rows[r["step"]]["train/lr"] == pytest.approx(r["lr"], rel=1e-12)
    for r in evals:
        assert rows[r["step"]]["eval/val_bpb"] == pytest.approx(r["val_bpb"], rel=1e-12)
    assert not (run / "wandb").exists()  # WANDB_DIR wins over the run folder


def test_wandb_asked_for_but_not_installed(tmp_path, corpus_file, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb now fails, as without the package
    code = main(["train", *set_args(tiny(corpus_file, tmp_path / "run", "train.max_steps=1", "log.wandb=true"))])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("bdh: error: log.wandb: the wandb package is not installed; pip install wandb")
    assert not (tmp_path / "run").exists()  # refused before anything was written
    code = main(["train", *set_args(tiny(corpus_file, tmp_path / "run2", "train.max_steps=1"))])
    assert code == 0  # off by default: no wandb needed


def test_wandb_options_are_checked(tmp_path, corpus_file):
    from bdh.train import ConfigError

    with pytest.raises(ConfigError, match="log.wandb_mode"):
        load_config(None, ["log.wandb_mode=sometimes"])
    with pytest.raises(ConfigError, match="log.wandb_project"):
        load_config(None, ["log.wandb_project=' '"])


def test_a_full_disk_under_wandb_is_one_line_naming_its_folder(tmp_path):
    """W&B writes its files itself, not through bdh.outputs: a full disk there is the same one-line DiskFull."""
    import errno
    import os

    from bdh.outputs import DiskFull
    from bdh.train.run.log import TensorBoard

    class FullWandB:
        folder = tmp_path / "wandb"

        def scalars(self, prefix, values, step):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    logger = TensorBoard(tmp_path / "tensorboard", enabled=False)
    logger.wandb = FullWandB()
    with pytest.raises(DiskFull, match=r"wandb: not written: No space left on device; .*free some space") as e:
        logger.scalars("train", {"loss": 1.0}, 1)
    assert "\n" not in str(e.value)
