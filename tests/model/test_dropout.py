"""Host dropout masks (kernels/pytorch/dropout.py) and the model's use of them against nn.Dropout's arithmetic."""

import math

import pytest
import torch

import bdh.model.kernels as kernels_module
from bdh.model.kernels import dispatch
from bdh.model.kernels.cpu import native
from bdh.model.kernels.pytorch.dropout import DropMask, drop_mask

from .helpers import tiny_model


@pytest.mark.parametrize("dtype", [None, torch.bfloat16, torch.float32])
def test_drop_rate_is_p_within_binomial_noise(dtype):
    torch.manual_seed(0)
    shape = (4, 8, 128, 64)
    count = math.prod(shape)
    for p in (0.05, 0.1, 0.5, 0.9):
        rate = drop_mask(shape, p, dtype=dtype).dropped().float().mean().item()
        # p is rounded to a multiple of 2^-16 (half a step at most), then binomial noise
        assert abs(rate - p) <= 2**-17 + 5 * math.sqrt(p * (1 - p) / count), (p, rate)
    assert not drop_mask(shape, 0.0, dtype=dtype).dropped().any()


@pytest.mark.parametrize("p", [0.001, 0.1, 0.25, 0.5, 0.9, 0.99])
def test_exactly_round_p_2_16_of_the_16_bit_patterns_are_dropped(p, monkeypatch):
    """Over all 2^16 equally likely draws, both mask forms drop exactly round(p 2^16): the probability is exact."""
    import bdh.model.kernels.pytorch.dropout as module

    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    monkeypatch.setattr(module, "_draws16", lambda count, generator: every)
    for dtype in (None, torch.bfloat16, torch.float32):
        mask = drop_mask((2**16,), p, dtype=dtype)
        assert int(mask.dropped().sum()) == round(p * 2**16), (p, dtype)
        kept = mask.zero(torch.ones(2**16, dtype=dtype or torch.float32))  # what the kernel actually zeroes
        assert int((kept == 0).sum()) == round(p * 2**16), (p, dtype)
    assert drop_mask((2**16,), p, dtype=torch.bfloat16).threshold is not None  # bf16 draws


def test_too_large_p_or_other_dtypes_fall_back_to_a_bool_mask():
    mask = drop_mask((10, 10), 0.999, dtype=torch.bfloat16)  # keeps 66 of 2^16 patterns: fewer than the 254 NaNs
    assert mask.threshold is None and mask.draws.dtype == torch.bool
    assert drop_mask((10, 10), 0.1, dtype=torch.float16).threshold is None


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_zeroing_with_bf16_draws_equals_masked_fill(dtype):
    torch.manual_seed(1)
    mask = drop_mask((3, 40, 50), 0.3, dtype=dtype)
    assert mask.threshold is not None
    t = torch.randn(3, 40, 50).to(dtype)
    assert torch.equal(mask.zero(t.clone()), t.masked_fill(mask.dropped(), 0))


def test_masks_follow_torch_seed_and_generator_state():
    torch.manual_seed(1)
    a, b = drop_mask((3, 1000), 0.3).dropped(), drop_mask((3, 1000), 0.3).dropped()
    assert not torch.equal(a, b)  # each call draws a new seed
    torch.manual_seed(1)
    assert torch.equal(drop_mask((3, 1000), 0.3).dropped(), a)
    state = torch.get_rng_state()
    c = drop_mask((3, 1000), 0.3, dtype=torch.bfloat16).dropped()
    torch.set_rng_state(state)  # what a checkpoint restores
    assert torch.equal(drop_mask((3, 1000), 0.3, dtype=torch.bfloat16).dropped(), c)
    g = torch.Generator().manual_seed(7)
    assert torch.equal(
        drop_mask((5, 9), 0.5, g).dropped(), drop_mask((5, 9), 0.5, torch.Generator().manual_seed(7)).dropped()
    )
    # odd element counts and the bit layout: entries are independent (no repeated halves)
    m = drop_mask((1, 10003), 0.5).dropped()
    assert m.shape == (1, 10003) and not torch.equal(m[0, :5000], m[0, 5000:10000])


def test_bad_probability_is_rejected():
    with pytest.raises(ValueError, match="p must lie in"):
        drop_mask((2, 2), 1.0)


def test_model_with_host_masks_equals_nn_dropout_arithmetic_with_the_same_masks(monkeypatch):
    """The fused path (mask in the gate, 1/(1-p) on y E) against nn.Dropout's y * mask / (1 - p). The PyTorch gate:
    the compiled gate draws its masks in its loop and is compared with this path in tests/model/test_native.py."""
    p = 0.25
    torch.manual_seed(2)
    fast = tiny_model(dropout=p, damping="alibi").train()
    plain = tiny_model(dropout=p, damping="alibi", dropout_rng="torch").train()
    plain.load_state_dict(fast.state_dict())
    masks: list[torch.Tensor] = []

    def recording(shape, prob, generator=None, dtype=None):
        masks.append(torch.rand(shape) < prob)
        return DropMask(masks[-1])

    monkeypatch.setattr(dispatch, "drop_mask", recording)
    idx = torch.randint(0, 256, (2, 9))
    target = torch.randint(0, 256, (2, 9))
    with native.disabled():
        out = fast(idx)
        torch.nn.functional.cross_entropy(out.flatten(0, 1), target.flatten()).backward()
    assert len(masks) == fast.config.n_layer

    replay = iter(masks)

    def replay_dropout(y, prob, training=True):
        return y.masked_fill(next(replay), 0) / (1 - prob)

    monkeypatch.setattr(dispatch.F, "dropout", replay_dropout)
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
    assert model.kernels(kernels_module.Pass("parallel", 0, 8)).choice.masks == "torch"
    assert tiny_model(dropout=0.5).train().kernels(kernels_module.Pass("parallel", 0, 8)).choice.masks == "in-gate"


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "mps", "meta"])
def test_host_masks_are_chosen_for_cpu_tensors_only(device):
    """The NumPy masks live on the host: `choose` must give every other device F.dropout (checked on the CPU by
    handing `choose` the device; no GPU needed to make the choice)."""
    model = tiny_model(dropout=0.5).train()

    def masks(dev: torch.device, **kw) -> str:
        choice = kernels_module.choose(
            kernels_module.Pass("parallel", 0, 8, **kw),
            positional=model.config.positional,
            log_u=None,
            causal=True,
            chunk_size=4,
            dropout=0.5,
            dropout_rng="auto",
            training=True,
            autograd=True,
            device=dev,
        )
        return choice.masks

    assert masks(torch.device("cpu")) == "in-gate"
    assert masks(torch.device(device)) == "torch"
    assert masks(torch.device("cpu"), hooked=True) == "torch"  # a hook reads y before dropout
