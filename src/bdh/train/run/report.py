"""What ``bdh train`` says after `train` returns: `train_report` (lines before a sample, the sample, lines after), and
`resume_checkpoint`, `resume_replans`, the two choices a resume makes.

    result = train(config)
    report = train_report(config, result)
    text = report.text(report.sample.generate(result.model) if report.sample else b"")"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the fields whose ``--set`` on a resume sets the run's length anew (`bdh.train.trainer.train`'s ``replan``)
LENGTH_FIELDS = ("train.max_steps", "train.max_tokens")


def resume_checkpoint(resume: str | Path | None, checkpoint: str | None) -> Path | None:
    """``resume/checkpoints/CHECKPOINT`` (a folder), or None (the latest) when no ``checkpoint`` is named."""
    if not (resume and checkpoint):
        return None
    path = Path(resume) / "checkpoints" / checkpoint
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such checkpoint")
    return path


def resume_replans(resume: str | Path | None, overrides: Sequence[str]) -> bool:
    """Whether a resume sets ``train.max_steps`` or ``train.max_tokens``, which then wins over a budget's length."""
    return bool(resume) and any(item.split("=", 1)[0].strip() in LENGTH_FIELDS for item in overrides)


@dataclass(frozen=True)
class Sample:
    """The sample a finished byte-level run shows: ``max_new_tokens`` after ``prompt`` (config section ``sample``)."""

    prompt: bytes
    max_new_tokens: int
    temperature: float
    top_k: int | None
    seed: int | None

    def generate(self, model: Any) -> bytes:
        """The prompt and the bytes ``model`` generates after it (`model.stream`), as the command streams them."""
        import torch

        tokens = torch.tensor(list(self.prompt), dtype=torch.long)
        options = {"temperature": self.temperature, "top_k": self.top_k, "top_p": None, "repetition_penalty": 1.0}
        made = model.stream(tokens, self.max_new_tokens, **options, stop=None, seed=self.seed)
        return self.prompt + bytes(int(token[0]) for token in made)


@dataclass(frozen=True)
class TrainReport:
    """The ``before`` lines, the streamed ``sample``, the ``after`` lines (stderr when ``error``), the
    exit ``status``."""

    before: list[str]
    sample: Sample | None = None
    after: list[str] = field(default_factory=list)
    error: bool = False
    status: int = 0

    def text(self, sample: bytes = b"") -> bytes:
        """The bytes the command writes, given the ``sample`` bytes it generated (`Sample.generate`)."""
        lines = "".join(f"{line}\n" for line in self.before).encode()
        middle = sample + b"\n" if self.sample is not None else b""
        return lines + middle + "".join(f"{line}\n" for line in self.after).encode()


def _finished_lines(result: Any) -> list[str]:
    """The run folder, the steps, tokens and speed, and the last validation."""
    from .log import metric_text, se_text

    m = result.metrics
    resumed = result.new_tokens != result.tokens
    lines = [
        f"run folder: {result.run_dir}",
        f"trained {result.step} steps, {result.tokens:,} tokens"
        + (f" ({result.new_tokens:,} of them in this process)" if resumed else "")
        + f" in {result.seconds / 60:.1f} min ({result.new_tokens / max(result.seconds, 1e-9):,.0f} tokens/s)",
    ]
    if m:
        extra = metric_text(m, skip=("val_loss", "val_bpb", "val_bpb_se"))
        lines.append(
            f"validation: loss {m['val_loss']:.4f}, bits per byte {m['val_bpb']:.4f}{se_text(m)}"
            + (f", {extra}" if extra else "")
        )
    return lines


#: the steps near the end of a run below this share of its speed at the start: slowed down, not slow throughout
SLOWED = 0.5


def busy_machine(speeds: tuple[float, float] | None) -> str:
    """`` (the machine was busy: ...)`` when the end speed fell below `SLOWED` of the start's and the load exceeds the
    CPUs, else ``''``."""
    import os

    if speeds is None or not speeds[1] < SLOWED * speeds[0]:
        return ""
    try:
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
    except (AttributeError, OSError):  # no load average on this system
        return ""
    if load <= cores:
        return ""
    share = speeds[1] / speeds[0]
    return (
        f" (the machine was busy: load average {load:.1f} on {cores} cores, and the last steps ran at {share:.0%} of "
        "the speed of the first)"
    )


