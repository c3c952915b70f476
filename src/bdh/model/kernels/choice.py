"""Which kernel runs each step of a forward pass: `choose`, one table read from the top (the names of docs/model.md;
each row's comment says where it lives). What only the tensors can tell (a dtype the compiled loops do not take,
a one-token step on a contiguous fp32 state, keys that are the queries) is decided in
`bdh.model.kernels.dispatch.bind`'s callables when they arrive. The state rules beyond Eq. 8 (a retention per token,
the delta rule; `bdh.model.state_rules`) run in plain PyTorch (`pytorch.state_rules`). Each attention kernel named here
is one entry of `bdh.model.kernels.dispatch.ATTENTION`: table, dict, kernel."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from bdh.errors import UserError

from ..names import MODES, STATE_RULES
from .cpu import native
from .triton import chunked as _triton


@dataclass(frozen=True)
class Pass:
    """What a forward pass is asked to do; `choose` turns it into kernel choices."""

    mode: str  # the attention form (one of `MODES`).
    # start, length: the absolute position of the first token and the number of tokens.
    start: int
    length: int
    carried: bool = False  # a recurrent state is given.
    need_state: bool = False  # the state after the block is wanted.
    inplace: bool = False  # update the given state in place (inference, no autograd).
    detach_kv: bool = False  # cut the gradient through keys and values (paper section 7.2).
    hooked: bool = False  # a hook reads the activations (y must be the gate's output before dropout).
    # the pairs (t, tau) of the T x T scores a query reads (T, T, bool; ours: a board's peers, ``attend: sudoku``), or
    # None: all those of ``causal``. Only the bidirectional parallel forms (``parallel``, ``shared-keys``) take one.
    mask: torch.Tensor | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Choice:
    """What `choose` chose for one pass: the kernel of each step by name (the rows of `choose`), and the pass's
    parameters the kernels are bound to."""

    positional: str
    rope: str
    relu_rope: str  # ``native`` (ReLU and rotation in one compiled pass) or ``plain`` (``F.relu``, then `rope`).
    attention: str
    gate: str
    # the dropout masks, ``none``, ``in-gate`` (drawn by our generators and applied in the gate, `pytorch.dropout`) or
    # ``torch`` (``F.dropout`` on y).
    masks: str
    # ``per-head``, ``sparse``, ``gated-triton`` (the gate and E y in one Triton product, `triton.read_in`: y never
    # written, its masks drawn inside) or ``step-triton`` (the same for one token without dropout, the rows of E
    # split over programs, `triton.read_in_step`).
    read_in: str
    # where the per-head products keep the (B, H, T, N) tensors z and y: ``head-major`` or ``heads-outer`` (stored
    # (H, B, T, N), `Kernels.heads`).
    layout: str
    # ``triton`` (x = ReLU(v Dx) in one Triton matmul, `triton.encode`), ``step-triton`` (one token: x and its
    # interleaved RoPE in one Triton kernel, `triton.encode_step`; other rotations after `triton.encode`'s kernel) or
    # ``heads-relu`` (the per-head product, then ReLU: `Kernels.heads`, `Kernels.relu_rope`).
    encode: str
    # log_u, causal, chunk_size: the damping, the direction and the chunk of the attention.
    log_u: torch.Tensor | None = field(repr=False, compare=False)
    causal: bool
    chunk_size: int
    need_state: bool
    inplace: bool
    detach_kv: bool
    dropout: float
    # the state rule (`bdh.model.names.STATE_RULES`): ``plain``, ``learned`` (U a parameter), ``gated``, ``delta``.
    state_rule: str = "plain"
    # the delta rule's keys are the unit queries (no ``separate_keys``, no shaped write keys): its UT form makes them
    # from one Gram Q Q^T (`pytorch.delta_ut`, ``query_keys``) and does not read the keys it is given.
    query_keys: bool = False
    mask: torch.Tensor | None = field(default=None, repr=False, compare=False)  # the pass's (`Pass.mask`)

    @property
    def native(self) -> bool:
        """Whether the compiled loops (`native`) run the element-wise steps they can take in this pass."""
        return self.gate == "native"


#: the delta rule's kernel by mode (`dispatch.ATTENTION`): the UT form for parallel (in chunks) and chunked, the loop
DELTA = {"parallel": "delta-parallel-ut", "chunked": "delta-chunked", "recurrent": "delta-recurrent"}


def choose(
    p: Pass,
    *,
    positional: str,
    log_u,
    causal: bool,
    chunk_size: int,
    dropout: float,
    dropout_rng: str,
    training: bool,
    autograd: bool,
    device: torch.device,
    state_rule: str = "plain",
    query_keys: bool = False,
) -> Choice:
    """The kernel of every step of pass ``p``: the first row that holds. ``autograd``: the weights get gradients;
    ``query_keys``: the delta rule's keys are the unit queries (`Choice.query_keys`)."""
    check(p, causal, log_u, state_rule)
    cpu, eager, mode, delta = device.type == "cpu", not compiling(), p.mode, state_rule == "delta"
    loops = cpu and native.available()  # cpu/: the compiled loops, built and not turned off (BDH_NATIVE=0)
    fixed = not (state_rule == "learned" and autograd)  # U does not train: the shared-keys, lean, Triton kernels hold
    stateless = fixed and not (p.carried or p.need_state or p.detach_kv)  # no state in or out, keys not detached
    in_gate = dropout_rng == "auto" and cpu and not p.hooked and (loops or eager)  # with the loops: drawn inside them
    step = mode == "recurrent" and p.inplace and use_triton(device)  # the generation step on CUDA (triton/*_step.py)
    rows = [
        # step        kernel              when (a step takes its first row that holds)     lives in
        ("relu_rope", "native",           loops and positional != "none"),                # cpu/ops.py
        ("relu_rope", "plain",            True),                                          # F.relu, then rope
        ("attention", "delta-chunked-triton", delta and mode == "chunked" and use_triton(device)),  # triton/delta.py
        ("attention", "delta-native",     delta and loops and eager and not autograd),    # cpu/native.py
        ("attention", DELTA.get(mode),    delta),               # pytorch/delta_ut.py; recurrent: state_rules.py
        ("attention", "gated-" + mode,    state_rule == "gated"),                         # pytorch/state_rules.py
        ("attention", "shared-keys",      mode == "parallel" and autograd and stateless), # pytorch/shared_keys.py
        ("attention", "chunked-triton",   mode == "chunked" and use_triton(device) and fixed),  # triton/chunked.py
        ("attention", "chunked-lean",     mode == "chunked" and autograd and fixed),      # pytorch/chunked_lean.py
        ("attention", "recurrent-triton", mode == "recurrent" and p.inplace and use_triton(device)),  # triton/step.py
        ("attention", "recurrent-native", mode == "recurrent" and p.inplace and loops and eager),  # cpu/native.py
        ("attention", mode,               True),                    # pytorch/attention.py, sparse: pytorch/sparse.py
        ("gate",      "native",           loops),                                         # cpu/ops.py
        ("gate",      "plain",            not eager),                                     # inductor fuses it
        ("gate",      "triton",           use_triton(device)),                            # triton/gate.py
        ("gate",      "fused",            True),                                          # pytorch/fused.py
        ("masks",     "none",             not (training and dropout > 0)),
        ("masks",     "in-gate",          in_gate),                                       # pytorch/dropout.py
        ("masks",     "torch",            True),                                          # F.dropout
        ("read_in",   "sparse",           mode == "sparse"),                              # pytorch/sparse.py
        ("read_in",   "step-triton",      step and not p.hooked and not (training and dropout > 0)),  # read_in_step
        ("read_in",   "gated-triton",     use_triton(device) and autograd and not p.hooked),  # triton/read_in.py
        ("read_in",   "per-head",         True),                                          # dispatch.py
        ("layout",    "heads-outer",      loops and autograd and not p.hooked),           # dispatch.py
        ("layout",    "head-major",       True),                                          # dispatch.py
        ("encode",    "step-triton",      step),                                          # encode_step.py
        ("encode",    "triton",           use_triton(device) and autograd),               # triton/encode.py
        ("encode",    "heads-relu",       True),                                          # dispatch.py
    ]  # fmt: skip
    chosen = {step: kernel for step, kernel, holds in reversed(rows) if holds}  # reversed: the first that holds wins
    chosen.update(need_state=p.need_state, inplace=p.inplace, detach_kv=p.detach_kv, mask=p.mask)  # the pass's
    chosen.update(log_u=log_u, causal=causal, chunk_size=chunk_size, dropout=dropout, state_rule=state_rule)
    rope = rope_impl(positional)  # complex (rope), fused (rope-standard), plain when compiling
    return Choice(positional=positional, rope=rope, query_keys=query_keys, **chosen)


