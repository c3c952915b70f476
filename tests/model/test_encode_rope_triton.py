"""The encoder with its RoPE in the epilogue (`bdh.model.kernels.triton.encode.encode_rope_triton`: x = ReLU(v W) and
R x in one Triton matmul, dh = [x > 0] (g_x + R^T g_Rx) in one element-wise backward) against the PyTorch form
(``F.relu(v @ W)``, then `pytorch.rope.rotate_complex`, through autograd) in values and gradients, run by Triton's CPU
interpreter; the model with it against today's path; and its compile for sm_90 at paper size."""

import pytest
import torch
import torch.nn.functional as F

from bdh.errors import UserError
from bdh.model.kernels.pytorch.rope import frequencies, rope_tables, rotate_complex

from .helpers import compile_without_interpreter, interpreted, rel_err, tiny_model

pytestmark = pytest.mark.extra  # the gpu extra
triton = pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")


@pytest.fixture(scope="module")
def encode_rope():
    return interpreted("bdh.model.kernels.triton.encode", "encode_rope_triton")


def _inputs(B=2, T=19, D=40, H=3, N=70, start=5, dtype=torch.float64, seed=0):
    """v (B, 1, T, D) with one token all zeros (ReLU's kink), W (H, D, N), the official RoPE tables of positions start
    .. start + T - 1, weights for the loss of x and of R x. At fp64 (tiles 32 rows x 16 pairs x 16) the B T = 38 rows
    take two row tiles, one across the batch boundary, the 35 pairs three, D = 40 three inner steps, the last of each
    partly masked."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(B, 1, T, D, generator=g, dtype=torch.float64)
    v[:, :, 3] = 0.0
    W = torch.randn(H, D, N, generator=g, dtype=torch.float64) / D**0.5
    w = torch.randn(2, B, H, T, N, generator=g, dtype=torch.float64)
    cos, sin = rope_tables("rope", frequencies("rope", N, 2.0**16), start, T)
    return v.to(dtype), W.to(dtype), cos, sin, w.to(dtype)


def _reference(v, W, cos, sin):
    x = F.relu(v @ W)
    return x, rotate_complex(x, cos, sin)


def _grads(fn, v, W, cos, sin, w, use=(True, True)):
    v, W = v.clone().requires_grad_(), W.clone().requires_grad_()
    x, xr = fn(v, W, cos, sin)
    loss = sum((out * wt).sum() for out, wt, on in zip((x, xr), w, use) if on)
    loss.backward()
    return x.detach(), xr.detach(), v.grad, W.grad


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_values_and_gradients_equal_the_pytorch_form(encode_rope, dtype, tol):
    """x as `triton.encode`'s kernel (the same D products summed in fp32 / fp64, rounded once), R x rotated in fp32
    (fp64) from the rounded x as `rotate_complex`, dh = [x > 0] (g_x + R^T g_Rx) summed once where autograd rounds
    R^T g_Rx and the sum each to the dtype: fp64 and fp32 differ by rounding in 40-term sums (~1e-15, ~1e-6
    relative); bf16 by an ulp of x or of R x (2^-8) where the two round to neighbours, and what such an ulp moves
    through the gradients' 70- and 38-term bf16 sums: 2e-2 of the largest (test_encode_triton.py's bound). The zero
    token has x = 0 and no gradient in both."""
    v, W, cos, sin, w = _inputs(dtype=dtype)
    got = _grads(encode_rope, v, W, cos, sin, w)
    want = _grads(_reference, v, W, cos, sin, w)
    for a, b in zip(got, want):
        assert a.dtype == dtype and a.shape == b.shape and rel_err(a.double(), b.double()) < tol
    assert (got[0][:, :, 3] == 0).all() and (got[2][:, :, 3] == want[2][:, :, 3]).all()


@pytest.mark.parametrize("use", [(False, True), (True, False)])
def test_one_output_alone_takes_its_gradient_only(encode_rope, use):
    """R x alone (the keys of their own, D_k: x unused) or x alone: the gradient of the one used, fp64 within 1e-12."""
    v, W, cos, sin, w = _inputs(B=1, T=9, N=38)
    got = _grads(encode_rope, v, W, cos, sin, w, use)
    want = _grads(_reference, v, W, cos, sin, w, use)
    for a, b in zip(got, want):
        assert rel_err(a, b) < 1e-12


def test_autocast_casts_the_inputs_as_the_matmul_would(encode_rope):
    """Under autocast x and R x are in autocast's dtype and equal autocast's PyTorch form within the bf16 bound above;
    the gradients reach the fp32 leaves in fp32."""
    v, W, cos, sin, w = _inputs(dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = _grads(encode_rope, v, W, cos, sin, w)
        want = _grads(_reference, v, W, cos, sin, w)
    assert got[0].dtype == got[1].dtype == torch.bfloat16 and got[2].dtype == got[3].dtype == torch.float32
    for a, b in zip(got, want):
        assert rel_err(a.double(), b.double()) < 2e-2


def test_the_pair_tables_carry_every_angle_of_the_official_rope(encode_rope):
    """The official RoPE turns both entries of a pair by one angle: the odd columns of its (T, N) tables are the even
    ones (the same float32 operations on the same frequency), so the pair tables (T, N / 2) the kernels read lose
    nothing; given either, the kernel sees the same numbers and its outputs and gradients are the same."""
    from bdh.model.kernels.cpu.native import half_tables

    v, W, cos, sin, w = _inputs(B=1, T=9, N=38)
    assert torch.equal(cos[:, 1::2], cos[:, ::2]) and torch.equal(sin[:, 1::2], sin[:, ::2])
    pairs = half_tables("rope", cos, sin)
    assert pairs[0].shape == (9, 19)
    for a, b in zip(_grads(encode_rope, v, W, cos, sin, w), _grads(encode_rope, v, W, *pairs, w)):
        assert torch.equal(a, b)  # one launch on identical inputs: the conversion is all that differs


def test_bad_input_is_refused_with_one_line(encode_rope):
    v, W, cos, sin, _ = _inputs(B=1, T=4, N=8, dtype=torch.float32)
    bad = [(v, W[..., :7], cos[:, :7], sin[:, :7]), (v, W, cos[:3], sin[:3]), (v, W, cos.double(), sin.double()),
           (v, W, cos[:, :3], sin[:, :3]),
           (v, W.double(), cos, sin), (v.long(), W.long(), cos, sin), (v[0], W, cos, sin)]  # fmt: skip
    for args in bad:
        with pytest.raises(UserError, match=r"^encode_rope_triton: needs v \(B, 1, T, D\)") as e:
            encode_rope(*args)
        assert "\n" not in str(e.value)


def test_the_model_with_it_computes_todays_path(monkeypatch):
    """CUDA's choice forced on the CPU (the compiled loops off), official RoPE, fp64: a training pass (chunked, keys
    = queries; parallel with keys of their own) runs the rotating kernel for every encoder, given the pass's pair
    tables (T, N / 2), and no other rotation, and its logits and every parameter gradient equal today's path's
    (``BDH_TRITON=0``) within 1e-12 (the same sums in another order)."""
    from bdh.model.kernels import choice, dispatch

    interpreted("bdh.model.kernels.triton.chunked", "chunked_triton")
    monkeypatch.setenv("BDH_NATIVE", "0")
    calls = []
    fused = dispatch._triton_encode.encode_rope_triton
    monkeypatch.setattr(dispatch._triton_encode, "encode_rope_triton", lambda *a: calls.append(a[2].shape) or fused(*a))
    idx = torch.randint(0, 256, (2, 11), generator=torch.Generator().manual_seed(0))
    for mode, keys in (("chunked", False), ("parallel", True)):
        results = {}
        for on in (True, False):
            monkeypatch.setattr(choice, "use_triton", lambda device, on=on: on)
            model = tiny_model(seed=1, separate_keys=keys).double().train()
            logits = model(idx, mode=mode)
            logits.pow(2).mean().backward()
            results[on] = [logits.detach()] + [p.grad for p in model.parameters()]
            assert len(calls) == (model.config.n_layer * (1 + keys) if on else 0)
            N = model.config.n_neurons // model.config.n_head
            assert all(shape == (idx.shape[1], N // 2) for shape in calls)  # one cos a pair: half the bytes
            calls.clear()
        for a, b in zip(results[True], results[False]):
            assert rel_err(a, b) < 1e-12


AHEAD_OF_TIME = r"""
import os, re, subprocess, sys, tempfile
os.environ.pop("TRITON_INTERPRET", None)
import torch, triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import ASTSource
from bdh.model.kernels.triton import encode
from bdh.model.kernels.triton.encode_jit import encode_rope_grad_kernel, encode_rope_kernel

