"""The kernels of BDH-GPU, by backend, and the one place that chooses among them (docs/model.md): `choose`, a table
that names the kernel of each step of a pass, and `bind`, which looks the names up (`dispatch.ATTENTION`).

    choice.py       which kernel runs each step of a pass: `choose`, one table (read it to know what runs)
    dispatch.py     the chosen kernels bound to the pass: `bind` makes `Kernels`, the callables `BDH.layer` calls;
                    `ATTENTION`, every attention kernel by its name in the table
    naive.py        the slow, obviously-correct references the kernels are tested against
    pytorch/        plain PyTorch, any device:
      attention.py    the paper's three forms of linear attention: parallel, chunked, recurrent (Eq. 4, Eq. 8)
      state_rules.py  the same three forms for the state rules: a retention per token, the delta-rule write (ours)
      delta_ut.py     the delta rule's chunked form as DeltaNet's UT transform (one batched solve, then the chunks)
      write_keys.py   the delta rule's write-key options (centred, top-m), shaped once before any form
      chunked_lean.py, shared_keys.py, sparse.py    faster forms of it (training, training, one-token steps)
      rope.py, fused.py, dropout.py                 RoPE, the gate and rotation in fewer passes, dropout masks
      per_head.py     a @ W per head without copying W per sequence (CUDA's training pass)
    cpu/            the compiled CPU loops, where setup.py built them (``BDH_NATIVE=0`` turns them off):
      _native.c, native.py, ops.py    the C loops, their ctypes binding, their PyTorch operators
    triton/         CUDA:
      chunked.py, chunked_jit.py      the chunked form as fused Triton kernels, and the kernels themselves
      delta.py, delta_jit.py          the delta rule's chunked form (`pytorch/state_rules.py`) likewise
      gate.py, gate_jit.py            the gate y = ReLU(z) * x and its dropout likewise
      encode.py, encode_jit.py        x = ReLU(v Dx): the matmul with the ReLU, the cast (and RoPE) in its epilogue
      read_in.py, read_in_jit.py      E y with the gate y = ReLU(z) * x and its dropout in the matmul's prologue
      step.py, step_jit.py            one generation token's state read and write in one pass over the state
      encode_step.py, encode_step_jit.py      one token's x = ReLU(v Dx) with its RoPE in one launch
      read_in_step.py, read_in_step_jit.py    one token's E y with y = ReLU(z) * x formed inside

A new state rule: its forms in ``pytorch/state_rules.py``, its write in naive.py's loop, its rows in `choose` and
its entries in `dispatch.ATTENTION`; a new kernel: a row in `choose`, an entry in `ATTENTION` (CONTRIBUTING.md).
"""

from __future__ import annotations

import torch

from .choice import Choice, Pass, choose, compiling, rope_impl, use_triton
from .dispatch import ATTENTION, Attention, Kernels, bind
from .pytorch.rope import rotation

#: the public names: `choose` and `bind`, what they take and return, and `apply_rope`
__all__ = [
    "ATTENTION",
    "Attention",
    "Choice",
    "Kernels",
    "Pass",
    "apply_rope",
    "bind",
    "choose",
    "compiling",
    "rope_impl",
    "use_triton",
]


def apply_rope(kind: str, v: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None) -> torch.Tensor:
    """Rotate v (..., T, N) by the tables of ``kind`` with the kernel `rope_impl` picks (outside a pass)."""
    return rotation(kind, rope_impl(kind))(v, cos, sin)
