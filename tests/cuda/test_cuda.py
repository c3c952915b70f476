"""Every fast path against its reference on a CUDA GPU: values and gradients, in fp32 and under bf16 autocast.

The CPU tests (tests/model, tests/train, tests/baselines) prove each kernel equal to its reference on the CPU;
these run the same comparisons on the GPU, where other kernels (cuBLAS, cuFFT, fused element-wise kernels,
flash attention) compute them, plus what only a GPU run shows: the trainer on CUDA (bf16, ``torch.compile``),
generation on the recurrent state, CPU <-> GPU agreement, and ``benchmarks/gpu.py``. They reuse the CPU tests'
helpers (tests/model/helpers.py). ``python -m pytest -m cuda`` runs them; without a GPU every one is skipped
at collection (tests/conftest.py), so ``python -m pytest -m "not slow"`` on a CPU machine skips them at once.

Tolerances: fp64 comparisons use the CPU tests' 1e-12 (reduction order changes a sum of a few hundred terms
by ~1e-16 of its size). fp32 comparisons run with TF32 off (tests/cuda/conftest.py) and use the CPU tests'
1e-5 of the largest value: ~100 fp32 ulps, while a missing or wrong term changes a result by the order of
the result itself. bf16 comparisons say why at each one.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _train_helpers import TINY, train_losses
from model.helpers import (
    attention_inputs,
    config_id,
    logits_and_grads,
    random_configs,
    rel_err,
    rerun_greedy,
    run_form,
    tiny_config,
    tiny_model,
    values_and_grads,
)

from bdh import BDH, load_pretrained
from bdh.model.interop import to_official
from bdh.model.kernels import Pass, apply_rope
from bdh.model.kernels.naive import naive_linear_attention, naive_official_forward, naive_rope_interleaved
from bdh.model.kernels.pytorch import attention
from bdh.model.kernels.pytorch.attention import causal_weights
from bdh.model.kernels.pytorch.chunked_lean import chunked_lean
from bdh.model.kernels.pytorch.dropout import DropMask
from bdh.model.kernels.pytorch.fused import relu_mul, rope_rotate
from bdh.model.kernels.pytorch.rope import official_frequencies, rope_plain, rope_tables, standard_frequencies
from bdh.model.kernels.pytorch.shared_keys import shared_key_attention
from bdh.model.names import ATTENTION_FORMS

pytestmark = pytest.mark.cuda

GPU = torch.device("cuda")
ROOT = Path(__file__).resolve().parents[2]


def _has_triton() -> bool:
    return importlib.util.find_spec("triton") is not None


@pytest.fixture(params=["kept", "recomputed"])
def state_policy(request, monkeypatch):
    """Both ways the lean chunked backward gets the per-chunk states: kept by the forward pass, or recomputed."""
    from bdh.model.kernels.pytorch import chunked_lean as module

    monkeypatch.setattr(module, "_keep_states", lambda chunks, D, T: request.param == "kept")
    return request.param


# --------------------------------------------------------------------------- the three attention forms
@pytest.mark.parametrize(
    "form, damped, with_state", list(itertools.product(ATTENTION_FORMS, [False, True], [False, True]))
)
def test_attention_forms_equal_the_naive_sum(form, damped, with_state):
    q, k, v, s = attention_inputs(with_state=with_state, device=GPU)
    retention = torch.tensor([0.9, 0.5, 1.0], dtype=torch.float64, device=GPU) if damped else None
    log_u = None if retention is None else retention.log()
    out, _ = run_form(form, q, k, v, log_u=log_u, state=s)
    assert out.is_cuda
    assert rel_err(out, naive_linear_attention(q, k, v, retention, s)) < 1e-12


@pytest.mark.parametrize("damped", [False, True])
def test_attention_forms_agree_in_final_state_and_every_gradient(damped):
    q, k, v, s = attention_inputs(T=13, with_state=True, device=GPU)
    log_u = torch.tensor([0.8, 0.95, 0.6], dtype=torch.float64, device=GPU).log() if damped else None
    results = {}
    for form in ATTENTION_FORMS:
        leaves = [t.clone().requires_grad_() for t in (q, k, v, s)]
        out, state = run_form(form, *leaves[:3], chunk_size=5, log_u=log_u, state=leaves[3], need_state=True)
        w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=GPU).view_as(out)
        ((out * w).sum() + state.square().sum()).backward()
        results[form] = [out.detach(), state.detach(), *(t.grad for t in leaves)]
    for form in ("parallel", "chunked"):
        for got, ref in zip(results[form], results["recurrent"]):
            assert rel_err(got, ref) < 1e-12, form


@pytest.mark.parametrize("case", random_configs(), ids=config_id)
def test_model_forms_equal_logits_and_gradients(case):
    """Parallel (the shared-keys kernel in training), chunked (the lean kernel) and recurrent, end to end."""
    case = dict(case)
    B, T = case.pop("batch"), case.pop("T")
    torch.manual_seed(0)
    model = BDH(tiny_config(**case)).to(GPU)
    idx = torch.randint(0, model.config.vocab_size, (B, T), device=GPU)
    ref_logits, ref_grads = logits_and_grads(model, idx, "parallel")
    for form in ("chunked", "recurrent"):
        logits, grads = logits_and_grads(model, idx, form)
        assert rel_err(logits, ref_logits) <= 1e-5, form
        for name in ref_grads:
            assert rel_err(grads[name], ref_grads[name]) <= 1e-5, (form, name)


@pytest.mark.parametrize("positional", ["rope", "rope-standard", "none"])
def test_model_forms_under_bf16_autocast_lose_no_more_than_the_parallel_form(positional):
    """Under bf16 autocast the forms round differently, so they are compared by their distance to fp32.

    The same comparison on the CPU (bf16 autocast against fp32, 5 seeds, this size) measured logits within
    0.6-0.7% of the largest (a few roundings of 2^-8) and gradients within 8-21% (sums over T tokens that
    nearly cancel), the three forms within 2% of each other. Bounds: each form at most twice as far from
    fp32 as the parallel form, plus one bf16 rounding; the parallel form itself within 3% (logits) and 50%
    (gradients) of fp32, loose sanity bounds that a wrong cast (bf16 weights, a bf16 state) would still break.
    """
    model = tiny_model(1, n_embd=32, n_neurons=256, positional=positional, chunk_size=8).to(GPU)
    idx = torch.randint(0, 256, (2, 33), generator=torch.Generator().manual_seed(1)).to(GPU)
    ref_logits, ref_grads = logits_and_grads(model, idx, "parallel")
    errors = {}
    for form in ATTENTION_FORMS:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits, grads = logits_and_grads(model, idx, form)
        assert all(g.dtype == torch.float32 for g in grads.values())  # fp32 master weights get fp32 gradients
        errors[form] = (rel_err(logits.float(), ref_logits), max(rel_err(grads[n], ref_grads[n]) for n in grads))
    base = errors["parallel"]
    assert base[0] < 0.03 and base[1] < 0.5, base
    for form in ("chunked", "recurrent"):
        assert errors[form][0] <= 2 * base[0] + 2**-8 and errors[form][1] <= 2 * base[1] + 2**-8, (form, errors)


# --------------------------------------------------------------------------- the lean chunked backward
@pytest.mark.parametrize("damped, with_state, chunk", list(itertools.product([False, True], [False, True], [1, 5, 16])))
def test_chunked_lean_equals_the_recurrent_form_in_values_and_every_gradient(damped, with_state, chunk, state_policy):
    g = torch.Generator().manual_seed(0)
    B, H, T, N, D = 2, 3, 13, 6, 5
    draw = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64).to(GPU)  # noqa: E731
    x, v = draw(B, H, T, N), draw(B, 1, T, D)
    s0 = draw(B, H, N, D) if with_state else None
    log_u = torch.tensor([0.9, 0.5, 1.0], dtype=torch.float64, device=GPU).log() if damped else None
    w_out, w_state = draw(B, H, T, D), draw(B, H, N, D)

    def run(fn):
        xl, vl = x.clone().requires_grad_(), v.clone().requires_grad_()
        sl = s0.clone().requires_grad_() if with_state else None
        out, state = fn(xl, vl, sl)
        ((out * w_out).sum() + (state * w_state).sum()).backward()
        return [out.detach(), state.detach(), xl.grad, vl.grad] + ([sl.grad] if with_state else [])

    shared = run(lambda a, b, c: chunked_lean(a, a, b, chunk_size=chunk, log_u=log_u, state=c))  # keys = queries
    separate = run(lambda a, b, c: chunked_lean(a, a.clone(), b, chunk_size=chunk, log_u=log_u, state=c))
    ref = run(lambda a, b, c: attention.recurrent(a, a, b, log_u=log_u, state=c, need_state=True))
    for got, other, r in zip(shared, separate, ref):
        assert rel_err(got, r) < 1e-12 and rel_err(other, r) < 1e-12


@pytest.mark.parametrize("damped", [False, True])
def test_chunked_lean_under_bf16_autocast_stays_close_to_fp32(damped, state_policy):
    """As tests/model/test_chunked_lean.py: bf16 rounds each product to 8 significant bits; sums of ~T N terms
    keep the error at a few 2^-8 of the scale (0.03); the state is summed in fp32."""
    torch.manual_seed(5)
    q = torch.relu(torch.randn(2, 2, 37, 16, device=GPU))
    v = torch.randn(2, 1, 37, 8, device=GPU)
    log_u = torch.log(torch.tensor([0.9, 0.99], device=GPU)) if damped else None
    w = torch.randn(2, 2, 37, 8, device=GPU)
    results = {}
    for low in (False, True):
        ql, vl = q.clone().requires_grad_(), v.clone().requires_grad_()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=low):
            out, state = chunked_lean(ql, ql, vl, chunk_size=8, log_u=log_u)
        assert state.dtype == torch.float32
        (out.float() * w).sum().backward()
        assert ql.grad.dtype == torch.float32 and vl.grad.dtype == torch.float32
        results[low] = (out.float(), state, ql.grad, vl.grad)
    for ref, got in zip(results[False], results[True]):
        assert (got - ref).abs().max() <= 0.03 * ref.abs().max()


# --------------------------------------------------------------------------- shared keys
@pytest.mark.parametrize("causal, damped", list(itertools.product([True, False], [False, True])))
def test_shared_keys_equal_separate_keys_and_the_naive_sum(causal, damped):
    x, _, v, _ = attention_inputs(T=11, device=GPU)
    log_u = torch.tensor([0.9, 0.5, 1.0], dtype=torch.float64, device=GPU).log() if damped else None
    w = torch.randn(x.shape[:3] + (v.shape[-1],), dtype=torch.float64, device=GPU)
    fast = values_and_grads(
        lambda a, b: shared_key_attention(a, b, causal_weights(log_u, a.shape[2], causal, a.device, a.dtype)),
        x,
        v,
        weight=w,
    )
    plain = values_and_grads(
        lambda a, b: attention.parallel(a, a.clone(), b, log_u=log_u, causal=causal)[0], x, v, weight=w
    )
    naive = naive_linear_attention(x, x, v, None if log_u is None else log_u.exp(), causal=causal)
    assert rel_err(fast[0], naive) < 1e-12
    assert rel_err(fast[0], plain[0]) < 1e-12
    for a, b in zip(fast[1], plain[1]):
        assert rel_err(a, b) < 1e-12


def test_shared_keys_under_bf16_autocast_stay_close_to_fp32():
    """As on the CPU: within 0.03 of the scale (products rounded to 8 bits, sums over T = 33 tokens)."""
    torch.manual_seed(1)
    x = torch.relu(torch.randn(2, 2, 33, 16, device=GPU))
    v = torch.randn(2, 1, 33, 8, device=GPU)
    w = torch.randn(2, 2, 33, 8, device=GPU)
    results = {}
    for low in (False, True):
        xl, vl = x.clone().requires_grad_(), v.clone().requires_grad_()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=low):
            out = shared_key_attention(xl, vl, causal_weights(None, 33, True, xl.device, xl.dtype))
        (out.float() * w).sum().backward()
        assert xl.grad.dtype == torch.float32 and vl.grad.dtype == torch.float32
        results[low] = (out.float(), xl.grad, vl.grad)
    for ref, got in zip(results[False], results[True]):
        assert (got - ref).abs().max() <= 0.03 * ref.abs().max()


def test_the_training_forward_on_the_gpu_takes_the_fast_kernels():
    """`choose` is device-blind except for dropout masks: the same fast kernels as on the CPU."""
    model = tiny_model(dropout=0.1).to(GPU).train()
    k = model.kernels(Pass("parallel", 0, 16))
    c = k.choice
    gate = "triton" if _has_triton() else "fused"  # the Triton gate where Triton is installed (F.dropout's masks)
    assert (c.attention, c.gate, c.rope, c.masks) == ("shared-keys", gate, "complex", "torch")
    chunked = "chunked-triton" if _has_triton() else "chunked-lean"  # the fused kernels where Triton is installed
    assert model.kernels(Pass("chunked", 0, 16)).choice.attention == chunked


# --------------------------------------------------------------------------- the fused Triton chunked kernels
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
@pytest.mark.parametrize(
    "damped, with_state, shared_keys", [(False, False, True), (True, True, True), (True, True, False)]
)
def test_the_triton_kernels_equal_the_recurrent_form_in_fp32(damped, with_state, shared_keys):
    """Compiled for the GPU, several tiles of N, D and the chunk (TF32 off: fp32 products and sums throughout)."""
    from bdh.model.kernels.triton.chunked import chunked_triton

    q, k, v, s = attention_inputs(B=2, H=3, T=150, N=200, D=96, with_state=with_state, device=GPU)
    q, k, v, s = (None if t is None else t.float() for t in (q, k, v, s))
    log_u = torch.tensor([0.9, 0.5, 0.999], device=GPU).log() if damped else None
    results = {}
    for name in ("triton", "recurrent"):
        leaves = [None if t is None else t.clone().requires_grad_() for t in (q, k, v, s)]
        keys = leaves[0] if shared_keys else leaves[1]
        if name == "triton":
            out, state = chunked_triton(
                leaves[0], keys, leaves[2], chunk_size=64, log_u=log_u, state=leaves[3], need_state=True
            )
        else:
            out, state = attention.recurrent(leaves[0], keys, leaves[2], log_u=log_u, state=leaves[3], need_state=True)
        w = torch.linspace(-1, 1, out.numel(), device=GPU).view_as(out)
        ((out * w).sum() + state.square().sum()).backward()
        results[name] = [
            out.detach(),
            state.detach(),
            *(t.grad for t in leaves if t is not None and t.grad is not None),
        ]
    for got, ref in zip(results["triton"], results["recurrent"]):
        # fp32 sums of a few hundred terms in two orders: a few 1e-6 of the scale
        assert rel_err(got, ref) < 1e-4


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_the_triton_kernels_with_a_chunk_state_every_r_chunks_equal_every_chunks():
    """R = 2 and 4 (``state_stride``: the readers rebuild the states not kept) against R = 1, compiled, fp32 (TF32
    off), 5 chunks (not a multiple of R), several tiles of N and D, damped, a carried state, BDH's shared keys."""
    from bdh.model.kernels.triton.chunked import chunked_triton

    q, _, v, s = attention_inputs(B=2, H=3, T=300, N=200, D=96, with_state=True, device=GPU)
    q, v, s = q.float(), v.float(), s.float()
    log_u = torch.tensor([0.9, 0.5, 0.999], device=GPU).log()
    results = {}
    for stride in (1, 2, 4):
        leaves = [t.clone().requires_grad_() for t in (q, v, s)]
        out, state = chunked_triton(
            leaves[0], leaves[0], leaves[1], chunk_size=64, log_u=log_u, state=leaves[2], need_state=True,
            state_stride=stride,
        )  # fmt: skip
        w = torch.linspace(-1, 1, out.numel(), device=GPU).view_as(out)
        ((out * w).sum() + state.square().sum()).backward()
        results[stride] = [out.detach(), state.detach(), *(t.grad for t in leaves)]
    for stride in (2, 4):
        for got, ref in zip(results[stride], results[1]):
            # a rebuilt state is the same fp32 sums in the same order, up to the compiler fusing them (FMA): ~1e-6
            assert rel_err(got, ref) < 1e-4


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_the_triton_kernels_under_bf16_autocast_stay_as_close_to_fp32_as_the_lean_form():
    from bdh.model.kernels.triton.chunked import chunked_triton

    q, _, v, _ = attention_inputs(B=2, H=4, T=300, N=512, D=64, device=GPU)
    q, v = q.float(), v.float()
    log_u = torch.tensor([0.9, 0.99, 0.999, 1.0], device=GPU).log()
    ref = attention.recurrent(q, q, v, log_u=log_u, need_state=True)
    errors = {}
    for name in ("triton", "lean"):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if name == "triton":
                out, state = chunked_triton(q, q, v, chunk_size=64, log_u=log_u, need_state=True)
            else:
                out, state = chunked_lean(q, q, v, chunk_size=64, log_u=log_u)
        errors[name] = rel_err(out.float(), ref[0]), rel_err(state.float(), ref[1])
    # both round the inputs to bf16 and sum in fp32: the same error, up to the order of the sums
    assert errors["triton"][0] <= 2 * errors["lean"][0] + 2**-8 and errors["triton"][1] < 0.02, errors


