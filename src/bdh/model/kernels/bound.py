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

from .choice import Choice
from .cpu import native
from .cpu.ops import native_gate, native_relu_rope
from .pytorch import chunked_lean as _lean
from .pytorch.attention import causal_weights, chunked, parallel, recurrent
from .pytorch.dropout import drop_mask
from .pytorch.fused import relu_mul
from .pytorch.rope import rotation
from .pytorch.shared_keys import shared_key_attention
from .pytorch.sparse import sparse_attention, sparse_read_in
from .pytorch.token_rules import FORMS as _TOKEN_FORMS
from .triton import chunked as _triton

Tensor = torch.Tensor
#: the one signature of every attention kernel of a pass: (queries, keys, values, state) -> (a, state after)
Attention = Callable[[Tensor, Tensor, Tensor, "Tensor | None"], "tuple[Tensor, Tensor | None]"]


@dataclass(frozen=True, eq=False)
class Kernels:
    """The kernels of one forward pass, chosen by `select` and bound to the pass: every step a callable that chooses
    nothing when called.

    Attributes:
        fire: h = Dx v -> (x, R x), the activations and their rotation (keys = queries).
        attend: (q, k, v, rho) -> (a, rho after the block), linear attention (`Attention`); BDH passes the same
            tensor as q and k, ``separate_keys`` its own keys; the ``gated`` and ``delta`` rules take (log_g, beta)
            after rho.
        gate: (z, x) -> y = ReLU(z) * x; host dropout masks zero the dropped entries here (unscaled).
        activate: z -> ReLU(z), the ``ungated`` ablation of ``gate``.
        heads: (a, W) -> a @ W per head, (B, H, T, N) (Dx v and Dy LN(a) of Eq. 8; `_heads`).
        read_in: (y, E) -> E y summed over the heads, (B, 1, T, D); ``torch`` masks applied to y here, the 1 / (1 - p)
            of ``host`` masks to the product, n / D times smaller than y."""

    choice: Choice
    tables: tuple[Tensor | None, Tensor | None] = field(repr=False)
    rotate: Callable[[Tensor], Tensor] = field(repr=False)
    fire: Callable[[Tensor], tuple[Tensor, Tensor]] = field(repr=False)
    attend: Attention = field(repr=False)
    gate: Callable[[Tensor, Tensor], Tensor] = field(repr=False)
    activate: Callable[[Tensor], Tensor] = field(repr=False)
    heads: Callable[[Tensor, Tensor], Tensor] = field(repr=False)
    read_in: Callable[[Tensor, Tensor], Tensor] = field(repr=False)

    def at(self, tables: tuple[Tensor, Tensor]) -> Kernels:
        """The same kernels at other positions: ``tables`` (cos, sin) replace the pass's (a step that moves along
        the sequence, `bdh.model.decoder`); the compiled loops' per-pair copy of them is made again."""
        return bind(self.choice, tables)


def bind(c: Choice, tables: tuple[Tensor | None, Tensor | None]) -> Kernels:
    """The kernels named by ``c``, bound to the pass and to the RoPE ``tables`` (cos, sin; None without RoPE)."""
    rotate = _rotate(c, tables)
    return Kernels(
        choice=c,
        tables=tables,
        rotate=rotate,
        fire=_fire(c, tables, rotate),
        attend=_attend(c),
        gate=_gate(c),
        activate=_activate(c),
        heads=_heads(c),
        read_in=_read_in(c),
    )


# ---------------------------------------------------------------------- R x and x = ReLU(h)
def _rotate(c: Choice, tables: tuple[Tensor | None, Tensor | None]) -> Callable[[Tensor], Tensor]:
    if c.rope == "none":
        return _same
    return partial(rotation(c.positional, c.rope), cos=tables[0], sin=tables[1])


def _same(x: Tensor) -> Tensor:
    return x


def _fire(c: Choice, tables, rotate: Callable[[Tensor], Tensor]) -> Callable[[Tensor], tuple[Tensor, Tensor]]:
    def fire(h: Tensor) -> tuple[Tensor, Tensor]:
        x = F.relu(h)
        return x, rotate(x)

    if c.fire != "native":
        return fire
    cos, sin, kind = *native.half_tables(c.positional, *tables), c.positional

    def fire_native(h: Tensor) -> tuple[Tensor, Tensor]:
        return native_relu_rope(h, cos, sin, kind) if native.supports(h) else fire(h)  # autocast's dtype decides

    return fire_native


# ---------------------------------------------------------------------- attention
def _attend(c: Choice) -> Attention:
    """The attention kernel of ``c`` with the pass's options: keys and values detached, the state updated in place."""
    attention = _attention(c)
    if not (c.detach_kv or c.inplace):
        return attention
    detach, inplace = c.detach_kv, c.inplace

    def attend(q: Tensor, k: Tensor, v: Tensor, rho: Tensor | None, *rule) -> tuple[Tensor, Tensor | None]:
        if detach:
            k, v = k.detach(), v.detach()
        a, rho_next = attention(q, k, v, rho, *rule)
        if inplace and rho_next is not rho:
            rho.copy_(rho_next)
            rho_next = rho
        return a, rho_next

    return attend


