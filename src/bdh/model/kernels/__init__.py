"""The kernels of BDH-GPU, and `select`: the one place that chooses among them.

Each step of a BDH layer (`bdh.model.bdh.BDH.layer`) has a plain expression and, where it pays, kernels
that compute the same values faster or in less memory. Every kernel is tested against its plain
expression or the obviously-correct loops of `naive` (values and gradients):

===============  =======================  ====================================================================
step             paper                    kernels (module)
===============  =======================  ====================================================================
R x              Eq. 8, U's rotation      ``complex`` / ``fused`` / ``plain`` (`rope`); with x = ReLU(Dx v) in one
                                          pass by the compiled loops (`native`, `fused.native_relu_rope`)
a (attention)    Eq. 4, Eq. 8             ``parallel``, ``shared-keys`` (`shared_keys`), ``chunked``,
                                          ``chunked-lean`` (`chunked_lean`), ``chunked-triton``
                                          (`chunked_triton`, CUDA), ``recurrent``, ``sparse`` (`sparse`);
                                          `attention` holds the three forms
y = ReLU(z) x    Eq. 8, the gate          ``fused`` (`fused.relu_mul`; `fused.native_gate` where the compiled
                                          loops take the tensors) or ``plain``; dropout masks from
                                          ``host`` (`dropout`, CPU) or ``torch`` (``F.dropout``)
E y              Eq. 8, the read-in       per head, summed over the heads; ``sparse`` for one token
===============  =======================  ====================================================================

A forward pass asks `select` once, with the attention ``mode`` it was given (``parallel``, ``chunked``,
``recurrent`` or ``sparse``) and the circumstances of the pass; the returned `Kernels` then runs the
chosen implementations, and the layer's code names only the paper's operations.

The compiled loops (`native`, optional, CPU) are chosen by `select` for CPU passes where they were built, eager
or under ``torch.compile`` (which keeps them as operator calls, `fused`; not the one-token generation step);
whether they take a tensor is decided when it arrives (its dtype is autocast's: fp32 and bf16 are taken, other
dtypes run the PyTorch kernels above).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from bdh.errors import UserError

from ..names import MODES
from . import chunked_lean as _lean
from . import chunked_triton as _triton
from . import native
from .attention import causal_weights, chunked, parallel, recurrent
from .dropout import drop_mask
from .fused import native_gate, native_relu_rope, relu_mul
from .rope import rope_tables, rotate
from .shared_keys import shared_key_attention
from .sparse import sparse_attention, sparse_read_in


def compiling() -> bool:
    """Whether ``torch.compile`` is tracing: it fuses the plain expressions itself and has no complex kernels."""
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling())


def rope_impl(kind: str) -> str:
    """The rotation kernel for a positional scheme (see `rope.rotate`)."""
    if kind == "none":
        return "none"
    if compiling():
        return "plain"
    return "complex" if kind == "rope" else "fused"


def apply_rope(kind: str, v: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None) -> torch.Tensor:
    """Rotate v (..., T, N) by the tables of ``kind`` with the kernel `rope_impl` picks."""
    return rotate(kind, rope_impl(kind), v, cos, sin)


@dataclass(frozen=True)
class Pass:
    """What a forward pass is asked to do; `select` turns it into kernel choices.

    Attributes:
        mode: the attention form (one of `MODES`).
        start, length: the absolute position of the first token and the number of tokens.
        carried: a recurrent state is given; need_state: the state after the block is wanted.
        inplace: update the given state in place (inference, no autograd).
        detach_kv: cut the gradient through keys and values (paper section 7.2).
        hooked: a hook reads the activations (y must be the gate's output before dropout).
    """

    mode: str
    start: int
    length: int
    carried: bool = False
    need_state: bool = False
    inplace: bool = False
    detach_kv: bool = False
    hooked: bool = False


@dataclass(frozen=True)
class Kernels:
    """The kernels chosen for one forward pass (by `select`), with the tables they share across layers."""

    kind: str  # the positional scheme
    rope: str  # the rotation kernel (`rope_impl`)
    tables: tuple[torch.Tensor | None, torch.Tensor | None]  # cos, sin at the pass's positions
    attention: str  # the attention kernel
    log_u: torch.Tensor | None
    causal: bool
    chunk_size: int
    need_state: bool
    inplace: bool
    detach_kv: bool
    gate_impl: str  # ``fused`` or ``plain``
    dropout: float
    masks: str  # ``none``, ``host`` or ``torch``
    native: bool = False  # the compiled loops (`native`) run the element-wise steps they can take
    half_tables: tuple[torch.Tensor, torch.Tensor] | None = None  # cos, sin per pair (`native.half_tables`)
    _memo: dict = field(default_factory=dict, repr=False, compare=False)  # what every layer of the pass shares

    def at(self, tables: tuple[torch.Tensor, torch.Tensor]) -> Kernels:
        """The same kernels at other positions: ``tables`` (cos, sin) replace the pass's, and so does the
        compiled loops' per-pair copy of them (a step that moves along the sequence, `bdh.model.decoder`)."""
        half = native.half_tables(self.kind, *tables) if self.half_tables is not None else None
        return replace(self, tables=tables, half_tables=half, _memo={})

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        """R x: the RoPE rotation at the pass's positions."""
        return rotate(self.kind, self.rope, x, *self.tables)

    def fire(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, R x) for h = Dx v: the neuron activations x = ReLU(h) and their rotation (keys = queries)."""
        if self.native and self.half_tables is not None and native.supports(h):
            return native_relu_rope(h, *self.half_tables, self.kind)
        x = F.relu(h)
        return x, self.rotate(x)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rho: torch.Tensor | None):
        """(a, rho after the block): linear attention of queries q and keys k over values v, from state rho.

        BDH's keys are its queries (pass the same tensor for both); the ``separate_keys`` ablation passes its own.
        """
        if self.detach_kv:
            k, v = k.detach(), v.detach()
        a, rho_next = self._attention(q, k, v, rho)
        if self.inplace and rho_next is not rho:
            rho.copy_(rho_next)
            rho_next = rho
        return a, rho_next

    def _attention(self, q, k, v, rho):
        kind, log_u, need = self.attention, self.log_u, self.need_state
        if kind == "shared-keys" and k is q:
            return shared_key_attention(q, v, self._score_weights(q)), None
        if kind == "shared-keys":  # keys of their own (or detached): the plain parallel form
            return parallel(q, k, v, log_u=log_u, state=rho, need_state=need, causal=self.causal)
        if kind == "parallel":
            return parallel(q, k, v, log_u=log_u, state=rho, need_state=need, causal=self.causal)
        if kind == "chunked-triton":
            return _triton.chunked_triton(q, k, v, chunk_size=self.chunk_size, log_u=log_u, state=rho, need_state=need)
        if kind == "chunked-lean":
            out, rho_next = _lean.chunked_lean(q, k, v, chunk_size=self.chunk_size, log_u=log_u, state=rho)
            return out, (rho_next if need else None)
        if kind == "chunked":
            return chunked(q, k, v, chunk_size=self.chunk_size, log_u=log_u, state=rho, need_state=need)
        if kind == "recurrent" and self._native_step(q, k, rho):
            u = None if log_u is None else torch.exp(log_u)
            return native.recurrent_step(q, k, v, rho, u), rho
        if kind == "recurrent":
            return recurrent(q, k, v, log_u=log_u, state=rho, need_state=need, inplace=self.inplace)
        return sparse_attention(q, v, rho, k), rho

    def _score_weights(self, q: torch.Tensor) -> torch.Tensor | None:
        """`causal_weights` for q's length and dtype, computed once per pass (every layer has the same)."""
        key = ("W", q.shape[2], q.dtype, q.device)
        if key not in self._memo:
            self._memo[key] = causal_weights(self.log_u, q.shape[2], self.causal, q.device, q.dtype)
        return self._memo[key]

    def _per_head(self, E: torch.Tensor, H: int, N: int) -> torch.Tensor:
        """E (n, D) as (H, N, D). Without autograd under autocast it is cast once per pass (autocast would cast
        this view again at every layer: n D numbers, as many as a layer's state at batch 1)."""
        W = E.view(H, N, E.shape[1])
        if torch.is_grad_enabled() or not torch.is_autocast_enabled(E.device.type):
            return W
        low = torch.get_autocast_dtype(E.device.type)
        key = ("E", low, E.data_ptr())  # one cast per weight set: layers of their own (unshared_layers) differ
        if key not in self._memo:
            self._memo[key] = W.to(low)
        return self._memo[key]

    def _native_step(self, q: torch.Tensor, k: torch.Tensor, rho: torch.Tensor | None) -> bool:
        """Whether the compiled loops run this recurrent pass: one token, a state updated in place in fp32."""
        return (
            self.native
            and not compiling()  # a ctypes call of its own, not an operator
            and self.inplace
            and q.shape[2] == 1
            and rho is not None
            and rho.dtype == torch.float32
            and rho.is_contiguous()
            and native.supports(q, k)
        )

    def gate(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """y = ReLU(z) * x; with host dropout masks, the dropped entries are zeroed here (unscaled)."""
        if self.native:  # host masks drawn inside the compiled loop
            y = native_gate(z, x, self.dropout if self.masks == "host" else 0.0)
            if y is not None:
                return y
        if self.masks == "host":
            return relu_mul(z, x, drop_mask(z.shape, self.dropout, dtype=z.dtype))
        return F.relu(z) * x if self.gate_impl == "plain" else relu_mul(z, x)

    def activate(self, z: torch.Tensor) -> torch.Tensor:
        """y = ReLU(z), the ``ungated`` ablation of `gate`; host dropout masks zero the dropped entries here too."""
        if self.masks == "host":
            return F.relu(z).masked_fill(drop_mask(z.shape, self.dropout, dtype=z.dtype).dropped(), 0)
        return F.relu(z)

    def heads(self, a: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
        """a @ W per head: a (B, 1 or H, T, D) and W (H, D, N) -> (B, H, T, N) (Dx v and Dy LN(a) of Eq. 8).

        torch.matmul broadcasts W over the batch by copying it B times (B h D N numbers); when a sequence has
        fewer tokens than D (generation, short prompts) the batch is folded into the rows instead, one (B T) x D
        product per head, and the result (B h T N numbers, fewer) copied once into the (B, H, T, N) layout.
        """
        if not _fold(a.shape[0], a.shape[2], a.shape[3]):
            return a @ W
        B, Ha, T, D = a.shape
        H, N = W.shape[0], W.shape[2]
        rows = a.transpose(0, 1).reshape(Ha, B * T, D)
        return (rows @ W).view(H, B, T, N).transpose(0, 1).contiguous()

    def read_in(self, y: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
        """E y for y (B, H, T, N) and E (n, D): one N x D product per head, summed over heads -> (B, 1, T, D).

        The same sum as ``y.transpose(1, 2).reshape(B, 1, T, n) @ E``, without copying y into that layout.
        Dropout: with ``torch`` masks it is applied to y here; with ``host`` masks (applied by `gate`)
        its 1 / (1 - p) scales the product, a tensor n / D times smaller than y.
        """
        if self.attention == "sparse":
            return sparse_read_in(y, E)
        if self.masks == "torch":
            y = F.dropout(y, self.dropout, training=True)
        H, N = y.shape[1], y.shape[3]
        B, T = y.shape[0], y.shape[2]
        W = self._per_head(E, H, N)
        if _fold(B, T, W.shape[2]):  # (H, B T, N) @ (H, N, D), summed over the heads
            e = (y.transpose(0, 1).reshape(H, B * T, N) @ W).sum(dim=0).view(B, 1, T, -1)
        else:
            e = (y @ W).sum(dim=1, keepdim=True)
        return e * (1.0 / (1.0 - self.dropout)) if self.masks == "host" else e


def use_triton(device: torch.device) -> bool:
    """Whether the chunked form runs the fused Triton kernels (`chunked_triton`): on CUDA, with Triton importable
    and not turned off (``BDH_TRITON=0``), outside ``torch.compile`` (which keeps the lean form it can trace)."""
    return device.type == "cuda" and not compiling() and _triton.available()


def _fold(batch: int, T: int, D: int) -> bool:
    """Whether a per-head product with an n x D weight (Dx, Dy, E) runs with the batch folded into its rows: a
    batch, and T < D, so that copying the N-wide activations (B h T N numbers) costs less than copying the
    weight B times (B h D N)."""
    return batch > 1 and T < D


def _attention_kernel(p: Pass, causal: bool, log_u, autograd: bool, device: torch.device) -> str:
    if p.mode not in MODES:
        raise UserError(f"BDH: mode must be one of {', '.join(MODES)}; got {p.mode!r}")
    if not causal and p.mode != "parallel":
        raise UserError(f"BDH: bidirectional attention (causal=false) needs mode 'parallel', got {p.mode!r}")
    if p.inplace and (not p.carried or torch.is_grad_enabled()):
        raise UserError("BDH: an in-place state update needs a state and torch.no_grad()")
    if p.mode == "sparse" and not (p.inplace and p.length == 1 and log_u is None):
        raise UserError("BDH: mode 'sparse' runs one token of one sequence in place, on a model without damping")
    if p.mode == "parallel" and autograd and not (p.carried or p.need_state or p.detach_kv):
        return "shared-keys"  # keys are the queries: the same values, one T x T x N product less in backward
    if p.mode == "chunked" and use_triton(device):
        return "chunked-triton"  # the same values; fused kernels, state tiles in registers (CUDA)
    if p.mode == "chunked" and autograd:
        return "chunked-lean"  # the same values; backward recomputes chunk states instead of keeping them
    return p.mode


def select(
    p: Pass,
    *,
    positional: str,
    freqs: torch.Tensor,
    log_u,
    causal: bool,
    chunk_size: int,
    dropout: float,
    dropout_rng: str,
    training: bool,
    autograd: bool,
    device: torch.device,
) -> Kernels:
    """Choose the kernels of one forward pass; the only place where implementations are chosen.

    ``autograd``: gradients will flow to the weights. The chunked form runs the fused Triton kernels on CUDA
    (`use_triton`), elsewhere the lean autograd form in training and the plain form otherwise. Under
    ``torch.compile`` the gate and the rotation are the plain expressions, which inductor fuses itself. Dropout
    masks come from the fast host generator (`dropout.drop_mask`) for an eager CPU training pass with
    ``dropout_rng="auto"`` and no hook, from ``F.dropout`` for other training passes, and not at all in eval
    mode. The compiled loops (`native`) for a CPU pass where they are built, and with them the host masks under
    ``torch.compile`` too (drawn inside the gate's loop).
    """
    kind = positional
    tables = rope_tables(kind, freqs, p.start, p.length) if kind != "none" else (None, None)
    fast = device.type == "cpu" and native.available()  # operators torch.compile keeps as calls (`fused`)
    masks = "none"
    if training and dropout > 0:
        host = dropout_rng == "auto" and device.type == "cpu" and not p.hooked and (fast or not compiling())
        masks = "host" if host else "torch"
    return Kernels(
        kind=kind,
        rope=rope_impl(kind),
        tables=tables,
        attention=_attention_kernel(p, causal, log_u, autograd, device),
        log_u=log_u,
        causal=causal,
        chunk_size=chunk_size,
        need_state=p.need_state,
        inplace=p.inplace,
        detach_kv=p.detach_kv,
        gate_impl="plain" if compiling() else "fused",
        dropout=dropout,
        masks=masks,
        native=fast,
        half_tables=native.half_tables(kind, *tables) if fast and kind != "none" else None,
    )
