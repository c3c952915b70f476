"""The chosen kernels bound to one pass: `bind` turns a `Choice` (named by `bdh.model.kernels.choice.choose`)
into `Kernels`, the callables `BDH.layer` calls, so that a call chooses nothing (docs/model.md).

Each factory below makes one step's callable from the kernels of ``pytorch/``, ``cpu/`` and ``triton/``; what only
the tensors can tell (a dtype the compiled loops do not take, a step of more than one token) is decided in the
callable, when they arrive.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn.functional as F

from ..names import ATTENTION_FORMS
from .choice import Choice
from .cpu import native
from .cpu.ops import native_gate, native_relu_rope
from .pytorch.attention import causal_weights, chunked, parallel, recurrent
from .pytorch.chunked_lean import chunked_lean
from .pytorch.delta_ut import delta_ut
from .pytorch.dropout import drop_mask
from .pytorch.fused import relu_mul
from .pytorch.per_head import per_head
from .pytorch.rope import rotation
from .pytorch.shared_keys import shared_key_attention
from .pytorch.sparse import sparse_attention, sparse_read_in
from .pytorch.state_rules import FORMS as STATE_RULE_FORMS
from .triton import chunked as _triton
from .triton import delta as _triton_delta
from .triton import encode as _triton_encode
from .triton import encode_step as _triton_encode_step
from .triton import gate as _triton_gate
from .triton import read_in as _triton_read_in
from .triton import read_in_step as _triton_read_in_step
from .triton import step as _triton_step

Tensor = torch.Tensor
#: every attention kernel of a pass: (queries, keys, values, *, state, **gates) -> (a, state after)
Attention = Callable[..., "tuple[Tensor, Tensor | None]"]


@dataclass(frozen=True, eq=False)
class Kernels:
    """The kernels of one forward pass, chosen by `choose` and bound to the pass: every step a callable that chooses
    nothing when called."""

    choice: Choice
    tables: tuple[Tensor | None, Tensor | None] = field(repr=False)
    rotate: Callable[[Tensor], Tensor] = field(repr=False)
    # h = Dx v -> (x, R x), the activations and their rotation (keys = queries).
    relu_rope: Callable[[Tensor], tuple[Tensor, Tensor]] = field(repr=False)
    # (v, W) -> (x, R x) with x = ReLU(v W) per head: ``relu_rope(heads(v, W))``, or the ReLU in the matmul's epilogue
    # (``triton``, `triton.encode`).
    encode: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] = field(repr=False)
    # (q, k, v, state=rho, **gates) -> (a, rho after the block), linear attention (`Attention`, the kernel `ATTENTION`
    # names); BDH passes the same tensor as q and k, ``separate_keys`` its own keys; the gates are the state rule's
    # (``log_g``, ``beta`` of the ``gated`` and ``delta`` rules; none for Eq. 8's).
    attend: Attention = field(repr=False)
    # (z, x) -> y = ReLU(z) * x; ``in-gate`` dropout masks zero the dropped entries here (unscaled).
    gate: Callable[[Tensor, Tensor], Tensor] = field(repr=False)
    activate: Callable[[Tensor], Tensor] = field(repr=False)  # z -> ReLU(z), the ``ungated`` ablation of ``gate``.
    # (a, W) -> a @ W per head, (B, H, T, N) (Dx v and Dy LN(a) of Eq. 8; `_heads`).
    heads: Callable[[Tensor, Tensor], Tensor] = field(repr=False)
    # (y, E) -> E y summed over the heads, (B, 1, T, D); ``torch`` masks applied to y here, the 1 / (1 - p) of
    # ``in-gate`` masks to the product, n / D times smaller than y.
    read_in: Callable[[Tensor, Tensor], Tensor] = field(repr=False)
    # (z, x, E) -> read_in(gate(z, x), E) with y formed inside the product (``gated-triton``, `triton.read_in`; the
    # pass's dropout drawn there; ``step-triton``: one token, no dropout, `triton.read_in_step`), or None: the layer
    # calls ``gate``, then ``read_in``.
    gated_read_in: Callable[[Tensor, Tensor, Tensor], Tensor] | None = field(repr=False)

    def at(self, tables: tuple[Tensor, Tensor]) -> Kernels:
        """The same kernels at other positions: ``tables`` (cos, sin) replace the pass's (a step that moves along
        the sequence, `bdh.model.decoder`); the compiled loops' per-pair copy of them is made again."""
        return bind(self.choice, tables)


