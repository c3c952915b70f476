import math

import pytest
import torch
import torch.nn.functional as F

from bdh.baselines import (
    GLA,
    GPT,
    RWKV,
    BaseConv,
    BaseConvConfig,
    Based,
    BasedConfig,
    DeltaNet,
    DeltaNetConfig,
    GatedDeltaNet,
    GatedDeltaNetConfig,
    GLAConfig,
    GPTConfig,
    Hyena,
    HyenaConfig,
    HyperSET,
    HyperSETConfig,
    Mamba,
    MambaConfig,
    RWKVConfig,
    gpt_config_for_params,
)
from bdh.baselines.baseconv import fft_conv
from bdh.model.io import load_pretrained
from bdh.registry import get_model
from bdh.tasks.base import IGNORE_INDEX
from bdh.tasks.mqar import MQAR, MQARConfig

TINY = {
    "gpt": (GPT, GPTConfig(vocab_size=64, seq_len=32, n_layer=2, n_embd=32, n_head=2)),
    "baseconv": (BaseConv, BaseConvConfig(vocab_size=64, seq_len=32, n_layer=2, n_embd=32)),
    "hyperset": (HyperSET, HyperSETConfig(vocab_size=64, seq_len=32, n_embd=32, n_head=2, n_recur=4, time_freq=16)),
    "based": (Based, BasedConfig(vocab_size=64, seq_len=32, n_layer=3, n_embd=32, d_feature=8, window=8)),
    "gla": (GLA, GLAConfig(vocab_size=64, seq_len=32, n_layer=2, n_embd=32, n_head=2, gate_rank=8)),
    "mamba": (Mamba, MambaConfig(vocab_size=64, n_layer=2, n_embd=32, d_state=8)),
    "hyena": (Hyena, HyenaConfig(vocab_size=64, seq_len=32, n_layer=2, n_embd=32, filter_order=16)),
    "rwkv": (RWKV, RWKVConfig(vocab_size=64, n_layer=2, n_embd=32)),
    "deltanet": (DeltaNet, DeltaNetConfig(vocab_size=64, seq_len=32, n_layer=2, n_embd=32, n_head=2)),
    "gated-deltanet": (GatedDeltaNet, GatedDeltaNetConfig(vocab_size=64, seq_len=32, n_layer=2, n_embd=32, n_head=2)),
}
#: the causal language models of TINY
CAUSAL = ["gpt", "baseconv", "based", "gla", "mamba", "hyena", "rwkv", "deltanet", "gated-deltanet"]


def train_losses(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    model.train()
    for _ in range(steps):
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE_INDEX)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("name", CAUSAL)
def test_causal_baselines_learn_mqar_batch(name):
    torch.manual_seed(0)
    cls, cfg = TINY[name]
    task = MQAR(MQARConfig(vocab_size=64, input_seq_len=32, num_kv_pairs=4, num_train_examples=64))
    x, y = task.batch("train", 0, 32, seed=0)
    losses = train_losses(cls(cfg), x, y, steps=40, lr=3e-3)
    assert losses[-1] < 0.6 * losses[0], losses[::8]


def test_hyperset_learns_a_bidirectional_batch():
    torch.manual_seed(0)
    cls, cfg = TINY["hyperset"]
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 64, (16, 32), generator=g)
    y = x.roll(1, dims=1).flip(1)  # every label depends on another position: needs attention
    losses = train_losses(cls(cfg), x, y, steps=40, lr=1e-2)
    assert losses[-1] < 0.6 * losses[0], losses[::8]


def test_gpt_param_formula():
    for kw in [
        {},
        dict(bias=False),
        dict(mlp_ratio=0),
        dict(positional="rope", tie_embeddings=False),
        dict(share_layers=True, mlp_ratio=2.5),
        dict(positional="none", n_head=8),
    ]:
        cfg = GPTConfig(vocab_size=97, seq_len=40, n_layer=3, n_embd=48, n_head=4).replace(**kw)
        assert GPT(cfg).num_params() == cfg.num_params(), kw
    # GPT-2 small (124M: tied readout, learned positions, biases): 124,439,808 parameters
    gpt2 = GPTConfig(vocab_size=50257, seq_len=1024, n_layer=12, n_embd=768, n_head=12)
    assert gpt2.num_params() == 124_439_808
    d = 48  # by hand, one block of the default: 12 d^2 + 13 d plus the LayerNorms
    assert (
        GPTConfig(vocab_size=10, seq_len=5, n_layer=1, n_embd=d, n_head=4).num_params()
        == 10 * d + 5 * d + 12 * d * d + 13 * d + 2 * d
    )


