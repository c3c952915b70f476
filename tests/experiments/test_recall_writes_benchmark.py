"""benchmarks/recall_writes.py (which writes erase the pairs of recall through a gap) at a tiny size."""

from __future__ import annotations

import pytest
import torch

import bdh
from bdh.experiments.length import reading
from bdh.tasks.lengths import fixed_test_set
from bdh.tasks.recall_gap import RecallGap, RecallGapConfig


def _model(**fields) -> bdh.BDH:
    torch.manual_seed(0)
    config = dict(n_layer=2, n_embd=16, n_head=2, n_neurons=64, vocab_size=32, dropout=0.0, positional="none")
    config.update(attention="chunked", chunk_size=8, state_write="delta", **fields)
    return bdh.BDH(bdh.BDHConfig(**config)).eval()


def _read(bench, model, change: str, x, y, chunk: int = 8) -> list[torch.Tensor]:
    """b_t of each layer (B, H, L) while ``model`` reads ``x`` through its state with ``change``."""
    writes = bench.Writes(model, 2)
    model.state_rule_gates = writes
    writes.reset(change, x.shape[1], collect=True)
    with torch.no_grad():
        reading.read_state(model, x, y, chunk)
    return [torch.cat(b, dim=2) for b in writes.betas]


def test_token_kinds_follow_the_layout(load_benchmark):
    bench = load_benchmark("recall_writes")
    x = torch.tensor([[3, 20, 5, 17, 9, 30, 2, 1, 6, 18, 3, 20, 5, 17]])  # 2 pairs, a gap of 6, 2 questions
    masks = bench.kinds(x, 2, 32)
    assert masks["pair keys"][0].nonzero().flatten().tolist() == [0, 2]
    assert masks["pair values"][0].nonzero().flatten().tolist() == [1, 3]
    assert masks["pair-like fillers"][0].nonzero().flatten().tolist() == [5, 9]  # 9 -> 30, 6 -> 18
    assert masks["other fillers"][0].nonzero().flatten().tolist() == [4, 6, 7, 8]


def test_silencing_a_head_zeroes_its_filler_writes_only(load_benchmark):
    """Read in chunks of 8 over 40 tokens: the wrapper finds each chunk's place, so b_t is 0 exactly on the gap's
    fillers of the silenced head in every layer and nowhere else (layer 0's other writes as trained)."""
    bench = load_benchmark("recall_writes")
    model = _model()
    task = RecallGap(RecallGapConfig(seq_len=8, vocab_size=32, num_kv_pairs=2))
    x, y = fixed_test_set(task, 40, n=64, rows=range(3))
    trained = _read(bench, model, "as trained", x, y)
    silent = _read(bench, model, "silent 1", x, y)
    assert len(trained) == 2 and trained[0].shape == (3, 2, 40)
    b, s = trained[0], silent[0]  # layer 0's b_t depends on its tokens only; layer 1's on what layer 0 read
    assert torch.equal(s[:, 0], b[:, 0]) and torch.equal(s[:, 1, :4], b[:, 1, :4])
    assert torch.equal(s[:, 1, -4:], b[:, 1, -4:]) and (b[:, 1, 4:-4] > 0).all()
    for s in silent:
        assert (s[:, 1, 4:-4] == 0).all() and (s[:, :, :4] > 0).all() and (s[:, 0] > 0).all()


def test_the_hard_gate_column_reads_the_hard_twin(load_benchmark, tmp_path, capsys):
    """A sigmoid model whose head 0 is shut at logit -4 (b = 0.018, hard 0): the hard column is the read of its twin
    with the same weights through the hard gate; for a model trained with the hard gate it is as trained."""
    bench = load_benchmark("recall_writes")
    for gate in ("sigmoid", "hard"):
        model = _model(write_gate=gate)
        with torch.no_grad():
            model.write_b.copy_(torch.tensor([-4.0, 1.0]))
        folder = tmp_path / gate
        model.save_pretrained(folder)
        argv = [str(folder), "--lengths", "24", "--sequences", "8", "--pairs", "2", "--threads", "1"]
        assert bench.main(argv) == 0
        row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| 24"))
        cells = [float(c) for c in row.split("|")[2:-1]]
        x, y = fixed_test_set(
            RecallGap(RecallGapConfig(seq_len=8, vocab_size=32, num_kv_pairs=2)), 24, n=64, rows=range(8)
        )
        twin = model.hard_gated() if gate == "sigmoid" else model
        with torch.no_grad():
            right, scored, _, _ = reading.read_state(twin, x, y, 64)
        assert cells[-2] == float(f"{right / scored:.3f}")
        if gate == "hard":
            assert cells[-2] == cells[0]


