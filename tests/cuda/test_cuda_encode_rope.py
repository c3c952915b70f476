"""The training encoder with the official RoPE in its epilogue (`bdh.model.kernels.triton.encode.encode_rope_triton`)
compiled for the GPU: x and R x and every gradient against the PyTorch form (``F.relu(v @ W)``, then
`pytorch.rope.rotate_complex`), and the model's training pass with it against ``BDH_TRITON=0``'s. fp32 with TF32 off
(tests/cuda/conftest.py) and bf16. (tests/cuda/test_cuda_fused.py runs the fused matmuls with ``rope-standard``,
whose rotation stays after the kernel.)"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from model.helpers import rel_err, tiny_model

from bdh.model.kernels import Pass
from bdh.model.kernels.pytorch.rope import frequencies, rope_tables, rotate_complex

pytestmark = pytest.mark.cuda
pytest.importorskip("triton", reason="Triton is not installed")

GPU = torch.device("cuda")


def _grads(fn, v, W, cos, sin, w):
    v, W = v.clone().requires_grad_(), W.clone().requires_grad_()
    x, xr = fn(v, W, cos, sin)
    ((x.double() * w[0]).sum() + (xr.double() * w[1]).sum()).backward()
    return x.detach(), xr.detach(), v.grad, W.grad


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_the_kernel_equals_the_pytorch_form_in_values_and_gradients(dtype, tol):
    """Two or more tiles of every dimension (bf16: 64 rows x 64 pairs x 64), the last ones partly masked, positions
    from 5. fp32: the same sums in another order (1e-5 of the largest). bf16: an ulp of x or R x where the two
    round to neighbours, moved through the gradients' bf16 sums: 2e-2 of the largest, the interpreter tests' bound
    (tests/model/test_encode_rope_triton.py)."""
    from bdh.model.kernels.triton.encode import encode_rope_triton

    g = torch.Generator().manual_seed(0)
    B, T, D, H, N = 2, 70, 96, 4, 300
    v = torch.randn(B, 1, T, D, generator=g).to(GPU, dtype)
    W = (torch.randn(H, D, N, generator=g) / D**0.5).to(GPU, dtype)
    w = torch.randn(2, B, H, T, N, generator=g, dtype=torch.float64).to(GPU)
    cos, sin = (t.to(GPU) for t in rope_tables("rope", frequencies("rope", N, 2.0**16), 5, T))

    def form(v, W, cos, sin):
        x = F.relu(v @ W)
        return x, rotate_complex(x, cos, sin)

    got = _grads(encode_rope_triton, v, W, cos, sin, w)
    want = _grads(form, v, W, cos, sin, w)
    for a, b in zip(got, want):
        assert a.dtype == dtype and rel_err(a.double(), b.double()) < tol


def _logits_and_grads(idx: torch.Tensor, triton: str, autocast: bool, monkeypatch) -> list[torch.Tensor]:
    """Logits and every parameter gradient of a chunked training forward with the official RoPE (dropout off)."""
    monkeypatch.setenv("BDH_TRITON", triton)
    model = tiny_model(seed=1, positional="rope").to(GPU).train()
    assert model.kernels(Pass("chunked", 0, 40)).choice.encode == ("triton" if triton == "1" else "heads-relu")
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        logits = model(idx, mode="chunked")
    logits.float().pow(2).mean().backward()
    return [logits.float().detach()] + [p.grad for p in model.parameters()]


def test_the_model_with_the_rotating_encoder_equals_todays_path(monkeypatch):
    """fp32: within 1e-5 of the largest (the same sums in another order). bf16 autocast: each path compared with the
    fp32 one, the fused path within 2x today's bf16 distance + 0.01 (test_cuda_fused.py's rule). The rotating
    kernel runs at every layer of the fused path, never at today's."""
    from bdh.model.kernels import dispatch

    calls = []
    fused = dispatch._triton_encode.encode_rope_triton
    monkeypatch.setattr(dispatch._triton_encode, "encode_rope_triton", lambda *a: calls.append(1) or fused(*a))
    idx = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0)).to(GPU)
    fused32, today32 = (_logits_and_grads(idx, on, False, monkeypatch) for on in ("1", "0"))
    for a, b in zip(fused32, today32):
        assert rel_err(a, b) < 1e-5
    fused16, today16 = (_logits_and_grads(idx, on, True, monkeypatch) for on in ("1", "0"))
    for a, b, ref in zip(fused16, today16, today32):
        assert rel_err(a, ref) <= 2 * rel_err(b, ref) + 0.01
    assert len(calls) == 2 * tiny_model().config.n_layer  # the fp32 and the bf16 fused passes