def test_gpt_sizing_by_budget():
    cfg = gpt_config_for_params(2_000_000, n_layer=4, n_head=4, vocab_size=256)
    assert abs(cfg.num_params() - 2_000_000) <= cfg.replace(n_embd=cfg.n_embd + 4).num_params() - cfg.num_params()
    assert cfg.n_embd % 4 == 0
    with pytest.raises(ValueError, match="budget"):
        gpt_config_for_params(0)


def test_baseconv_param_formula_and_state():
    for kw in [
        {},
        dict(long_filter="explicit", mlp_ratio=0),
        dict(kernel_sizes=[3, 5, -1], n_layer=3, positional="learned"),
    ]:
        cfg = BaseConvConfig(vocab_size=97, seq_len=40, n_embd=24).replace(**kw)
        assert BaseConv(cfg).num_params() == cfg.num_params(), kw
    d, V, T = 24, 97, 40  # by hand: short-3 layer and explicit long layer, no MLP
    cfg = BaseConvConfig(vocab_size=V, seq_len=T, n_embd=d, long_filter="explicit", mlp_ratio=0)
    short = 2 * d + d * d + d + 3 * d + d
    long = 2 * d + d * d + d + d * T + d
    assert cfg.num_params() == V * d + 2 * d + short + long
    assert BaseConv(cfg).state_sizes() == [3 * d, T * d]


def test_hyperset_param_formula():
    cfg = HyperSETConfig(vocab_size=10, seq_len=81, n_embd=32, n_head=4, ff_mult=4, time_freq=16)
    d, M, p = 32, 128, 8
    expected = 10 * d + 81 * d + d * d + d * M + p + M + (16 * d + d) + (d * d + d) + (2 * d * d + 2 * d) + d + 10 * d
    assert cfg.num_params() == expected == HyperSET(cfg).num_params()
    nopos = cfg.replace(positional="sinusoidal")
    assert HyperSET(nopos).num_params() == nopos.num_params() == expected - 81 * d


def test_fft_conv_is_causal_linear_convolution():
    torch.manual_seed(0)
    u, k = torch.randn(2, 3, 10), torch.randn(3, 10)
    direct = torch.zeros_like(u)
    for t in range(10):
        for s in range(t + 1):
            direct[..., t] += k[:, s] * u[..., t - s]
    assert torch.allclose(fft_conv(u, k), direct, atol=1e-5)


@pytest.mark.parametrize("name", CAUSAL)
def test_causal_models_do_not_see_the_future(name):
    cls, cfg = TINY[name]
    model = cls(cfg).eval()
    x = torch.randint(0, 64, (2, 20))
    x2 = x.clone()
    x2[:, 12:] = (x2[:, 12:] + 1) % 64
    a, b = model(x), model(x2)
    assert torch.allclose(a[:, :12], b[:, :12], atol=1e-5)
    assert not torch.allclose(a[:, 12:], b[:, 12:], atol=1e-3)


def test_bidirectional_gpt_and_rope():
    cfg = TINY["gpt"][1].replace(causal=False, positional="rope")
    model = GPT(cfg).eval()
    x = torch.randint(0, 64, (2, 20))
    x2 = x.clone()
    x2[:, -1] = (x2[:, -1] + 1) % 64
    assert not torch.allclose(model(x)[:, 0], model(x2)[:, 0], atol=1e-5)


def test_hyperset_attention_is_the_energy_gradient():
    """Without the sphere normalisation, the attention update is exactly grad_X E_ATTN (Eq. 6)."""
    torch.manual_seed(0)
    layer = HyperSET(HyperSETConfig(vocab_size=5, seq_len=7, n_embd=12, n_head=3)).layer.double()
    layer.norm_h = torch.nn.Identity()
    x = torch.randn(2, 7, 12, dtype=torch.double, requires_grad=True)
    z = (x @ layer.W).view(2, 7, 3, 4).transpose(1, 2)
    beta = 1 / math.sqrt(4)
    energy = torch.logsumexp(beta * z @ z.transpose(-1, -2), dim=-1).sum() / beta
    (grad,) = torch.autograd.grad(energy, x)
    assert torch.allclose(layer.attention(x), grad, atol=1e-10)
    s = torch.randn(4, 4)
    s = s + s.T
    assert torch.allclose(s.softmax(-1) + s.softmax(-2), (s.softmax(-1) + s.softmax(-2)).T)  # symmetric


