"""The encoder of Eq. 8, x = ReLU(v Dx) per head, as one Triton matmul with the ReLU and the cast in its epilogue.

The values of ``F.relu(v @ W)`` (v (B, 1, T, D) shared by the heads, W (H, D, N)): the product is summed in fp32
(fp64 for fp64) and rounded once to the activation dtype after the ReLU, so the pre-activation h = v W, a (B, H,
T, N) tensor, is never written (today's step writes h and reads it back for the ReLU). Under autocast v and W are
cast here, as the matmul autocast would run. The layer has no clamp at this step (`BDH.layer`).

Backward: only v, W and the output x are kept. ReLU'(h) = [x > 0] exactly, x being the ReLU of the pre-activation
rounded to x's dtype, as autocast's matmul rounds it before today's ``F.relu``; dh = [x > 0] g is one pass, written
with the heads outermost ((H, B, T, N) storage), then dv = sum_h dh_h W_h^T and dW_h = v^T dh_h by cuBLAS, each a
product per head with the batch in its rows: no copy of W per sequence, no partial dW per sequence (a broadcast
``dh @ W.mT`` over (B, H) copies W B times, ``v.mT @ dh`` writes B partial dW summed after).

With the official interleaved RoPE (``rope``, `encode_rope_triton`) the rotation is in the epilogue too: the kernel
writes x and R x (rotated in fp32 from the rounded x, as `pytorch.rope.rotate_complex`), so today's fp32 copy of x,
its complex multiply and the cast back are not run; the backward forms dh = [x > 0] (g_x + R^T g_Rx) in one
element-wise kernel (today: the cast of g_Rx to fp32, the complex multiply, the cast back, the sum with g_x and the
ReLU's backward, each a pass), then the same two products. The official RoPE turns both entries of a pair by one
angle (`pytorch.rope.official_frequencies`), so the kernels read tables of one cos and one sin a pair (T, N / 2:
`cpu.native.half_tables`), half the bytes of the (T, N) tables, the same numbers. Autograd keeps v, W, x and the
pair tables."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bdh.errors import UserError

from ..cpu.native import half_tables
from .chunked import _on, _pow2, interpreting

#: the largest tile (rows, columns, inner) by element size: bf16 / fp16 fill the tensor cores with 128 x 128 x 64
TILES = {2: (128, 128, 64), 4: (64, 64, 32), 8: (32, 32, 16)}
#: warps and software-pipeline stages per program (sm_90: tests/model/test_encode_triton.py compiles them)
NUM_WARPS = 8
NUM_STAGES = 3
#: the rotating kernel's largest tile (rows, column pairs, inner): two fp32 sums of BM x BN. At 128 rows (`TILES`'
#: output tile) ptxas gives it 254 registers at bf16 (one program an SM), at 64 rows 128
#: (tests/model/test_encode_rope_triton.py)
ROPE_TILES = {2: (64, 64, 64), 4: (64, 32, 32), 8: (32, 16, 16)}
#: the most interleaved pairs per program of the rotating kernel's backward (an element-wise kernel over one row of
#: (B, H, T, N) a program, 4 warps)
GRAD_BLOCK = 1024


@dataclass(frozen=True)
class _Plan:
    BM: int
    BN: int
    BK: int
    acc: torch.dtype
    precision: str  # ``ieee``, or ``tf32`` for fp32 inputs where torch allows TF32 matmuls
    widen: bool  # the CPU interpreter's dot has no bf16 / fp16 path: widen the operands to fp32 (exact)

    def constants(self) -> dict:
        import triton.language as tl

        acc = tl.float64 if self.acc == torch.float64 else tl.float32
        return dict(BM=self.BM, BN=self.BN, BK=self.BK, ACC=acc, PRECISION=self.precision, WIDEN=self.widen)


def _plan(dtype: torch.dtype, M: int, N: int, D: int, tiles: dict = TILES) -> _Plan:
    """The tiles of an M x N product summed over D: at most ``tiles`` by element size, at least 16 (tensor cores)."""
    bm, bn, bk = tiles[dtype.itemsize]
    tf32 = dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    return _Plan(
        BM=_pow2(M, 16, bm),
        BN=_pow2(N, 16, bn),
        BK=_pow2(D, 16, bk),
        acc=torch.float64 if dtype == torch.float64 else torch.float32,
        precision="tf32" if tf32 else "ieee",
        widen=interpreting() and dtype in (torch.bfloat16, torch.float16),
    )


class TritonEncode(torch.autograd.Function):
    """x = ReLU(v @ W) forward in one kernel; backward from v, W and x (module docstring)."""

    @staticmethod
    def forward(ctx, v: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
        from .encode_jit import encode_kernel

        B, _, T, D = v.shape
        H, _, N = W.shape
        p = _plan(v.dtype, B * T, N, D)
        x = v.new_empty(B, H, T, N)
        grid = (-(-B * T // p.BM), -(-N // p.BN), H)
        with _on(v):
            encode_kernel[grid](
                v, W, x, B * T, T, H, N, D, **p.constants(), num_warps=NUM_WARPS, num_stages=NUM_STAGES
            )  # fmt: skip
        ctx.save_for_backward(v, W, x)
        return x

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        v, W, x = ctx.saved_tensors
        dh = _heads_outer(x)  # g where x > 0, as autograd's ReLU backward, written in (H, B, T, N) storage
        torch.ops.aten.threshold_backward.grad_input(g, x, 0, grad_input=dh.transpose(0, 1))
        return _products(ctx, dh, v, W)


def _heads_outer(x: torch.Tensor) -> torch.Tensor:
    """An empty (H, B, T, N) tensor for x (B, H, T, N): dh with the heads outermost."""
    B, H, T, N = x.shape
    return x.new_empty(H, B, T, N)


def _products(ctx, dh: torch.Tensor, v: torch.Tensor, W: torch.Tensor) -> tuple:
    """dv = sum_h dh_h W_h^T and dW_h = v^T dh_h (cuBLAS), each where its input wants it: per head, the batch in the
    rows of dh (H, B, T, N) and v (B, 1, T, D), so W is read once a head and dW written once (module docstring)."""
    H, B, T, N = dh.shape
    rows = dh.view(H, B * T, N)
    dv = torch.bmm(rows, W.mT).sum(dim=0).view(B, 1, T, -1) if ctx.needs_input_grad[0] else None
    dW = torch.bmm(v.view(B * T, -1).mT.expand(H, -1, -1), rows) if ctx.needs_input_grad[1] else None
    return dv, dW


class TritonEncodeRope(torch.autograd.Function):
    """(x, R x) with x = ReLU(v @ W) and its interleaved RoPE in one kernel; backward dh in one element-wise kernel,
    then the two products (module docstring)."""

    @staticmethod
    def forward(ctx, v: torch.Tensor, W: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        from .encode_jit import encode_rope_kernel

        B, _, T, D = v.shape
        H, _, N = W.shape
        p = _plan(v.dtype, B * T, N // 2, D, ROPE_TILES)
        x, xr = v.new_empty(B, H, T, N), v.new_empty(B, H, T, N)
        grid = (-(-B * T // p.BM), -(-(N // 2) // p.BN), H)
        with _on(v):
            encode_rope_kernel[grid](
                v, W, cos, sin, x, xr, B * T, T, H, N, D, **p.constants(), num_warps=NUM_WARPS, num_stages=NUM_STAGES
            )  # fmt: skip
        ctx.save_for_backward(v, W, x, cos, sin)
        ctx.set_materialize_grads(False)  # an unused output (x of D_k's keys) gets no gradient: no zeros read
        return x, xr

    @staticmethod
    def backward(ctx, gx: torch.Tensor | None, gxr: torch.Tensor | None):
        import triton.language as tl

        from .encode_jit import encode_rope_grad_kernel

        v, W, x, cos, sin = ctx.saved_tensors
        if gx is None and gxr is None:
            return None, None, None, None
        B, H, T, N = x.shape
        dh, block = _heads_outer(x), _pow2(N // 2, 16, GRAD_BLOCK)
        gx_, gxr_ = (x if g is None else g.contiguous() for g in (gx, gxr))  # x: a pointer the kernel never reads
        acc = tl.float64 if x.dtype == torch.float64 else tl.float32
        with _on(x):
            encode_rope_grad_kernel[(B * H * T, -(-(N // 2) // block))](
                gx_, gxr_, x, cos, sin, dh, B, H, T, N, GX=gx is not None, GXR=gxr is not None, BLOCK=block,
                ACC=acc, num_warps=4,
            )  # fmt: skip
        return (*_products(ctx, dh, v, W), None, None)


def takes(v: torch.Tensor, W: torch.Tensor) -> bool:
    """Whether `encode_triton` computes ``F.relu(v @ W)`` for these tensors: v (B, 1, T, D) shared by the heads and W
    (H, D, N), floating-point, on one CUDA device (or the interpreter), of one dtype unless autocast casts them."""
    shapes = v.dim() == 4 and v.shape[1] == 1 and W.dim() == 3 and v.shape[3] == W.shape[1]
    floats = v.is_floating_point() and W.is_floating_point()
    place = v.device == W.device and (v.is_cuda or interpreting())
    dtypes = v.dtype == W.dtype or torch.is_autocast_enabled(v.device.type)
    offsets = v.numel() < 2**31 and W[0].numel() < 2**31  # v's and a head of W's in 32 bits (`encode_kernel`)
    return shapes and floats and place and dtypes and offsets


def encode_triton(v: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """ReLU(v @ W) (B, H, T, N) for v (B, 1, T, D) and W (H, D, N): Eq. 8's x_l = ReLU(Dx v_{l-1}) (module
    docstring); under autocast in its dtype, else in v's."""
    if not takes(v, W):
        raise UserError(
            f"encode_triton: needs v (B, 1, T, D) and W (H, D, N) of one floating dtype on one CUDA device (or "
            f"TRITON_INTERPRET=1), v and a head of W under 2^31 entries, got {tuple(v.shape)} {v.dtype} {v.device} "
            f"and {tuple(W.shape)} {W.dtype} {W.device}"
        )
    if torch.is_autocast_enabled(v.device.type):
        low = torch.get_autocast_dtype(v.device.type)
        v, W = v.to(low), W.to(low)
    return TritonEncode.apply(v.contiguous(), W.contiguous())


