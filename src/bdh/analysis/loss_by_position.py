"""Loss by context position: how well a model reads past the window it was trained on.

* `carried_curve`: every stream read window after window with the recurrent state carried, so token ``t`` is predicted
from all ``t`` tokens before it;
* `sliding_curve`, the yardstick: every token predicted from at most ``context`` tokens (as nanoGPT's ``generate``
crops), windows advancing by ``stride``, at ``context / stride`` passes.

Both return a `ContextCurve` (bits per token per bucket of positions 0–T, T–2T, 2T–4T, ...); ``sliding - carried`` is
what the state adds (`state_gain`). The streams are the lanes of a `StreamTask` split (`task_streams`)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bdh.errors import UserError
from bdh.model_api import carries_state

LN2 = math.log(2.0)


def position_edges(window: int, length: int) -> list[int]:
    """Bucket edges over positions [0, length): 0, T, 2T, 4T, ... and ``length`` last."""
    if window < 1 or length < 1:
        raise UserError(f"position buckets need a window and a length >= 1, got {window} and {length}")
    edges, edge = [0], window
    while edge < length:
        edges.append(edge)
        edge *= 2
    edges.append(length)
    return edges


def bucket_label(lo: int, hi: int) -> str:
    """``0-128``, ``1k-2k``, ``16k-64k``: positions in bytes, powers of two in k."""

    def short(v: int) -> str:
        return f"{v // 1024}k" if v >= 1024 and v % 1024 == 0 else f"{v:,}"

    return f"{short(lo)}-{short(hi)}"


@dataclass
class ContextCurve:
    """Loss by context position over a set of streams, in bits per token."""

    edges: list[int]  # bucket edges over positions (`position_edges`); bucket i holds positions [edges[i], edges[i+1]).
    window: int  # T, the context the model was trained on.
    how: str  # ``carried`` or ``sliding (context C, stride S)``.
    # summed cross-entropy (nats) of the tokens scored in each bucket.
    loss_sum: list[float] = field(default_factory=list)
    count: list[int] = field(default_factory=list)  # tokens scored in each bucket.
    token_loss: torch.Tensor | None = None  # every token's loss (B, L), when asked for (`keep_tokens`)

    def __post_init__(self) -> None:
        n = len(self.edges) - 1
        self.loss_sum = self.loss_sum or [0.0] * n
        self.count = self.count or [0] * n

    def keep_tokens(self, batch: int) -> None:
        """Also keep every token's loss (``self.token_loss``, (batch, L) nats) for probes by token."""
        self.token_loss = torch.full((batch, self.edges[-1]), float("nan"))

    def add(self, losses: torch.Tensor, start: int) -> None:
        """Add per-token losses (B, t) (nats) of positions ``start .. start + t - 1`` of every stream."""
        if self.token_loss is not None:
            self.token_loss[:, start : start + losses.shape[1]] = losses.float().cpu()
        per_pos = losses.float().sum(dim=0).cpu()
        rows = losses.shape[0]
        for i, (lo, hi) in enumerate(zip(self.edges[:-1], self.edges[1:])):
            a, b = max(lo, start), min(hi, start + per_pos.numel())
            if a < b:
                self.loss_sum[i] += float(per_pos[a - start : b - start].sum())
                self.count[i] += rows * (b - a)

    @property
    def labels(self) -> list[str]:
        return [bucket_label(lo, hi) for lo, hi in zip(self.edges[:-1], self.edges[1:])]

    def bits(self) -> list[float]:
        """Bits per token in each bucket (NaN where nothing was scored)."""
        return [s / c / LN2 if c else float("nan") for s, c in zip(self.loss_sum, self.count)]

    def total_bits(self) -> float:
        """Bits per token over every scored token."""
        c = sum(self.count)
        return sum(self.loss_sum) / c / LN2 if c else float("nan")

    def at(self, lo: int, hi: int | None = None) -> float:
        """Bits per token over the buckets inside positions [lo, hi) (hi: the end)."""
        hi = self.edges[-1] if hi is None else hi
        keep = [i for i, (a, b) in enumerate(zip(self.edges[:-1], self.edges[1:])) if a >= lo and b <= hi]
        c = sum(self.count[i] for i in keep)
        return sum(self.loss_sum[i] for i in keep) / c / LN2 if c else float("nan")

    def to_dict(self) -> dict:
        return {
            "how": self.how,
            "window": self.window,
            "edges": self.edges,
            "buckets": self.labels,
            "bits": self.bits(),
            "count": self.count,
            "total_bits": self.total_bits(),
        }


