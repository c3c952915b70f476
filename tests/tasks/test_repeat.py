"""The repeated-word sequence of paper section 6.4."""

import pytest
import torch

from bdh.tasks import repeat


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


def test_the_repeat_task_is_pure_scores_every_phase_and_is_registered():
    import torch.nn.functional as F

    from bdh.registry import get_task
    from bdh.tasks.repeat import RepeatConfig, RepeatTask

    assert get_task("repeat") is RepeatTask
    task = RepeatTask(RepeatConfig(seq_len=3 * repeat.PERIOD))
    x, y = task.batch("train", 5, 4, seed=1)
    assert x.shape == y.shape == (4, 3 * repeat.PERIOD)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one letter
    assert torch.equal(task.batch("train", 5, 4, seed=1)[0], x)
    assert not torch.equal(task.batch("train", 6, 4, seed=1)[0], x)
    assert not torch.equal(task.batch("val", 5, 4, seed=1)[0], x)
    assert task.num_batches("val", 4) == 8 and task.num_batches("train", 4) is None
    perfect = F.one_hot(y, 256).float() * 10
    m = task.metrics(perfect, y, x)
    assert m["repeat_accuracy"] == m["fact_accuracy"] == m["warmup_accuracy"] == 1.0
    # a model that copies the previous period's word, but cannot know a new fact
    guess = torch.where(task.target_phase == 1, (y + 1) % 256, y)
    m = task.metrics(F.one_hot(guess, 256).float() * 10, y, x)
    assert m["fact_accuracy"] == 0.0 and m["repeat_accuracy"] == 1.0 and m["fact_loss"] > m["repeat_loss"]
    with pytest.raises(ValueError, match="RepeatConfig.seq_len"):
        RepeatConfig(seq_len=1)
