"""The compiled loops (bdh.model.kernels.cpu.native) against their PyTorch references: values and gradients, the model
with and without them, and the fallback where the library is missing."""

import contextlib
import dataclasses
import math
import os

import pytest
import torch
import torch.nn.functional as F

import bdh.model.kernels as kernels_module
from bdh.model.kernels import Pass, choose, dispatch
from bdh.model.kernels.cpu import native
from bdh.model.kernels.cpu.ops import native_gate, native_relu_rope
from bdh.model.kernels.pytorch import attention
from bdh.model.kernels.pytorch.dropout import counter_draws, counter_mask, draw_seed
from bdh.model.kernels.pytorch.rope import official_frequencies, rope_plain, rope_tables, standard_frequencies

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


def _heads_outer(t: torch.Tensor) -> torch.Tensor:
    """The same (B, H, T, N) values stored heads-outer, (H, B, T, N) (`Kernels.heads`)."""
    return t.transpose(0, 1).contiguous().transpose(0, 1)


@built
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize(
    "shape, outer",
    [((2, 3, 7, 16), False), ((5, 1, 3), False), ((2, 3, 7, 16), True), ((3, 2, 5, 1030), True)],
)  # a whole number of words of draws, and not; z stored heads-outer (x head-major), rows longer than a chunk
def test_gate_equals_the_plain_masked_product(dtype, dropout, shape, outer):
    """The draws made inside the loop are `counter_draws`' (the NumPy reference of the same stream) at each entry's
    index in the (B, H, T, N) shape, whatever the layout; y and dz take z's layout, dx x's."""
    torch.manual_seed(2)
    z = torch.randn(shape).to(dtype)
    z.view(-1)[:4] = 0.0  # the kink: ReLU'(0) = 0 in both
    x = torch.relu(torch.randn(shape)).to(dtype)
    w = torch.randn(shape)
    if outer:
        z, w = _heads_outer(z), _heads_outer(w)
    seed = 123456789
    dropped = counter_mask(shape, dropout, seed).dropped()
    fast, (dz, dx) = values_and_grads(lambda a, b: native_gate(a, b, dropout, seed), z, x, weight=w)
    ref, (rz, rx) = values_and_grads(lambda a, b: (torch.relu(a) * b).masked_fill(dropped, 0), z, x, weight=w)
    # one product computed in fp32 and rounded once to the dtype, on both paths: within one rounding
    rel = 2**-23 if dtype == torch.float32 else BF16
    for a, b in ((fast, ref), (dz, rz), (dx, rx)):
        assert a.dtype == dtype and _close(a, b, rel, 0.0)
    assert (fast[dropped] == 0).all() and (dz[dropped] == 0).all() and (dx[dropped] == 0).all()
    assert dropped.any() == (dropout > 0)
    assert fast.stride() == z.stride() and dx.stride() == x.stride()


@built
def test_gate_draws_over_a_large_tensor_drop_p_and_follow_the_seed():
    """Many threads and blocks: the drop rate is p within binomial noise, the stream is the reference's, a new seed
    from PyTorch's generator per call (reproducible with torch.manual_seed)."""
    shape = (4, 4, 64, 1024)  # many rows per thread
    ones = torch.ones(shape)
    y = native_gate(ones, ones, 0.1, seed=7)
    assert torch.equal(y == 0, counter_mask(shape, 0.1, 7).dropped())
    rate = (y == 0).float().mean().item()
    assert abs(rate - 0.1) <= 2**-17 + 5 * math.sqrt(0.1 * 0.9 / y.numel())  # p to 2^-16, then binomial noise
    torch.manual_seed(3)
    a, b = native_gate(ones, ones, 0.1), native_gate(ones, ones, 0.1)
    torch.manual_seed(3)
    assert not torch.equal(a, b) and torch.equal(a, native_gate(ones, ones, 0.1))