def _attention(c: Choice) -> Attention:
    """The attention kernel named ``c.attention`` as one function (q, k, v, rho) -> (a, rho after)."""
    log_u, need = c.log_u, c.need_state
    name = c.attention
    if name.startswith(("gated-", "delta-")):
        return _token_rule(_TOKEN_FORMS[name.split("-", 1)[1]], c)
    if name in ("parallel", "shared-keys"):
        plain = _stateful(parallel, log_u=log_u, need_state=need, causal=c.causal)
        return _shared_keys(plain, log_u, c.causal) if name == "shared-keys" else plain
    if name == "chunked-triton":
        return _stateful(_triton.chunked_triton, chunk_size=c.chunk_size, log_u=log_u, need_state=need)
    if name == "chunked-lean":
        return partial(_chunked_lean, chunk_size=c.chunk_size, log_u=log_u, need_state=need)
    if name == "chunked":
        return _stateful(chunked, chunk_size=c.chunk_size, log_u=log_u, need_state=need)
    if name == "sparse":
        return _sparse
    plain = _stateful(recurrent, log_u=log_u, need_state=need, inplace=c.inplace)
    return _recurrent_native(plain, log_u) if name == "recurrent-native" else plain


def _stateful(form: Callable, **options) -> Attention:
    """A form of `attention` (its state a keyword) as an `Attention`, bound to ``options``."""

    def attention(q: Tensor, k: Tensor, v: Tensor, rho: Tensor | None) -> tuple[Tensor, Tensor | None]:
        return form(q, k, v, state=rho, **options)

    return attention


def _token_rule(form: Callable, c: Choice) -> Callable:
    """A form of `pytorch.token_rules` as (q, k, v, rho, log_g, beta) -> (a, rho after)."""
    options = {"chunk_size": c.chunk_size} if form is _TOKEN_FORMS["chunked"] else {}

    def attention(q: Tensor, k: Tensor, v: Tensor, rho: Tensor | None, log_g, beta) -> tuple[Tensor, Tensor | None]:
        return form(q, k, v, log_g=log_g, beta=beta, state=rho, need_state=c.need_state, **options)

    return attention


def _chunked_lean(q, k, v, rho, *, chunk_size: int, log_u, need_state: bool) -> tuple[Tensor, Tensor | None]:
    out, rho_next = _lean.chunked_lean(q, k, v, chunk_size=chunk_size, log_u=log_u, state=rho)
    return out, (rho_next if need_state else None)


def _sparse(q: Tensor, k: Tensor, v: Tensor, rho: Tensor) -> tuple[Tensor, Tensor]:
    return sparse_attention(q, v, rho, k), rho


def _shared_keys(plain: Attention, log_u: Tensor | None, causal: bool) -> Attention:
    """`shared_key_attention` where the keys are the queries (no state in, none out: `select` checks); keys of
    their own (``separate_keys``) take the plain parallel form. The weights W of the T x T scores are computed
    once per pass and dtype (every layer has the same)."""
    weights: dict = {}

    def attention(q: Tensor, k: Tensor, v: Tensor, rho: Tensor | None) -> tuple[Tensor, None]:
        if k is not q:
            return plain(q, k, v, rho)
        key = (q.shape[2], q.dtype, q.device)
        if key not in weights:
            weights[key] = causal_weights(log_u, q.shape[2], causal, q.device, q.dtype)
        return shared_key_attention(q, v, weights[key]), None

    return attention


def _recurrent_native(plain: Attention, log_u: Tensor | None) -> Attention:
    """The compiled recurrent step (read and write in one pass over the state) where it takes the tensors: one
    token, a contiguous fp32 state updated in place (`select` checks the in place), q and k of a supported dtype."""
    u = None if log_u is None else torch.exp(log_u)

    def attention(q: Tensor, k: Tensor, v: Tensor, rho: Tensor) -> tuple[Tensor, Tensor | None]:
        if q.shape[2] == 1 and rho.dtype == torch.float32 and rho.is_contiguous() and native.supports(q, k):
            return native.recurrent_step(q, k, v, rho, u), rho
        return plain(q, k, v, rho)

    return attention


# ---------------------------------------------------------------------- the gate and E y
def _gate(c: Choice) -> Callable[[Tensor, Tensor], Tensor]:
    """y = ReLU(z) * x by the kernel ``c.gate``, the dropped entries of host masks zeroed (unscaled)."""
    if c.gate == "plain":
        return _plain_gate
    p = c.dropout if c.masks == "host" else 0.0
    fused = partial(_masked_gate, p=p) if c.masks == "host" else relu_mul
    if c.gate != "native":
        return fused

    def gate(z: Tensor, x: Tensor) -> Tensor:
        y = native_gate(z, x, p)  # host masks drawn inside the compiled loop; None: the loop cannot take them
        return fused(z, x) if y is None else y

    return gate


def _plain_gate(z: Tensor, x: Tensor) -> Tensor:
    return F.relu(z) * x


def _masked_gate(z: Tensor, x: Tensor, p: float) -> Tensor:
    return relu_mul(z, x, drop_mask(z.shape, p, dtype=z.dtype))


def _activate(c: Choice) -> Callable[[Tensor], Tensor]:
    """y = ReLU(z) (``ungated``); host masks zero the dropped entries here too."""
    if c.masks != "host":
        return F.relu
    p = c.dropout

    def activate(z: Tensor) -> Tensor:
        return F.relu(z).masked_fill(drop_mask(z.shape, p, dtype=z.dtype).dropped(), 0)

    return activate


def _heads(c: Choice) -> Callable[[Tensor, Tensor], Tensor]:
    """a @ W per head (`Kernels.heads`). torch.matmul would copy W B times and sum its gradient over B products of a
    T-long contraction; folded (a batch shorter than D) or with the ``heads-outer`` layout, the batch goes into the
    rows of one (B T) x D product per head, kept in (H, B, T, N) storage that `_read_in` and the gate read without a
    copy. A shared input (Dx v) keeps the broadcast product, which measured as fast."""
    outer = c.layout == "heads-outer"

    def heads(a: Tensor, W: Tensor) -> Tensor:
        B, Ha, T, D = a.shape
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
    scale = 1.0 / (1.0 - p) if masks == "host" else None

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
