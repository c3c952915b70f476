"""DeltaNet and Gated DeltaNet: the reference against the delta rule's defining property, the chunked form against
the reference (values and gradients of every input, a carried state in and out), whole models in both forms, the
parameter and state formulas, sizing to a budget, and bad configs in one line. The reads through a carried state
(chunk by chunk, one token at a time) are in test_state.py with the other models'.

Tolerances: in fp64 the two forms add the same O(T) terms of size O(1) in other orders (and the chunked form solves
a unit-triangular system of size C whose entries are at most 1), so they differ by about T C * 1e-16; 1e-10 leaves a
factor of 1e4 over that and is still 1e6 below any error of a wrong mask, decay or chunk offset (order 1e-3 or
more at these sizes)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _compare import assert_same_model, randomize

from bdh.baselines.deltanet import (
    DeltaNet,
    DeltaNetConfig,
    GatedDeltaNet,
    GatedDeltaNetConfig,
    delta_rule_chunked,
    delta_rule_recurrent,
)
from bdh.baselines.mixer_lm import skeleton_params

TOL = 1e-10  # fp64; see the module docstring


def inputs(T=11, B=2, H=2, K=4, V=3, seed=0, gate_scale=2.0):
    """q, k (L2-normalised), v, beta in (0, 1), log a < 0 and a state before, fp64, each a leaf."""
    g = torch.Generator().manual_seed(seed)

    def r(*s):
        return torch.randn(*s, generator=g, dtype=torch.float64)

    q, v, S0 = r(B, H, T, K), r(B, H, T, V), r(B, H, V, K)
    k = F.normalize(r(B, H, T, K), dim=-1)
    beta = torch.sigmoid(2 * r(B, H, T))
    log_a = F.logsigmoid(gate_scale * r(B, H, T))
    return [x.requires_grad_() for x in (q, k, v, beta, log_a, S0)]


def values_and_grads(fn, xs):
    o, S = fn(*xs)
    g = torch.Generator().manual_seed(1)
    wo, wS = torch.randn(o.shape, generator=g, dtype=o.dtype), torch.randn(S.shape, generator=g, dtype=S.dtype)
    loss = (o * wo).sum() + (S * wS).sum()
    return (o.detach(), S.detach()), torch.autograd.grad(loss, xs)


def close(a, b):
    return (a - b).abs().max() <= TOL * max(1.0, b.abs().max())


def test_the_reference_reads_back_the_last_write_exactly():
    """The delta rule's defining property: with b_t = 1 and q_t = k_t (unit), S_t k_t = v_t whatever came before
    (the write replaces what k_t addressed): o_t = v_t for any decays and any state before. With b = 0 nothing is
    written: the state is only decayed."""
    q, k, v, beta, log_a, S0 = (x.detach() for x in inputs(T=9))
    ones = torch.ones_like(beta)
    assert torch.allclose(delta_rule_recurrent(k, k, v, ones, log_a, S0), v, atol=1e-12, rtol=0)
    o, S = delta_rule_recurrent(q, k, v, torch.zeros_like(beta), log_a, S0, final=True)
    decay = log_a.sum(-1).exp()[..., None, None]
    assert torch.allclose(S, decay * S0, atol=1e-12, rtol=0)
    assert torch.allclose(o[:, :, -1], (S @ q[:, :, -1, :, None]).squeeze(-1), atol=1e-12, rtol=0)


@pytest.mark.parametrize("gated", [False, True], ids=["deltanet", "gated"])
@pytest.mark.parametrize("chunk", [1, 3, 4, 11, 16])
def test_the_chunked_form_equals_the_reference_in_values_and_gradients(chunk, gated):
    """Every input's gradient (q, k, v, b, log a, the state before), and the state after; chunks that do and do not
    divide T, one longer than T."""
    xs = inputs()
    if not gated:
        xs.pop(4)  # log a: a_t = 1

    def fast(q, k, v, beta, *rest):
        log_a, S0 = rest if gated else (None, *rest)
        return delta_rule_chunked(q, k, v, beta, log_a, S0, chunk=chunk, final=True)

    def ref(q, k, v, beta, *rest):
        log_a, S0 = rest if gated else (None, *rest)
        return delta_rule_recurrent(q, k, v, beta, log_a, S0, final=True)

    (a, ga), (b, gb) = values_and_grads(fast, xs), values_and_grads(ref, xs)
    assert close(a[0], b[0]) and close(a[1], b[1])
    for x, y in zip(ga, gb):
        assert close(x, y)


def test_a_state_carried_across_calls_is_one_long_call():
    q, k, v, beta, log_a, _ = (x.detach() for x in inputs(T=13))
    whole, S = delta_rule_chunked(q, k, v, beta, log_a, chunk=4, final=True)
    first, S1 = delta_rule_chunked(*(x[:, :, :5] for x in (q, k, v, beta, log_a)), chunk=4, final=True)
    second, S2 = delta_rule_chunked(*(x[:, :, 5:] for x in (q, k, v, beta, log_a)), S1, chunk=4, final=True)
    assert close(torch.cat([first, second], dim=2), whole) and close(S2, S)


def test_the_chunked_form_is_stable_under_strong_forgetting_in_fp32():
    """log a_t down to -60 a step: a factorisation exp(c_t) exp(-c_s) would overflow fp32 (exp(600) in a chunk of
    16); the chunked form forms every ratio as exp(c_t - c_s) <= 1. Relative bound 1e-5: fp32 rounding of sums of
    a few dozen terms of size <= 1 (about 1e-6)."""
    q, k, v, beta, _, S0 = (x.detach() for x in inputs(T=24))
    log_a = -torch.linspace(0.01, 60.0, 24, dtype=torch.float64).expand(2, 2, 24)
    ref = delta_rule_recurrent(q, k, v, beta, log_a, S0)
    got = delta_rule_chunked(*(x.float() for x in (q, k, v, beta, log_a, S0)), chunk=16)
    assert torch.isfinite(got).all() and got.dtype == torch.float32
    assert (got.double() - ref).abs().max() <= 1e-5 * ref.abs().max()


CFG = DeltaNetConfig(vocab_size=40, seq_len=24, n_layer=2, n_embd=16, n_head=2, chunk_size=5, mlp_ratio=2)
GATED = GatedDeltaNetConfig(**{**CFG.to_dict(), "output_gate": True})
MODELS = {
    "deltanet": (DeltaNet, CFG),
    "deltanet-noconv-gate": (DeltaNet, CFG.replace(conv_size=0, output_gate=True, expand_v=2.0)),
    "gated-deltanet": (GatedDeltaNet, GATED),
    "gated-deltanet-conv2": (GatedDeltaNet, GATED.replace(conv_size=2, output_gate=False, mlp_ratio=0)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_the_chunked_model_equals_the_reference_model(name):
    """The whole network in fp64 with random weights (every path carries weight), the chunked form against the
    loop: logits and every parameter's gradient, 23 tokens (not a multiple of the chunk)."""
    cls, cfg = MODELS[name]
    torch.manual_seed(0)
    fast = randomize(cls(cfg).double(), std=0.3)
    ref = cls(cfg.replace(form="reference")).double()
    assert_same_model(fast, ref, torch.randint(0, cfg.vocab_size, (2, 23)), TOL)