def test_counter_draws_are_splitmix64():
    """The reference stream against splitmix64 written out with Python integers (Steele et al. 2014)."""
    mask = (1 << 64) - 1

    def splitmix(seed: int, k: int) -> int:
        z = (seed + k * 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    seed = 2**62 - 12345
    draws = counter_draws(seed, 10)
    expected = [(splitmix(seed, i // 4 + 1) >> (16 * (i % 4))) & 0xFFFF for i in range(10)]
    assert draws.tolist() == expected


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


def _training_pass(model, idx, target, native_on: bool, low: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits and every parameter's gradient of one training pass (the dropout masks from seed 7)."""
    model.zero_grad()
    torch.manual_seed(7)
    with contextlib.nullcontext() if native_on else native.disabled():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            logits = model(idx)
        F.cross_entropy(logits.float().view(-1, 256), target.view(-1)).backward()
    return logits.detach().float(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


@built
@pytest.mark.parametrize("positional", ["rope", "rope-standard", "none"])
@pytest.mark.parametrize("low", [False, True])
def test_model_training_pass_equals_the_pytorch_path(positional, low, monkeypatch):
    """A training pass (dropout with host masks, bf16 autocast or fp32): logits and every gradient as without the
    compiled loops. The PyTorch path is given the compiled gate's masks (`counter_mask` from the same seed) in place
    of `drop_mask`'s own stream, so that both drop the same entries."""
    monkeypatch.setattr(dispatch, "drop_mask", lambda shape, p, dtype=None: counter_mask(shape, p, draw_seed()))
    model = tiny_model(seed=4, positional=positional, dropout=0.2, n_neurons=128).train()
    idx = torch.randint(0, 256, (3, 13), generator=torch.Generator().manual_seed(5))
    target = torch.randint(0, 256, (3, 13), generator=torch.Generator().manual_seed(6))
    fast, fg = _training_pass(model, idx, target, True, low)
    ref, rg = _training_pass(model, idx, target, False, low)
    if not low:
        # fp32 both: the same products, sums in another order: a few ulps carried through 2 layers and LayerNorms
        assert _err(fast, ref) <= 1e-5 and all(_err(fg[n], rg[n]) <= 1e-4 for n in fg)
        return
    # bf16: both paths round at every matmul and round the rotation and the sums at different places, so they
    # differ by bf16 roundings; the compiled path must be at least as close to the fp32 pass as the PyTorch path
    # (2x its distance, plus 2^-8 of slack: one rounding)
    exact, eg = _training_pass(model, idx, target, False, False)
    assert _err(fast, exact) <= 2 * _err(ref, exact) + BF16
    for n in fg:
        assert _err(fg[n], eg[n]) <= 2 * _err(rg[n], eg[n]) + BF16, n


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


def test_choose_takes_the_loops_for_eager_cpu_passes_only(monkeypatch):
    def chosen(device: str = "cpu") -> bool:
        return choose(
            Pass("parallel", 0, 8),
            positional="rope",
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


def test_choose_names_the_compiled_recurrent_step_for_in_place_cpu_steps_only():
    """``recurrent-native`` where the loops are built and the state is updated in place; ``recurrent`` otherwise."""
    model = tiny_model()
    step = Pass("recurrent", 3, 1, carried=True, need_state=True, inplace=True)
    with torch.no_grad():
        assert model.kernels(step).choice.attention == ("recurrent-native" if native.available() else "recurrent")
        with native.disabled():
            assert model.kernels(step).choice.attention == "recurrent"
    assert model.kernels(Pass("recurrent", 3, 1, carried=True, need_state=True)).choice.attention == "recurrent"


def test_without_the_library_the_model_runs_the_pytorch_path(monkeypatch):
    """Where the extension was not built (or does not load), nothing chooses it: the PyTorch path's results."""
    model = tiny_model(seed=10)
    idx = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(11))
    with native.disabled():
        ref = model(idx)
    monkeypatch.setattr(native, "_library", lambda: None)
    assert not native.available() and not native.supports(torch.zeros(1))
    assert model.kernels(Pass("parallel", 0, 9)).choice.native is False
    assert torch.equal(model(idx), ref)  # the same code runs: identical


@pytest.mark.parametrize("layout", ["head-major", "heads-outer"])
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("T", [3, 40])  # below D: the batch folded into the rows; above: torch.matmul's broadcast
def test_per_head_products_equal_the_broadcast_matmul(shared, T, layout):
    """`Kernels.heads` (Dx v, Dy LN(a)) and `Kernels.read_in` (E y) against the plain broadcast products, in both
    layouts of the neuron tensors."""
    B, H, D, N = 3, 2, 16, 12
    k = tiny_model().kernels(Pass("parallel", 0, T))
    k = kernels_module.bind(dataclasses.replace(k.choice, layout=layout), k.tables)
    g = torch.Generator().manual_seed(12)
    a = torch.randn(B, 1 if shared else H, T, D, generator=g, dtype=torch.float64)
    W = torch.randn(H, D, N, generator=g, dtype=torch.float64)
    y = torch.randn(B, H, T, N, generator=g, dtype=torch.float64)
    if layout == "heads-outer":
        y = _heads_outer(y)
    E = torch.randn(H * N, D, generator=g, dtype=torch.float64)
    w1, w2 = torch.randn(B, H, T, N, generator=g), torch.randn(B, 1, T, D, generator=g)
    fast, grads = values_and_grads(k.heads, a, W, weight=w1)
    ref, ref_grads = values_and_grads(lambda s, t: s @ t, a, W, weight=w1)
    # fp64: the same products summed in the same order, only laid out differently
    outer = layout == "heads-outer" and (T < D or not shared)  # Dx v (shared) stays head-major unless folded
    assert (fast.transpose(0, 1) if outer else fast).is_contiguous()
    assert torch.allclose(fast, ref, atol=1e-12, rtol=0)
    assert all(torch.allclose(f, r, atol=1e-12, rtol=0) for f, r in zip(grads, ref_grads))
    fast, grads = values_and_grads(k.read_in, y, E, weight=w2)
    ref, ref_grads = values_and_grads(lambda s, e: (s @ e.view(H, N, D)).sum(dim=1, keepdim=True), y, E, weight=w2)
    assert torch.allclose(fast, ref, atol=1e-12, rtol=0)
    assert all(torch.allclose(f, r, atol=1e-12, rtol=0) for f, r in zip(grads, ref_grads))


def test_choose_keeps_the_neuron_tensors_heads_outer_for_training_with_the_loops():
    """The layout of `Kernels.heads`: heads-outer for a CPU training pass with the compiled loops, without a hook;
    head-major otherwise (no gradients, a hook reading the activations, the PyTorch path)."""
    model = tiny_model()
    train = Pass("parallel", 0, 8)
    with torch.enable_grad():
        assert model.kernels(train).choice.layout == ("heads-outer" if native.available() else "head-major")
        assert model.kernels(dataclasses.replace(train, hooked=True)).choice.layout == "head-major"
        with native.disabled():
            assert model.kernels(train).choice.layout == "head-major"
    with torch.no_grad():
        assert model.kernels(train).choice.layout == "head-major"


@built
@pytest.mark.parametrize("low", [False, True])
def test_a_training_pass_writes_no_neuron_tensor_of_zeros(low):
    """No pass over the (B, H, T, N) activations goes to writing zeros: the gate's mask output has no gradient, and
    autograd must not be asked to make one (it filled a tensor of zeros per layer)."""
    model = tiny_model(seed=1, dropout=0.1, n_neurons=512, n_head=2).train()
    B, T = 3, 16
    idx = torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(2))
    with torch.profiler.profile(record_shapes=True) as prof:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            logits = model(idx)
        F.cross_entropy(logits.float().view(-1, 256), idx.view(-1)).backward()
    fills = [
        row.input_shapes
        for row in prof.key_averages(group_by_input_shape=True)
        if row.key in ("aten::fill_", "aten::zero_") and row.input_shapes and row.input_shapes[0] == [B, 2, T, 256]
    ]
    assert not fills
