"""The compiled loops (bdh.model.kernels.native) against their PyTorch references: values and gradients, the model
with and without them, and the fallback where the library is missing."""

import contextlib
import os

import pytest
import torch
import torch.nn.functional as F

from bdh.model.kernels import Pass, attention, native, select
from bdh.model.kernels.dropout import drop_mask
from bdh.model.kernels.fused import native_gate, native_relu_rope
from bdh.model.kernels.rope import official_frequencies, rope_plain, rope_tables, standard_frequencies

from .helpers import tiny_model, values_and_grads

built = pytest.mark.skipif(not native.available(), reason="the compiled loops are not built here (setup.py)")
BF16 = (
    2**-8
)  # bf16 keeps 8 significant bits: one rounding to nearest moves a value by at most 2^-8 of it (2^-9, rounded up)


def test_the_library_is_built_where_ci_requires_it():
    """CI sets BDH_REQUIRE_NATIVE=1 after installing: there both paths must be tested, so the build must not be lost."""
    if os.environ.get("BDH_REQUIRE_NATIVE") == "1":
        assert native.available(), "the compiled loops were not built (pip install -e . builds them; see setup.py)"


def _tables(kind: str, N: int, start: int, T: int):
    freqs = official_frequencies(N, 2.0**16) if kind == "rope" else standard_frequencies(N, 10000.0)
    cos, sin = rope_tables(kind, freqs, start, T)
    return cos, sin, native.half_tables(kind, cos, sin)


def _relu_rope_reference(h, cos, sin, kind):
    x = torch.relu(h)
    return x, rope_plain(kind, x, cos.to(h.dtype), sin.to(h.dtype))


def _close(fast: torch.Tensor, ref: torch.Tensor, rel: float, scale: float) -> bool:
    """|fast - ref| <= rel |ref| + rel * scale elementwise: one rounding of the result, plus the fp32 error of a sum
    whose terms are of size ``scale`` (the sum may cancel, the error of its terms does not)."""
    return bool(((fast.double() - ref.double()).abs() <= rel * ref.double().abs() + rel * scale).all())