def _delta_inputs(B, H, T, N, D):
    """The delta rule's inputs on the GPU: ReLU queries, unit non-negative keys, damped, a sigmoid write gate, a
    carried state; drawn on the CPU in fp64 (the same numbers on every device)."""
    from bdh.model.kernels.pytorch.state_rules import unit_keys

    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, T, N, generator=g, dtype=torch.float64).relu()
    k = unit_keys(torch.randn(B, H, T, N, generator=g, dtype=torch.float64).relu())
    v = torch.randn(B, 1, T, D, generator=g, dtype=torch.float64)
    log_g = -0.1 * torch.rand(B, H, T, generator=g, dtype=torch.float64)
    beta = torch.sigmoid(2 * torch.randn(B, H, T, generator=g, dtype=torch.float64))
    s = torch.randn(B, H, N, D, generator=g, dtype=torch.float64)
    return [t.float().to(GPU) for t in (q, k, v, log_g, beta, s)]


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_the_delta_rule_kernels_equal_the_chunked_form_in_fp32():
    """Compiled for the GPU, several tiles of N and D and three chunks (TF32 off): values and every gradient."""
    from bdh.model.kernels.pytorch.state_rules import chunked
    from bdh.model.kernels.triton.delta import delta_chunked_triton

    inputs = _delta_inputs(B=2, H=2, T=150, N=200, D=96)
    results = {}
    for name, form in (("triton", delta_chunked_triton), ("chunked", chunked)):
        q, k, v, log_g, beta, s = (t.clone().requires_grad_() for t in inputs)
        out, state = form(q, k, v, chunk_size=64, log_g=log_g, beta=beta, state=s, need_state=True)
        w = torch.linspace(-1, 1, out.numel(), device=GPU).view_as(out)
        ((out * w).sum() + state.square().sum()).backward()
        results[name] = [out.detach(), state.detach(), q.grad, k.grad, v.grad, log_g.grad, beta.grad, s.grad]
    for got, ref in zip(results["triton"], results["chunked"]):
        # fp32 sums of a few hundred terms in two orders and a 64 x 64 triangular solve: ~1e-6 of the scale
        assert rel_err(got, ref) < 1e-4


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_the_delta_rule_kernels_under_bf16_autocast_stay_as_close_to_fp32_as_the_chunked_form():
    from bdh.model.kernels.pytorch.state_rules import chunked
    from bdh.model.kernels.triton.delta import delta_chunked_triton

    q, k, v, log_g, beta, s = _delta_inputs(B=2, H=4, T=300, N=512, D=64)
    ref = chunked(q, k, v, chunk_size=64, log_g=log_g, beta=beta, state=s, need_state=True)
    errors = {}
    for name, form in (("triton", delta_chunked_triton), ("chunked", chunked)):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out, state = form(q, k, v, chunk_size=64, log_g=log_g, beta=beta, state=s, need_state=True)
        errors[name] = rel_err(out.float(), ref[0]), rel_err(state.float(), ref[1])
    # both round the N-wide operands to bf16 and sum in fp32 (the chunked form's small algebra in bf16, ours in
    # fp32): the kernels' error at most twice the chunked form's, plus a bf16 ulp
    assert errors["triton"][0] <= 2 * errors["chunked"][0] + 2**-8, errors
    assert errors["triton"][1] <= 2 * errors["chunked"][1] + 2**-8, errors


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_triton_gate_equals_relu_mul_with_its_mask(dtype):
    """The kernel's mask read back (ReLU(1) * 1 is 1 where kept), then values and gradients against autograd's
    ReLU(z) * x * mask: one rounding each, within an ulp of the result (bf16: 2^-8 of the largest)."""
    from bdh.model.kernels.triton.gate import gate_triton

    g = torch.Generator().manual_seed(0)
    z, x, w = (torch.randn(4, 3, 257, 130, generator=g).to(GPU, dtype) for _ in range(3))
    ones = torch.ones_like(z)
    keep = gate_triton(ones, ones, p=0.2, seed=9) != 0
    assert abs((~keep).float().mean().item() - 0.2) < 0.01  # 400k entries: the standard deviation is 6e-4
    results = {}
    for name in ("triton", "torch"):
        zz, xx = z.clone().requires_grad_(), x.clone().requires_grad_()
        y = gate_triton(zz, xx, p=0.2, seed=9) if name == "triton" else relu_mul(zz, xx) * keep
        (y * w).sum().backward()
        results[name] = [y.detach(), zz.grad, xx.grad]
    for got, ref in zip(results["triton"], results["torch"]):
        assert rel_err(got.float(), ref.float()) < (1e-6 if dtype == torch.float32 else 2**-7)


