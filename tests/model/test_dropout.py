"""Host dropout masks (bdh.model.dropout) and the model's use of them against nn.Dropout's arithmetic."""

import math

import pytest
import torch

import bdh.model.bdh as bdh_module
from bdh.model.dropout import drop_mask

from .helpers import tiny_model


def test_drop_rate_is_p_within_binomial_noise():
    torch.manual_seed(0)
    shape = (4, 8, 128, 64)
    count = math.prod(shape)
    for p in (0.05, 0.1, 0.5, 0.9):
        rate = drop_mask(shape, p).float().mean().item()
        # p is rounded to a multiple of 2^-16 (half a step at most), then binomial noise
        assert abs(rate - p) <= 2**-17 + 5 * math.sqrt(p * (1 - p) / count), (p, rate)
    assert not drop_mask(shape, 0.0).any()


def test_masks_follow_torch_seed_and_generator_state():
    torch.manual_seed(1)
    a, b = drop_mask((3, 1000), 0.3), drop_mask((3, 1000), 0.3)
    assert not torch.equal(a, b)  # each call draws a new seed
    torch.manual_seed(1)
    assert torch.equal(drop_mask((3, 1000), 0.3), a)
    state = torch.get_rng_state()
    c = drop_mask((3, 1000), 0.3)
    torch.set_rng_state(state)  # what a checkpoint restores
    assert torch.equal(drop_mask((3, 1000), 0.3), c)
    g = torch.Generator().manual_seed(7)
    assert torch.equal(drop_mask((5, 9), 0.5, g), drop_mask((5, 9), 0.5, torch.Generator().manual_seed(7)))
    # odd element counts and the bit layout: entries are independent (no repeated halves)
    m = drop_mask((1, 10003), 0.5)
    assert m.shape == (1, 10003) and not torch.equal(m[0, :5000], m[0, 5000:10000])


def test_bad_probability_is_rejected():
    with pytest.raises(ValueError, match="p must lie in"):
        drop_mask((2, 2), 1.0)


def test_model_with_host_masks_equals_nn_dropout_arithmetic_with_the_same_masks(monkeypatch):
    """The fused path (mask in the gate, 1/(1-p) on y E) against nn.Dropout's y * mask / (1 - p)."""
    p = 0.25
    torch.manual_seed(2)
    fast = tiny_model(dropout=p, damping="alibi").train()
    plain = tiny_model(dropout=p, damping="alibi", dropout_rng="torch").train()
    plain.load_state_dict(fast.state_dict())
    masks: list[torch.Tensor] = []

    def recording(shape, prob, generator=None):
        masks.append(torch.rand(shape) < prob)
        return masks[-1]

    monkeypatch.setattr(bdh_module, "drop_mask", recording)
    idx = torch.randint(0, 256, (2, 9))
    target = torch.randint(0, 256, (2, 9))
    out = fast(idx)
    torch.nn.functional.cross_entropy(out.flatten(0, 1), target.flatten()).backward()
    assert len(masks) == fast.config.n_layer

    replay = iter(masks)

    class Replay(torch.nn.Module):
        def forward(self, y):
            return y.masked_fill(next(replay), 0) / (1 - p)

    plain.drop = Replay()
    ref = plain(idx)
    torch.nn.functional.cross_entropy(ref.flatten(0, 1), target.flatten()).backward()
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5)
    for (name, a), b in zip(fast.named_parameters(), plain.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-6, rtol=1e-4), name


def test_torch_rng_setting_uses_nn_dropout():
    torch.manual_seed(3)
    model = tiny_model(dropout=0.5, dropout_rng="torch").train()
    idx = torch.randint(0, 256, (2, 8))
    torch.manual_seed(4)
    a = model(idx)
    torch.manual_seed(4)
    assert torch.equal(a, model(idx))
    assert not model._host_dropout(torch.zeros(1), capture=False)
