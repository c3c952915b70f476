"""The kernels of BDH-GPU, by backend, and `select`: the one place that chooses among them (docs/model.md).

    choice.py       which kernel runs each step of a pass: `choose`, one table (read it to know what runs)
    bound.py        the chosen kernels bound to the pass: `bind` makes `Kernels`, the callables `BDH.layer` calls
    naive.py        the slow, obviously-correct references the kernels are tested against
    pytorch/        plain PyTorch, any device:
      attention.py    the paper's three forms of linear attention: parallel, chunked, recurrent (Eq. 4, Eq. 8)
      token_rules.py  the same three forms with a retention per token and the delta-rule write (ours)
      chunked_lean.py, shared_keys.py, sparse.py    faster forms of it (training, training, one-token steps)
      rope.py, fused.py, dropout.py                 RoPE, the gate and rotation in fewer passes, dropout masks
    cpu/            the compiled CPU loops, where setup.py built them (``BDH_NATIVE=0`` turns them off):
      _native.c, native.py, ops.py    the C loops, their ctypes binding, their PyTorch operators
    triton/         CUDA:
      chunked.py, chunked_jit.py      the chunked form as fused Triton kernels, and the kernels themselves

A new attention rule: its forms in ``pytorch/``, its term-by-term loop in naive.py, its rows in `choose` and its
branch in bound.py (CONTRIBUTING.md, "Kernels").
"""

from __future__ import annotations

import torch

from .bound import Attention, Kernels, bind
from .choice import Choice, Pass, choose, compiling, rope_impl, use_triton
from .pytorch.rope import rope_tables, rotation

#: the public names: `select` (and its parts, `choose` and `bind`), what it takes and returns, and `apply_rope`
__all__ = [
    "Attention",
    "Choice",
    "Kernels",
    "Pass",
    "apply_rope",
    "bind",
    "choose",
    "compiling",
    "rope_impl",
    "select",
    "use_triton",
]


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
    rule: str = "plain",
) -> Kernels:
    """The kernels of one forward pass (`choose`), bound to it (`bind`) at its RoPE tables. ``autograd``: gradients
    will flow to the weights; ``training``: dropout is on."""
    kind = positional
    tables = rope_tables(kind, freqs, p.start, p.length) if kind != "none" else (None, None)
    choice = choose(
        p,
        positional=kind,
        log_u=log_u,
        causal=causal,
        chunk_size=chunk_size,
        dropout=dropout,
        dropout_rng=dropout_rng,
        training=training,
        autograd=autograd,
        device=device,
        rule=rule,
    )
    return bind(choice, tables)


def apply_rope(kind: str, v: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None) -> torch.Tensor:
    """Rotate v (..., T, N) by the tables of ``kind`` with the kernel `rope_impl` picks (outside a pass)."""
    return rotation(kind, rope_impl(kind))(v, cos, sin)