# --------------------------------------------------------------------------- the fused gate and RoPE
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_gate_is_bit_identical_to_autograd(dtype):
    """The same element-wise products and threshold in both (one rounding each): equal bits, as on the CPU."""
    torch.manual_seed(0)
    z = torch.randn(2, 3, 7, 16, dtype=dtype, device=GPU)
    z[0, 0, 0, :4] = 0.0  # the kink: ReLU'(0) = 0 in both
    x = torch.relu(torch.randn(2, 3, 7, 16, dtype=dtype, device=GPU))
    w = torch.randn(2, 3, 7, 16, device=GPU)
    fast, (dz, dx) = values_and_grads(relu_mul, z, x, weight=w)
    ref, (rz, rx) = values_and_grads(lambda a, b: torch.relu(a) * b, z, x, weight=w)
    assert torch.equal(fast, ref) and torch.equal(dz, rz) and torch.equal(dx, rx)
    drop = torch.rand(2, 3, 7, 16, device=GPU) < 0.3  # the gate with a mask inside, as in-gate masks use it
    fast, (dz, dx) = values_and_grads(lambda a, b: relu_mul(a, b, DropMask(drop)), z, x, weight=w)
    ref, (rz, rx) = values_and_grads(lambda a, b: (torch.relu(a) * b).masked_fill(drop, 0), z, x, weight=w)
    assert torch.equal(fast, ref) and torch.equal(dz, rz) and torch.equal(dx, rx)