def test_weight_shared_models_take_n_layer():
    torch.manual_seed(0)
    hs = HyperSET(TINY["hyperset"][1]).eval()
    torch.nn.init.normal_(hs.steps.out.weight, std=0.1)  # nonzero step sizes (zero at init)
    x = torch.randint(0, 64, (2, 32))
    assert torch.equal(hs(x), hs(x, n_layer=4))
    assert not torch.allclose(hs(x, n_layer=2), hs(x, n_layer=6))
    logits, traj = hs(x, n_layer=3, return_trajectory=True)
    assert len(traj) == 3
    gpt = GPT(TINY["gpt"][1].replace(share_layers=True)).eval()
    assert torch.equal(gpt(x), gpt(x, n_layer=2)) and not torch.allclose(gpt(x, n_layer=1), gpt(x, n_layer=3))
    with pytest.raises(ValueError, match="share_layers"):
        GPT(TINY["gpt"][1])(x, n_layer=3)
    with pytest.raises(ValueError, match="n_layer"):
        hs(x, n_layer=0)


def test_weight_sharing_is_declared_by_the_model_not_guessed_from_its_name():
    from bdh.bench.sudoku import weight_shared
    from bdh.model import BDH, BDHConfig

    assert weight_shared(HyperSET(TINY["hyperset"][1]))
    assert weight_shared(GPT(TINY["gpt"][1].replace(share_layers=True)))
    assert not weight_shared(GPT(TINY["gpt"][1]))
    assert not weight_shared(BaseConv(TINY["baseconv"][1]))  # declares nothing: not shared
    assert weight_shared(BDH(BDHConfig(n_layer=2, n_embd=16, n_head=2, n_neurons=64, vocab_size=32)))


@pytest.mark.parametrize("name", list(TINY))
def test_save_load_round_trip(name, tmp_path):
    cls, cfg = TINY[name]
    model = cls(cfg).eval()
    for p in model.parameters():  # non-trivial weights everywhere (some start at zero)
        torch.nn.init.normal_(p, std=0.05)
    model.save_pretrained(tmp_path)
    again = load_pretrained(tmp_path)
    assert type(again) is cls and again.config == cfg
    x = torch.randint(0, 64, (2, 16))
    assert torch.equal(model(x), again(x))
    assert type(cls.from_pretrained(tmp_path)) is cls
    assert get_model(name) is cls


@pytest.mark.parametrize(
    "cfg_cls, kw, msg",
    [
        (GPTConfig, dict(n_embd=30, n_head=4), "GPTConfig.n_head"),
        (GPTConfig, dict(positional="alibi"), "GPTConfig.positional"),
        (GPTConfig, dict(n_embd=12, n_head=4, positional="rope"), "even"),
        (GPTConfig, dict(dropout=1.0), "GPTConfig.dropout"),
        (BaseConvConfig, dict(kernel_sizes=[3, 0]), "BaseConvConfig.kernel_sizes"),
        (BaseConvConfig, dict(causal=False), "BaseConvConfig.causal"),
        (BaseConvConfig, dict(filter_emb_dim=4), "BaseConvConfig.filter_emb_dim"),
        (HyperSETConfig, dict(causal=True), "HyperSETConfig.causal"),
        (HyperSETConfig, dict(n_embd=30, n_head=4), "HyperSETConfig.n_head"),
        (HyperSETConfig, dict(step_condition="t"), "HyperSETConfig.step_condition"),
        (BasedConfig, dict(layer_pattern=["conv", "mamba"]), "BasedConfig.layer_pattern"),
        (GLAConfig, dict(decay="none"), "GLAConfig.decay"),
        (MambaConfig, dict(causal=False), "MambaConfig.causal"),
        (MambaConfig, dict(dt_min=0.5, dt_max=0.1), "MambaConfig.dt_min"),
        (MambaConfig, dict(scan="chunky"), "MambaConfig.scan"),
        (MambaConfig, dict(d_state=0), "MambaConfig.d_state"),
        (HyenaConfig, dict(causal=False), "HyenaConfig.causal"),
        (HyenaConfig, dict(filter_emb_dim=4), "HyenaConfig.filter_emb_dim"),
        (HyenaConfig, dict(decay_fast=2.0), "HyenaConfig.decay_fast"),
        (HyenaConfig, dict(conv="fast"), "HyenaConfig.conv"),
        (RWKVConfig, dict(causal=False), "RWKVConfig.causal"),
        (RWKVConfig, dict(wkv="cuda"), "RWKVConfig.wkv"),
        (RWKVConfig, dict(mlp_ratio=-1), "RWKVConfig.mlp_ratio"),
    ],
)
def test_bad_config_is_one_line(cfg_cls, kw, msg):
    with pytest.raises(ValueError, match=msg) as err:
        cfg_cls(**kw)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="unknown field"):
        cfg_cls.from_dict({"n_layers": 2})


def test_bad_tokens_are_refused():
    model = GPT(TINY["gpt"][1])
    with pytest.raises(ValueError, match="longer than seq_len"):
        model(torch.zeros(1, 33, dtype=torch.long))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.full((1, 3), 64))
