"""The benchmark scripts' mistakes are one line, as the ``bdh`` commands print them (`benchmarks/_shared.py`:
`Parser`, `run`): a bad argument, a value a check refuses, a model folder whose checksums fail. Each script loads
its model through the verified door of the commands (`bdh.train.run.model.load_run_model`)."""

from __future__ import annotations

import shutil

import pytest
import torch

from bdh import BDH, BDHConfig
from bdh.train.run.checkpoint import save_checkpoint


def _tampered_best(tmp_path):
    """A run's best/ folder (meta.json with the checksums) whose weights changed after they were recorded."""
    torch.manual_seed(0)
    model = BDH(BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64, vocab_size=32, state_write="delta"))
    step = save_checkpoint(tmp_path / "run", 1, model, torch.optim.AdamW(model.parameters()), {}, {}, keep=1)
    best = shutil.copytree(step, tmp_path / "run" / "best")
    data = bytearray((best / "model.safetensors").read_bytes())
    data[-1] ^= 0x01
    (best / "model.safetensors").write_bytes(bytes(data))
    return best


def _one_line(load_benchmark, capsys, name: str, argv: list[str]) -> str:
    shared = load_benchmark("_shared")
    bench = load_benchmark(name)
    with pytest.raises(SystemExit) as info:
        shared.run(lambda: bench.main(argv))
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert len(err.splitlines()) == 1 and "error: " in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "name, argv, said",
    [
        ("recall_writes", ["MODEL", "--pairs", "0"], "--pairs"),
        ("recall_writes", ["MODEL", "--lengths", "64", "-5"], "--lengths"),
        ("recall_fillers", ["MODEL", "--threads", "0"], "--threads"),
        ("long_price", ["--threads", "0"], "--threads"),
        ("long_price", ["--width", "0"], "--width"),
        ("long_price", ["--tokens", "0"], "--tokens"),
    ],
)
def test_a_bad_argument_is_one_line(load_benchmark, capsys, tmp_path, name, argv, said):
    assert said in _one_line(load_benchmark, capsys, name, argv)


@pytest.mark.parametrize("name", ["recall_writes", "recall_fillers"])
def test_a_model_whose_checksums_fail_is_refused_in_one_line(load_benchmark, capsys, tmp_path, name):
    best = _tampered_best(tmp_path)
    err = _one_line(load_benchmark, capsys, name, [str(best), "--lengths", "8", "--pairs", "2", "--threads", "1"])
    assert "does not match its checksum" in err
