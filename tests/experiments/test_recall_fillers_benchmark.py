"""benchmarks/recall_fillers.py (which fillers erase the pairs of recall through a gap) at a tiny size."""

from __future__ import annotations

import torch

import bdh
from bdh.tasks.lengths import fixed_test_set
from bdh.tasks.recall_gap import RecallGap, RecallGapConfig


def test_a_redrawn_gap_keeps_the_pairs_and_questions_and_draws_from_its_pool(load_benchmark):
    bench = load_benchmark("recall_fillers")
    task = RecallGap(RecallGapConfig(seq_len=32, vocab_size=32, num_kv_pairs=2))
    x, _ = fixed_test_set(task, 64, n=64, rows=range(4))
    gap = task.test_gap(64)
    assert bench.redraw(x, 2, gap, 32, "task", seed=0) is x
    for name in bench.POOLS[1:]:
        out = bench.redraw(x, 2, gap, 32, name, seed=0)
        assert torch.equal(out[:, :4], x[:, :4]) and torch.equal(out[:, -4:], x[:, -4:])  # pairs and questions
        for row in range(4):
            pool = bench.pool_of(name, 32, set(x[row, :4].tolist()))
            assert set(out[row, 4:-4].tolist()) <= set(pool)
            assert not set(pool) & set(x[row, :4].tolist())  # never a key or value of the example
    assert len(bench.pool_of("4 values", 32, set())) == 4
    assert bench.pool_of("key-range", 32, set()) == list(range(1, 16))


def test_the_table_has_a_row_per_length(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("recall_fillers")
    torch.manual_seed(0)
    folder = tmp_path / "model"
    bdh.BDH(bdh.BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64, vocab_size=32, dropout=0.0)).save_pretrained(
        folder
    )
    argv = [str(folder), "--lengths", "16", "32", "--sequences", "3", "--pairs", "2", "--threads", "1"]
    assert bench.main(argv) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 16") or line.startswith("| 32")]
    assert [r.split("|")[1].strip() for r in rows] == ["16 (8)", "32 (24)"]
    for row in rows:
        cells = [float(c) for c in row.split("|")[2:-1]]
        assert len(cells) == 5 and all(0 <= c <= 1 for c in cells)
    assert bench.main([str(tmp_path / "none")]) == 2