M, T, N, D = 8 * 2048, 2048, 8192, 256  # paper size: B 8, T 2048, N 8192 a head, D 256
plan = encode._plan(torch.bfloat16, M, N // 2, D, encode.ROPE_TILES)
grad = dict(GX=True, GXR=True, BLOCK=encode.GRAD_BLOCK, ACC=tl.float32)
for fn, constants, warps, stages in ((encode_rope_kernel, plan.constants(), encode.NUM_WARPS, encode.NUM_STAGES),
                                     (encode_rope_grad_kernel, grad, 4, 3)):
    names = fn.arg_names
    signature = {n: "constexpr" if n in constants else ("*fp32" if n in ("cos_ptr", "sin_ptr") else "*bf16")
                 if n.endswith("_ptr") else "i64" if n == "pairs" else "i32" for n in names}
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n in names if n not in constants}  # as a launch
    src = ASTSource(fn=fn, signature=signature,  # at paper size specialises its pointers and sizes
                    constexprs={(names.index(n),): v for n, v in constants.items()}, attrs=aligned)
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    assert kernel.metadata.shared <= 227 * 1024, kernel.metadata.shared  # Hopper's maximum
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(kernel.asm["ptx"])
        f.flush()
        command = [get_ptxas(90).path, "-v", "--gpu-name=sm_90a", f.name, "-o", f.name + ".cubin"]
        log = subprocess.run(command, capture_output=True, text=True, check=True).stderr
        os.remove(f.name + ".cubin")
    spills = [int(b) for b in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
    print(fn.__name__, f"shared {kernel.metadata.shared} B", re.findall(r"Used \d+ registers", log), "spills", spills)
    assert spills and not any(spills), log
    assert fn is not encode_rope_kernel or "wgmma.mma_async" in kernel.asm["ptx"]  # Hopper's tensor cores
print("compiled")
"""


def test_the_kernels_compile_for_hopper_without_spilling():
    """The forward (bf16, the training step's dtype under autocast, fp32 tables) and the backward, at paper size."""
    print(compile_without_interpreter(AHEAD_OF_TIME))