def takes_rope(v: torch.Tensor, W: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None) -> bool:
    """Whether `encode_rope_triton` takes these tensors: those of `takes`, N even, fp32 tables (T, N) or pair tables
    (T, N / 2) on their device, T N under 2^31 (the tables' offsets are 32-bit)."""
    if cos is None or sin is None or not takes(v, W) or W.shape[2] % 2:
        return False
    T, N = v.shape[2], W.shape[2]
    shapes = cos.shape == sin.shape and cos.shape in ((T, N), (T, N // 2))
    tables = shapes and cos.dtype == sin.dtype == torch.float32
    return tables and cos.device == sin.device == v.device and T * N < 2**31


def encode_rope_triton(
    v: torch.Tensor, W: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, R x), each (B, H, T, N): x = ReLU(v @ W) as `encode_triton` and its interleaved RoPE by the tables (T, N)
    of the pass's positions (``rope``: `pytorch.rope.rope_tables`; their even columns are read) or by their pair
    tables (T, N / 2, `cpu.native.half_tables`: what a pass makes once for all its layers), rotated in the epilogue
    (module docstring)."""
    if not takes_rope(v, W, cos, sin):
        raise UserError(
            f"encode_rope_triton: needs v (B, 1, T, D), W (H, D, N) with N even of one floating dtype and fp32 tables "
            f"(T, N) or (T, N / 2) on one CUDA device (or TRITON_INTERPRET=1); got {tuple(v.shape)} {v.dtype} "
            f"{v.device}, {tuple(W.shape)} {W.dtype}, tables {None if cos is None else (tuple(cos.shape), cos.dtype)}"
        )
    if cos.shape[1] == W.shape[2]:
        cos, sin = half_tables("rope", cos, sin)
    if torch.is_autocast_enabled(v.device.type):
        low = torch.get_autocast_dtype(v.device.type)
        v, W = v.to(low), W.to(low)
    return TritonEncodeRope.apply(v.contiguous(), W.contiguous(), cos.contiguous(), sin.contiguous())
