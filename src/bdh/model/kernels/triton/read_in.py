"""The gate and the decoder of Eq. 8 in one: E y with y = ReLU(z) * x formed in the matmul's prologue (Triton).

The values of `bdh.model.kernels.pytorch.fused.relu_mul` followed by the per-head read-in E y summed over the heads
(`bdh.model.kernels.dispatch`'s ``read_in``): z, x (B, H, T, N), E (H N, D) -> (B, 1, T, D). Each program loads tiles
of z and x, forms y (rounded to their dtype, as the gate writes it) and multiplies it into its fp32 sum: the (B, H,
T, N) product y is never written. Dropout as the gate's (`triton.gate`): entry i of y kept when Philox's u_i >= p,
drawn from (seed, i), i the flat index in (B, H, T, N), so the same seed drops the same entries as `gate_triton`;
the product is scaled by 1 / (1 - p), as the ``in-gate`` masks' read-in scales it.

Backward, from z, x, E and the seed only: one kernel forms dy = g E_h^T per tile and writes dz = dy x [z > 0] and
dx = dy ReLU(z) in its epilogue (dy never written); another forms y again in its prologue for dE_h = y_h^T g."""

from __future__ import annotations

import torch

from bdh.errors import UserError

from .chunked import _on, interpreting
from .encode import NUM_STAGES, NUM_WARPS, _plan
from .gate import MAX_SEED

#: the largest tile (rows, columns, inner) by element size: at encode's 128 x 128 x 64 the prologue's z, x and
#: Philox draws spill registers at bf16 (sm_90, 8 warps); at 64 x 128 x 64 none of the three kernels spills
TILES = {2: (64, 128, 64), 4: (32, 64, 32), 8: (32, 32, 16)}


def _launch(kernel, grid, tensors, sizes, tile: tuple[int, int, int], dtype, seed: int, p: float) -> None:
    """``kernel`` on ``grid`` with its tensors, (M, T, H, N, D), the dropout and the tiles of a (rows, columns, inner)
    product (`encode._plan`)."""
    plan = _plan(dtype, *tile, TILES)
    scale = 1.0 / (1.0 - p)
    with _on(tensors[0]):
        kernel[grid](
            *tensors, *sizes, seed, p, scale, DROP=p > 0, **plan.constants(), num_warps=NUM_WARPS,
            num_stages=NUM_STAGES,
        )  # fmt: skip


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class TritonGatedReadIn(torch.autograd.Function):
    """E (ReLU(z) * x, dropped entries zeroed) / (1 - p), summed over the heads; backward from z, x, E and the seed."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, x: torch.Tensor, E: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        from .read_in_jit import read_in_kernel

        B, H, T, N = z.shape
        D = E.shape[1]
        out = z.new_empty(B, 1, T, D)
        tile = (B * T, D, N)
        plan = _plan(z.dtype, *tile, TILES)
        grid = (_cdiv(B * T, plan.BM), _cdiv(D, plan.BN))
        _launch(read_in_kernel, grid, (z, x, E, out), (B * T, T, H, N, D), tile, z.dtype, seed, p)
        ctx.save_for_backward(z, x, E)
        ctx.p, ctx.seed = p, seed
        return out

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        from .read_in_jit import read_in_grad_kernel, read_in_grad_weight_kernel

        z, x, E = ctx.saved_tensors
        B, H, T, N = z.shape
        D, g = E.shape[1], g.contiguous()
        sizes, dz, dx, dE = (B * T, T, H, N, D), torch.empty_like(z), torch.empty_like(x), torch.empty_like(E)
        tile = (B * T, N, D)
        plan = _plan(z.dtype, *tile, TILES)
        grid = (_cdiv(B * T, plan.BM), _cdiv(N, plan.BN), H)
        _launch(read_in_grad_kernel, grid, (g, z, x, E, dz, dx), sizes, tile, z.dtype, ctx.seed, ctx.p)
        tile = (N, D, B * T)
        plan = _plan(z.dtype, *tile, TILES)
        grid = (_cdiv(N, plan.BM), _cdiv(D, plan.BN), H)
        _launch(read_in_grad_weight_kernel, grid, (g, z, x, dE), sizes, tile, z.dtype, ctx.seed, ctx.p)
        return dz, dx, dE, None, None


def takes(z: torch.Tensor, x: torch.Tensor, E: torch.Tensor) -> bool:
    """Whether `gated_read_in_triton` takes these tensors: z and x (B, H, T, N) of one shape and E (H N, D), floating,
    on one CUDA device (or the interpreter), of one dtype unless autocast casts them, B T D and E under 2^31
    entries (their offsets are 32-bit)."""
    shapes = z.dim() == 4 and z.shape == x.shape and E.dim() == 2 and E.shape[0] == z.shape[1] * z.shape[3]
    floats = z.is_floating_point() and x.is_floating_point() and E.is_floating_point()
    place = z.device == x.device == E.device and (z.is_cuda or interpreting())
    dtypes = z.dtype == x.dtype == E.dtype or torch.is_autocast_enabled(z.device.type)
    offsets = E.numel() < 2**31 and shapes and z.shape[0] * z.shape[2] * E.shape[1] < 2**31
    return shapes and floats and place and dtypes and offsets


def gated_read_in_triton(
    z: torch.Tensor, x: torch.Tensor, E: torch.Tensor, *, p: float = 0.0, seed: int | None = None
) -> torch.Tensor:
    """E y summed over the heads, (B, 1, T, D), y = ReLU(z) * x with the entries dropped at rate ``p`` zeroed and the
    product scaled by 1 / (1 - p) (module docstring). ``seed`` as `gate.gate_triton`'s: None draws one from torch's
    default generator."""
    if not takes(z, x, E):
        raise UserError(
            f"gated_read_in_triton: needs z, x (B, H, T, N) of one shape and E (H N, D), of one floating dtype on one "
            f"CUDA device (or TRITON_INTERPRET=1), B T D and E under 2^31 entries; got {tuple(z.shape)} {z.dtype}, "
            f"{tuple(x.shape)} {x.dtype}, {tuple(E.shape)} {E.dtype}"
        )
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
        raise UserError(f"gated_read_in_triton: the dropout rate p must be in [0, 1), got {p!r}")
    if seed is None:
        seed = int(torch.randint(MAX_SEED, ()).item()) if p > 0 else 0
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < MAX_SEED:
        raise UserError(f"gated_read_in_triton: seed must be an int in [0, {MAX_SEED}), got {seed!r}")
    if torch.is_autocast_enabled(z.device.type):
        low = torch.get_autocast_dtype(z.device.type)
        z, x, E = z.to(low), x.to(low), E.to(low)
    return TritonGatedReadIn.apply(z.contiguous(), x.contiguous(), E.contiguous(), float(p), seed)