def test_the_tables_have_a_row_per_length_and_head(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("recall_writes")
    folder = tmp_path / "model"
    _model().save_pretrained(folder)
    argv = [str(folder), "--lengths", "16", "32", "--sequences", "3", "--pairs", "2", "--threads", "1"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if line.startswith("| 16") or line.startswith("| 32")]
    assert [r.split("|")[1].strip() for r in rows] == ["16 (8)", "32 (24)"]
    for row in rows:
        cells = [float(c) for c in row.split("|")[2:-1]]
        assert len(cells) == 5 and all(0 <= c <= 1 for c in cells)
    assert [line.split("|")[1].strip() for line in out if line.startswith("| L")] == ["L0H0", "L0H1", "L1H0", "L1H1"]
    add = tmp_path / "add"
    bdh.BDH(bdh.BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64, vocab_size=32)).save_pretrained(add)
    assert bench.main([str(add)]) == 2 and "no write strengths" in capsys.readouterr().err
    assert bench.main([str(folder), "--lengths", "8", "--pairs", "2"]) == 2
    assert bench.main([str(folder), "--top1-head", "2"]) == 2 and "--top1-head" in capsys.readouterr().err
    assert bench.main([str(tmp_path / "none")]) == 2


def test_the_top1_column_reads_the_hard_twin_with_one_hot_keys(load_benchmark, tmp_path, capsys):
    """The last column: the model option's read, the hard twin with head h's write keys one-hot
    (``hard_gated(top1_heads=(h,))``), which reads otherwise than the hard gate alone; a model trained with the hard
    gate gets the same twin of its own."""
    bench = load_benchmark("recall_writes")
    model = _model()
    folder = tmp_path / "m"
    model.save_pretrained(folder)
    argv = [str(folder), "--lengths", "24", "--sequences", "64", "--pairs", "2", "--threads", "1", "--top1-head", "0"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "hard gate, keys top-1 in head 0 |" in out
    row = next(line for line in out.splitlines() if line.startswith("| 24"))
    x, y = fixed_test_set(RecallGap(RecallGapConfig(seq_len=8, vocab_size=32, num_kv_pairs=2)), 24, n=64)
    twin = model.hard_gated((0,))
    with torch.no_grad():
        right, scored, _, _ = reading.read_state(twin, x, y, 64)
        assert (twin(x[:4]) - model.hard_gated()(x[:4])).abs().max() > 1e-3  # far above rounding
    assert float(row.split("|")[-2]) == float(f"{right / scored:.3f}")
    hard = bench.top1_twin(_model(write_gate="hard"), 0)
    assert (hard.config.write_gate, hard.config.write_topk, hard.config.write_topk_heads) == ("hard", 1, (0,))


def test_columns_reads_only_the_chosen_ones(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("recall_writes")
    folder = tmp_path / "model"
    _model().save_pretrained(folder)
    argv = [str(folder), "--lengths", "24", "--sequences", "8", "--pairs", "2", "--threads", "1"]
    assert bench.main(argv) == 0
    full = capsys.readouterr().out.splitlines()
    assert bench.main([*argv, "--columns", "top1", "hard"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "| length (gap) | hard gate | hard gate, keys top-1 in head 1 |" in out  # table order, not the given one
    row, want = (next(r for r in lines if r.startswith("| 24")) for lines in (out, full))
    assert row.split("|")[2:-1] == want.split("|")[-3:-1]
    assert not any(line.startswith("| L0H0") for line in out)  # the b_t table comes with trained
    with pytest.raises(SystemExit):
        bench.main([*argv, "--columns", "nope"])
