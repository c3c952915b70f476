"""The encoder of Eq. 8 for one token with its rotation, x = ReLU(v Dx) and R x, as one Triton kernel (generation at
batch 1: `bdh.model.decoder.StateDecoder`, CUDA, or Triton's interpreter).

The decoder's step today makes the per-head product h = v Dx, its ReLU, and the rotation of interleaved pairs
(`pytorch.rope.rotate_complex`: a widening cast, the phasor from the tables, the complex multiply, the cast back),
each its own kernel; here one kernel sums the even and the odd columns of each pair, applies the ReLU, rounds x once
to its dtype and rotates the rounded x in the epilogue (fp32, fp64 for fp64, as `rotate_complex`), writing x and
R x and nothing else. Under autocast v and W are cast here, as the matmul autocast would run. Inference only: no
autograd (the training step has `triton.encode`)."""

from __future__ import annotations

import torch

from bdh.errors import UserError

from .chunked import _on, interpreting
from .encode import NUM_STAGES, _plan

#: the largest tile (batch rows, column pairs, inner) by element size: two fp32 sums of BM x BN a program
TILES = {2: (64, 64, 64), 4: (64, 32, 32), 8: (32, 16, 16)}
#: warps per program (sm_90: tests/model/test_triton_sm90.py compiles the largest tile without spilling)
NUM_WARPS = 4


def takes(v: torch.Tensor, W: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None) -> bool:
    """Whether `encode_step_triton` takes these tensors: one token v (B, 1, 1, D) shared by the heads, W (H, D, N)
    with N even, one-row tables (1, N), floating, on one CUDA device (or the interpreter), v and W of one dtype
    unless autocast casts them, without autograd, v's and a head of W's offsets in 32 bits."""
    if cos is None or sin is None or torch.is_grad_enabled():
        return False
    shapes = v.dim() == 4 and v.shape[1:3] == (1, 1) and W.dim() == 3 and v.shape[3] == W.shape[1]
    tables = shapes and W.shape[2] % 2 == 0 and cos.shape == sin.shape == (1, W.shape[2])
    floats = v.is_floating_point() and W.is_floating_point()
    place = v.device == W.device == cos.device == sin.device and (v.is_cuda or interpreting())
    dtypes = v.dtype == W.dtype or torch.is_autocast_enabled(v.device.type)
    offsets = v.numel() < 2**31 and W[0].numel() < 2**31
    return tables and floats and place and dtypes and offsets


def encode_step_triton(
    v: torch.Tensor, W: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, R x), each (B, H, 1, N), for one token v (B, 1, 1, D) and W (H, D, N): Eq. 8's x_l = ReLU(Dx v_{l-1}) and
    its interleaved RoPE by the tables (1, N) of the token's position (``rope``: `pytorch.rope.rope_tables_at`);
    under autocast in its dtype, else in v's (module docstring)."""
    from .encode_step_jit import encode_step_kernel

    if not takes(v, W, cos, sin):
        raise UserError(
            "encode_step_triton: needs one token v (B, 1, 1, D), W (H, D, N) with N even and tables (1, N), of one "
            "floating dtype on one CUDA device (or TRITON_INTERPRET=1), without autograd; got "
            f"{tuple(v.shape)} {v.dtype} {v.device}, {tuple(W.shape)} {W.dtype}, tables "
            f"{None if cos is None else tuple(cos.shape)}, autograd {torch.is_grad_enabled()}"
        )
    if torch.is_autocast_enabled(v.device.type):
        low = torch.get_autocast_dtype(v.device.type)
        v, W = v.to(low), W.to(low)
    v, W = v.contiguous(), W.contiguous()
    B, D = v.shape[0], v.shape[3]
    H, _, N = W.shape
    p = _plan(v.dtype, B, N // 2, D, TILES)
    x, xr = v.new_empty(B, H, 1, N), v.new_empty(B, H, 1, N)
    grid = (-(-B // p.BM), -(-(N // 2) // p.BN), H)
    with _on(v):
        encode_step_kernel[grid](
            v, W, cos.contiguous(), sin.contiguous(), x, xr, B, H, N, D, **p.constants(), num_warps=NUM_WARPS,
            num_stages=NUM_STAGES,
        )  # fmt: skip
    return x, xr
