"""The gate y = ReLU(z) * x of Eq. 8 and its dropout as one Triton kernel each way (CUDA, or Triton's interpreter).

The values of `bdh.model.kernels.pytorch.fused.relu_mul` with a mask: the dropped entries of y are zeroed, unscaled
(the caller scales the n / D times smaller y E by 1 / (1 - p), as the ``in-gate`` masks). The mask is never a
tensor: entry i is kept when u_i >= p, u_i ~ U(0, 1) drawn by Philox (a counter-based generator, ``tl.rand``) from
(seed, i), i the entry's flat index, so the forward draws it and the backward draws the same again from the seed.
Forward: read z and x, write y; backward: read g, z and x, write dz and dx; only z and x are kept for it (no ReLU(z)
copy, no mask)."""

from __future__ import annotations

import torch

from bdh.errors import UserError

from .chunked import _on, interpreting

#: entries per program (a power of two)
BLOCK = 1024
#: warps per program (an element-wise kernel: 4, Triton's default)
NUM_WARPS = 4
#: seeds are drawn below this (Philox takes 64 bits; torch's generators draw them reproducibly)
MAX_SEED = 2**31 - 1


def _launch(kernel, *tensors, numel: int, seed: int, p: float) -> None:
    import triton.language as tl

    acc = tl.float64 if tensors[0].dtype == torch.float64 else tl.float32
    with _on(tensors[0]):
        kernel[(-(-numel // BLOCK),)](*tensors, numel, seed, p, DROP=p > 0, BLOCK=BLOCK, ACC=acc, num_warps=NUM_WARPS)


class TritonGate(torch.autograd.Function):
    """y = ReLU(z) * x with the entries dropped at rate p zeroed; backward from z and x and the seed."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        from .gate_jit import gate_kernel

        y = torch.empty_like(z)
        _launch(gate_kernel, z, x, y, numel=z.numel(), seed=seed, p=p)
        ctx.save_for_backward(z, x)
        ctx.p, ctx.seed = p, seed
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        from .gate_jit import gate_backward_kernel

        z, x = ctx.saved_tensors
        dz, dx = torch.empty_like(z), torch.empty_like(x)
        _launch(gate_backward_kernel, g.contiguous(), z, x, dz, dx, numel=z.numel(), seed=ctx.seed, p=ctx.p)
        return dz, dx, None, None


def gate_triton(z: torch.Tensor, x: torch.Tensor, *, p: float = 0.0, seed: int | None = None) -> torch.Tensor:
    """ReLU(z) * x, the entries dropped at rate ``p`` zeroed (unscaled: module docstring). ``seed`` (an int in
    [0, 2^31 - 1)) decides the mask; None draws one from torch's default generator (reproducible by
    ``torch.manual_seed``)."""
    if z.shape != x.shape or z.dtype != x.dtype:
        raise UserError(f"gate_triton: z and x must share a shape and a dtype, got {tuple(z.shape)} {z.dtype} and "
                        f"{tuple(x.shape)} {x.dtype}")  # fmt: skip
    if not z.is_floating_point():
        raise UserError(f"gate_triton: z and x must be floating-point tensors, got {z.dtype}")
    if not (z.is_cuda or interpreting()) or z.device != x.device:
        raise UserError("gate_triton: the Triton kernels need z and x on one CUDA device (or TRITON_INTERPRET=1)")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
        raise UserError(f"gate_triton: the dropout rate p must be in [0, 1), got {p!r}")
    if seed is None:
        seed = int(torch.randint(MAX_SEED, ()).item()) if p > 0 else 0
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < MAX_SEED:
        raise UserError(f"gate_triton: seed must be an int in [0, {MAX_SEED}), got {seed!r}")
    return TritonGate.apply(z.contiguous(), x.contiguous(), float(p), seed)
