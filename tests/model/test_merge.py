"""Merging by concatenation along n, head by head (paper section 7.1), and plain averaging."""

import copy

import pytest
import torch

from bdh import BDH
from bdh.model.merge import average, concatenate

from .helpers import rel_err, tiny_model


def test_heads_stay_aligned():
    a, b = tiny_model(seed=1), tiny_model(seed=2, n_neurons=96)
    m = concatenate(a, b)
    H, D = 2, 16
    assert m.config.n == 64 + 96 and m.config.N == 32 + 48
    E = m.E.view(H, 80, D)
    for h in range(H):
        assert torch.equal(E[h, :32], a.E.view(H, 32, D)[h]) and torch.equal(E[h, 32:], b.E.view(H, 48, D)[h])
        assert torch.equal(m.Dx[h, :, :32], a.Dx[h]) and torch.equal(m.Dx[h, :, 32:], b.Dx[h])
    assert torch.equal(m.freqs, torch.cat([a.freqs, b.freqs]))
    assert torch.equal(m.embed.weight, (a.embed.weight + b.embed.weight) / 2)


def test_a_silent_partner_changes_nothing():
    """If B's neurons never fire (Dx = 0) and both share embeddings, the merge computes exactly A."""
    a = tiny_model(seed=1)
    b = copy.deepcopy(tiny_model(seed=2))
    with torch.no_grad():
        b.Dx.zero_()
        b.embed.weight.copy_(a.embed.weight)
        b.readout.copy_(a.readout)
    idx = torch.randint(0, 256, (2, 12))
    assert rel_err(concatenate(a, b)(idx), a(idx)) <= 1e-5


def test_merging_a_model_with_itself_is_itself():
    """Scores and E y double; the LayerNorms remove the factor exactly when their epsilon is negligible."""
    a = tiny_model(seed=3, ln_eps=1e-30).double()
    idx = torch.randint(0, 256, (2, 12))
    assert rel_err(concatenate(a, a)(idx), a(idx)) < 1e-9


def test_merged_model_saves_and_loads_with_its_frequencies(tmp_path):
    m = concatenate(tiny_model(seed=1), tiny_model(seed=2))
    m.save_pretrained(tmp_path)
    again = BDH.from_pretrained(tmp_path)
    assert torch.equal(again.freqs, m.freqs)
    assert not torch.equal(again.freqs, BDH(m.config).freqs)  # not the formula for N = 64: the parents' pairs
    idx = torch.randint(0, 256, (1, 9))
    assert torch.equal(again(idx), m(idx))


@pytest.mark.parametrize(
    "other, match",
    [
        (dict(n_embd=8), "differ in n_embd"),
        (dict(n_head=4), "differ in n_head"),
        (dict(n_layer=3), "differ in n_layer"),
        (dict(damping=0.9), "differ in damping"),
    ],
)
def test_incompatible_models_are_refused(other, match):
    with pytest.raises(ValueError, match=match):
        concatenate(tiny_model(), tiny_model(**other))


def test_rope_standard_cannot_be_concatenated():
    with pytest.raises(ValueError, match="rope-standard"):
        concatenate(tiny_model(positional="rope-standard"), tiny_model(positional="rope-standard"))


def test_average():
    a, b = tiny_model(seed=1), tiny_model(seed=2)
    idx = torch.randint(0, 256, (1, 7))
    assert torch.equal(average(a, b, 0.0)(idx), a(idx)) and torch.equal(average(a, b, 1.0)(idx), b(idx))
    assert torch.allclose(average(a, b).E, (a.E + b.E) / 2)
    with pytest.raises(ValueError, match="same size"):
        average(a, tiny_model(n_neurons=96))


def test_merge_command(tmp_path, capsys):
    from bdh.cli import main

    a, b = tiny_model(seed=1), tiny_model(seed=2)
    a.save_pretrained(tmp_path / "a")
    b.save_pretrained(tmp_path / "b")
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "m")]) == 0
    assert "n = 64 + 64 = 128" in capsys.readouterr().out
    merged = BDH.from_pretrained(tmp_path / "m")
    idx = torch.randint(0, 256, (1, 6))
    assert torch.equal(merged(idx), concatenate(a, b).eval()(idx))
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "avg"), "--average"]) == 0
    tiny_model(n_embd=8).save_pretrained(tmp_path / "c")
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "c"), str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "differ in n_embd" in err and err.count("\n") == 1
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "nope"), str(tmp_path / "bad")]) == 2
