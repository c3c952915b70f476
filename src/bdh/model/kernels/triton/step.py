"""One token of the recurrent form (Eq. 8) as one Triton kernel over the state: the read a = q^T S and the write
S <- u (S + k v^T) in place, for generation (`bdh.model.decoder.StateDecoder`, CUDA, or Triton's interpreter).

The PyTorch step (`pytorch.attention.recurrent` with ``inplace``) makes three passes over each head's N x D fp32
state, each its own kernel: the read (a matmul, after casting S to q's dtype when that is not fp32), the write
(``baddbmm_``) and the damping (``mul_``), S read three times and written twice. Here each program streams ROWS rows
and BD columns of S once: it reads the tile, adds its share of q^T S to an fp32 partial sum, and writes the updated
tile back. The rows of a head are split over several programs so that a batch of one still fills the GPU; their
partial reads are summed by one small reduction over (B, H, splits, D). Inference only: no autograd."""

from __future__ import annotations

import torch

from bdh.errors import UserError

from ..pytorch.attention import _check
from .chunked import _on, _pow2, interpreting

#: programs the grid aims at (enough to fill an H100 / H200's 132 SMs a few times at batch 1)
TARGET_PROGRAMS = 512
#: warps per program (a streaming kernel)
NUM_WARPS = 4
#: rows of S a program holds at once (a BN x 64 fp32 tile: 96 registers at 32 for sm_90, 168 at 64; no spill)
BN = 32


def takes(q: torch.Tensor, state: torch.Tensor | None) -> bool:
    """Whether the kernel runs this step: one token, on CUDA (or the interpreter), a contiguous fp32 state."""
    return (
        state is not None
        and q.dim() == 4
        and q.shape[2] == 1
        and (q.is_cuda or interpreting())
        and state.dtype == torch.float32
        and state.is_contiguous()
        and not torch.is_grad_enabled()
    )


def _split(B: int, H: int, N: int, D: int, BN: int, BD: int) -> tuple[int, int]:
    """(rows a program scans, a multiple of BN; programs along N)."""
    wanted = max(1, min(_cdiv(N, BN), _cdiv(TARGET_PROGRAMS, B * H * _cdiv(D, BD))))
    rows = _cdiv(_cdiv(N, wanted), BN) * BN
    return rows, _cdiv(N, rows)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def recurrent_step_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    state: torch.Tensor,
    log_u: torch.Tensor | None = None,
) -> torch.Tensor:
    """a (B, H, 1, D) in q's dtype for one token, q, k (B, H, 1, N), v (B, 1 or H, 1, D); ``state`` (B, H, N, D),
    fp32, contiguous, updated in place to u (S + k v^T) (log_u (H,) or None: no damping). The values of
    `pytorch.attention.recurrent` with ``inplace``, the read summed in fp32."""
    from .step_jit import step_kernel

    _check(q, k, v, state)
    if not takes(q, state):
        raise UserError(
            "recurrent_step_triton: one token (T = 1) without autograd, on CUDA (or TRITON_INTERPRET=1), with a "
            f"contiguous fp32 state; got T = {q.shape[2]}, state {state.dtype}, device {q.device}"
        )
    B, H, _, N = q.shape
    D = v.shape[-1]
    shared = k is q
    q = q[:, :, 0].contiguous()
    k = q if shared else k[:, :, 0].contiguous()
    v = v[:, :, 0].contiguous()
    BD = _pow2(D, 16, 64)
    rows, split = _split(B, H, N, D, BN, BD)
    part = state.new_empty(B * H, split, D)
    u = None if log_u is None else torch.exp(log_u.detach().float()).to(state.device).contiguous()
    with _on(state):
        step_kernel[(split, _cdiv(D, BD), B * H)](
            q, k, v, state, part, state if u is None else u,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), 0 if v.shape[1] == 1 else v.stride(1),
            H, N, D, rows, split,
            SHARED=shared, HAS_U=u is not None, BN=BN, BD=BD, num_warps=NUM_WARPS,
        )  # fmt: skip
    return part.sum(dim=1).view(B, H, 1, D).to(q.dtype)