def _is_main_job(config: Any) -> bool:
    """Whether ``config`` trains the main job (model, data, batch, learning rate) that `MEASURED_BPB` records."""
    from ..config import RunConfig

    job = RunConfig()
    same = config.model == job.model and config.task == job.task and config.optim.lr == job.optim.lr
    return same and config.train.batch_size == job.train.batch_size


def documented_gap(config: Any, step: int, metrics: dict[str, Any]) -> str:
    """``; ...``: how far the main job cut at ``step`` is from its documented full run, or that a cut run's
    numbers are."""
    import math

    from ..main_job import MEASURED_BPB

    if not _is_main_job(config):
        return "; its validation is that of a run cut short, not of its full length"
    full_step, full = max(MEASURED_BPB.items())
    near = max((s for s in MEASURED_BPB if s <= step), default=min(MEASURED_BPB))
    source = f"(docs/training.md; {MEASURED_BPB[near]:.2f} at step {near:,})"
    own = metrics.get("val_bpb")
    if not isinstance(own, (int, float)) or not math.isfinite(own):
        return f"; the documented main job reached {full:.2f} bits per byte at step {full_step:,} {source}"
    return (
        f"; its validation, {own:.2f} bits per byte, is {own - full:+.2f} from the {full:.2f} the documented main "
        f"job reached at step {full_step:,} {source}"
    )


def budget_note(config: Any, result: Any, metrics: dict[str, float]) -> str:
    """The one diagnosis of a run its time budget ended early: where, how far from its full result, the command
    to finish."""
    return (
        f"the time budget train.max_minutes={config.train.max_minutes} ended the run at step {result.step} of "
        f"{result.step_limit} steps{busy_machine(result.speeds)}{documented_gap(config, result.step, metrics)}; to "
        f"finish this run: {budget_command(result.run_dir)}"
    )


def budget_command(run_dir: str | Path) -> str:
    """The command that trains a run its time budget cut to its step limit."""
    return f"bdh train --resume {run_dir} --set train.max_minutes=null"


def train_report(config: Any, result: Any, resume: str | Path | None = None) -> TrainReport:
    """The report of ``result``: one line for a finished resume or an interrupted run (stderr, its signal's status, the
    command that continues it); else folder, length, speed, last validation, a sample and the budget note."""
    from bdh.errors import exit_status

    from ..recurrent import StreamingModel

    if result.finished_before:
        if result.budget_cut:
            return TrainReport([f"{resume}: finished; {budget_note(config, result, _last_eval(resume))}"])
        return TrainReport(
            [
                f"{resume}: finished at step {result.step} of {result.total_steps}; nothing to do (to train longer: "
                f"bdh train --resume {resume} --set train.max_steps=M with M > {result.step})"
            ]
        )
    if result.interrupted is not None:
        line = (
            f"interrupted at step {result.step}/{result.total_steps}; saved {result.checkpoint}; "
            f"continue with: bdh train --resume {result.run_dir}"
        )
        return TrainReport([line], error=True, status=exit_status(result.interrupted))
    before, s, task, sample = _finished_lines(result), config.sample, result.task, None
    if (
        s.max_new_tokens
        and getattr(task, "vocab_size", None) == 256
        and getattr(task, "causal", False)
        and isinstance(result.model, StreamingModel)
    ):
        before.append(f"sample (temperature {s.temperature}, seed {s.seed}):")
        sample = Sample(s.prompt.encode("utf-8"), s.max_new_tokens, s.temperature, s.top_k, s.seed)
    after = []
    if result.budget_cut:
        after.append(budget_note(config, result, result.metrics))
    return TrainReport(before, sample, after)


def _last_eval(run_dir: str | Path | None) -> dict[str, float]:
    """The last evaluation ``run_dir/metrics.jsonl`` logged (empty when there is none)."""
    from .log import read_metrics

    evals = [r for r in read_metrics(Path(run_dir or ".") / "metrics.jsonl") if r.get("kind") == "eval"]
    return evals[-1] if evals else {}