def test_parameters_and_state_by_hand():
    V, d, H, m, k = 40, 16, 2, 32, 4
    mixer = d * 3 * d + 3 * d * k + d * H + d // H + d * d  # W_qkv, conv, W_b, RMSNorm, W_o
    assert CFG.num_params() == skeleton_params(V, d, m, 2) + 2 * mixer == DeltaNet(CFG).num_params()
    gated = mixer + d * d + d * H + 2 * H  # + W_g, W_a, A_log, dt_bias
    assert GATED.num_params() == skeleton_params(V, d, m, 2) + 2 * gated == GatedDeltaNet(GATED).num_params()
    assert DeltaNet(CFG).state_size() == H * (d // H) ** 2
    for name, (cls, cfg) in MODELS.items():
        assert cls(cfg).num_params() == cfg.num_params(), name
    wide = CFG.replace(expand_k=0.5, expand_v=2.0, n_head=4)
    assert DeltaNet(wide).state_size() == 4 * 2 * 8


def test_the_gate_starts_as_mamba2_s_and_decays():
    mixer = GatedDeltaNet(GATED).blocks[0].mixer
    A = mixer.A_log.exp()
    assert ((A >= 1) & (A <= 16)).all()
    dt = F.softplus(mixer.dt_bias)
    assert ((dt >= GATED.dt_init_floor - 1e-7) & (dt <= GATED.dt_max + 1e-7)).all()
    log_a = mixer.log_a(torch.randn(2, 5, 16))
    assert log_a.shape == (2, 2, 5) and (log_a < 0).all()
    assert DeltaNet(CFG).blocks[0].mixer.log_a(torch.randn(2, 5, 16)) is None  # DeltaNet: a_t = 1


@pytest.mark.parametrize("cls", [DeltaNetConfig, GatedDeltaNetConfig])
@pytest.mark.parametrize("budget", [20_000, 150_000, 1_000_000])
def test_for_budget_lands_next_to_the_budget(cls, budget):
    sizes = dict(vocab_size=128, seq_len=64, n_layer=2, n_head=4)
    cfg = cls.for_budget(budget, **sizes, causal=True)
    below, above = cfg.replace(n_embd=cfg.n_embd - 4), cfg.replace(n_embd=cfg.n_embd + 4)  # 4 heads: steps of 4
    assert abs(cfg.num_params() - budget) <= min(abs(below.num_params() - budget), abs(above.num_params() - budget))
    assert type(cfg) is cls and cfg.n_head == 4 and cfg.seq_len == 64
    assert cls.for_budget(budget, **sizes, causal=True, conv_size=0).conv_size == 0  # the model's own fields
    with pytest.raises(ValueError, match="causal"):
        cls.for_budget(budget, **sizes, causal=False)


@pytest.mark.parametrize(
    "cfg_cls, kw, msg",
    [
        (DeltaNetConfig, dict(n_embd=30, n_head=4), "DeltaNetConfig.expand_k"),
        (DeltaNetConfig, dict(expand_v=0.3), "DeltaNetConfig.expand_v"),
        (DeltaNetConfig, dict(conv_size=-1), "DeltaNetConfig.conv_size"),
        (DeltaNetConfig, dict(chunk_size=0), "DeltaNetConfig.chunk_size"),
        (DeltaNetConfig, dict(form="parallel"), "DeltaNetConfig.form"),
        (DeltaNetConfig, dict(causal=False), "DeltaNetConfig.causal"),
        (DeltaNetConfig, dict(output_gate="yes"), "DeltaNetConfig.output_gate"),
        (GatedDeltaNetConfig, dict(dt_min=0.5, dt_max=0.1), "GatedDeltaNetConfig.dt_min"),
        (GatedDeltaNetConfig, dict(dt_max=0), "GatedDeltaNetConfig.dt_max"),
    ],
)
def test_bad_configs_are_one_line(cfg_cls, kw, msg):
    with pytest.raises(ValueError, match=msg) as err:
        cfg_cls(**kw)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="unknown field"):
        cfg_cls.from_dict({"n_heads": 2})


def test_a_model_refuses_the_other_model_s_config():
    with pytest.raises(TypeError, match="expected a DeltaNetConfig, got GatedDeltaNetConfig"):
        DeltaNet(GATED)
    with pytest.raises(TypeError, match="expected a GatedDeltaNetConfig, got DeltaNetConfig"):
        GatedDeltaNet(CFG)
