"""The compiled element-wise loops of a BDH layer on the CPU (optional; PyTorch runs the same steps without them).

On a CPU with fast bf16 matmuls (AMX) a step's time goes to element-wise passes over the (B, h, T, N) tensors;
`_native.c` (built by ``setup.py``) does each element-wise step of Eq. 8 in one fp32 pass: `relu_rope`,
`relu_rope_back`, `gate` (dropout drawn in the loop, `counter_draws`), `gate_back`, `recurrent_step`, and
`delta_read` (the delta rule over a block, no gradient); and the zoo's Mamba scan, `selective_scan` and
`selective_scan_back` (fp32, for `bdh.baselines.mamba`). Each has a PyTorch reference it is tested against;
`available` is False when not built, under ``BDH_NATIVE=0`` or inside `disabled` (docs/performance.md)."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import os
from collections.abc import Iterator

import torch

#: the interface version this module expects of the library (bdh_native_version in _native.c)
VERSION = 5

_P = ctypes.c_void_p
_L = ctypes.c_int64
_I = ctypes.c_int
_SIGNATURES = {
    "relu_rope": ([_P, _P, _P, _P, _P, _L, _L, _L, _I, _I], None),
    "relu_rope_back": ([_P, _P, _P, _P, _P, _P, _L, _L, _L, _I, _I], None),
    "gate": ([_P, _P, ctypes.c_uint64, ctypes.c_uint32, _P, _P, _P, _P, _I], None),
    "gate_back": ([_P, _P, _P, _P, _P, _P, _P, _I], None),
    "step": ([_P, _P, _P, _P, _P, _P, _L, _L, _L, _L, _L, _L, _I], _I),
    "delta_read": ([_P, _P, _P, _P, _P, _P, _P, _L, _L, _L, _L, _L, _L, _I], _I),
}
#: loops built for fp32 alone (the Mamba scan), called through `_call` with torch.float32
_F32_SIGNATURES = {
    "scan": ([_P, _P, _P, _P, _P, _P, _P, _L, _L, _L, _L, _I], _I),
    "scan_back": ([_P] * 13 + [_L, _L, _L, _L, _I], _I),
}
_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16"}
_off = 0  # depth of `disabled` contexts


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The built library with its signatures set, or None where it was not built or does not load."""
    try:
        spec = importlib.util.find_spec("bdh.model.kernels.cpu._native")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    try:
        lib = ctypes.CDLL(spec.origin)  # after torch: its OpenMP runtime is the one already loaded
        if lib.bdh_native_version() != VERSION:
            return None
        for name, (args, res) in _SIGNATURES.items():
            for suffix in _SUFFIX.values():
                fn = getattr(lib, f"bdh_{name}_{suffix}")
                fn.argtypes, fn.restype = args, res
        for name, (args, res) in _F32_SIGNATURES.items():
            fn = getattr(lib, f"bdh_{name}_f32")
            fn.argtypes, fn.restype = args, res
    except (OSError, AttributeError):
        return None
    return lib


@torch.compiler.assume_constant_result
def _built() -> bool:
    """Whether the library was built and loads (a constant of the process: ``torch.compile`` reads it once)."""
    return _library() is not None


def available() -> bool:
    """Whether the compiled loops are used: built, loadable, not turned off (``BDH_NATIVE=0``, `disabled`)."""
    return _off == 0 and os.environ.get("BDH_NATIVE", "1") != "0" and _built()


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run the PyTorch paths instead of the compiled loops inside this block (for tests and comparisons)."""
    global _off
    _off += 1
    try:
        yield
    finally:
        _off -= 1


def supports(*tensors: torch.Tensor | None) -> bool:
    """Whether the loops can take these tensors: available, all on the CPU and of one dtype, fp32 or bf16."""
    ts = [t for t in tensors if t is not None]
    return (
        available()
        and all(t.device.type == "cpu" for t in ts)
        and len({t.dtype for t in ts}) == 1
        and ts[0].dtype in _SUFFIX
    )


def _call(name: str, dtype: torch.dtype, *args):
    """Call loop ``name`` for ``dtype`` (tensors passed by address, None as NULL); under torch.profiler as the
    range ``bdh::name`` (the loops are no PyTorch operations, so a profile would not see them otherwise)."""
    fn = getattr(_library(), f"bdh_{name}_{_SUFFIX[dtype]}")
    args = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
    if not getattr(torch.autograd.profiler, "_is_profiler_enabled", False):
        return fn(*args)
    with torch.profiler.record_function(f"bdh::{name}"):
        return fn(*args)


def half_tables(kind: str, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The (T, N) rotation tables of `bdh.model.kernels.pytorch.rope.rope_tables` as one cos and sin per pair,
    (T, N / 2) fp32 contiguous: the even columns for ``rope`` (pairs (2k, 2k + 1)), the first half for
    ``rope-standard``."""
    half = cos.shape[-1] // 2
    pick = (lambda t: t[..., ::2]) if kind == "rope" else (lambda t: t[..., :half])
    return pick(cos).float().contiguous(), pick(sin).float().contiguous()


