"""BDH's chunked linear attention as fused Triton kernels, forward and backward (chosen on CUDA by `select`).

The quantity of `bdh.model.kernels.pytorch.attention.chunked` (Eq. 4 in the chunked form of Eq. 8). Per chunk of
``len`` tokens, S_b and S_a the states before and after it:

    a_i  = u^i q_i S_b + sum_{j < i} u^(i-j) (q_i . k_j) v_j                     (read + the chunk's scores)
    S_a  = u^len S_b + sum_j u^(len-j) k_j v_j^T                                  (the write)
    dq_i = u^i dO_i S_b^T + sum_{j<i} P_ij k_j,       P_ij = u^(i-j) (dO_i . v_j)
    dk_j = u^(len-j) v_j dS_a^T + sum_{i>j} P_ij q_i
    dv_j = u^(len-j) k_j dS_a + sum_{i>j} A_ij dO_i,   A_ij = u^(i-j) (q_i . k_j)
    dS_b = u^len dS_a + sum_i u^i q_i dO_i^T.

BDH's N x D state of a head is far larger than registers, so ``scan_kernel`` scans it in BN x BD tiles, writing
states only at chunk boundaries, and ``read_kernel`` and ``grad_keys_kernel`` sum over N and D in blocks; the
backward recomputes the chunk states. With a state stride R > 1 the scans write the state of every R-th chunk
only, and each reading kernel rebuilds the tile it needs from the last one kept with the (at most R - 1) chunk
updates between, from the scan's own inputs: R times fewer state bytes for at most R - 1 chunk updates a read
(``BDH_TRITON_STATE_STRIDE``; R = 1, every state written and read, is the default). docs/performance.md ("GPU")
has the tiling, why the state does not stay in registers across chunks, and the block sizes. Triton (the ``gpu``
extra) is imported only when a kernel runs."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import torch

from bdh.errors import UserError

from ..pytorch.attention import _check

#: the largest chunk the kernels take (its C x C scores and C-row tiles are held in registers)
MAX_CHUNK = 64
#: warps per program: with 4, ptxas spills registers in every kernel at bf16 (compiled for sm_90 without a GPU;
#: tests/model/test_chunked_triton.py); with 8, none or a few bytes
NUM_WARPS = 8


def available() -> bool:
    """Whether Triton can be imported (without importing it), and ``BDH_TRITON`` does not turn it off (``0``)."""
    return os.environ.get("BDH_TRITON", "1") != "0" and importlib.util.find_spec("triton") is not None


#: the environment knob of the chunk-state stride R (`chunk_state_stride`)
STATE_STRIDE = "BDH_TRITON_STATE_STRIDE"


def chunk_state_stride(stride: int | None = None) -> int:
    """The chunk-state stride R: ``stride`` when given, else ``BDH_TRITON_STATE_STRIDE`` (default 1, every chunk's
    state kept); a positive integer, or a one-line refusal."""
    raw = os.environ.get(STATE_STRIDE, "1") if stride is None else stride
    if isinstance(raw, str):
        raw = int(raw) if raw.strip().isdigit() else raw
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        where = STATE_STRIDE if stride is None else "state_stride"
        raise UserError(f"chunked_triton: {where} must be a positive integer, got {raw!r}")
    return raw


def interpreting() -> bool:
    """Whether Triton runs its kernels in the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _pow2(x: int, low: int, high: int) -> int:
    """The power of two >= x, clamped to [low, high]."""
    return max(low, min(high, 1 << max(0, (x - 1).bit_length())))


@dataclass(frozen=True)
class _Plan:
    """Shapes, tiles and the compile-time settings of one call."""

    B: int
    H: int
    T: int
    N: int
    D: int
    C: int  # tokens per chunk
    NC: int  # chunks
    BC: int  # rows of a chunk tile (a power of two >= C, at least 16 for the tensor cores)
    BN: int
    BD: int
    acc: torch.dtype  # the dtype of every sum (fp32, or fp64 for fp64 inputs)
    precision: str  # ``ieee`` or ``tf32`` (fp32 inputs where torch allows TF32 matmuls)
    widen: bool  # widen bf16 / fp16 operands to fp32 before a product (the CPU interpreter has no bf16 dot)

    def constants(self) -> dict:
        import triton.language as tl

        return dict(
            BC=self.BC,
            BN=self.BN,
            BD=self.BD,
            ACC=tl.float64 if self.acc == torch.float64 else tl.float32,
            PRECISION=self.precision,
            WIDEN=self.widen,
        )


