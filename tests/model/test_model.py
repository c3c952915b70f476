"""The forward pass: the official math, the paper's structural facts, capture, input errors."""

import pytest
import torch

from bdh import BDHCapture, interop
from bdh.model.kernels.naive import naive_official_forward

from .helpers import rel_err, tiny_model


def _official_state_dict(n_layer=3, D=16, H=2, mult=4, V=256, seed=0):
    """Random tensors in the official layout and names (as pathwaycom/bdh's BDH holds them)."""
    g = torch.Generator().manual_seed(seed)
    N = mult * D // H
    return {
        "decoder": torch.randn(H * N, D, generator=g) * 0.02,
        "encoder": torch.randn(H, D, N, generator=g) * 0.02,
        "encoder_v": torch.randn(H, D, N, generator=g) * 0.02,
        "embed.weight": torch.randn(V, D, generator=g) * 0.02,
        "lm_head": torch.randn(D, V, generator=g) * 0.02,
    }


def test_the_reference_forward_computes_the_official_math():
    """`BDH.slow_forward` against the transcription of the official code in its own names (fp32: the same products,
    LayerNorm written out there and F.layer_norm here, summed in other orders: a few ulps through three layers)."""
    sd = _official_state_dict()
    model = interop.from_official(sd, n_layer=3, n_embd=16, n_head=2, mlp_internal_dim_multiplier=4, dropout=0.0)
    idx = torch.randint(0, 256, (2, 30), generator=torch.Generator().manual_seed(0))
    assert rel_err(model.eval().slow_forward(idx), naive_official_forward(sd, idx, n_layer=3, n_head=2)) <= 1e-5


@pytest.mark.parametrize("form", ["parallel", "chunked", "recurrent"])
def test_every_form_of_an_official_model_equals_the_reference_forward(form):
    sd = _official_state_dict()
    model = interop.from_official(sd, n_layer=3, n_embd=16, n_head=2, mlp_internal_dim_multiplier=4, dropout=0.0)
    model.config.chunk_size = 7
    idx = torch.randint(0, 256, (2, 30), generator=torch.Generator().manual_seed(0))
    # fp32, the same sums in other orders (blocks, chunks, token by token): a few ulps through three layers
    assert rel_err(model.eval()(idx, mode=form), model.slow_forward(idx)) <= 1e-5


def test_larger_weights_still_match_the_official_math():
    # std 0.02 keeps activations small; scale up so that RoPE and the scores matter a lot
    sd = {k: v * 25 for k, v in _official_state_dict(n_layer=2, D=32, H=4, mult=8, seed=3).items()}
    model = interop.from_official(sd, n_layer=2, n_embd=32, n_head=4, mlp_internal_dim_multiplier=8, dropout=0.0).eval()
    idx = torch.randint(0, 256, (3, 40))
    ref = naive_official_forward(sd, idx, n_layer=2, n_head=4)
    assert rel_err(model.slow_forward(idx), ref) <= 1e-5 and rel_err(model(idx), ref) <= 1e-5


def test_the_reference_forward_refuses_dropout_and_bad_tokens():
    model = tiny_model(dropout=0.1).train()
    with pytest.raises(ValueError, match="slow_forward: the reference runs without dropout"):
        model.slow_forward(torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="slow_forward"):
        model.eval().slow_forward(torch.full((1, 4), 256))


def test_parameters_follow_the_paper_and_count_3nD_plus_2VD():
    model = tiny_model()
    cfg = model.config
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert shapes == {
        "E": (cfg.n, cfg.n_embd),
        "Dx": (cfg.n_head, cfg.n_embd, cfg.N),
        "Dy": (cfg.n_head, cfg.n_embd, cfg.N),
        "embed.weight": (cfg.vocab_size, cfg.n_embd),
        "readout": (cfg.n_embd, cfg.vocab_size),
    }
    assert model.num_params() == 3 * cfg.n * cfg.n_embd + 2 * cfg.vocab_size * cfg.n_embd == cfg.num_params()


def test_causal_model_never_looks_ahead():
    model = tiny_model()
    idx = torch.randint(0, 256, (1, 12))
    base = model(idx)
    changed = idx.clone()
    changed[0, 7] = (changed[0, 7] + 1) % 256
    out = model(changed)
    # exact: the same kernels on the same shapes; token 7 reaches earlier rows only through an exact 0 weight
    assert torch.equal(base[:, :7], out[:, :7])
    assert not torch.allclose(base[:, 7:], out[:, 7:])


