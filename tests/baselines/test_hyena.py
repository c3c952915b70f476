"""Hyena: the FFT long convolution against the direct O(T^2) sum (values and gradients), the filter, the
formulas, the trainer."""

from __future__ import annotations

import math

import pytest
import torch
from _compare import assert_same_model, randomize, rel_err
from _trainer_run import learned, trainer_losses

from bdh.baselines.baseconv import fft_conv
from bdh.baselines.hyena import Hyena, HyenaConfig, ImplicitFilter, budget_filter_order, direct_conv

#: fft_conv computes in fp32 whatever its input: its rounding is about 1e-7 relative per product, and a sum of up
#: to T = 40 terms stays under 1e-5 relative to the result's norm; a wrong tap or lag is an O(1) error.
FFT_TOL = 1e-5


def test_direct_conv_is_the_causal_convolution_written_out():
    g = torch.Generator().manual_seed(0)
    u, k = torch.randn(2, 3, 9, generator=g, dtype=torch.float64), torch.randn(3, 12, generator=g, dtype=torch.float64)
    want = torch.zeros_like(u)
    for t in range(9):
        for s in range(t + 1):
            want[..., t] += k[:, s] * u[..., t - s]
    assert torch.allclose(direct_conv(u, k), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("T", [1, 8, 37])
def test_fft_conv_is_the_direct_sum_in_values_and_gradients(T):
    g = torch.Generator().manual_seed(T)
    u = torch.randn(2, 4, T, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(4, T + 3, generator=g, dtype=torch.float64, requires_grad=True)
    ys = [f(u, k) for f in (direct_conv, fft_conv)]
    weight = torch.cos(torch.arange(ys[0].numel(), dtype=torch.float64)).view_as(ys[0])
    grads = [torch.autograd.grad((y * weight).sum(), (u, k)) for y in ys]
    assert rel_err(ys[1], ys[0]) <= FFT_TOL
    for a, b in zip(grads[1], grads[0]):
        assert rel_err(a, b) <= FFT_TOL


def test_the_model_with_either_convolution_is_the_same_model():
    """fp64 model with random weights (the filter then matters: at Zoology's init it is ~1e-4 of the skip D): the
    long convolution is the only difference, computed in fp32 by the FFT, so the bound is the FFT's, a little wider
    for the layers it passes through."""
    torch.manual_seed(0)
    cfg = HyenaConfig(vocab_size=32, seq_len=24, n_layer=2, n_embd=8, filter_order=8, mlp_ratio=2)
    fast = randomize(Hyena(cfg).double(), std=0.5)
    ref = Hyena(cfg.replace(conv="direct")).double()
    assert_same_model(fast, ref, torch.randint(0, 32, (2, 24)), tol=1e-4)


def test_the_filter_is_windowed_by_decays_from_slow_to_fast():
    """window_{t,c} = exp(-|alpha_c| t / (T-1)) reaches the target 0.01 at 1.5 of the length in the first channel
    and at 0.3 in the last; the filter is the FFN's output times it."""
    cfg = HyenaConfig(vocab_size=8, seq_len=101, n_embd=6, filter_order=4)
    filt = ImplicitFilter(cfg)
    assert filt.alpha[0].item() == pytest.approx(-math.log(0.01) / 1.5)
    assert filt.alpha[-1].item() == pytest.approx(-math.log(0.01) / 0.3)
    with torch.no_grad():
        filt.out.weight.fill_(0.0)
        filt.out.weight[:, 0] = 1.0  # h = sin(...) of one hidden unit times the window
        h = filt(101)
        a = filt.pos(101)
        for layer in filt.layers:
            a = torch.sin(filt.freq * layer(a))
    window = h / a[:, :1].T
    assert window[-1, 30].item() == pytest.approx(0.01, rel=1e-4)  # t / (T-1) = 0.3
    assert window[0, 100].item() == pytest.approx(0.01 ** (1 / 1.5), rel=1e-4)


def test_param_formula_and_state_size():
    d, V, T, k, e, q, n, m = 12, 97, 40, 3, 5, 8, 2, 24
    cfg = HyenaConfig(vocab_size=V, seq_len=T, n_layer=3, n_embd=d, filter_emb_dim=e, filter_order=q, mlp_ratio=2)
    implicit = e * q + q + n * (q * q + q) + q * d + q + d
    operator = 2 * d + 3 * d * d + 3 * d + 3 * d * k + 3 * d + d * d + d + implicit
    mlp = 2 * d + 2 * d * m + m + d
    assert cfg.num_params() == Hyena(cfg).num_params() == V * d + 2 * d + 3 * (operator + mlp)
    for kw in [dict(mlp_ratio=0), dict(filter_layers=0, short_filter=5)]:
        assert Hyena(cfg.replace(**kw)).num_params() == cfg.replace(**kw).num_params(), kw
    assert Hyena(cfg).state_size() == d * T == 480  # Zoology's Hyena.state_size


def test_for_budget_lands_next_to_the_budget():
    cfg = HyenaConfig.for_budget(150_000, vocab_size=128, seq_len=64, n_layer=2, n_head=4, causal=True)
    step = cfg.replace(n_embd=cfg.n_embd + 2).num_params() - cfg.num_params()
    assert abs(cfg.num_params() - 150_000) <= step and cfg.seq_len == 64
    with pytest.raises(ValueError, match="causal"):
        HyenaConfig.for_budget(10_000, vocab_size=16, seq_len=16, n_layer=2, n_head=4, causal=False)


def test_for_budget_narrows_the_filter_of_a_small_model_and_keeps_a_given_one():
    # BDH at the relatives frontier's width 8 has 5,120 parameters; a 64-wide filter alone would be about 17k
    sizes = dict(vocab_size=128, seq_len=32, n_layer=2, n_head=4, causal=True)
    small = HyenaConfig.for_budget(5_120, **sizes)
    assert small.filter_order == budget_filter_order(small.n_embd) < 64
    assert abs(small.num_params() - 5_120) / 5_120 < 0.2
    assert HyenaConfig.for_budget(150_000, **sizes).filter_order == 64  # Zoology's from width 32 on
    assert HyenaConfig.for_budget(5_120, **sizes, filter_order=64).filter_order == 64  # given: kept


def test_it_trains_through_the_public_trainer(tmp_path):
    losses = trainer_losses(tmp_path / "run", 40, "model.name=hyena", "model.n_layer=1", "model.n_embd=32")
    assert len(losses) == 40 and learned(losses), losses[::8]
