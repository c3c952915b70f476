import math

import pytest

from bdh import BDHConfig
from bdh.errors import UserError
from bdh.model.config import alibi_retention, multiscale_retention


def test_defaults_are_the_official_model():
    cfg = BDHConfig()
    assert (cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.vocab_size, cfg.dropout) == (6, 256, 4, 256, 0.1)
    assert cfg.n == 128 * 256 == 32768 and cfg.N == 8192
    assert cfg.num_params() == 3 * 32768 * 256 + 2 * 256 * 256 == 25_296_896
    assert cfg.state_size() == 32768 * 256
    assert cfg.causal and cfg.positional == "rope" and cfg.theta == 2.0**16 and cfg.damping is None


def test_neurons_given_directly_or_by_multiplier():
    assert BDHConfig(n_embd=32, n_neurons=256).n == 256
    assert BDHConfig(n_embd=32, mlp_internal_dim_multiplier=4).n == 128
    assert BDHConfig(positional="rope-standard").theta == 10000.0


@pytest.mark.parametrize(
    "fields, field",
    [
        (dict(n_layer=0), "n_layer"),
        (dict(n_embd=-1), "n_embd"),
        (dict(n_head=2.5), "n_head"),
        (dict(n_head=True), "n_head"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(n_neurons=100, n_head=3), "n_neurons"),
        (dict(n_neurons=64, mlp_internal_dim_multiplier=2), "n_neurons"),
        (dict(n_neurons=6, n_head=2), "n_neurons"),  # odd neurons per head with RoPE
        (dict(mlp_internal_dim_multiplier=0), "mlp_internal_dim_multiplier"),
        (dict(dropout=1.0), "dropout"),
        (dict(dropout="0.1"), "dropout"),
        (dict(dropout_rng="numpy"), "dropout_rng"),
        (dict(causal="yes"), "causal"),
        (dict(positional="alibi"), "positional"),
        (dict(rope_theta=0.5), "rope_theta"),
        (dict(damping=1.5), "damping"),
        (dict(damping=0.0), "damping"),
        (dict(damping="linear"), "damping"),
        (dict(damping=[0.9, 0.8, 0.7]), "damping"),
        (dict(attention="flash"), "attention"),
        (dict(causal=False, attention="chunked"), "attention"),
        (dict(causal=False, attention="recurrent"), "attention"),
        (dict(chunk_size=0), "chunk_size"),
        (dict(ln_eps=0), "ln_eps"),
    ],
)
def test_invalid_values_give_one_line_naming_the_field(fields, field):
    with pytest.raises(ValueError) as err:
        BDHConfig(**fields)
    msg = str(err.value)
    assert f"BDHConfig.{field}" in msg
    assert "\n" not in msg


def test_enumerated_fields_list_the_allowed_values():
    with pytest.raises(ValueError, match="parallel, chunked, recurrent"):
        BDHConfig(attention="fast")
    with pytest.raises(ValueError, match="rope, rope-standard, none"):
        BDHConfig(positional="sinusoid")


def test_odd_neurons_per_head_are_fine_without_rope():
    assert BDHConfig(n_neurons=6, n_head=2, positional="none").N == 3


def test_dict_round_trip_and_unknown_keys():
    cfg = BDHConfig(n_layer=3, n_embd=32, n_neurons=128, damping=[0.9, 0.8, 0.7, 0.6], causal=True)
    again = BDHConfig.from_dict(cfg.to_dict())
    assert again == cfg and again.n == 128
    with pytest.raises(ValueError, match="unknown field 'n_layers'"):
        BDHConfig.from_dict({"n_layers": 3})


def test_replace_switches_sizing():
    cfg = BDHConfig(n_embd=32, mlp_internal_dim_multiplier=4)
    assert cfg.replace(n_neurons=64).n == 64
    assert cfg.replace(n_layer=2).n == 128


def test_damping_forms():
    assert BDHConfig(damping=0.5).retention() == (0.5,) * 4
    assert BDHConfig(n_head=2, n_neurons=64, damping=[0.5, 0.25]).retention() == (0.5, 0.25)
    alibi = BDHConfig(damping="alibi").retention()
    assert alibi == alibi_retention(4)
    assert all(0 < u < 1 for u in alibi) and list(alibi) == sorted(alibi)  # slower decay for later heads
    assert BDHConfig().retention() is None


def test_multiscale_damping_spreads_half_lives():
    """The ``multiscale`` preset: half-lives geometric from 16 to 16384 tokens over the heads (u^h = 1/2)."""
    u = BDHConfig(damping="multiscale").retention()
    assert u == multiscale_retention(4)
    half_lives = [math.log(0.5) / math.log(x) for x in u]
    assert half_lives == pytest.approx([16.0, 16.0 * 1024 ** (1 / 3), 16.0 * 1024 ** (2 / 3), 16384.0], rel=1e-9)
    assert len(BDHConfig(n_head=1, n_neurons=64, damping="multiscale").retention()) == 1
    assert math.log(0.5) / math.log(multiscale_retention(1)[0]) == pytest.approx(512.0)
    with pytest.raises(UserError, match="'alibi', 'multiscale' or 'local-global'"):
        BDHConfig(damping="slow")


def test_local_global_damping_keeps_half_the_heads_undamped():
    """The ``local-global`` preset: the first half of the heads local (half-lives 1 to 8 tokens, geometric), the
    others u = 1; one head: undamped."""
    u = BDHConfig(n_head=4, n_embd=64, n_neurons=512, damping="local-global").retention()
    assert u[2:] == (1.0, 1.0)
    assert [-1 / math.log2(x) for x in u[:2]] == pytest.approx([1.0, 8.0])  # half-lives in tokens
    u8 = BDHConfig(n_head=8, n_embd=64, n_neurons=512, damping="local-global").retention()
    assert u8[4:] == (1.0,) * 4 and list(u8[:4]) == sorted(u8[:4])
    assert BDHConfig(n_head=1, n_embd=64, n_neurons=512, damping="local-global").retention() == (1.0,)
