"""``bdh eval`` as a library call: `open_eval` loads, reads and plans; `RunEval.header`, `RunEval.run` and
`EvalResult.table` are what the command prints and scores."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bdh.errors import UserError

from .plan import StreamPlan, WindowPlan

LN2 = math.log(2.0)


@dataclass(frozen=True)
class EvalResult:
    """A `WindowPlan`'s ``metrics`` or a `StreamPlan`'s ``curves`` (carried first), and the ``figure`` written
    or None."""

    plan: WindowPlan | StreamPlan
    metrics: dict[str, float] | None = None
    curves: list[tuple[str, Any]] | None = None
    figure: str | Path | None = None

    def table(self) -> str:
        """The lines ``bdh eval`` prints after scoring."""
        lines = self._metric_lines() if self.metrics is not None else self._curve_lines()
        if self.figure is not None:
            lines.append(f"figure: {self.figure}")
        return "\n".join(lines)

    def _metric_lines(self) -> list[str]:
        """The loss and bits per unit (the standard error of a sample), then the task's metrics."""
        from bdh.train.run.log import se_text

        m, plan = self.metrics, self.plan
        unit = plan.ev.unit
        se = "" if plan.whole else se_text(m)  # the whole split has no sampling error
        lines = [f"loss {m['val_loss']:.4f} nats per {unit}, bits per {unit} {m['val_bpb']:.4f}{se} ({plan.mode})"]
        lines += [f"{k[4:]} {v:.4f}" for k, v in m.items() if k not in ("val_loss", "val_bpb", "val_bpb_se")]
        return lines

    def _curve_lines(self) -> list[str]:
        """The curves by position as a table, the state's gain when both are there, and each curve's total."""
        from ..loss_by_position import curve_table, state_gain

        curves, unit = self.curves, self.plan.ev.unit
        lines = [f"bits per {unit} by position:", curve_table(curves, unit)]
        if len(curves) == 2:  # the carried curve, then the cut one (`StreamPlan.run`)
            gains = state_gain(curves[0][1], curves[1][1])
            lines.append(
                "the state's gain over the cut context (bits, positive: the state helps): "
                + ", ".join(f"{label} {g:+.3f}" for label, g in gains.items())
            )
        for name, curve in curves:
            total = curve.total_bits()
            lines.append(f"loss {total * LN2:.4f} nats per {unit}, bits per {unit} {total:.4f} ({name})")
        return lines


@dataclass(frozen=True)
class RunEval:
    """A planned evaluation: ``model``, its ``folder``, the ``plan``, the ``source`` and ``figure``, and ``read_as``."""

    model: Any
    folder: Path
    plan: WindowPlan | StreamPlan
    source: Path
    figure: str | Path | None = None
    read_as: str = ""

    def header(self) -> str:
        """The lines ``bdh eval`` prints before scoring: the model's folder and the plan's notes."""
        how = f" ({self.read_as})" if self.read_as else ""
        return "\n".join([f"model: {self.folder}{how}", *self.plan.notes])

    def run(self, progress: str = "none") -> EvalResult:
        """Score the plan (``progress``: a mode of `bdh.train.run.log.EvalProgress`) and draw the figure if asked."""
        if isinstance(self.plan, WindowPlan):
            return EvalResult(self.plan, metrics=self.plan.run(self.model, progress))
        curves = self.plan.run(self.model, progress)
        if self.figure is not None:
            from ..loss_by_position import figure

            title = f"{self.source.resolve().name}: loss by context position"
            figure(curves, self.figure, self.plan.trained, title=title, unit=self.plan.ev.unit)
        return EvalResult(self.plan, curves=curves, figure=self.figure)


def open_eval(
    source: str | Path,
    *,
    checkpoint: str | None = None,
    device: Any = "auto",
    data: str | Path | None = None,
    carry: bool = False,
    sliding: bool = False,
    figure: str | Path | None = None,
    hard_gate: bool = False,
    **reading: Any,
) -> RunEval:
    """The evaluation of the run or model folder ``source``: its model, data (``data`` or the validation split) and plan
    (``carry``, ``sliding``, ``reading``). ``figure``: the loss by position drawn there; ``hard_gate``: read the delta
    rule through the hard gate. A one-line `UserError` for options that conflict."""
    from bdh.train.run.model import load_run_model

    from .data import eval_data
    from .plan import plan_eval

    model, folder = load_run_model(source, checkpoint, device)
    if hard_gate:
        from bdh.model import hard_read

        try:
            model = hard_read(model)
        except UserError as exc:
            raise UserError(f"--hard-gate: {exc}") from None
    ev = eval_data(source, model, data)
    if not (carry or sliding) and (figure or reading.get("stride")):
        raise UserError("--figure and --stride go with --carry-state or --sliding")
    plan = plan_eval(ev, model, carry=carry, sliding=sliding, **reading)
    return RunEval(model, folder, plan, Path(source), figure, "read with the hard write gate" if hard_gate else "")


__all__ = ["EvalResult", "RunEval", "open_eval"]
