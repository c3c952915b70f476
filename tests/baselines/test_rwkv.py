"""RWKV-4: the WKV recurrence (stable loop and chunked form) against the naive exp-sum of Eq. 14, the formulas,
the trainer."""

from __future__ import annotations

import math

import pytest
import torch
from _compare import assert_same_model, randomize, rel_err
from _trainer_run import learned, trainer_losses

from bdh.baselines.rwkv import RWKV, RWKVConfig, ramp, token_shift, wkv_chunked, wkv_sequential


def wkv_naive(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Eq. 14 as written: sums of exponentials over i <= t, no rescaling (overflows for large k)."""
    out = []
    for t in range(k.shape[1]):
        now = torch.exp(u + k[:, t])
        num, den = now * v[:, t], now
        for i in range(t):
            e = torch.exp(-(t - 1 - i) * w + k[:, i])
            num, den = num + e * v[:, i], den + e
        out.append(num / den)
    return torch.stack(out, dim=1)


def wkv_inputs(T: int, d: int = 5, k_scale: float = 3.0, w_scale: float = 2.0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    w = torch.rand(d, generator=g, dtype=torch.float64) * w_scale
    u = torch.randn(d, generator=g, dtype=torch.float64)
    k = torch.randn(2, T, d, generator=g, dtype=torch.float64) * k_scale
    v = torch.randn(2, T, d, generator=g, dtype=torch.float64)
    return [t.requires_grad_() for t in (w, u, k, v)]


FORMS = {
    "sequential": wkv_sequential,
    "chunk 1": lambda *a: wkv_chunked(*a, 1),
    "chunk 4": lambda *a: wkv_chunked(*a, 4),
    "chunk 64": lambda *a: wkv_chunked(*a, 64),  # one chunk longer than the sequence
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("T", [1, 6, 13])
def test_the_wkv_forms_are_eq_14_in_values_and_gradients(form, T):
    """fp64 at small sizes, where the naive sum does not overflow (|k| of a few units): the forms rescale by
    exact powers of e, so they agree with it to rounding (about 1e-15 relative); 1e-10 catches any wrong term.
    At T = 1, wkv_1 = v_1 and the gradients of u and k are zero, left as rounding noise: absolute below 1."""
    args = wkv_inputs(T)
    ref, got = wkv_naive(*args), FORMS[form](*args)
    weight = torch.cos(torch.arange(ref.numel(), dtype=torch.float64)).view_as(ref)
    g_ref, g_got = (
        torch.autograd.grad((y * weight).sum(), args, allow_unused=True, materialize_grads=True) for y in (ref, got)
    )  # at T = 1, w is not used (no past token)
    assert rel_err(got, ref) <= 1e-10
    for a, b in zip(g_got, g_ref):
        assert rel_err(a, b, floor=1.0) <= 1e-10


@pytest.mark.parametrize("form", list(FORMS))
def test_the_stable_forms_take_keys_that_overflow_the_naive_sum(form):
    """Eq. 14 is unchanged when every k_i moves by the same constant (numerator and denominator both scale by e^c);
    at c = 1000, e^k overflows even fp64, while the stable forms, in fp32, still give the unshifted naive values
    (fp32 rounding over ~20 steps: 1e-5 relative suffices), and decays of e^-50 per step underflow harmlessly."""
    w, u, k, v = (a.detach() for a in wkv_inputs(20, w_scale=50.0))
    assert not torch.isfinite(wkv_naive(w, u, k + 1000, v)).all()
    got = FORMS[form](*(a.float() for a in (w, u, k + 1000, v)))
    assert torch.isfinite(got).all()
    assert rel_err(got.double(), wkv_naive(w, u, k, v)) <= 1e-5


def test_the_model_with_either_wkv_form_is_the_same_model():
    """The whole model in fp64, random weights: only the WKV form differs; tolerance as for the WKV alone."""
    torch.manual_seed(0)
    cfg = RWKVConfig(vocab_size=32, n_layer=2, n_embd=12, chunk_size=5)
    fast = randomize(RWKV(cfg).double())
    ref = RWKV(cfg.replace(wkv="sequential")).double()
    assert_same_model(fast, ref, torch.randint(0, 32, (2, 17)), tol=1e-10)


def test_token_shift_is_the_previous_input():
    x = torch.arange(6.0).view(1, 3, 2)
    assert token_shift(x).tolist() == [[[0.0, 0.0], [0.0, 1.0], [2.0, 3.0]]]


def test_param_formula_and_state_size():
    d, V, m = 16, 97, 48
    cfg = RWKVConfig(vocab_size=V, n_layer=3, n_embd=d, mlp_ratio=3)
    layer = 2 * d + 5 * d + 4 * d * d + 2 * d + 2 * d + 2 * d * m + d * d
    assert cfg.num_params() == RWKV(cfg).num_params() == V * d + 2 * d + 3 * layer
    bare = cfg.replace(mlp_ratio=0)
    assert bare.num_params() == RWKV(bare).num_params() == V * d + 2 * d + 3 * (2 * d + 5 * d + 4 * d * d)
    assert RWKV(cfg).state_size() == 4 * d and RWKV(bare).state_size() == 3 * d


def test_the_initial_decays_span_slow_to_fast_channels():
    """RWKV-4's init: time_decay from -5 (channel 0, w = e^-5) to 3 (the last, w = e^3) in every layer."""
    model = RWKV(RWKVConfig(vocab_size=8, n_layer=3, n_embd=9))
    for block in model.blocks:
        decay = block.mixer.time_decay
        assert decay[0].item() == pytest.approx(-5) and decay[-1].item() == pytest.approx(3)
        assert (decay.diff() > 0).all()


def test_for_budget_lands_next_to_the_budget():
    cfg = RWKVConfig.for_budget(150_000, vocab_size=128, seq_len=64, n_layer=2, n_head=4, causal=True)
    step = cfg.replace(n_embd=cfg.n_embd + 2).num_params() - cfg.num_params()
    assert abs(cfg.num_params() - 150_000) <= step
    with pytest.raises(ValueError, match="causal"):
        RWKVConfig.for_budget(10_000, vocab_size=16, seq_len=16, n_layer=2, n_head=4, causal=False)


def test_it_trains_through_the_public_trainer(tmp_path):
    losses = trainer_losses(tmp_path / "run", 40, "model.name=rwkv", "model.n_layer=1", "model.n_embd=32")
    assert len(losses) == 40 and learned(losses), losses[::8]


def test_zoologys_init_of_the_linear_maps_and_rwkvs_of_the_mixes():
    """Linear maps and the embedding N(0, 0.02), the residual outputs W_o, W'_v N(0, 0.02 / sqrt(2 L)) (MixerLM's
    pass, which leaves RWKV's decays and mixes as built). Each weight has >= 4,096 draws: 10% is > 6 std errors."""
    torch.manual_seed(0)
    cfg = RWKVConfig(vocab_size=128, n_layer=4, n_embd=64)
    model = RWKV(cfg)
    outputs = 0.02 / math.sqrt(2 * cfg.n_layer)
    assert model.embed.weight.std().item() == pytest.approx(0.02, rel=0.1)
    for i, block in enumerate(model.blocks):
        time, channel = block.mixer, block.branch
        for w in (time.key, time.value, time.receptance, channel.key, channel.receptance):
            assert w.weight.std().item() == pytest.approx(0.02, rel=0.1)
        for w in (time.output, channel.value):
            assert w.weight.std().item() == pytest.approx(outputs, rel=0.1)
        assert torch.equal(channel.mix_k, ramp(cfg.n_embd, 1.0 - i / cfg.n_layer))
        assert torch.equal(time.mix_r, ramp(cfg.n_embd, 0.5 * (1.0 - i / cfg.n_layer)))


def test_auto_reads_with_the_loop_on_a_cpu_and_trains_chunked():
    """``auto``: the loop on a CPU without gradients (reads, generation), the chunked form when training and on other
    devices; the same logits either way (fp32, 40 tokens: both forms sum the same exponentials, 1e-5 of rounding)."""
    model = RWKV(RWKVConfig(vocab_size=32, n_layer=2, n_embd=16, chunk_size=4, embed_dropout=0.0)).eval()
    mixer = model.blocks[0].mixer
    assert mixer.wkv_for(torch.device("cpu")).func is wkv_chunked
    with torch.no_grad():
        assert mixer.wkv_for(torch.device("cpu")) is wkv_sequential
        assert mixer.wkv_for(torch.device("cuda")).func is wkv_chunked
        idx = torch.randint(0, 32, (2, 40))
        read = model(idx)
    torch.testing.assert_close(model(idx).detach(), read, rtol=1e-5, atol=1e-5)