@pytest.mark.parametrize("kind", ["rope", "rope-standard"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_and_complex_rope_equal_the_plain_rotation(kind, dtype):
    """Values of size ~3 rotated with one or two roundings each way: 2e-6 is a few fp32 ulps at that size
    (the GPU may fuse a multiply-add where the CPU rounds twice); a wrong angle or sign is off by O(1)."""
    N, T = 32, 9
    freqs = official_frequencies(N, 2.0**16) if kind == "rope" else standard_frequencies(N, 10000.0)
    cos, sin = rope_tables(kind, freqs.to(GPU), 3, T)
    assert cos.is_cuda
    torch.manual_seed(2)
    v = torch.randn(2, 2, T, N, dtype=dtype, device=GPU)
    w = torch.randn(2, 2, T, N, device=GPU)
    tol = 2e-6 if dtype == torch.float32 else 1e-13
    ref, (rv,) = values_and_grads(lambda t: rope_plain(kind, t, cos.to(dtype), sin.to(dtype)), v, weight=w)
    fused, (dv,) = values_and_grads(lambda t: rope_rotate(t, cos, sin, kind == "rope"), v, weight=w)
    assert torch.allclose(fused, ref, atol=tol, rtol=0) and torch.allclose(dv, rv, atol=tol, rtol=0)
    if kind == "rope":  # the complex multiply against the official rotation
        fast, (dc,) = values_and_grads(lambda t: apply_rope("rope", t, cos, sin), v, weight=w)
        naive, (dn,) = values_and_grads(lambda t: naive_rope_interleaved(t, cos.to(dtype), sin.to(dtype)), v, weight=w)
        assert torch.allclose(fast, naive, atol=tol, rtol=0) and torch.allclose(dc, dn, atol=tol, rtol=0)


def test_rope_in_bf16_rotates_in_fp32_and_rounds_once():
    """As on the CPU: within one bf16 rounding (2^-8) of the fp32 rotation; the gradient within two."""
    N, T = 64, 16
    cos, sin = rope_tables("rope", official_frequencies(N, 2.0**16).to(GPU), 5, T)
    torch.manual_seed(6)
    v = torch.randn(2, 2, T, N, device=GPU)
    w = torch.randn(2, 2, T, N, device=GPU)
    fast, (dv,) = values_and_grads(lambda t: apply_rope("rope", t, cos, sin), v.bfloat16(), weight=w)
    ref, (rv,) = values_and_grads(lambda t: rope_plain("rope", t, cos, sin), v.bfloat16().float(), weight=w)
    assert fast.dtype == torch.bfloat16 and dv.dtype == torch.bfloat16
    assert ((fast.float() - ref).abs() <= 2**-8 * ref.abs() + 1e-30).all()
    assert (dv.float() - rv).abs().max() <= 2 * 2**-8 * rv.abs().max()
    fused, (df,) = values_and_grads(lambda t: rope_rotate(t, cos, sin, True), v.bfloat16(), weight=w)
    # the fused kernel rotates in bf16 itself (tables cast to bf16): a few roundings of 2^-8 (CPU test: 4)
    assert (fused.float() - ref).abs().max() <= 4 * 2**-8 * ref.abs().max()
    assert (df.float() - rv).abs().max() <= 4 * 2**-8 * rv.abs().max()


# --------------------------------------------------------------------------- the model: CPU <-> GPU, official math
@pytest.mark.parametrize("form", ["parallel", "chunked", "recurrent"])
@pytest.mark.parametrize("positional, damping", [("rope", None), ("rope-standard", "alibi"), ("none", 0.9)])
def test_the_model_on_the_gpu_computes_what_it_computes_on_the_cpu(form, positional, damping):
    """The same weights on both devices: logits and every gradient within 1e-5 (other kernels, other orders)."""
    cpu = tiny_model(3, positional=positional, damping=damping, n_neurons=128)
    gpu = tiny_model(3, positional=positional, damping=damping, n_neurons=128).to(GPU)
    idx = torch.randint(0, 256, (2, 19))
    ref_logits, ref_grads = logits_and_grads(cpu, idx, form)
    logits, grads = logits_and_grads(gpu, idx.to(GPU), form)
    assert logits.is_cuda and rel_err(logits.cpu(), ref_logits) <= 1e-5
    for name, g in grads.items():
        assert rel_err(g.cpu(), ref_grads[name]) <= 1e-5, name


def test_the_model_on_the_gpu_matches_the_official_math():
    """The transcription of the official forward (`naive_official_forward`), run on the GPU too."""
    model = tiny_model(4).to(GPU)
    idx = torch.randint(0, 256, (2, 11), device=GPU)
    cfg = model.config
    with torch.no_grad():
        ref = naive_official_forward(to_official(model), idx, cfg.n_layer, cfg.n_head)
        assert ref.is_cuda and torch.allclose(model(idx), ref, atol=1e-5)


# --------------------------------------------------------------------------- dropout on the GPU
def test_dropout_on_the_gpu_draws_masks_of_rate_p_scaled_by_one_over_one_minus_p():
    """Host (NumPy) masks are for CPU tensors only; on the GPU `F.dropout` draws them. The masks differ from
    the CPU's, so their distribution is checked: E y read with E = identity shows each kept entry y / (1 - p)
    and each dropped one 0."""
    p, H, N, T = 0.25, 2, 512, 64
    model = tiny_model(dropout=p, n_neurons=H * N, n_embd=H * N).to(GPU).train()  # n = D: E can be the identity
    k = model.kernels(Pass("parallel", 0, T))
    assert k.choice.masks == "torch"  # with dropout_rng "auto": never the in-gate (NumPy) masks for a CUDA tensor
    eye = torch.eye(H * N, device=GPU)
    y = torch.ones(1, H, T, N, device=GPU, requires_grad=True)
    out = k.read_in(y, eye)  # (1, 1, T, n): every neuron's y after dropout
    values = out.detach().flatten()
    kept = values != 0
    assert torch.allclose(values[kept], torch.full_like(values[kept], 1 / (1 - p)))
    rate, count = 1 - kept.float().mean().item(), values.numel()
    assert abs(rate - p) <= 5 * math.sqrt(p * (1 - p) / count), rate  # five binomial standard deviations
    out.sum().backward()  # the backward applies the same mask: dy = mask / (1 - p)
    assert torch.equal(y.grad.transpose(1, 2).reshape(values.shape), values)  # y's (h, t, i) -> (t, h N + i)
    torch.manual_seed(7)
    a = k.read_in(torch.ones(1, H, T, N, device=GPU), eye)
    b = k.read_in(torch.ones(1, H, T, N, device=GPU), eye)
    torch.manual_seed(7)
    assert not torch.equal(a, b) and torch.equal(k.read_in(torch.ones(1, H, T, N, device=GPU), eye), a)


def test_a_training_forward_with_dropout_on_the_gpu_differs_per_call_and_eval_does_not():
    model = tiny_model(dropout=0.3).to(GPU).train()
    idx = torch.randint(0, 256, (2, 16), device=GPU)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        a, b = model(idx), model(idx)
    assert torch.isfinite(a).all() and not torch.equal(a, b)
    model.eval()
    assert torch.equal(model(idx), model(idx))


# --------------------------------------------------------------------------- generation
@pytest.mark.parametrize("damping", [None, "alibi"])
@pytest.mark.parametrize("positional", ["rope", "rope-standard", "none"])
def test_greedy_generation_on_the_state_equals_rerunning_the_prefix(positional, damping):
    """As on the CPU (tests/model/test_generate.py): weights x 20 make the top two logits differ by far more than
    the two paths' fp32 logits do, so argmax ties cannot flip a token."""
    model = tiny_model(seed=1, positional=positional, damping=damping, n_neurons=128).to(GPU)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(20)
    prompt = torch.randint(0, 256, (3, 5), device=GPU)
    ours = model.generate(prompt, 30, temperature=0)
    assert ours.is_cuda and torch.equal(ours, rerun_greedy(model, prompt, 30))
    for row in range(3):  # a batch gives each row the tokens it gets alone (a batch of one: the sparse step)
        assert torch.equal(model.generate(prompt[row], 30, temperature=0, sparse=damping is None), ours[row])


@pytest.mark.parametrize("threshold", [0.0, 1.0, 0.4])
def test_the_sparse_step_equals_the_dense_step(threshold, monkeypatch):
    from bdh.model.kernels.pytorch import sparse as sparse_kernels

    monkeypatch.setattr(sparse_kernels, "DENSITY", threshold)  # 0: the dense read and write; 1: row by row
    model = tiny_model(seed=2, n_neurons=128).to(GPU)
    with torch.no_grad():  # make x sparse: most pre-activations negative
        model.Dx.sub_(model.Dx.abs().mean() * 0.8)
    idx = torch.randint(0, 256, (1, 9), device=GPU)
    _, dense = model.step(idx[:, :5], model.init_state(1))
    sparse = dense.clone()
    for t in range(5, 9):
        ref, dense = model.step(idx[:, t], dense)
        with torch.no_grad():
            got, sparse = model.step(idx[:, t], sparse, mode="sparse", inplace=True)
        # as on the CPU: the state sums the same rank-one updates in another order (~1 ulp of the scale)
        assert torch.allclose(got, ref, rtol=1e-5, atol=1e-6)
        scale = dense.rho.abs().max().item()
        assert torch.allclose(sparse.rho, dense.rho, rtol=1e-5, atol=1e-6 * scale) and sparse.pos == dense.pos


# --------------------------------------------------------------------------- generation as a CUDA graph
@pytest.mark.parametrize("options", [dict(temperature=0), dict(temperature=0.9, top_k=50, seed=3)])
def test_the_captured_decoder_step_equals_the_eager_step(options):
    """The CUDA graph replays what the eager step computes: the same tokens, logits within fp32 rounding."""
    from bdh.model.decoder import StateDecoder

    model = tiny_model(seed=4, n_neurons=128, damping="alibi").to(GPU)
    prompt = torch.randint(0, 256, (8, 12), device=GPU)
    graphed, eager = StateDecoder(model, 8, **options), StateDecoder(model, 8, cuda_graph=False, **options)
    assert torch.equal(graphed.prefill(prompt), eager.prefill(prompt))
    for _ in range(12):  # the eager warm-up steps, the capture, then replays
        assert torch.equal(graphed.step(), eager.step())
        assert rel_err(graphed.logits, eager.logits) < 1e-5 and int(graphed.position) == int(eager.position)
    assert graphed._graph is not None


def test_the_decoder_step_never_waits_for_the_gpu():
    """No host synchronisation inside a step: torch raises on any while the debug mode is "error"."""
    from bdh.model.decoder import StateDecoder

    model = tiny_model(seed=5, damping=0.9).to(GPU)
    dec = StateDecoder(model, 4, temperature=0.8, top_k=20, top_p=0.9, repetition_penalty=1.2, cuda_graph=False)
    dec.prefill(torch.randint(0, 256, (4, 6), device=GPU))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            dec.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")


# --------------------------------------------------------------------------- the trainer on CUDA
@pytest.mark.parametrize(
    "extra",
    [[], ["train.compile=true"], ["train.bptt=tbptt", "model.attention=chunked"]],
    ids=["bf16", "bf16-compile", "bf16-tbptt"],
)
def test_the_trainer_learns_on_the_gpu_in_bf16(tmp_path, extra, recwarn):
    """60 steps of the CPU test's tiny run (tests/train/test_trainer.py): the loss falls by 0.5 nats or more."""
    from bdh.train import Trainer, load_config

    overrides = [*TINY, "train.device=cuda", "train.precision=bf16", "train.max_steps=60", "optim.lr=3e-3"]
    trainer = Trainer(load_config(None, [*overrides, "eval.every=30", f"run_dir={tmp_path / 'run'}", *extra]))
    try:
        result = trainer.fit()
    finally:
        trainer.close()
    rt = trainer.runtime
    assert rt.device.type == "cuda" and rt.device.index is not None
    assert rt.amp_dtype == torch.bfloat16 and rt.caps.fused_adamw
    assert all(p.is_cuda and p.dtype == torch.float32 for p in trainer.model.parameters())  # fp32 master weights
    losses = list(train_losses(result.run_dir).values())
    assert len(losses) == 60 and sum(losses[-10:]) / 10 < sum(losses[:10]) / 10 - 0.5, losses[::10]
    if "train.compile=true" in extra and _has_triton():
        assert trainer.objective.model.failed is None  # compiled for real: no fallback to eager
        assert not [w for w in recwarn if "torch.compile failed" in str(w.message)]
    model = load_pretrained(result.run_dir / "best")  # saved from the GPU, loads on the CPU
    assert model.E.device.type == "cpu" and torch.isfinite(model.E).all()


def test_a_run_resumed_on_the_gpu_continues_as_the_uninterrupted_run(tmp_path):
    """Dropout on the GPU draws from the CUDA generator, whose state checkpoints keep. The embedding's backward
    sums with atomics in no fixed order, so the losses agree to fp32 rounding (1e-4 relative), not bitwise."""
    from bdh.train import load_config, train

    common = [*TINY, "train.device=cuda", "train.precision=fp32", "model.dropout=0.1", "eval.every=0"]
    common += ["train.max_steps=8", "checkpoint.every=4", "checkpoint.keep=2"]
    full = train(load_config(None, [*common, f"run_dir={tmp_path / 'full'}"]))
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(full.run_dir, resumed_dir)
    config = load_config(None, [*common, f"run_dir={resumed_dir}"])
    train(config, resume=resumed_dir, resume_from=resumed_dir / "checkpoints" / "step-4")
    a, b = train_losses(full.run_dir), train_losses(resumed_dir)
    assert sorted(b) == list(range(1, 9))
    for step in range(5, 9):
        assert b[step] == pytest.approx(a[step], rel=1e-4), step


# --------------------------------------------------------------------------- the baselines
@pytest.mark.parametrize(
    "name", ["gpt", "baseconv", "hyperset", "based", "gla", "mamba", "hyena", "rwkv", "deltanet", "gated-deltanet"]
)
def test_the_baselines_on_the_gpu_compute_what_they_compute_on_the_cpu(name):
    """fp32: logits within 1e-5 and gradients within 1e-4 of the CPU's (cuBLAS, cuFFT and the SDPA kernels sum in
    other orders; the gradients sum over more terms). bf16 autocast: on the CPU it measured logits within 0.4%
    and gradients within 5% of fp32; bounds 3% and 25%."""
    from test_baselines import TINY as BASELINES

    cls, cfg = BASELINES[name]
    torch.manual_seed(0)
    cpu = cls(cfg).eval()
    gpu = cls(cfg).to(GPU).eval()
    gpu.load_state_dict(cpu.state_dict())
    idx = torch.randint(0, cfg.vocab_size, (3, getattr(cfg, "seq_len", 32)))  # a recurrent model has no length
    weight = torch.linspace(-1, 1, idx.numel() * cfg.vocab_size).view(*idx.shape, cfg.vocab_size)

    def run(model, device, bf16=False):
        model.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(idx.to(device))
        (logits.float() * weight.to(device)).sum().backward()
        grads = {n: p.grad.float().cpu() for n, p in model.named_parameters() if p.grad is not None}
        return logits.detach().float().cpu(), grads

    ref, ref_grads = run(cpu, torch.device("cpu"))
    for bf16, (tol, grad_tol) in ((False, (1e-5, 1e-4)), (True, (0.03, 0.25))):
        logits, grads = run(gpu, GPU, bf16)
        assert set(grads) == set(ref_grads)
        assert rel_err(logits, ref) <= tol, bf16
        for n in grads:
            assert rel_err(grads[n], ref_grads[n]) <= grad_tol, (bf16, n)


# --------------------------------------------------------------------------- analysis of a model on the GPU
def test_analysis_of_a_model_on_the_gpu_runs_and_equals_the_cpu():
    """`bdh plot --device cuda` analyses a model on the GPU: the blocks of G come back to the CPU for NumPy."""
    from bdh.analysis import neurograph as ng
    from bdh.analysis.record import record

    cpu, gpu = tiny_model(2, n_neurons=128), tiny_model(2, n_neurons=128).to(GPU)
    G = ng.head_block(gpu, "x", 0)
    assert G.device.type == "cpu" and torch.allclose(G, ng.head_block(cpu, "x", 0), atol=1e-6)
    result = ng.degree_analysis(G, 4 * G.shape[0], gpu.config.n_embd)
    assert result["edges"] > 0
    idx = torch.randint(0, 256, (1, 20))
    on_gpu, on_cpu = record(gpu, idx, chunk_size=8), record(cpu, idx, chunk_size=8)
    assert on_gpu.x[0].device.type == "cpu" and torch.allclose(on_gpu.logits, on_cpu.logits, atol=1e-5)


# --------------------------------------------------------------------------- the benchmark script
def test_the_gpu_benchmark_runs_in_quick_mode(tmp_path):
    """``benchmarks/gpu.py --quick`` at the paper's size (no official checkout: ours, GPT and generation)."""
    out = tmp_path / "gpu.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["peak_tflops"] > 0
    for row in results["training"]:
        assert row["tok_s"] == "OOM" or (row["tok_s"] > 0 and 0 < row["mfu"] and row["peak_gib"] > 0), row
    assert all(r["ours_tok_s"] == "OOM" or r["ours_tok_s"] > 0 for r in results["generation"])


# --------------------------------------------------------------------------- several GPUs
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_gpus_match_one(tmp_path, parallel):
    """torchrun over two GPUs (NCCL), DDP or FSDP2, against one GPU with the same global batch (fp32, TF32 on
    in both: the per-step losses agree to 1e-3 relative, the order of the sums being the only difference)."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    from _train_helpers import run_bdh, set_args, subprocess_env

    common = [*TINY, "train.device=cuda", "train.precision=fp32", "train.max_steps=6", "eval.every=3"]
    one = run_bdh("train", *set_args([*common, "train.micro_batch_size=2", f"run_dir={tmp_path / 'one'}"]))
    assert one.returncode == 0, one.stderr[-3000:]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "bdh", "train"]
    cmd += set_args([*common, f"train.parallel={parallel}", f"run_dir={tmp_path / 'two'}"])
    two = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=subprocess_env())
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = train_losses(tmp_path / "one"), train_losses(tmp_path / "two")
    assert sorted(a) == sorted(b) == list(range(1, 7))
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-3), step