def bind(c: Choice, tables: tuple[Tensor | None, Tensor | None]) -> Kernels:
    """The kernels named by ``c``, bound to the pass and to the RoPE ``tables`` (cos, sin; None without RoPE)."""
    rotate = _rotate(c, tables)
    relu_rope, heads, gate, read_in = _relu_rope(c, tables, rotate), _heads(c), _gate(c), _read_in(c)
    return Kernels(
        choice=c,
        tables=tables,
        rotate=rotate,
        relu_rope=relu_rope,
        encode=_encode(c, heads, relu_rope, rotate, tables),
        attend=_pass_options(ATTENTION[c.attention](c), c),  # the table's name -> the kernel
        gate=gate,
        activate=_activate(c),
        heads=heads,
        read_in=read_in,
        gated_read_in=_gated_read_in(c, gate, read_in),
    )


# ---------------------------------------------------------------------- R x and x = ReLU(h)
def _rotate(c: Choice, tables: tuple[Tensor | None, Tensor | None]) -> Callable[[Tensor], Tensor]:
    if c.rope == "none":
        return _same
    return partial(rotation(c.positional, c.rope), cos=tables[0], sin=tables[1])


def _same(x: Tensor) -> Tensor:
    return x


def _relu_rope(c: Choice, tables, rotate: Callable[[Tensor], Tensor]) -> Callable[[Tensor], tuple[Tensor, Tensor]]:
    def relu_rope(h: Tensor) -> tuple[Tensor, Tensor]:
        x = F.relu(h)
        return x, rotate(x)

    if c.relu_rope != "native":
        return relu_rope
    cos, sin, kind = *native.half_tables(c.positional, *tables), c.positional

    def relu_rope_native(h: Tensor) -> tuple[Tensor, Tensor]:
        return native_relu_rope(h, cos, sin, kind) if native.supports(h) else relu_rope(h)  # autocast's dtype decides

    return relu_rope_native


def _encode(c: Choice, heads, relu_rope, rotate, tables) -> Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """(v, W) -> (x, R x), x = ReLU(v W) per head (`Kernels.encode`); ``triton`` where the kernel takes the tensors
    (`triton.encode.takes`; with ``rope``, R x in its epilogue where `triton.encode.takes_rope`), ``step-triton``
    (`_encode_step`), else the per-head product and ``relu_rope``."""

    def encode(v: Tensor, W: Tensor) -> tuple[Tensor, Tensor]:
        return relu_rope(heads(v, W))

    if c.encode == "step-triton":
        return _encode_step(c, encode, rotate, tables)
    if c.encode != "triton":
        return encode

    # the official RoPE's pair tables (T, N / 2), made once a pass: the kernels read half the bytes of (T, N)
    cos, sin = native.half_tables("rope", *tables) if c.positional == "rope" else (None, None)

    def encode_triton(v: Tensor, W: Tensor) -> tuple[Tensor, Tensor]:
        if not _triton_encode.takes(v, W):
            return encode(v, W)
        if _triton_encode.takes_rope(v, W, cos, sin):
            return _triton_encode.encode_rope_triton(v, W, cos, sin)
        x = _triton_encode.encode_triton(v, W)
        return x, rotate(x)

    return encode_triton


def _encode_step(c: Choice, encode, rotate, tables) -> Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """The generation step's encoder: x and its interleaved RoPE (``rope``) in one kernel where it takes the tensors
    (`triton.encode_step.takes`: one token, no autograd); other rotations (or none) after `triton.encode`'s kernel;
    else ``encode``."""
    cos, sin = tables if c.positional == "rope" else (None, None)

    def encode_step(v: Tensor, W: Tensor) -> tuple[Tensor, Tensor]:
        if _triton_encode_step.takes(v, W, cos, sin):
            return _triton_encode_step.encode_step_triton(v, W, cos, sin)
        if c.positional == "rope" or not _triton_encode.takes(v, W):
            return encode(v, W)
        x = _triton_encode.encode_triton(v, W)
        return x, rotate(x)

    return encode_step


# ---------------------------------------------------------------------- attention
def _pass_options(attention: Attention, c: Choice) -> Attention:
    """An attention kernel with the pass's options, where it has any: keys and values detached, the state updated
    in place."""
    if not (c.detach_kv or c.inplace):
        return attention
    detach, inplace = c.detach_kv, c.inplace

    def attend(q: Tensor, k: Tensor, v: Tensor, *, state: Tensor | None, **gates) -> tuple[Tensor, Tensor | None]:
        if detach:
            k, v = k.detach(), v.detach()
        a, after = attention(q, k, v, state=state, **gates)
        if inplace and after is not state:
            state.copy_(after)
            after = state
        return a, after

    return attend