def _layout(kind: str) -> int:
    return 1 if kind == "rope" else 2


def relu_rope(h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, R x) with x = ReLU(h), for contiguous h (..., T, N) and `half_tables` cos, sin (T, N / 2)."""
    x, xr = torch.empty_like(h), torch.empty_like(h)
    T, N = h.shape[-2:]
    _call("relu_rope", h.dtype, h, x, xr, cos, sin, h.numel() // N, T, N, _layout(kind), _threads())
    return x, xr


def relu_rope_back(
    x: torch.Tensor, gx: torch.Tensor, gxr: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kind: str
) -> torch.Tensor:
    """dh = [x > 0] (gx + R^T gxr): the gradient of h from those of x and R x (contiguous, x's dtype)."""
    dh = torch.empty_like(x)
    T, N = x.shape[-2:]
    _call("relu_rope_back", x.dtype, x, gx, gxr, dh, cos, sin, x.numel() // N, T, N, _layout(kind), _threads())
    return dh


def rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as the gate's loops take it: rows of N contiguous entries at any strides for a 4-D (B, H, T, N) tensor
    (head-major, or the heads-outer layout of `bdh.model.kernels.Kernels.heads`), else contiguous."""
    return t if (t.dim() == 4 and t.stride(-1) == 1) or t.is_contiguous() else t.contiguous()


def _row_strides(*tensors: torch.Tensor | None) -> tuple[ctypes.Array, ctypes.Array]:
    """The (B, H, T, N) shape of the first tensor and the (b, h, t) strides of each (0 for a missing one) as C
    arrays; a tensor that is not 4-D is contiguous (`rows`): one run of rows."""
    first = tensors[0]
    if first.dim() == 4:
        shape = tuple(first.shape)
    else:
        N = first.shape[-1]
        shape = (1, 1, first.numel() // N, N)
    strides: list[int] = []
    for t in tensors:
        if t is None:
            strides += [0, 0, 0]
        elif t.dim() == 4:
            strides += [t.stride(0), t.stride(1), t.stride(2)]
        else:
            strides += [0, 0, shape[3]]
    return (_L * 4)(*shape), (_L * len(strides))(*strides)


def gate(
    z: torch.Tensor, x: torch.Tensor, seed: int, drop: int, keep_r: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(y, r): y = ReLU(z) * keep * x and, with ``keep_r``, r = ReLU(z) * keep, in z's layout; keep is 0 where entry i's
    draw (`counter_draws` of ``seed``, i its index in the (B, H, T, N) shape) is below ``drop`` = round(p 2^16)."""
    y = torch.empty_like(z)
    r = torch.empty_like(z) if keep_r else None
    shape, strides = _row_strides(z, x, y, r)
    _call("gate", z.dtype, z, x, seed, drop, y, r, shape, strides, _threads())
    return y, r


def gate_back(
    g: torch.Tensor, r: torch.Tensor, x: torch.Tensor, need_dz: bool, need_dx: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(dz, dx) = ([r > 0] g x, g ReLU(r)) for r = ReLU(z) * keep (or z without dropout), of one shape and dtype
    (`rows`); dz takes r's layout, dx x's."""
    dz = torch.empty_like(r) if need_dz else None
    dx = torch.empty_like(x) if need_dx else None
    shape, strides = _row_strides(g, r, x, dz, dx)
    _call("gate_back", r.dtype, g, r, x, dz, dx, shape, strides, _threads())
    return dz, dx


def recurrent_step(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, S: torch.Tensor, u: torch.Tensor | None
) -> torch.Tensor:
    """One token of Eq. 8 in place: a = q^T S, then S = u (S + k v^T); returns a (B, H, 1, D) in q's dtype. q, k
    contiguous (B, H, 1, N); v (B, 1 or H, 1, D); S contiguous fp32 (B, H, N, D); u (H,) or None."""
    B, H, _, N = q.shape
    D = S.shape[-1]
    a = q.new_empty(B, H, 1, D)
    threads = _threads()
    parts = max(1, min(N, -(-4 * threads // (B * H))))  # at least 4 tasks per thread
    vf, uf = v.float().contiguous(), None if u is None else u.float().contiguous()
    if _call("step", q.dtype, q, k, vf, S, a, uf, B, H, N, D, v.shape[1], parts, threads):
        raise MemoryError("recurrent step: could not allocate the per-thread sums")
    return a


def delta_read(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_g: torch.Tensor | None,
    S: torch.Tensor,
) -> torch.Tensor:
    """The delta rule over a block of T tokens, S updated in place (no gradient): a_t = q_t^T S, then S = u_t (S +
    k_t w_t^T), w_t = b_t (v_t - S^T k_t), u_t = e^{log_g} (`bdh.model.kernels.naive.naive_state_rule`). q, k
    contiguous (B, H, T, N), unit keys k; v (B, 1 or H, T, D); beta, log_g (B, H, T) or log_g None; S contiguous
    fp32 (B, H, N, D). Returns a (B, H, T, D) in q's dtype."""
    B, H, T, N = q.shape
    D = S.shape[-1]
    a = q.new_empty(B, H, T, D)
    vf, bf = v.float().contiguous(), beta.float().expand(B, H, T).contiguous()
    uf = None if log_g is None else torch.exp(log_g.float()).expand(B, H, T).contiguous()
    _call("delta_read", q.dtype, q, k, vf, bf, uf, S, a, B, H, T, N, D, v.shape[1], _threads())
    return a


def selective_scan(
    x: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, h0: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mamba's scan without D (`bdh.baselines.mamba.selective_scan_sequential`): (y, h_T), y_t = h_t . C_t, h_t =
    exp(delta_t A) ⊙ h_{t-1} + delta_t x_t B_t. fp32: x, delta (b, T, e); A (e, N); B, C (b, T, N); h0 (b, e, N)."""
    b, T, e = x.shape
    h = x.new_zeros(b, e, A.shape[1]) if h0 is None else h0.contiguous().clone()
    y = x.new_empty(b, T, e)
    args = [t.contiguous() for t in (x, delta, A, B, C)]
    if _call("scan", torch.float32, *args, h, y, b, T, e, A.shape[1], _threads()):
        raise MemoryError("selective scan: could not allocate a thread's buffer")
    return y, h


def selective_scan_back(
    x: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    h0: torch.Tensor | None,
    gy: torch.Tensor,
    gh: torch.Tensor | None,
) -> tuple[torch.Tensor, ...]:
    """The gradients (dx, ddelta, dA, dB, dC, dh0) of `selective_scan` from those of y and h_T (None: zero), fp32."""
    b, T, e = x.shape
    N = A.shape[1]
    gh = x.new_zeros(b, e, N) if gh is None else gh.contiguous().clone()  # becomes dh0
    dx, ddelta = x.new_empty(b, T, e), x.new_empty(b, T, e)
    dA, dB, dC = x.new_zeros(b, e, N), x.new_zeros(b, T, N), x.new_zeros(b, T, N)
    args = [t.contiguous() for t in (x, delta, A, B, C)]
    h0c = None if h0 is None else h0.contiguous()
    if _call(
        "scan_back", torch.float32, *args, h0c, gy.contiguous(), gh, dx, ddelta, dA, dB, dC, b, T, e, N, _threads()
    ):
        raise MemoryError("selective scan backward: could not allocate a thread's buffer")
    return dx, ddelta, dA.sum(0), dB, dC, gh


def _threads() -> int:
    return torch.get_num_threads()