def check(p: Pass, causal: bool, log_u, state_rule: str = "plain") -> None:
    """Refuse a pass that no kernel computes, in one line."""
    if p.mask is not None and (causal or p.mode != "parallel" or state_rule in ("gated", "delta")):
        raise UserError("BDH: a score mask (attend: sudoku) needs bidirectional attention in mode 'parallel'")
    if p.mode not in MODES:
        raise UserError(f"BDH: mode must be one of {', '.join(MODES)}; got {p.mode!r}")
    if not causal and p.mode != "parallel":
        raise UserError(f"BDH: bidirectional attention (causal=false) needs mode 'parallel', got {p.mode!r}")
    if p.inplace and (not p.carried or torch.is_grad_enabled()):
        raise UserError("BDH: an in-place state update needs a state and torch.no_grad()")
    if p.mode == "sparse" and not (p.inplace and p.length == 1 and log_u is None):
        raise UserError("BDH: mode 'sparse' runs one token of one sequence in place, on a model without damping")
    if state_rule not in STATE_RULES:
        raise UserError(f"BDH: the state rule must be one of {', '.join(STATE_RULES)}; got {state_rule!r}")
    if state_rule in ("gated", "delta") and p.mode == "sparse":
        raise UserError("BDH: mode 'sparse' reads a state written by Eq. 8's rule only (no decay_gate, no delta)")


def rope_impl(kind: str) -> str:
    """The rotation kernel for a positional scheme (`pytorch.rope.rotation`): the plain expression under
    ``torch.compile`` (inductor fuses it), else the complex multiply (``rope``) or `pytorch.fused.rope_rotate`."""
    if kind == "none":
        return "none"
    if compiling():
        return "plain"
    return "complex" if kind == "rope" else "fused"


def use_triton(device: torch.device) -> bool:
    """Whether the chunked form runs the fused Triton kernels (`triton.chunked`): on CUDA, with Triton importable
    and not turned off (``BDH_TRITON=0``), outside ``torch.compile`` (which keeps the lean form it can trace)."""
    return device.type == "cuda" and not compiling() and _triton.available()


def compiling() -> bool:
    """Whether ``torch.compile`` is tracing: it fuses the plain expressions itself and has no complex kernels."""
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling())