def test_bidirectional_model_sees_the_whole_sequence():
    model = tiny_model(causal=False)
    idx = torch.randint(0, 256, (1, 12))
    changed = idx.clone()
    changed[0, 7] = (changed[0, 7] + 1) % 256
    assert not torch.allclose(model(idx)[:, :7], model(changed)[:, :7])


def test_capture_shapes_and_the_papers_invariants():
    model = tiny_model(n_layer=3, attention="chunked")
    cfg = model.config
    idx = torch.randint(0, 256, (2, 9))
    logits, cap = model(idx, capture=True)
    assert isinstance(cap, BDHCapture) and cap.n_layer == 3
    B, T, H, N, D, V = 2, 9, cfg.n_head, cfg.N, cfg.n_embd, cfg.vocab_size
    for layer in range(3):
        assert cap.x[layer].shape == (B, H, T, N)
        assert cap.y[layer].shape == (B, H, T, N)
        assert cap.attention[layer].shape == (B, H, T, T)
        assert cap.a[layer].shape == (B, H, T, D)
        assert cap.v[layer].shape == (B, T, D)
        assert cap.logits[layer].shape == (B, T, V)
        x, y = cap.x[layer], cap.y[layer]
        assert (x >= 0).all() and (y >= 0).all()  # positive activations (paper section 3)
        assert ((y > 0) <= (x > 0)).all()  # y is gated by x: supp(y) within supp(x)
        scores = cap.attention[layer]
        assert torch.equal(scores, scores.tril(diagonal=-1))  # strictly causal
        assert torch.all(cap.a[layer][:, :, 0] == 0)  # the first token reads an empty state
    assert torch.equal(cap.logits[-1], logits)
    assert rel_err(logits, model(idx)) <= 1e-5


def test_capture_attention_rows_reproduce_the_attention_output():
    model = tiny_model(damping="alibi")
    idx = torch.randint(0, 256, (1, 8))
    _, cap = model(idx, capture=True)
    v_in = model.embed_tokens(idx)  # values of the first layer
    assert rel_err(cap.attention[0] @ v_in, cap.a[0]) <= 1e-5


def test_dropout_only_in_training_mode():
    model = tiny_model(dropout=0.5)
    idx = torch.randint(0, 256, (2, 8))
    assert torch.equal(model(idx), model(idx))
    model.train()
    assert not torch.equal(model(idx), model(idx))


def test_shared_weights_mean_more_layers_cost_no_parameters():
    assert tiny_model(n_layer=1).num_params() == tiny_model(n_layer=5).num_params()


@pytest.mark.parametrize(
    "idx, match",
    [
        (torch.tensor([1, 2, 3]), "a \\(batch, time\\) tensor"),
        (torch.zeros(1, 0, dtype=torch.long), "empty sequence"),
        (torch.tensor([[1, 256]]), "token 256 is outside the vocabulary"),
        (torch.tensor([[-1, 2]]), "token -1 is outside"),
        (torch.tensor([[0.5, 1.0]]), "must be integers"),
    ],
)
def test_bad_tokens_are_refused_in_one_line(idx, match):
    with pytest.raises(ValueError, match=match):
        tiny_model()(idx)


def test_model_runs_in_float64():
    model = tiny_model().to(torch.float64)
    assert model.freqs.dtype == torch.float64
    out = model(torch.randint(0, 256, (1, 5)))
    assert out.dtype == torch.float64


def test_bf16_autocast_runs_and_stays_close():
    model = tiny_model()
    idx = torch.randint(0, 256, (2, 16))
    ref = model(idx)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(idx)
    assert low.dtype == torch.bfloat16
    assert rel_err(low.float(), ref) < 0.1


def test_layer_passes_can_be_changed_at_test_time():
    model = tiny_model(n_layer=3)
    idx = torch.randint(0, 256, (2, 7))
    deeper, cap = model(idx, n_layer=5, capture=True)
    assert cap.n_layer == 5 and torch.equal(cap.logits[-1], deeper)
    assert torch.allclose(cap.logits[2], model(idx), atol=1e-6)  # the first 3 passes are the trained model
    with pytest.raises(ValueError, match="layer passes"):
        model(idx, n_layer=0)