def _parallel(c: Choice) -> Attention:
    return partial(parallel, log_u=c.log_u, need_state=c.need_state, causal=c.causal, mask=c.mask)


def _recurrent(c: Choice) -> Attention:
    return partial(recurrent, log_u=c.log_u, need_state=c.need_state, inplace=c.inplace)


def _chunked(form: Callable) -> Callable[[Choice], Attention]:
    return lambda c: partial(form, chunk_size=c.chunk_size, log_u=c.log_u, need_state=c.need_state)


def _state_rule(form: str) -> Callable[[Choice], Attention]:
    """A form of the state rules (`pytorch.state_rules.FORMS`), called with their gates (``log_g``, ``beta``)."""

    def make(c: Choice) -> Attention:
        options = {"chunk_size": c.chunk_size} if form == "chunked" else {}
        return partial(STATE_RULE_FORMS[form], need_state=c.need_state, **options)

    return make


#: every attention kernel by the name `choose` gives it (`Choice.attention`): the pass's choice -> the kernel
#: bound to it, called (q, k, v, state=rho, **gates) -> (a, rho after) with the state rule's gates
#: (`bdh.model.state_rules`). A new kernel: its row in `choose` and its entry here.
ATTENTION: dict[str, Callable[[Choice], Attention]] = {
    "parallel": _parallel,  # pytorch/attention.py
    "shared-keys": lambda c: _shared_keys(_parallel(c), c.log_u, c.causal, c.mask),  # pytorch/shared_keys.py
    "chunked": _chunked(chunked),  # pytorch/attention.py
    "chunked-lean": _chunked(chunked_lean),  # pytorch/chunked_lean.py
    "chunked-triton": _chunked(_triton.chunked_triton),  # triton/chunked.py
    "recurrent": _recurrent,  # pytorch/attention.py
    "recurrent-native": lambda c: _recurrent_native(_recurrent(c), c.log_u),  # cpu/native.py
    "recurrent-triton": lambda c: _recurrent_triton(_recurrent(c), c.log_u),  # triton/step.py
    "sparse": lambda c: _sparse,  # pytorch/sparse.py
    **{f"{rule}-{form}": _state_rule(form) for rule in ("gated", "delta") for form in ATTENTION_FORMS},
    "delta-chunked": lambda c: _delta_ut(c),  # pytorch/delta_ut.py
    "delta-parallel-ut": lambda c: _delta_ut(c, parallel=True),  # pytorch/delta_ut.py
    "delta-native": lambda c: _delta_native(_delta_ut(c), c),  # cpu/native.py
    "delta-chunked-triton": lambda c: partial(  # triton/delta.py
        _triton_delta.delta_chunked_triton, chunk_size=c.chunk_size, need_state=c.need_state
    ),
}


def _sparse(q: Tensor, k: Tensor, v: Tensor, *, state: Tensor) -> tuple[Tensor, Tensor]:
    return sparse_attention(q, v, state, k), state


def _shared_keys(plain: Attention, log_u: Tensor | None, causal: bool, mask: Tensor | None = None) -> Attention:
    """`shared_key_attention` where the keys are the queries (no state in, none out: `choose` checks); keys of
    their own (``separate_keys``) take the plain parallel form. The weights W of the T x T scores (zero outside
    ``mask``) are computed once per pass and dtype (every layer has the same)."""
    weights: dict = {}

    def attention(q: Tensor, k: Tensor, v: Tensor, *, state: Tensor | None) -> tuple[Tensor, Tensor | None]:
        if k is not q:
            return plain(q, k, v, state=state)
        key = (q.shape[2], q.dtype, q.device)
        if key not in weights:
            weights[key] = causal_weights(log_u, q.shape[2], causal, q.device, q.dtype, mask)
        return shared_key_attention(q, v, weights[key]), None

    return attention


def _recurrent_native(plain: Attention, log_u: Tensor | None) -> Attention:
    """The compiled recurrent step (read and write in one pass over the state) where it takes the tensors: one
    token, a contiguous fp32 state updated in place (`choose` checks the in place), q and k of a supported dtype."""
    u = None if log_u is None else torch.exp(log_u)

    def attention(q: Tensor, k: Tensor, v: Tensor, *, state: Tensor) -> tuple[Tensor, Tensor | None]:
        if q.shape[2] == 1 and state.dtype == torch.float32 and state.is_contiguous() and native.supports(q, k):
            return native.recurrent_step(q, k, v, state, u), state
        return plain(q, k, v, state=state)

    return attention