def task_streams(task, split: str, lanes: int, length: int, seed: int = 0) -> torch.Tensor:
    """(lanes, length + 1) tokens: the first ``length + 1`` of each of ``lanes`` lanes of ``split``."""
    _need_streams(task)
    T = task.seq_len
    available = task.lane_windows(split, lanes) * T
    if length > available:
        raise UserError(
            f"{split}: {lanes} lane{'s' if lanes > 1 else ''} of {length:,} tokens need more text than the split has "
            f"(at most {available:,} tokens per lane); use fewer lanes or a shorter length"
        )
    windows = -(-length // T)
    parts, last = [], None
    for w in range(windows):
        inputs, targets, _ = task.stream_batch(split, w, lanes, seed)
        parts.append(inputs)
        last = targets[:, -1:]
    tokens = torch.cat(parts + [last], dim=1)
    return tokens[:, : length + 1] if tokens.shape[1] > length + 1 else tokens


def _need_streams(task) -> None:
    """A one-line `UserError` unless ``task`` has lanes of consecutive windows (`bdh.tasks.base.StreamTask`)."""
    if not callable(getattr(task, "stream_batch", None)):
        raise UserError(f"task {getattr(task, 'name', type(task).__name__)!r} has no consecutive windows to read")


def _token_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")


@torch.no_grad()
def carried_curve(
    model: nn.Module,
    tokens: torch.Tensor,
    window: int,
    chunk: int | None = None,
    progress: Callable[[int], None] | None = None,
    autocast=contextlib.nullcontext,
    keep: bool = False,
    forget: Callable[[Any], Any] | None = None,
) -> ContextCurve:
    """Loss by position of ``tokens`` (B, L + 1) read with the state carried, in chunks (default ``window``), in memory
    flat in L. ``forget`` (e.g. `empty_heads`) is applied to the state after every chunk."""
    _need_state(model)
    device = next(model.parameters()).device
    L = tokens.shape[1] - 1
    curve = ContextCurve(position_edges(window, L), window, "carried")
    if keep:
        curve.keep_tokens(tokens.shape[0])
    chunk = chunk or window
    was_training = model.training
    model.eval()
    try:
        state = model.init_state(tokens.shape[0])
        for done, start in enumerate(range(0, L, chunk), 1):
            part = tokens[:, start : min(start + chunk, L) + 1].to(device)
            with autocast():
                logits, state = model.step(part[:, :-1], state)
            curve.add(_token_losses(logits, part[:, 1:]), start)
            if forget is not None:
                state = forget(state)
            if progress is not None:
                progress(done)
    finally:
        model.train(was_training)
    return curve


def empty_heads(heads: Sequence[int]) -> Callable[[Any], Any]:
    """A ``forget`` for BDH emptying the state of ``heads`` after every chunk: they read the current chunk only."""
    chosen = list(heads)

    def forget(state: Any) -> Any:
        rho = state.rho.clone()
        rho[:, :, chosen] = 0
        return type(state)(rho, state.pos)

    return forget


@torch.no_grad()
def sliding_curve(
    model: nn.Module,
    tokens: torch.Tensor,
    window: int,
    context: int | None = None,
    stride: int | None = None,
    progress: Callable[[int], None] | None = None,
    autocast=contextlib.nullcontext,
    keep: bool = False,
) -> ContextCurve:
    """Loss by position of ``tokens`` (B, L + 1) with the context cut to ``context`` tokens, advancing by ``stride``."""
    context = context or window
    stride = stride or max(1, context // 4)
    if not 1 <= stride <= context:
        raise UserError(f"sliding window: stride must lie in [1, context = {context}], got {stride}")
    device = next(model.parameters()).device
    L = tokens.shape[1] - 1
    curve = ContextCurve(position_edges(window, L), window, f"sliding (context {context}, stride {stride})")
    if keep:
        curve.keep_tokens(tokens.shape[0])
    was_training = model.training
    model.eval()
    try:
        scored, done = 0, 0
        while scored < L:
            end = min(scored + stride, L) if scored else min(context, L)
            begin = max(0, end - context)
            part = tokens[:, begin : end + 1].to(device)
            with autocast():
                logits = model(part[:, :-1])
            keep = end - scored
            curve.add(_token_losses(logits[:, -keep:], part[:, -keep:]), scored)
            scored, done = end, done + 1
            if progress is not None:
                progress(done)
    finally:
        model.train(was_training)
    return curve


def sliding_steps(length: int, context: int, stride: int | None = None) -> int:
    """Forward passes `sliding_curve` makes over a stream of ``length`` tokens."""
    stride = stride or max(1, context // 4)
    return 1 + max(0, -(-(length - context) // stride))


def _need_state(model: nn.Module) -> None:
    if not carries_state(model):
        raise UserError(
            f"the model ({type(model).__name__}) has no recurrent state to carry; "
            "it reads long text only through a sliding window"
        )


def plan_streams(task, split: str, length: int | None, lanes: int | None, max_lanes: int = 8) -> tuple[int, int]:
    """(lanes, tokens per lane): ``length`` each (None: to the end) in ``lanes`` lanes (None: as many as fit,
    ``max_lanes`` at most)."""
    _need_streams(task)
    T = task.seq_len
    if lanes is None:
        if length is None:
            lanes = 1
        else:
            whole = task.lane_windows(split, 1) * T
            lanes = max(1, min(max_lanes, whole // length))
    available = task.lane_windows(split, lanes) * T
    return lanes, available if length is None else min(length, available)


def figure(
    curves: Sequence[tuple[str, ContextCurve]], path, trained: int | None = None, title: str = "", unit: str = "token"
) -> None:
    """Bits per ``unit`` against context position (log scale), one line per curve, dotted at the trained context."""
    from bdh.plotting import pyplot, save_file

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=140)
    for name, c in curves:
        mids = [max(1.0, (lo + hi) / 2) for lo, hi in zip(c.edges[:-1], c.edges[1:])]
        ax.plot(mids, c.bits(), marker="o", label=name)
    if trained:
        ax.axvline(trained, color="grey", linestyle=":", label=f"trained context ({trained:,})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"position in the stream ({unit}s; bucket midpoints)", fontsize=12)
    ax.set_ylabel(f"bits per {unit}", fontsize=12)
    ax.set_title(title or "loss by context position", fontsize=13)
    ax.tick_params(labelsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=11)
    save_file(fig, path, dpi=140, tight=True)


def state_gain(carried: ContextCurve, cut: ContextCurve) -> dict[str, float]:
    """Bits per token of ``cut`` minus ``carried`` per bucket label: positive where the state helps, NaN where
    none scored."""
    if carried.edges != cut.edges:
        raise UserError(
            f"the state's gain needs curves over the same positions, got buckets {carried.edges} and {cut.edges}"
        )
    return {label: s - c for label, c, s in zip(carried.labels, carried.bits(), cut.bits())}


def curve_table(curves: Sequence[tuple[str, ContextCurve]], unit: str = "byte") -> str:
    """A markdown table: one row per named curve, one column per position bucket, bits per ``unit``."""
    labels = curves[0][1].labels
    head = f"| positions ({unit}s) | " + " | ".join(labels) + " | all |"
    rule = "|---|" + "---:|" * (len(labels) + 1)
    rows = [
        f"| {name} | " + " | ".join(f"{b:.3f}" for b in c.bits()) + f" | {c.total_bits():.3f} |" for name, c in curves
    ]
    return "\n".join([head, rule, *rows])


__all__ = [
    "ContextCurve",
    "bucket_label",
    "carried_curve",
    "curve_table",
    "empty_heads",
    "figure",
    "plan_streams",
    "position_edges",
    "sliding_curve",
    "sliding_steps",
    "state_gain",
    "task_streams",
]
