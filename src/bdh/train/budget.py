"""`TimeBudget`: ``train.max_minutes``, a run whose length is planned from the time its steps take: after
`CALIBRATION_STEPS` timed steps, and again every tenth of the run (`REPLANS`), never past the step and token
limits. It reads no clock (the trainer passes the times); the planned length is saved in checkpoints. How it
behaves: docs/training.md, "The main job".
"""

from __future__ import annotations

from collections import deque
from typing import Any

#: steps timed before a ``train.max_minutes`` budget fixes the length of the run (the first is not timed)
CALIBRATION_STEPS = 12
#: share of the budget planned for training steps (the rest: evaluations, checkpoints, the final sample)
BUDGET_SHARE = 0.93
#: plans of a time budget over the run after the first (one every tenth of the planned steps: follows a machine
#: whose speed changes, e.g. busy at the start)
REPLANS = 10
#: a plan that changes the length of the run by this share or less leaves it as it is
REPLAN_TOLERANCE = 0.03
#: steps whose mean time gives the speed of a run at its start (after the untimed first) and near its end
SPEED_STEPS = CALIBRATION_STEPS


class TimeBudget:
    """The time budget of a run (``train.max_minutes``; None: no budget, the length of the run is fixed).

    ``eval_every``, ``eval_batches``, ``final_batches``, ``eval_batch`` and ``train_rows``: how often the run
    evaluates and how many windows an evaluation (and the final one) reads against the rows a training step reads
    on this process, to leave time for the evaluations that the planned steps bring.
    """

    def __init__(
        self,
        minutes: float | None,
        *,
        eval_every: int,
        eval_batches: int,
        eval_batch: int,
        train_rows: int,
        final_batches: int | None = None,
    ) -> None:
        self.minutes = minutes
        self.eval_every = eval_every
        self.eval_batches = eval_batches
        self.final_batches = eval_batches if final_batches is None else final_batches
        self.eval_batch = eval_batch
        self.train_rows = train_rows
        #: the length of the run is settled: no budget, or a plan was made (saved in checkpoints)
        self.fixed = minutes is None
        #: seconds spent by earlier processes of a resumed run
        self.elapsed_before = 0.0
        self.start(0.0)

    @property
    def enabled(self) -> bool:
        """True when the run has a time budget."""
        return self.minutes is not None

    # ------------------------------------------------------------------ the clock of this process
    def start(self, now: float) -> None:
        """Start the clock of this process at ``now``: the seconds left are those earlier processes of the run
        did not spend; step times are counted from here."""
        self.started = now
        self.seconds = None if self.minutes is None else self.minutes * 60.0 - self.elapsed_before
        self._step_seconds = 0.0  # time spent in training steps (not evaluations or checkpoints)
        self._timed_from: tuple[int, float] | None = None  # (step, training seconds) where the timing started
        self._steps = 0  # steps counted by this process
        self._first: list[float] = []  # the times of its first SPEED_STEPS steps after the first
        self._last: deque[float] = deque(maxlen=SPEED_STEPS)  # and of its last SPEED_STEPS steps

    def elapsed(self, now: float) -> float:
        """Seconds the run has taken at ``now``, earlier processes of a resumed run included."""
        return self.elapsed_before + now - self.started

    def spent(self, now: float) -> bool:
        """True when the budget is spent at ``now`` (never without a budget)."""
        return self.seconds is not None and now - self.started >= self.seconds

    # ------------------------------------------------------------------ plans
    def replan_every(self, total_steps: int) -> int:
        """Steps between two plans: `CALIBRATION_STEPS` for the first, then a tenth of the planned run
        (``total_steps``), each plan using the time per step since the last one."""
        return CALIBRATION_STEPS if not self.fixed else max(CALIBRATION_STEPS, total_steps // REPLANS)

    def count(self, seconds: float) -> None:
        """Count the ``seconds`` a training step took (evaluations and checkpoints are not counted)."""
        self._step_seconds += seconds
        self._steps += 1
        if self._steps == 1:
            return  # warm-up and allocations: not the speed of the run
        if len(self._first) < SPEED_STEPS:
            self._first.append(seconds)
        self._last.append(seconds)

    def speeds(self) -> tuple[float, float] | None:
        """Steps per second of this process over its first `SPEED_STEPS` steps after the first, and over its last
        `SPEED_STEPS`; None until the two stretches are apart."""
        if self._steps < 1 + 2 * SPEED_STEPS:
            return None
        return SPEED_STEPS / max(sum(self._first), 1e-12), SPEED_STEPS / max(sum(self._last), 1e-12)

    def measure(self, step: int, total_steps: int) -> float | None:
        """After training step ``step`` (counted from 1): the seconds per step since the last plan when the next
        plan is due, else None."""
        if self._timed_from is None:
            self._timed_from = (step, self._step_seconds)  # the first step (warm-up, allocation) is not timed
            return None
        first, before = self._timed_from
        if step - first < self.replan_every(total_steps):
            return None
        self._timed_from = (step, self._step_seconds)
        return (self._step_seconds - before) / (step - first)

    def plan(self, per_step: float, now: float, step: int, total_steps: int, limit: int) -> int | None:
        """The length of the run that fits the budget at ``now`` after ``step`` steps at ``per_step`` seconds each
        (evaluations included), at most ``limit`` and at least one step more; None when it differs from
        ``total_steps`` by `REPLAN_TOLERANCE` or less. Fixes the length of the run from now on."""
        every = self.eval_every
        # an evaluation reads eval.batches x eval batch windows forward only: about a third of a step per row
        per_batch = per_step * self.eval_batch / max(self.train_rows, 1) / 3
        per_eval, per_final = self.eval_batches * per_batch, self.final_batches * per_batch
        fits = limit
        for _ in range(3):  # the number of evaluations depends on the length of the run
            evals = max(0, fits // every - step // every) if every else 0  # along the way, then the final one
            remaining = self.seconds * BUDGET_SHARE - (now - self.started) - evals * per_eval - per_final
            fits = min(limit, step + max(0, int(remaining / per_step)))
        fits = max(step + 1, fits)
        self.fixed = True
        if fits != total_steps and abs(fits - total_steps) > REPLAN_TOLERANCE * total_steps:
            return fits
        return None

    # ------------------------------------------------------------------ checkpoints
    def resume(self, meta: dict[str, Any]) -> int | None:
        """Take the time spent and the planned length from the ``meta`` of the checkpoint a run resumes from:
        the length a plan fixed (None when none did, or the run has no budget)."""
        self.elapsed_before = float(meta.get("elapsed", 0.0))
        if self.enabled and meta.get("budget_fixed"):
            self.fixed = True
            return int(meta["total_steps"])
        return None


__all__ = ["BUDGET_SHARE", "CALIBRATION_STEPS", "REPLANS", "SPEED_STEPS", "TimeBudget"]
