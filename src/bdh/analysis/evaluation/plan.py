"""How an evaluation of a trained run is read (``bdh eval``): `plan_eval` makes a plan, whose ``run`` scores it.

* `WindowPlan`: windows of ``seq_len`` tokens from an empty context, as training evaluates (by default its final
evaluation's batches and seed, so the number equals training's); ``full``: every window.
* `StreamPlan`: ``lanes`` long streams read with the state carried (``carry``) and/or through a window cut to the
trained context (``sliding``), the loss by position bucketed 0–W, W–2W, 2W–4W, ...

A plan's ``notes`` say what is read; the command prints them before scoring."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bdh.errors import UserError

from .data import EvalData

#: tokens per lane a long-context evaluation reads by default (a whole play for byte-level text)
LONG_LENGTH = 65536
#: the most lanes a long-context reading takes by default (`bdh.analysis.loss_by_position.plan_streams`)
MAX_LANES = 8


@dataclass(frozen=True)
class WindowPlan:
    """``batches`` of ``batch_size`` windows of ``ev``'s split, ``total`` in all (None: endless);
    ``progress``: shown."""

    ev: EvalData
    batch_size: int
    batches: int
    total: int | None
    progress: bool
    notes: tuple[str, ...]

    @property
    def mode(self) -> str:
        """How the windows are read, for the report lines."""
        return _mode(self.ev)

    @property
    def whole(self) -> bool:
        """Whether the plan reads the whole split (its numbers then have no sampling error)."""
        return self.batches == self.total

    def run(self, model: Any, progress: str = "none") -> dict[str, float]:
        """The metrics of `evaluate` (``val_loss`` in nats, ``val_bpb``, its standard error, the task's metrics)."""
        from bdh.train.evaluate import evaluate
        from bdh.train.run.log import EvalProgress

        ev = self.ev
        ticker = EvalProgress(self.batches, progress) if self.progress else None
        metrics = evaluate(model, ev.task, self.batch_size, self.batches, ev.seed, split=ev.split, progress=ticker)
        if not metrics:
            raise UserError("nothing to evaluate: no scored targets")
        return metrics


@dataclass(frozen=True)
class StreamPlan:
    """``lanes`` streams of ``length`` tokens bucketed by ``window``: ``carry`` and/or ``sliding`` (cut to ``cut``, by
    ``stride``); ``trained``: the longest context met in training."""

    ev: EvalData
    lanes: int
    length: int
    window: int
    trained: int | None
    carry: bool
    sliding: bool
    cut: int
    stride: int | None
    notes: tuple[str, ...]

    def run(self, model: Any, progress: str = "none") -> list[tuple[str, Any]]:
        """``(name, ContextCurve)`` of the carried curve, then the sliding one, over the same streams."""
        from ..loss_by_position import task_streams

        ev = self.ev
        tokens = task_streams(ev.task, ev.split, self.lanes, self.length, ev.seed)
        curves = []
        if self.carry:
            curves.append((f"state carried (context up to {self.length:,})", self._carried(model, tokens, progress)))
        if self.sliding:
            curve = self._sliding(model, tokens, progress)
            curves.append((f"context cut to {self.cut:,} ({curve.how.split('(')[1].rstrip(')')})", curve))
        return curves

    def _carried(self, model: Any, tokens: Any, progress: str) -> Any:
        from bdh.train.run.log import EvalProgress

        from ..loss_by_position import carried_curve

        T = self.ev.task.seq_len
        chunks = -(-self.length // T)
        ticker = EvalProgress(chunks, progress, unit="windows") if chunks > 1 else None
        curve = carried_curve(model, tokens, self.window, chunk=T, progress=ticker and ticker.update)
        if ticker is not None:
            ticker.close()
        return curve

    def _sliding(self, model: Any, tokens: Any, progress: str) -> Any:
        from bdh.train.run.log import EvalProgress

        from ..loss_by_position import sliding_curve, sliding_steps

        steps = sliding_steps(self.length, self.cut, self.stride)
        ticker = EvalProgress(steps, progress, unit="windows", desc="sliding") if steps > 1 else None
        curve = sliding_curve(model, tokens, self.window, self.cut, self.stride, progress=ticker and ticker.update)
        if ticker is not None:
            ticker.close()
        return curve


def plan_eval(
    ev: EvalData,
    model: Any,
    *,
    batches: int | None = None,
    full: bool = False,
    batch_size: int | None = None,
    carry: bool = False,
    sliding: bool = False,
    length: int | None = None,
    stride: int | None = None,
) -> WindowPlan | StreamPlan:
    """A `StreamPlan` with ``carry`` or ``sliding``, else a `WindowPlan`; ``batches`` and ``batch_size`` are windows and
    lanes per lane and batch for streams. A one-line `UserError` for what cannot be read."""
    if carry or sliding:
        return _stream_plan(ev, model, batches, full, batch_size, carry, sliding, length, stride)
    return _window_plan(ev, batches, full, batch_size)


def _mode(ev: EvalData) -> str:
    """How a `WindowPlan` reads its windows, for the report lines."""
    return f"windows of {ev.task.seq_len} {ev.unit}s, independent"


def _window_plan(ev: EvalData, batches: int | None, full: bool, batch_size: int | None) -> WindowPlan:
    """`plan_eval` of independent windows, with the lines saying what is scored."""
    from bdh.train.evaluate import eval_batch_count

    task, unit = ev.task, ev.unit
    size = batch_size or ev.batch_size
    n = eval_batch_count(task, ev.split, size, None if full else batches or ev.batches)
    total = task.num_batches(ev.split, size)
    of = total if total is not None else "endless"
    note = "" if full or n == total else "; the batches of the run's final evaluation. --full scores all"
    default = eval_batch_count(task, ev.split, size, ev.batches)
    if full and n > default:  # what --full costs: one forward pass per window, against the default's
        note = f": {n / default:.1f} times the {default} batches the default reads, in as many forward passes"
    notes = (
        f"data: {ev.description} ({task.seq_len}-{unit} windows)",
        f"mode: {_mode(ev)} (each starts from an empty context; --carry-state carries the recurrent state)",
        f"scoring {n} of {of} batches of {size} windows (seed {ev.seed}){note}",
    )
    return WindowPlan(ev, size, n, total, full and n > 1, notes)


def _stream_plan(
    ev: EvalData,
    model: Any,
    batches: int | None,
    full: bool,
    lanes: int | None,
    carry: bool,
    sliding: bool,
    length: int | None,
    stride: int | None,
) -> StreamPlan:
    """`plan_eval` of long streams: lanes and length (`plan_streams`), the bucket window and the notes."""
    from bdh.train.evaluate import check_carry
    from bdh.train.run.model import trained_context

    from ..loss_by_position import plan_streams

    task, unit = ev.task, ev.unit
    if carry:
        check_carry(model, task)
    T = task.seq_len
    trained = trained_context(ev.config) if ev.config is not None else None
    wanted = None if full else (batches * T if batches else length or LONG_LENGTH)
    lanes, length = plan_streams(task, ev.split, wanted, lanes, MAX_LANES)
    plural = "s" if lanes > 1 else ""
    notes = [f"data: {ev.description}: {lanes} lane{plural} of {length:,} {unit}s, each read in order"]
    if trained is None:
        notes.append("trained context: unknown (not a run folder); buckets of the task's window")
    elif length > trained:
        notes.append(
            f"note: the streams ({length:,} {unit}s) are longer than any context the model met in training "
            f"({trained:,} {unit}s): past that, the loss measures how it extrapolates"
        )
    window = trained if trained and trained < length else T
    return StreamPlan(ev, lanes, length, window, trained, carry, sliding, trained or T, stride, tuple(notes))


__all__ = ["LONG_LENGTH", "StreamPlan", "WindowPlan", "plan_eval"]
