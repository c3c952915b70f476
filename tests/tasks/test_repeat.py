"""The repeated-word sequence of paper section 6.4."""

import torch

from bdh.analysis import repeat


def test_structure_of_the_sequence():
    rb = repeat.repeat_batch(3, 3 * repeat.PERIOD, seed=5)
    assert repeat.PERIOD == 13 + 8 * 8
    toks = rb.tokens
    assert toks.shape == (3, 3 * repeat.PERIOD)
    w = len(repeat.WARMUP)
    warm = torch.tensor(list(repeat.WARMUP.encode()))
    for b in range(3):
        words = []
        for p in range(3):
            seg = toks[b, p * repeat.PERIOD : (p + 1) * repeat.PERIOD]
            assert torch.equal(seg[:w], warm)
            word = seg[w : w + 8]
            assert torch.equal(seg[w:], word.repeat(8))
            assert ((word >= ord("a")) & (word <= ord("z"))).all()
            words.append(bytes(word.tolist()))
        assert len(set(words)) == 3  # a new word every period
    assert not torch.equal(toks[0], toks[1])
    assert torch.equal(repeat.repeat_batch(3, 100, seed=5).tokens, toks[:, :100])


def test_phases():
    phase, period = repeat.phases(2 * repeat.PERIOD)
    assert (phase[:13] == 0).all() and (phase[13:21] == 1).all() and (phase[21:77] == 2).all()
    assert phase[77] == 0 and period[76] == 0 and period[77] == 1
    runs = repeat.describe_phases(phase)
    assert runs[:3] == [(0, 13, "warmup"), (13, 21, "fact"), (21, 77, "repeat")]