def _recurrent_triton(plain: Attention, log_u: Tensor | None) -> Attention:
    """The generation step's Triton kernel (`triton.step`: the read and the write in one pass over the state) where it
    takes the tensors (`triton.step.takes`: one token, a contiguous fp32 state, no autograd), else ``plain``."""

    def attention(q: Tensor, k: Tensor, v: Tensor, *, state: Tensor) -> tuple[Tensor, Tensor | None]:
        if _triton_step.takes(q, state):
            return _triton_step.recurrent_step_triton(q, k, v, state=state, log_u=log_u), state
        return plain(q, k, v, state=state)

    return attention


def _delta_ut(c: Choice, parallel: bool = False) -> Attention:
    """The delta rule's UT form (the ``parallel`` and ``chunked`` modes; its chunk `delta_ut.ut_chunk`, at most the
    config's; ``parallel``: one block where `delta_ut.one_block` says so), the keys made from the queries where they
    are the unit queries (``query_keys``)."""
    return partial(
        delta_ut, chunk_size=c.chunk_size, need_state=c.need_state, query_keys=c.query_keys, parallel=parallel
    )


def _delta_native(ut: Attention, c: Choice) -> Attention:
    """The delta rule's compiled read (`native.delta_read`: token by token, one pass over the state a token) where
    it takes the tensors: no gradient wanted, q and k of one dtype the loops take, a fp32 state (zero where none is
    given), updated in place on an in-place pass, else in a copy; the UT form ``ut`` otherwise."""
    need_state, inplace = c.need_state, c.inplace

    def attention(q: Tensor, k: Tensor, v: Tensor, *, state: Tensor | None, log_g=None, beta=None):
        tensors = (q, k, v, state, log_g, beta)
        grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
        if grad or beta is None or not native.supports(q, k) or not (state is None or state.dtype == torch.float32):
            return ut(q, k, v, state=state, log_g=log_g, beta=beta)
        B, H, _, N = q.shape
        if state is None:
            S = torch.zeros(B, H, N, v.shape[-1], device=q.device)
        else:
            S = state if inplace and state.is_contiguous() else state.clone(memory_format=torch.contiguous_format)
        a = native.delta_read(q.contiguous(), k.contiguous(), v, beta, log_g, S)
        return a, (S if need_state else None)

    return attention


# ---------------------------------------------------------------------- the gate and E y
def _gate(c: Choice) -> Callable[[Tensor, Tensor], Tensor]:
    """y = ReLU(z) * x by the kernel ``c.gate``, the dropped entries of ``in-gate`` masks zeroed (unscaled)."""
    if c.gate == "plain":
        return _plain_gate
    p = c.dropout if c.masks == "in-gate" else 0.0
    if c.gate == "triton":
        return partial(_gate_triton, p=p)
    fused = partial(_masked_gate, p=p) if c.masks == "in-gate" else relu_mul
    if c.gate != "native":
        return fused

    def gate(z: Tensor, x: Tensor) -> Tensor:
        y = native_gate(z, x, p)  # the masks drawn inside the compiled loop; None: the loop cannot take them
        return fused(z, x) if y is None else y

    return gate


def _plain_gate(z: Tensor, x: Tensor) -> Tensor:
    return F.relu(z) * x


def _gate_triton(z: Tensor, x: Tensor, p: float) -> Tensor:
    """The Triton gate (its mask drawn inside) where it takes the tensors (one shape and dtype), else `relu_mul`."""
    if z.shape != x.shape or z.dtype != x.dtype:
        return _masked_gate(z, x, p) if p > 0 else relu_mul(z, x)
    return _triton_gate.gate_triton(z, x, p=p)


def _masked_gate(z: Tensor, x: Tensor, p: float) -> Tensor:
    return relu_mul(z, x, drop_mask(z.shape, p, dtype=z.dtype))


def _activate(c: Choice) -> Callable[[Tensor], Tensor]:
    """y = ReLU(z) (``ungated``); ``in-gate`` masks zero the dropped entries here too."""
    if c.masks != "in-gate":
        return F.relu
    p = c.dropout

    def activate(z: Tensor) -> Tensor:
        return F.relu(z).masked_fill(drop_mask(z.shape, p, dtype=z.dtype).dropped(), 0)

    return activate


