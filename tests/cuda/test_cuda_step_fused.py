"""The generation step's one-token encoder and read-in Triton kernels (`bdh.model.kernels.triton.encode_step`,
`read_in_step`) compiled for the GPU, against the PyTorch step at paper width (fp32 with TF32 off:
tests/cuda/conftest.py, and bf16), and chosen by the decoder (its tokens, logits and state against ``BDH_TRITON=0``:
tests/cuda/test_cuda_step.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from model.helpers import rel_err, tiny_model

from bdh.model.kernels.pytorch.fused import relu_mul
from bdh.model.kernels.pytorch.rope import rotate_complex

pytestmark = pytest.mark.cuda
pytest.importorskip("triton", reason="Triton is not installed")

GPU = torch.device("cuda")
#: fp32: sums of 256 (the encoder) or 32,768 (the read-in) products in other orders, 1e-5 of the largest (the CPU
#: tests' bound); bf16: an ulp of x and its rotation, the reference's h + 1 roundings of E y (the CPU tests' bounds)
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 3])
def test_the_kernels_equal_the_pytorch_step_at_paper_width(batch, dtype):
    """h 4, N 8,192, D 256: x, R x (a position's interleaved tables) and E (ReLU(z) * x)."""
    from bdh.model.kernels.triton.encode_step import encode_step_triton
    from bdh.model.kernels.triton.read_in_step import gated_read_in_step_triton

    g = torch.Generator(device=GPU).manual_seed(0)
    v = torch.randn(batch, 1, 1, 256, generator=g, device=GPU).to(dtype)
    W = (torch.randn(4, 256, 8192, generator=g, device=GPU) / 16).to(dtype)
    angles = (torch.rand(1, 4096, generator=g, device=GPU) * 6.3).repeat_interleave(2, dim=1)
    cos, sin = torch.cos(angles), torch.sin(angles)
    z = torch.randn(batch, 4, 1, 8192, generator=g, device=GPU).to(dtype)
    E = (torch.randn(4 * 8192, 256, generator=g, device=GPU) / 90).to(dtype)
    encode_tol, read_in_tol = TOLERANCE[dtype]
    with torch.no_grad():
        x, xr = encode_step_triton(v, W, cos, sin)
        want = F.relu(v @ W)
        assert rel_err(x.double(), want.double()) < encode_tol
        assert rel_err(xr.double(), rotate_complex(want, cos, sin).double()) < encode_tol
        e = gated_read_in_step_triton(z, x, E)
        want_e = (relu_mul(z, x) @ E.view(4, 8192, 256)).sum(dim=1, keepdim=True)
        assert rel_err(e.double(), want_e.double()) < read_in_tol


def test_the_decoder_chooses_them():
    from bdh.model.kernels import Pass

    model = tiny_model(seed=3).to(GPU)
    with torch.no_grad():
        c = model.kernels(Pass("recurrent", 0, 1, carried=True, need_state=True, inplace=True)).choice
    assert (c.encode, c.read_in) == ("step-triton", "step-triton")