@built
@pytest.mark.parametrize("kind", ["rope", "rope-standard"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_relu_rope_equals_relu_then_the_plain_rotation(kind, dtype):
    N, T = 64, 9
    cos, sin, half = _tables(kind, N, 3, T)
    torch.manual_seed(0)
    h = torch.randn(2, 3, T, N).to(dtype)
    wx, wr = torch.randn(2, 3, T, N), torch.randn(2, 3, T, N)

    def both(fn):
        return values_and_grads(lambda t: torch.cat(fn(t), dim=-1), h, weight=torch.cat((wx, wr), dim=-1))

    fast, (dh,) = both(lambda t: native_relu_rope(t, *half, kind))
    ref, (rh,) = both(lambda t: _relu_rope_reference(t.double(), cos.double(), sin.double(), kind))  # fp64 exact
    assert fast.dtype == dtype and dh.dtype == dtype
    # fp32: a few ulps of the pair's size; bf16: the fp32 result rounded once (the gradients arrive in bf16 too)
    rel = 4 * 2**-24 if dtype == torch.float32 else BF16
    assert torch.equal(fast[..., :N], ref[..., :N].to(dtype))  # x = ReLU(h) is exact
    assert _close(fast[..., N:], ref[..., N:], rel, h.abs().max().item())
    grads = (wx.to(dtype).double().abs() + wr.to(dtype).double().abs()).max().item()
    ref_h = values_and_grads(
        lambda t: torch.cat(_relu_rope_reference(t.double(), cos.double(), sin.double(), kind), dim=-1),
        h,
        weight=torch.cat(
            (wx.to(dtype), wr.to(dtype)), dim=-1
        ).float(),  # the incoming gradients as the fast path sees them
    )[1][0]
    assert _close(dh, ref_h, rel, 3 * grads)
    assert (dh[h <= 0] == 0).all() and rh.shape == dh.shape


@built
def test_relu_rope_with_one_output_unused():
    """Autograd gives no gradient for an output that was not used: the backward counts it as zero."""
    cos, sin, half = _tables("rope", 16, 0, 5)
    torch.manual_seed(1)
    h = torch.randn(2, 5, 16)
    w = torch.randn(2, 5, 16)
    for pick in (0, 1):
        _, (dh,) = values_and_grads(lambda t, i=pick: native_relu_rope(t, *half, "rope")[i], h, weight=w)
        _, (rh,) = values_and_grads(lambda t, i=pick: _relu_rope_reference(t, cos, sin, "rope")[i], h, weight=w)
        assert torch.allclose(dh, rh, atol=1e-6, rtol=0)  # fp32: a few ulps of terms of size |w| <= 5


@built
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_gate_equals_the_plain_masked_product(dtype, dropout):
    torch.manual_seed(2)
    z = torch.randn(2, 3, 7, 16).to(dtype)
    z[0, 0, 0, :4] = 0.0  # the kink: ReLU'(0) = 0 in both
    x = torch.relu(torch.randn(2, 3, 7, 16)).to(dtype)
    w = torch.randn(2, 3, 7, 16)
    mask = drop_mask(z.shape, dropout, dtype=dtype) if dropout else None
    dropped = mask.dropped() if mask else torch.zeros(z.shape, dtype=torch.bool)
    fast, (dz, dx) = values_and_grads(lambda a, b: native_gate(a, b, mask), z, x, weight=w)
    ref, (rz, rx) = values_and_grads(lambda a, b: (torch.relu(a) * b).masked_fill(dropped, 0), z, x, weight=w)
    # one product computed in fp32 and rounded once to the dtype, on both paths: within one rounding
    rel = 2**-23 if dtype == torch.float32 else BF16
    for a, b in ((fast, ref), (dz, rz), (dx, rx)):
        assert a.dtype == dtype and _close(a, b, rel, 0.0)
    assert (fast[dropped] == 0).all() and (dz[dropped] == 0).all() and (dx[dropped] == 0).all()


@built
def test_gate_refuses_what_it_cannot_take():
    z = torch.randn(4, 8, dtype=torch.float64)
    assert native_gate(z, z) is None  # fp64: the PyTorch path
    assert native_gate(z.float(), z.bfloat16()) is None  # mixed dtypes
    assert native_gate(z.float(), z.float(), drop_mask((4, 8), 0.999, dtype=torch.float32)) is None  # a bool mask


@built
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("damped", [False, True])
@pytest.mark.parametrize("B", [1, 3])
def test_recurrent_step_equals_the_plain_recurrent_form(dtype, damped, B):
    H, N, D = 3, 24, 8
    torch.manual_seed(3)
    q = torch.randn(B, H, 1, N).relu().to(dtype)  # keys = queries, with zeros (rows skipped)
    v = torch.randn(B, 1, 1, D)
    S = torch.randn(B, H, N, D)
    log_u = torch.log(torch.tensor([0.9, 0.5, 0.99])) if damped else None
    u = None if log_u is None else torch.exp(log_u)
    ref, S_ref = attention.recurrent(q.double(), q.double(), v.double(), log_u=log_u, state=S.double(), need_state=True)
    S_fast = S.clone()
    a = native.recurrent_step(q, q, v, S_fast, u)
    assert a.dtype == dtype and a.shape == (B, H, 1, D)
    # fp32 sums of N products (q exact in either dtype): ~N ulps of the terms' size; a bf16 a is rounded once more
    scale = (q.double().abs().unsqueeze(-1) * S.double().abs().unsqueeze(2)).sum(-2).max().item()
    rel = N * 2**-24 if dtype == torch.float32 else BF16
    assert _close(a, ref, rel, scale)
    assert torch.allclose(
        S_fast.double(), S_ref, atol=4 * 2**-24 * S_ref.abs().max().item(), rtol=0
    )  # one fma-ish step


def _step(model, tokens, autocast: bool):
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.autocast("cpu", enabled=False)
    with ctx:
        return model(tokens)


@built
@pytest.mark.parametrize("positional", ["rope", "rope-standard", "none"])
@pytest.mark.parametrize("low", [False, True])
def test_model_training_pass_equals_the_pytorch_path(positional, low):
    """A training pass (dropout with host masks, bf16 autocast or fp32): logits and every gradient as without the
    compiled loops, the same masks drawn from the same seed."""
    model = tiny_model(seed=4, positional=positional, dropout=0.2, n_neurons=128).train()
    idx = torch.randint(0, 256, (3, 13), generator=torch.Generator().manual_seed(5))
    target = torch.randint(0, 256, (3, 13), generator=torch.Generator().manual_seed(6))
    results = []
    for use in (True, False):
        model.zero_grad()
        torch.manual_seed(7)
        with native.disabled() if not use else contextlib.nullcontext():
            logits = _step(model, idx, low)
            F.cross_entropy(logits.float().view(-1, 256), target.view(-1)).backward()
        results.append((logits.detach().float(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (fast, fg), (ref, rg) = results
    # fp32: the same products in another order (a few ulps through 2 layers); bf16: both paths round to bf16 at
    # every matmul, and the rotation and sums round at different places: a few bf16 roundings of the values
    tol = 1e-5 if not low else 8 * BF16
    assert (fast - ref).abs().max() <= tol * ref.abs().max()
    for name in fg:
        assert (fg[name] - rg[name]).abs().max() <= 4 * tol * rg[name].abs().max(), name


@built
@pytest.mark.parametrize("damping", [None, 0.9])
@pytest.mark.parametrize("batch", [1, 3])
def test_generation_on_the_compiled_step_equals_the_pytorch_step(damping, batch):
    model = tiny_model(seed=8, damping=damping)
    prompt = torch.randint(0, 256, (batch, 7), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        fast_state = model.init_state(batch)
        ref_state = model.init_state(batch)
        _, fast_state = model.step(prompt, fast_state, inplace=True)
        with native.disabled():
            _, ref_state = model.step(prompt, ref_state, inplace=True)
        tok = prompt[:, -1]
        for _ in range(5):
            fast, fast_state = model.step(tok, fast_state, inplace=True)
            with native.disabled():
                ref, ref_state = model.step(tok, ref_state, inplace=True)
            # fp32 both ways, the state sums in another order: a few ulps of the logits' size
            assert torch.allclose(fast, ref, atol=1e-5 * ref.abs().max().item(), rtol=0)
            tok = ref.argmax(-1)
    assert torch.allclose(fast_state.rho, ref_state.rho, atol=1e-5 * ref_state.rho.abs().max().item(), rtol=0)


def test_select_chooses_the_loops_for_eager_cpu_passes_only(monkeypatch):
    model = tiny_model()

    def chosen(device: str = "cpu") -> bool:
        return select(
            Pass("parallel", 0, 8),
            positional="rope",
            freqs=model.freqs,
            log_u=None,
            causal=True,
            chunk_size=4,
            dropout=0.0,
            dropout_rng="auto",
            training=False,
            autograd=False,
            device=torch.device(device),
        ).native

    assert chosen() == native.available()
    assert not chosen("cuda") and not chosen("meta")
    with native.disabled():
        assert not chosen()
    monkeypatch.setenv("BDH_NATIVE", "0")
    assert not chosen()


def test_without_the_library_the_model_runs_the_pytorch_path(monkeypatch):
    """Where the extension was not built (or does not load), nothing chooses it: the PyTorch path's results."""
    model = tiny_model(seed=10)
    idx = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(11))
    with native.disabled():
        ref = model(idx)
    monkeypatch.setattr(native, "_library", lambda: None)
    assert not native.available() and not native.supports(torch.zeros(1))
    assert model.kernels(Pass("parallel", 0, 9)).native is False
    assert torch.equal(model(idx), ref)  # the same code runs: identical
