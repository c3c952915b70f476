"""The gate and the decoder of Eq. 8 for one token in one Triton kernel, E y with y = ReLU(z) * x formed inside
(generation at batch 1: `bdh.model.decoder.StateDecoder`, CUDA, or Triton's interpreter).

The values of the gate (`pytorch.fused.relu_mul`) followed by the per-head read-in E y summed over the heads. The
decoder's step makes the gate, the per-head product and the sum over the heads, each its own kernel (under autocast
a cast of E too, once a pass); `triton.read_in`'s training kernel puts the whole n-long sum of a row in D / 128
programs, too few at one token. Here the n = H N rows of E are split over programs (as `triton.step` splits the
state's rows) so that a batch of one fills the GPU: each forms y for its rows, multiplies it into an fp32 partial sum
over BD columns, and one small reduction sums the partial sums. Inference only (no dropout: an eval pass, no
autograd)."""

from __future__ import annotations

import torch

from bdh.errors import UserError

from .chunked import _on, _pow2, interpreting
from .step import _cdiv, _split

#: rows of E a program holds at once (a BK x BD tile)
BK = 64
#: warps per program (a streaming kernel)
NUM_WARPS = 4


def takes(z: torch.Tensor, x: torch.Tensor, E: torch.Tensor) -> bool:
    """Whether `gated_read_in_step_triton` takes these tensors: one token, z and x (B, H, 1, N) of one shape and dtype
    and E (H N, D), floating, on one CUDA device (or the interpreter), E of z's dtype unless autocast casts it,
    without autograd, B H N D under 2^31."""
    if torch.is_grad_enabled():
        return False
    shapes = z.dim() == 4 and z.shape[2] == 1 and z.shape == x.shape and E.dim() == 2
    shapes = shapes and E.shape[0] == z.shape[1] * z.shape[3]
    floats = z.is_floating_point() and z.dtype == x.dtype and E.is_floating_point()
    place = z.device == x.device == E.device and (z.is_cuda or interpreting())
    dtypes = E.dtype == z.dtype or torch.is_autocast_enabled(z.device.type)
    return shapes and floats and place and dtypes and E.numel() < 2**31 and z.numel() < 2**31


def gated_read_in_step_triton(z: torch.Tensor, x: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
    """E y summed over the heads, (B, 1, 1, D) in z's dtype, y = ReLU(z) * x for one token: z, x (B, H, 1, N), E
    (H N, D) (module docstring); under autocast E's entries are rounded to z's dtype inside the kernel."""
    from .read_in_step_jit import read_in_step_kernel

    if not takes(z, x, E):
        raise UserError(
            "gated_read_in_step_triton: needs one token z, x (B, H, 1, N) of one shape and floating dtype and E "
            "(H N, D) of theirs, on one CUDA device (or TRITON_INTERPRET=1), without autograd; got "
            f"{tuple(z.shape)} {z.dtype} {z.device}, {tuple(x.shape)} {x.dtype}, {tuple(E.shape)} {E.dtype}, "
            f"autograd {torch.is_grad_enabled()}"
        )
    B, H, _, N = z.shape
    D = E.shape[1]
    z, x, E = z.contiguous(), x.contiguous(), E.contiguous()
    acc = torch.float64 if z.dtype == torch.float64 else torch.float32
    BD = _pow2(D, 16, 64)
    rows, split = _split(B, 1, H * N, D, BK, BD)
    part = torch.empty(B, split, D, dtype=acc, device=z.device)
    with _on(z):
        read_in_step_kernel[(split, _cdiv(D, BD), B)](
            z, x, E, part, H * N, D, rows, split, BK=BK, BD=BD, ACC=_acc(acc), num_warps=NUM_WARPS
        )  # fmt: skip
    return part.sum(dim=1).view(B, 1, 1, D).to(z.dtype)


def _acc(dtype: torch.dtype):
    import triton.language as tl

    return tl.float64 if dtype == torch.float64 else tl.float32