def _heads(c: Choice) -> Callable[[Tensor, Tensor], Tensor]:
    """a @ W per head (`Kernels.heads`). torch.matmul would copy W B times and sum its gradient over B products of a
    T-long contraction; folded (a batch shorter than D) or with the ``heads-outer`` layout, the batch goes into the
    rows of one (B T) x D product per head, kept in (H, B, T, N) storage that `_read_in` and the gate read without a
    copy. A shared input (Dx v) keeps the broadcast product, which measured as fast. CUDA's training pass (``triton``
    encode) takes `per_head`: one product a head, W not copied, z in the (B, H, T, N) layout the Triton read-in
    reads."""
    outer, batched = c.layout == "heads-outer", c.encode == "triton"

    def heads(a: Tensor, W: Tensor) -> Tensor:
        B, Ha, T, D = a.shape
        if batched and B > 1:
            return per_head(a, W)
        if not (_fold(B, T, D) or (outer and Ha > 1)):
            return a @ W
        H, N = W.shape[0], W.shape[2]
        out = (a.transpose(0, 1).reshape(Ha, B * T, D) @ W).view(H, B, T, N).transpose(0, 1)
        return out if outer else out.contiguous()

    return heads


def _read_in(c: Choice) -> Callable[[Tensor, Tensor], Tensor]:
    """E y (`Kernels.read_in`): ``sparse`` for one token, else per head with the pass's dropout."""
    if c.read_in == "sparse":
        return sparse_read_in
    p, masks, casts, outer = c.dropout, c.masks, {}, c.layout == "heads-outer"
    scale = 1.0 / (1.0 - p) if masks == "in-gate" else None

    def read_in(y: Tensor, E: Tensor) -> Tensor:
        if masks == "torch":
            y = F.dropout(y, p, training=True)
        H, N = y.shape[1], y.shape[3]
        B, T = y.shape[0], y.shape[2]
        W = _per_head(E, H, N, casts)
        if outer or _fold(B, T, W.shape[2]):  # (H, B T, N) @ (H, N, D), summed over the heads
            e = (y.transpose(0, 1).reshape(H, B * T, N) @ W).sum(dim=0).view(B, 1, T, -1)
        else:
            e = (y @ W).sum(dim=1, keepdim=True)
        return e if scale is None else e * scale

    return read_in


def _gated_read_in(c: Choice, gate, read_in) -> Callable[[Tensor, Tensor, Tensor], Tensor] | None:
    """E (ReLU(z) * x) in one Triton product (``gated-triton``) where it takes the tensors, the pass's dropout
    (``torch`` masks included) drawn inside it; else ``read_in(gate(z, x), E)``. None for the other read-ins."""
    if c.read_in == "step-triton":
        return partial(_gated_read_in_step, gate=gate, read_in=read_in)
    if c.read_in != "gated-triton":
        return None
    p = 0.0 if c.masks == "none" else c.dropout

    def gated_read_in(z: Tensor, x: Tensor, E: Tensor) -> Tensor:
        if not _triton_read_in.takes(z, x, E):
            return read_in(gate(z, x), E)
        return _triton_read_in.gated_read_in_triton(z, x, E, p=p)

    return gated_read_in


def _gated_read_in_step(z: Tensor, x: Tensor, E: Tensor, gate, read_in) -> Tensor:
    """E (ReLU(z) * x) for one token in one Triton kernel (``step-triton``, no dropout: `choose` checks) where it takes
    the tensors (`triton.read_in_step.takes`), else ``read_in(gate(z, x), E)``."""
    if _triton_read_in_step.takes(z, x, E):
        return _triton_read_in_step.gated_read_in_step_triton(z, x, E)
    return read_in(gate(z, x), E)


def _per_head(E: Tensor, H: int, N: int, casts: dict) -> Tensor:
    """E (n, D) as (H, N, D). Without autograd under autocast it is cast once per pass (autocast would cast this
    view again at every layer: n D numbers, as many as a layer's state at batch 1); ``casts`` keeps the pass's."""
    W = E.view(H, N, E.shape[1])
    if torch.is_grad_enabled() or not torch.is_autocast_enabled(E.device.type):
        return W
    low = torch.get_autocast_dtype(E.device.type)
    key = (low, E.data_ptr())  # one cast per weight set: layers of their own (unshared_layers) differ
    if key not in casts:
        casts[key] = W.to(low)
    return casts[key]


def _fold(batch: int, T: int, D: int) -> bool:
    """Whether a per-head product with an n x D weight (Dx, Dy, E) runs with the batch folded into its rows: a
    batch, and T < D, so that copying the N-wide activations (B h T N numbers) costs less than copying the
    weight B times (B h D N)."""
    return batch > 1 and T < D