def _plan(q: torch.Tensor, v: torch.Tensor, chunk_size: int) -> _Plan:
    B, H, T, N = q.shape
    D = v.shape[-1]
    C = min(chunk_size, MAX_CHUNK)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    tf32 = q.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    return _Plan(
        B=B,
        H=H,
        T=T,
        N=N,
        D=D,
        C=C,
        NC=-(-T // C),
        BC=_pow2(C, 16, MAX_CHUNK),
        BN=_pow2(N, 16, 64 if q.element_size() <= 4 else 32),
        BD=_pow2(D, 16, 64 if q.element_size() <= 2 else 32),
        acc=acc,
        precision="tf32" if tf32 else "ieee",
        widen=interpreting() and q.dtype in (torch.bfloat16, torch.float16),
    )


def _scan(plan: _Plan, x, y, init, log_u, reverse: bool, stride: int = 1):
    """(states at the chunk boundaries (B H, NC, N, D) in x's dtype, the state past the last chunk (B, H, N, D));
    with ``stride`` R > 1 the state of every R-th chunk only, (B H, ceil(NC / R), N, D) (`chunked_jit._kept`)."""
    from .chunked_jit import scan_kernel

    p = plan
    states = x.new_empty(p.B * p.H, -(-p.NC // stride), p.N, p.D)
    final = x.new_empty(p.B, p.H, p.N, p.D, dtype=p.acc)
    grid = (-(-p.N // p.BN), -(-p.D // p.BD), p.B * p.H)
    scan_kernel[grid](
        x,
        y,
        x if init is None else init,
        states,
        final,
        x if log_u is None else log_u,
        *x.stride(),
        *y.stride(),
        *((0, 0, 0, 0) if init is None else init.stride()),
        p.H,
        p.T,
        p.N,
        p.D,
        p.C,
        p.NC,
        REVERSE=reverse,
        HAS_INIT=init is not None,
        HAS_U=log_u is not None,
        STRIDE=stride,
        **p.constants(),
        num_warps=NUM_WARPS,
    )
    return states, final


def _read(plan: _Plan, x, y, z, states, log_u, out, backward: bool, stride: int = 1) -> torch.Tensor:
    """``out`` (B, H, T, D) = the state read plus the chunk's scores (`read_kernel`; the states kept every
    ``stride`` chunks, the others rebuilt from y and z, the inputs of their scan)."""
    from .chunked_jit import read_kernel

    p = plan
    grid = (p.NC, -(-p.D // p.BD), p.B * p.H)
    read_kernel[grid](
        x,
        y,
        z,
        states,
        out,
        x if log_u is None else log_u,
        *x.stride(),
        *y.stride(),
        *z.stride(),
        *out.stride(),
        p.H,
        p.T,
        p.N,
        p.D,
        p.C,
        p.NC,
        BACKWARD=backward,
        HAS_U=log_u is not None,
        STRIDE=stride,
        **p.constants(),
        num_warps=NUM_WARPS,
    )
    return out


def grad_keys_constants(plan: _Plan, stride: int) -> dict:
    """The compile-time settings of `grad_keys_kernel`: the plan's, and with ``stride`` > 1 half its BD (the two
    state tiles rebuilt in registers spill at the plan's BD in bf16 at sm_90: tests/model/test_triton_sm90.py)."""
    constants = plan.constants()
    if stride > 1:
        constants["BD"] = max(16, plan.BD // 2)
    return constants


def _grad_keys(plan: _Plan, q, k, v, g, states, dstates, log_u, shared: bool, stride: int = 1):
    """(dq, dk) (`grad_keys_kernel`, both state buffers kept every ``stride`` chunks); with shared keys dq holds
    dq + dk and dk is None."""
    from .chunked_jit import grad_keys_kernel

    p = plan
    dq = torch.empty_like(q)
    dk = None if shared else torch.empty_like(k)
    grid = (p.NC, -(-p.N // p.BN), p.B * p.H)
    grad_keys_kernel[grid](
        q,
        k,
        v,
        g,
        states,
        dstates,
        dq,
        dq if dk is None else dk,
        q if log_u is None else log_u,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *g.stride(),
        p.H,
        p.T,
        p.N,
        p.D,
        p.C,
        p.NC,
        SHARED=shared,
        HAS_U=log_u is not None,
        STRIDE=stride,
        **grad_keys_constants(p, stride),
        num_warps=NUM_WARPS,
    )
    return dq, dk


class TritonChunkedAttention(torch.autograd.Function):
    """(a, S after the block) = f(q, k, v, S0); the kernels and the backward as in the module docstring."""

    @staticmethod
    def forward(ctx, q, k, v, S0, log_u, chunk_size: int, stride: int = 1):
        shared = q is k
        q = q.contiguous()
        k = q if shared else k.contiguous()
        B, H, T, _ = q.shape
        vh = v.expand(B, H, T, v.shape[-1])  # one value vector shared by the heads: a stride of 0, no copy
        plan = _plan(q, v, chunk_size)
        ctx.set_materialize_grads(False)  # an unused output (often the state) has no gradient to read
        with _on(q):
            states, S = _scan(plan, k, vh, S0, log_u, reverse=False, stride=stride)
            out = _read(plan, q, k, vh, states, log_u, q.new_empty(B, H, T, v.shape[-1]), False, stride)
        ctx.save_for_backward(q, None if shared else k, v, S0, log_u)
        ctx.plan, ctx.shared, ctx.stride = plan, shared, stride
        return out, S

    @staticmethod
    def backward(ctx, d_out, d_S):
        q, k, v, S0, log_u = ctx.saved_tensors
        plan, shared, R = ctx.plan, ctx.shared, ctx.stride
        k = q if shared else k
        B, H, T, D = q.shape[0], q.shape[1], q.shape[2], v.shape[-1]
        vh = v.expand(B, H, T, D)
        g = (torch.zeros_like(q[..., :1]).expand(B, H, T, D) if d_out is None else d_out).to(q.dtype).contiguous()
        dS = None if d_S is None else d_S.contiguous()
        with _on(q):
            states, _ = _scan(plan, k, vh, S0, log_u, False, R)  # recomputed, not kept by the forward pass
            dstates, dS0 = _scan(plan, q, g, dS, log_u, True, R)
            dq, dk = _grad_keys(plan, q, k, vh, g, states, dstates, log_u, shared, R)
            dv = _read(plan, k, q, g, dstates, log_u, q.new_empty(B, H, T, D, dtype=plan.acc), True, R)
        if v.shape[1] == 1:
            dv = dv.sum(dim=1, keepdim=True)  # the values are shared by the heads
        dS0 = dS0.to(S0.dtype) if S0 is not None and ctx.needs_input_grad[3] else None
        return dq, dk, dv.to(v.dtype), dS0, None, None, None


def _on(t: torch.Tensor):
    """The CUDA device of ``t`` as the current one while kernels launch (nothing to do on the CPU)."""
    import contextlib

    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def check_call(name: str, q, k, v, state, chunk_size) -> None:
    """The one-line refusals of a call of the Triton kernels: shapes, device, chunk size, dtype."""
    _check(q, k, v, state)
    if not (q.is_cuda or interpreting()):
        raise UserError(f"{name}: the Triton kernels need CUDA tensors (or TRITON_INTERPRET=1 on the CPU)")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise UserError(f"{name}: chunk_size must be a positive integer, got {chunk_size!r}")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise UserError(f"{name}: q must be a floating-point tensor (fp16, bf16, fp32, fp64), got {q.dtype}")


def autocast_inputs(name: str, q, k, v):
    """(q, k, v) cast to autocast's dtype when it is on (k stays q when it is q); else they must share a dtype."""
    shared = q is k
    if torch.is_autocast_enabled(q.device.type):
        low = torch.get_autocast_dtype(q.device.type)
        q, v = q.to(low), v.to(low)
        return q, (q if shared else k.to(low)), v
    if v.dtype != q.dtype or k.dtype != q.dtype:
        raise UserError(f"{name}: q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    return q, k, v


def chunked_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    chunk_size: int,
    log_u: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
    need_state: bool = False,
    state_stride: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The chunked form with the fused kernels, with the signature and values of `pytorch.attention.chunked`: q, k (B,
    H, T, N), v (B, 1 or H, T, D), log_u (H,) or None, state (B, H, N, D) or None -> (a in q's dtype, the fp32 state
    after the block when ``need_state``); under autocast q, k, v are cast here. ``state_stride`` R: a chunk state
    kept every R chunks (module docstring; None: ``BDH_TRITON_STATE_STRIDE``, default 1)."""
    check_call("chunked_triton", q, k, v, state, chunk_size)
    stride = chunk_state_stride(state_stride)
    q, k, v = autocast_inputs("chunked_triton", q, k, v)
    u_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    log_u = None if log_u is None else log_u.detach().to(device=q.device, dtype=u_dtype).contiguous()
    out, S = TritonChunkedAttention.apply(q, k, v, state, log_u, chunk_size, stride)
    return out, (S if need_state else None)
