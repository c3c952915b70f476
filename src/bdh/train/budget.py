"""`TimeBudget`: ``train.max_minutes``, a run whose length is planned from the time its steps take (docs/training.md,
"The main job").

After `CALIBRATION_STEPS` timed steps, and again every tenth of the run (`REPLANS`), the length is planned within the
step and token limits; no clock is read (the trainer passes the times). Its state is saved in checkpoints: a resume
before the first plan goes on timing, one after it completes the planned steps."""

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
    """The time budget of a run (``train.max_minutes``; None: a fixed length).

    ``eval_every``, ``eval_batches``, ``final_batches``, ``eval_batch``, ``train_rows``: the evaluations to leave
    time for."""

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
        #: a resumed run whose length a plan fixed: it trains the planned steps, no plan or clock changes them
        self.completing = False
        #: seconds spent by earlier processes of a resumed run
        self.elapsed_before = 0.0
        #: training seconds and steps timed towards the next plan (the run's first step is not timed: warm-up)
        self._plan_seconds, self._plan_steps = 0.0, 0
        self.start(0.0)

    @property
    def enabled(self) -> bool:
        """True when the run has a time budget."""
        return self.minutes is not None

    # ------------------------------------------------------------------ the clock of this process
    def start(self, now: float) -> None:
        """Start this process's clock at ``now``; the seconds left are those earlier processes of the run did
        not spend."""
        self.started = now
        self.seconds = None if self.minutes is None else self.minutes * 60.0 - self.elapsed_before
        self._steps = 0  # steps counted by this process
        self._first: list[float] = []  # the times of its first SPEED_STEPS steps after the first
        self._last: deque[float] = deque(maxlen=SPEED_STEPS)  # and of its last SPEED_STEPS steps

    def elapsed(self, now: float) -> float:
        """Seconds the run has taken at ``now``, earlier processes of a resumed run included."""
        return self.elapsed_before + now - self.started

    def spent(self, now: float) -> bool:
        """True when the budget is spent at ``now`` (never without a budget, nor when completing a plan)."""
        return self.seconds is not None and not self.completing and now - self.started >= self.seconds

    # ------------------------------------------------------------------ plans
    def replan_every(self, total_steps: int) -> int:
        """Steps between plans: `CALIBRATION_STEPS` for the first, then a tenth of ``total_steps``."""
        return CALIBRATION_STEPS if not self.fixed else max(CALIBRATION_STEPS, total_steps // REPLANS)

    def count(self, seconds: float, step: int) -> None:
        """Count the ``seconds`` step ``step`` (from 1) took; plans skip the run's first step, speeds each
        process's first."""
        if step > 1:
            self._plan_seconds += seconds
            self._plan_steps += 1
        self._steps += 1
        if self._steps == 1:
            return  # warm-up and allocations: not the speed of the run
        if len(self._first) < SPEED_STEPS:
            self._first.append(seconds)
        self._last.append(seconds)

    def speeds(self) -> tuple[float, float] | None:
        """Steps per second over this process's first and last `SPEED_STEPS` steps; None until the two are apart."""
        if self._steps < 1 + 2 * SPEED_STEPS:
            return None
        return SPEED_STEPS / max(sum(self._first), 1e-12), SPEED_STEPS / max(sum(self._last), 1e-12)

    def measure(self, total_steps: int) -> float | None:
        """The seconds per step since the last plan when the next plan is due, else None."""
        if self.completing or self._plan_steps < self.replan_every(total_steps):
            return None
        per_step = self._plan_seconds / self._plan_steps
        self._plan_seconds, self._plan_steps = 0.0, 0
        return per_step

    def plan(self, per_step: float, now: float, step: int, total_steps: int, limit: int) -> int | None:
        """The run length that fits the budget (evaluations included), at most ``limit``, at least one more step; None
        when within `REPLAN_TOLERANCE` of ``total_steps``. Fixes the length from now on."""
        every = self.eval_every
        # an evaluation reads eval.batches x eval batch windows forward only: about a third of a step per row
        per_batch = per_step * self.eval_batch / max(self.train_rows, 1) / 3
        per_eval, per_final = self.eval_batches * per_batch, self.final_batches * per_batch
        fits = limit
        for _ in range(3):  # the number of evaluations depends on the length of the run
            evals = max(0, fits // every - step // every) if every else 0  # along the way, then the final one
            remaining = self.minutes * 60.0 * BUDGET_SHARE - self.elapsed(now) - evals * per_eval - per_final
            fits = min(limit, step + max(0, int(remaining / per_step)))
        fits = max(step + 1, fits)
        self.fixed = True
        if fits != total_steps and abs(fits - total_steps) > REPLAN_TOLERANCE * total_steps:
            return fits
        return None

    # ------------------------------------------------------------------ checkpoints
    def state(self, now: float) -> dict[str, Any]:
        """What a checkpoint keeps of the budget at ``now`` (a fixed length, the time spent, the step time),
        for `resume`."""
        timed = [self._plan_seconds, self._plan_steps]
        return {"budget_fixed": self.fixed, "elapsed": self.elapsed(now), "budget_timed": timed}

    def resume(self, meta: dict[str, Any]) -> int | None:
        """Take back the `state` from a checkpoint's ``meta``: the length a plan fixed, or None (it goes on timing)."""
        self.elapsed_before = float(meta.get("elapsed", 0.0))
        seconds, steps = meta.get("budget_timed", [0.0, 0])
        self._plan_seconds, self._plan_steps = float(seconds), int(steps)
        if self.enabled and meta.get("budget_fixed"):
            self.fixed = self.completing = True
            return int(meta["total_steps"])
        return None


__all__ = ["BUDGET_SHARE", "CALIBRATION_STEPS", "REPLANS", "SPEED_STEPS", "TimeBudget"]
