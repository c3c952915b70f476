"""The per-head products of CUDA's training pass without the weight's copies, on the GPU: `pytorch.per_head` (z =
Dy LN(a)) and the encoder's backward (`triton.encode`: dv, dDx from dh in (H, B, T, N) storage) against the broadcast
``a @ W`` in values and gradients, and the memory each allocates: the broadcast product's B copies of W are there,
ours are not (cuBLAS takes the weight with batch stride 0 and writes a head's slice of the output in place)."""

from __future__ import annotations

import pytest
import torch
from model.helpers import rel_err

from bdh.model.kernels.pytorch.per_head import per_head

pytestmark = pytest.mark.cuda

GPU = torch.device("cuda")
B, H, T, D, N = 8, 4, 64, 256, 2048  # a copy of W per sequence: B H D N bf16, 4x z's bytes


def _peak(fn, *args) -> int:
    """Bytes ``fn`` allocates at its peak beyond what is held before (after one warm-up call: cuBLAS' workspace)."""
    fn(*args)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(*args)
    torch.cuda.synchronize()
    del out
    return torch.cuda.max_memory_allocated() - base


@pytest.mark.parametrize("Ha", [H, 1])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_per_head_equals_the_broadcast_product(Ha, dtype, tol):
    """fp32 (TF32 off): the same sums in another order, 1e-5 of the largest. bf16: z rounded once from fp32 sums
    in both (an ulp where the orders differ), the gradients' bf16 partial sums: 2e-2, the other GPU tests' bound."""
    g = torch.Generator(device=GPU).manual_seed(0)
    a = torch.randn(B, Ha, T, D, device=GPU, generator=g).to(dtype)
    W = (torch.randn(H, D, N, device=GPU, generator=g) / D**0.5).to(dtype)
    w = torch.randn(B, H, T, N, device=GPU, generator=g)
    results = []
    for fn in (per_head, torch.matmul):
        a_, W_ = a.clone().requires_grad_(), W.clone().requires_grad_()
        z = fn(a_, W_)
        (z.float() * w).sum().backward()
        results.append((z.detach(), a_.grad, W_.grad))
    for x, y in zip(*results):
        assert x.dtype == y.dtype and rel_err(x.float(), y.float()) < tol


def test_per_head_allocates_no_copy_of_the_weight():
    a = torch.randn(B, H, T, D, device=GPU, dtype=torch.bfloat16)
    W = torch.randn(H, D, N, device=GPU, dtype=torch.bfloat16)
    z_bytes, copies = B * H * T * N * 2, B * W.numel() * 2
    assert _peak(torch.matmul, a, W) >= z_bytes + copies  # the test can fail: the broadcast product copies W
    assert _peak(per_head, a, W) < z_bytes + W.numel() * 2


def test_the_encoder_s_backward_allocates_no_copy_of_the_weight():
    """dv and dDx from the encoder's dh (Triton): the backward allocates dh, dW and the heads' dv (H, B, T, D, a
    quarter of W here), under dh and four W; the broadcast products added 2 B = 16 W (Dx's copies, B partial dW)."""
    from bdh.model.kernels.pytorch.rope import frequencies, rope_tables
    from bdh.model.kernels.triton.encode import encode_rope_triton

    v = torch.randn(B, 1, T, D, device=GPU, dtype=torch.bfloat16, requires_grad=True)
    W = torch.randn(H, D, N, device=GPU, dtype=torch.bfloat16, requires_grad=True)
    cos, sin = (t.to(GPU) for t in rope_tables("rope", frequencies("rope", N, 2.0**16), 0, T))
    x, xr = encode_rope_triton(v, W, cos, sin)
    g = torch.randn_like(x)

    def backward(x, xr, g):
        return torch.autograd.grad((x, xr), (v, W), (g, g), retain_graph=True)

    entries = B * H * T * N * 2  # dh
    assert _peak(backward, x, xr, g) < entries + 4 * W.numel() * 2
