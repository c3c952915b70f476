"""The learning-rate schedule: warmup, then linear or cosine decay to the floor."""

import pytest

from bdh.train.schedule import learning_rate


@pytest.mark.parametrize("decay", ["linear", "cosine"])
def test_warmup_peak_and_floor(decay):
    kw = dict(lr=1e-3, min_lr=1e-4, warmup_steps=10, total_steps=110, decay=decay)
    rates = [learning_rate(s, **kw) for s in range(110)]
    assert rates[0] == pytest.approx(1e-4) and rates[4] == pytest.approx(5e-4)
    assert rates[9] == pytest.approx(1e-3) and rates[10] == pytest.approx(1e-3)
    assert rates[-1] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(rates[10:], rates[11:]))  # decays monotonically
    mid = learning_rate(60, **kw)
    assert mid == pytest.approx(5.5e-4, rel=0.02)  # both reach the midpoint halfway


def test_constant_and_unknown():
    assert learning_rate(50, lr=1e-3, min_lr=0, warmup_steps=0, total_steps=100, decay="constant") == 1e-3
    with pytest.raises(ValueError, match="optim.decay"):
        learning_rate(50, lr=1e-3, min_lr=0, warmup_steps=0, total_steps=100, decay="exp")
