"""benchmarks/mamba_retention.py (how long a trained Mamba's channels keep the induction answer) at a tiny size."""

from __future__ import annotations

import math

import pytest
import torch

from bdh.baselines.mamba import Mamba, MambaConfig


def test_the_best_channel_is_the_one_that_decays_least_over_the_tokens_after_the_write(load_benchmark):
    bench = load_benchmark("mamba_retention")
    delta = torch.zeros(11, 2)
    delta[6:, 0] = 0.1  # channel 0: five steps of 0.1 after the write at 5 (t = 6..10), channel 1: 0.2
    delta[6:, 1] = 0.2
    delta[:6] = 5.0  # before and at the write: never counted
    A_log = torch.log(torch.tensor([[1.0, 3.0], [2.0, 4.0]]))  # A = -1, -3 (channel 0), -2, -4 (channel 1)
    half_life, log10_kept = bench.best_channel(delta, A_log, write=5)
    # best: channel 0, n = 0: -log retention 1 * 0.5 over a gap of 5 tokens
    assert log10_kept == pytest.approx(-0.5 / math.log(10))
    assert half_life == pytest.approx(math.log(2) * 5 / 0.5)
    assert bench.best_channel(torch.zeros(4, 2), A_log, write=1)[0] == math.inf  # no step: kept forever


def test_the_table_has_a_row_per_length_and_refuses_other_folders(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("mamba_retention")
    torch.manual_seed(0)
    folder = tmp_path / "mamba"
    Mamba(MambaConfig(vocab_size=16, n_layer=2, n_embd=16, d_state=4)).save_pretrained(folder)
    assert bench.main([str(folder), "--lengths", "32", "64", "--sequences", "2", "--threads", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("| 32 ", "| 64 "))]
    assert len(rows) == 2
    for row in rows:
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert 0 <= float(cells[2]) <= 1 and len(cells) == 5  # length, gap, accuracy, two layers
        for layer in cells[3:]:
            half_life, kept = layer.split(" / ")
            assert float(half_life.replace(",", "")) > 0 and float(kept) <= 0
    assert bench.main([str(tmp_path / "none")]) == 2
    assert "not a Mamba model folder" in capsys.readouterr().err
    assert bench.main([str(folder), "--lengths", "2"]) == 2  # no room for the trigger, its answer and the question
    assert "induction: 2 tokens have no room" in capsys.readouterr().err
    assert bench.main([str(folder), "--sequences", "65"]) == 2
    assert "--sequences" in capsys.readouterr().err
