"""The trainer: one plain loop in the style of nanoGPT, for any registered model on any registered task.

Per optimiser step ``s`` (0-based), `Trainer.fit` and `Trainer.train_step`:

1. the learning rate of step ``s`` (`bdh.train.schedule`),
2. the global batch ``task.batch("train", s, batch_size, seed)`` (a pure function of ``s``); each process takes its
   rows in micro-batches, accumulating gradients (DDP, or FSDP2 with ``train.parallel: fsdp``, averages them),
3. loss = cross-entropy summed over the scored targets / the scored targets of the global batch, so one process
   with accumulation and K processes compute the same gradient,
4. gradient clipping, AdamW (weight decay on matrices only), a NaN check,
5. evaluation every ``eval.every`` steps, checkpoints every ``checkpoint.every`` steps and on a signal.

``train.bptt``: ``window`` trains each window from a zero state; ``tbptt`` carries the state across
consecutive windows, detached (appendix B.2; `bdh.train.recurrent`); ``state-passing`` starts each window from
the state its row left (Buitrago Ruiz & Gu 2025); ``none`` detaches keys and values (section 7.2).
``train.max_minutes``: `bdh.train.budget`."""

from __future__ import annotations

import gc
import math
import random
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..model.io import CheckpointError
from ..tasks.base import IGNORE_INDEX
from . import build, rng
from .budget import TimeBudget
from .config import RunConfig, load_run_config
from .errors import TrainingError
from .evaluate import evaluate
from .recurrent import TruncatedBPTT
from .run.folder import RunFolder
from .run.log import RunLog
from .runtime.hardware import compile_or_eager
from .schedule import learning_rate
from .signals import StopSignals


@dataclass
class TrainResult:
    """What a finished (or interrupted) run reports."""

    run_dir: Path
    step: int
    total_steps: int
    tokens: int
    seconds: float
    metrics: dict[str, float] = field(default_factory=dict)  # the last evaluation
    best: dict[str, Any] | None = None
    interrupted: int | None = None  # the signal number that stopped the run
    checkpoint: Path | None = None
    model: nn.Module | None = None
    task: Any = None
    finished_before: bool = False  # a resumed run that had already reached its end: nothing trained or written
    new_tokens: int = 0  # tokens trained by this process (``tokens`` counts those before a resume too)
    step_limit: int = 0  # the steps the run's step and token limits allow
    budget_cut: bool = False  # the time budget (train.max_minutes) ended the run before step_limit
    speeds: tuple[float, float] | None = None  # steps/s of this process at its start and near its end


@dataclass
class _Fit:
    """What one call of `Trainer.fit` keeps besides the trainer's own state."""

    log: RunLog
    start: float
    tokens_before: int
    saved_at: int  # the step of the last checkpoint (-1: none)
    evaluated_at: int = -1  # the step of the last evaluation
    evaluated_final: bool = False  # the last evaluation read the final evaluation's batches
    metrics: dict[str, float] = field(default_factory=dict)  # the last evaluation
    stop: str | int | None = None  # "budget", "target", or the number of the signal that stopped the run
    last_time: float = 0.0  # tokens per second are measured from (last_step, last_time)
    last_step: int = 0
    loss: float = float("nan")  # the last training step's loss and tokens per second (shown with evaluations)
    tok_s: float = 0.0


class Trainer:
    """Builds everything a run needs from a `RunConfig` and runs the loop.

    Its parts: ``runtime``, ``task``, ``model``, ``optimizer``, ``objective`` (`bdh.train.build`), ``folder``,
    ``budget`` and ``recurrent`` (the states tbptt carries); its position: ``step`` and ``tokens``."""

    def __init__(
        self,
        config: RunConfig,
        *,
        resume: Path | None = None,
        resume_from: Path | None = None,
        replan: bool = False,
        overwrite: bool = False,
    ):
        """``resume``: a run folder to continue (from ``resume_from``, else its newest checkpoint); ``replan``: the
        resume sets the run's length anew; ``overwrite``: a non-empty ``run_dir`` is emptied (refused otherwise)."""
        self.config, plan = config, build.plan_run(config)
        self.runtime, self.task, self.model_cls, self.seq_len = plan.runtime, plan.task, plan.model_cls, plan.seq_len
        self.rows, self.micro, self.accum, self.eval_batch = plan.rows, plan.micro, plan.accum, plan.eval_batch
        self._limits()
        self._build_model(init_from=config.train.init_from if resume is None else None)
        self.folder = RunFolder(config, self.runtime, resume=resume, overwrite=overwrite)
        try:
            self._open(resume, resume_from, replan)
        except BaseException:
            self.folder.close()
            raise
        self.budget.start(time.time())

    # ------------------------------------------------------------------ setup, in the order __init__ runs it
    def _limits(self) -> None:
        """The length of the run (its step and token limits) and the time budget."""
        t = self.config.train
        self.tokens_per_step = t.batch_size * self.seq_len
        total = t.max_steps
        if t.max_tokens is not None:
            total = min(total, max(1, -(-t.max_tokens // self.tokens_per_step)))
        self.total_steps = self.step_limit = total
        self.budget = TimeBudget(
            t.max_minutes,
            eval_every=self.config.eval.every,
            eval_batches=self.config.eval.batches or 16,
            final_batches=self.config.eval.final() or 16,
            eval_batch=self.eval_batch,
            train_rows=self.rows,
        )

    def _build_model(self, init_from: str | None) -> None:
        """The model (seeded, or ``init_from``), the optimiser, the objective (DDP-wrapped under torchrun),
        tbptt's states."""
        t, rt = self.config.train, self.runtime
        torch.manual_seed(t.seed)
        np.random.seed(t.seed % 2**32)
        random.seed(t.seed)
        self.model = self.model_cls(self.config.model.config).to(rt.device)
        if init_from is not None:
            build.load_initial_weights(self.model, self.model_cls, self.config.model.config, init_from, rt.device)
        if rt.env.rank:  # dropout differs between processes; rank 0 keeps the single-process stream
            torch.manual_seed(t.seed + 1_000_003 * rt.env.rank)
        rt.shard(self.model)  # before the optimiser: sharding replaces the parameters by DTensors
        self.optimizer = build.make_optimizer(self.model, self.config, rt.caps.fused_adamw)
        model = compile_or_eager(self.model) if t.compile else self.model
        self.objective: nn.Module | None = rt.wrap(build.Objective(model, t.bptt))
        self.recurrent = TruncatedBPTT(self.task, self.model, self.micro, self.accum, t.tbptt_windows)

    def _open(self, resume: Path | None, resume_from: Path | None, replan: bool) -> None:
        """The position of the run (step 0, or the resumed checkpoint's) and its config.yaml in the folder."""
        self.step, self.tokens = 0, 0
        self.restarted = False  # a resume of a run that had no checkpoint yet: it starts again from step 0
        if resume is not None:
            self._resume(resume_from, replan)
        #: a resumed run that had already reached its end: `fit` returns at once and nothing is written
        self.finished_before = resume is not None and self.step >= self.total_steps
        if not self.finished_before:
            self.folder.start(self.config, self.step if resume is not None else None)

    def _resume(self, resume_from: Path | None, replan: bool) -> None:
        """Load checkpoint ``resume_from`` (else the newest): weights, optimiser, position, best, length,
        RNGs, states."""
        t, rank = self.config.train, self.runtime.env.rank
        path = self.folder.checkpoint_to_resume(resume_from)
        if path is None:  # stopped before its first checkpoint: its config.yaml is all there is, start again
            self.restarted = True
            if t.init_from is not None:
                build.load_initial_weights(
                    self.model, self.model_cls, self.config.model.config, t.init_from, self.runtime.device
                )
            return
        state = self.folder.load(path, self.model, self.optimizer, self.runtime.device)
        meta = state.meta
        self.step, self.tokens = int(meta["step"]), int(meta["tokens"])
        self._resume_length(meta, path, replan)
        saved_world = int(meta.get("world_size", 1))
        if saved_world != self.runtime.env.world_size and t.bptt in ("tbptt", "state-passing"):
            raise CheckpointError(
                f"{path}: written by {saved_world} processes; a {t.bptt} run must resume with the same number"
            )
        rng_states = {k.split(".", 2)[2]: v for k, v in state.tensors.items() if k.startswith(f"rng.{rank}.")}
        if rng_states:
            rng.restore(rng_states)
        else:  # a process the checkpoint did not have: a fresh stream, still seeded
            torch.manual_seed(t.seed + 1_000_003 * rank + self.step)
        self.recurrent.restore(state.tensors, meta.get("carry", {}), rank, self.runtime.device)

    def _resume_length(self, meta: dict[str, Any], path: Path, replan: bool) -> None:
        """A resumed run's length: the one a time budget fixed, unless ``replan``: then the config's limit, the budget
        counted again from the resume. A limit below the checkpoint's step is refused."""
        t = self.config.train
        if self.step_limit < self.step:
            key = "train.max_tokens" if self.step_limit < t.max_steps else "train.max_steps"
            raise TrainingError(
                f"{key}: the run would end at step {self.step_limit}, before its checkpoint "
                f"{path.name} at step {self.step}; give a {key} that reaches step {self.step} or more"
            )
        if replan:
            return  # total_steps = the new limit; no time spent before: a fresh time budget
        planned = self.budget.resume(meta)
        if planned is not None:
            self.total_steps = planned

    @property
    def carry(self) -> list[Any]:
        """The recurrent state carried per micro-batch of this process (tbptt; None: none yet)."""
        return self.recurrent.carry

    # ------------------------------------------------------------------ the loop
    def fit(self) -> TrainResult:
        """Train to the step, token or target limit, the budget or a signal, leaving a checkpoint; a finished resume
        writes nothing."""
        if self.finished_before:
            return self._result(None)
        with StopSignals() as signals, self._session() as run:
            self._announce(run.log)
            self.model.train()
            run.last_time, run.last_step = time.time(), self.step
            while self.step < self.total_steps:
                lr = self._set_learning_rate()
                step_start = time.time()
                loss, norm = self.train_step(self.step)
                self.budget.count(time.time() - step_start, self.step + 1)
                self._check_loss(loss)
                self.step += 1
                self.tokens += self.tokens_per_step
                now = time.time()
                tok_s = self._log_step(run, now, loss=loss, lr=lr, grad_norm=norm)
                if self.budget.enabled and self._budget_spent(now, run.log):
                    run.stop = "budget"
                if self.runtime.any(signals.received is not None):
                    run.stop = signals.received or signal.SIGTERM
                run.loss, run.tok_s = loss, tok_s
                if self._due(self.config.eval.every) and run.stop in (None, "budget"):
                    self._evaluate_in_loop(run, final=run.stop == "budget" or self.step == self.total_steps)
                if self._due(self.config.checkpoint.every) or run.stop is not None:
                    self.save()
                    run.saved_at, run.last_time = self.step, time.time()
                if run.stop is not None:
                    break
            if run.saved_at != self.step:
                self.save()
            if run.stop in (None, "budget", "target") and not (run.evaluated_at == self.step and run.evaluated_final):
                run.metrics = self._eval_and_log(run, final=True)  # a target reached along the way: read again
        return self._result(run)

    def train_step(self, step: int) -> tuple[float, float]:
        """One optimiser step on global batch ``step``; returns (loss, gradient norm before clipping)."""
        t, rt = self.config.train, self.runtime
        tbptt, reset, carried = t.bptt == "tbptt", False, t.bptt in ("tbptt", "state-passing")
        if tbptt:
            inputs, targets, reset = self.recurrent.batch(step, t.batch_size, t.seed)
        else:
            inputs, targets = self.task.batch("train", step, t.batch_size, t.seed)
        count = int((targets != IGNORE_INDEX).sum())
        if count == 0:
            raise TrainingError(f"task {self.task.name!r}: batch {step} has no scored targets")
        lo = rt.env.rank * self.rows
        inputs, targets = inputs[lo : lo + self.rows].to(rt.device), targets[lo : lo + self.rows].to(rt.device)
        scale = rt.env.world_size / count  # DDP and FSDP average over processes, so each sums its share x W
        total = torch.zeros((), device=rt.device)
        for j in range(self.accum):
            x = inputs[j * self.micro : (j + 1) * self.micro]
            y = targets[j * self.micro : (j + 1) * self.micro]
            state = self.recurrent.state(j, reset) if carried else None
            with rt.gradient_sync(self.model, self.objective, j == self.accum - 1):
                with rt.autocast():
                    loss_sum, new_state = self.objective(x, y, state)
                (loss_sum * scale).backward()
            if new_state is not None:
                self.recurrent.keep(j, new_state)
            total += loss_sum.detach()
        total = rt.sum(total)
        clip = self.config.optim.grad_clip
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip is not None else float("inf"))
        loss = float(total) / count
        if math.isfinite(loss):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss, float(norm)

    # ------------------------------------------------------------------ around a step
    def _set_learning_rate(self) -> float:
        """Set the scheduled learning rate of the coming step in the optimiser; returns it."""
        o = self.config.optim
        lr = learning_rate(
            self.step,
            lr=o.lr,
            min_lr=o.min_lr,
            warmup_steps=self.warmup_steps(),
            total_steps=self.total_steps,
            decay=o.decay,
        )
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def warmup_steps(self) -> int:
        """``optim.warmup_steps``; under a time budget at most a tenth of the (possibly shortened) run."""
        warmup = self.config.optim.warmup_steps
        if self.budget.enabled:
            warmup = min(warmup, max(1, self.total_steps // 10))
        return warmup

    def _check_loss(self, loss: float) -> None:
        """A `TrainingError` naming the last good checkpoint when the loss of the step is not finite."""
        if math.isfinite(loss):
            return
        last = self.folder.last_checkpoint
        good = last.name if last else "none (no checkpoint was written yet)"
        raise TrainingError(
            f"loss is {loss} at step {self.step + 1}; training stopped; the last good checkpoint is {good} "
            f"in {self.folder.path} (try a lower optim.lr or optim.grad_clip)"
        )

    def _log_step(self, run: _Fit, now: float, **values: float) -> float:
        """Show and log the finished step's ``values``; returns the tokens per second since the last measure."""
        tok_s = (self.step - run.last_step) * self.tokens_per_step / max(now - run.last_time, 1e-9)
        record = {"kind": "train", "step": self.step, **values, "tokens": self.tokens, "tok_per_s": tok_s}
        record["time"] = now - run.start
        run.log.train(record, write=self.step % self.config.log.every == 0 or self.step == self.total_steps)
        run.last_time, run.last_step = now, self.step
        return tok_s

    def _due(self, every: int) -> bool:
        """True when the step just finished is a multiple of ``every`` (0: never) or the last one."""
        return bool(every and self.step % every == 0) or self.step == self.total_steps

    def _budget_spent(self, now: float, log: RunLog) -> bool:
        """Under ``train.max_minutes``: replan when due; True, with a line, when the budget is spent on any process."""
        per_step = self.budget.measure(self.total_steps)
        if per_step is not None:
            self._plan_budget(per_step, now, log)
        if not self.runtime.any(self.budget.spent(now)):
            return False
        log.message(f"time budget of train.max_minutes={self.config.train.max_minutes} spent at step {self.step}")
        return True

    def _plan_budget(self, per_step: float, now: float, log: RunLog) -> None:
        """Set the run's length to what fits the budget at ``per_step`` seconds, averaged over the processes."""
        per_step = self.runtime.mean(per_step)
        fits = self.budget.plan(per_step, now, self.step, self.total_steps, self.step_limit)
        if fits is None:
            return
        self.total_steps = fits
        log.set_total(fits)
        log.message(
            f"{per_step:.2f} s/step measured at step {self.step}: {fits} steps fit train.max_minutes="
            f"{self.config.train.max_minutes} (the schedule decays over them)"
        )

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, model: nn.Module | None = None, batches: int | None = None) -> dict[str, float]:
        """Validation loss, bits per token and the task's metrics over the eval batches (`bdh.train.evaluate`)."""
        model = model or self.model
        batches = batches if batches is not None else self.config.eval.batches
        return evaluate(model, self.task, self.eval_batch, batches, self.config.train.seed, self.runtime.autocast)

    def _evaluate_in_loop(self, run: _Fit, final: bool) -> None:
        """A scheduled evaluation (``final``: the last); ``run.stop`` is set when it reaches ``train.target``."""
        run.metrics = self._eval_and_log(run, final)
        run.evaluated_at, run.evaluated_final = self.step, final
        run.last_time = time.time()  # tokens/s measures training, not evaluation
        if self._target_reached(run.metrics):
            run.log.message(
                f"target {self.config.train.target} of val_{self.task.target_metric[0]} reached at step {self.step}"
            )
            run.stop = "target"

    def _eval_and_log(self, run: _Fit, final: bool) -> dict[str, float]:
        """Evaluate on rank 0 (``final``: the final batches), log it beside the training loss, share it, keep
        the best."""
        metrics: dict[str, float] = {}
        rt = self.runtime
        if rt.sharded or rt.env.is_main:  # a sharded forward gathers the weights from every process: all evaluate
            self.model.eval()
            metrics = self.evaluate(batches=self.config.eval.final() if final else None)
            self.model.train()
            run.log.evaluation(self.step, self.tokens, run.loss, run.tok_s, metrics)  # rank 0 logs
        metrics = rt.broadcast(metrics)
        if metrics:
            self.folder.keep_best(metrics, self.task.target_metric, self.model, self.step, self.tokens)
        return metrics

    def _target_reached(self, metrics: dict[str, float]) -> bool:
        """True when ``metrics`` reach ``train.target`` on the task's target metric."""
        target = self.config.train.target
        if target is None:
            return False
        name, higher = self.task.target_metric
        value = metrics.get(f"val_{name}")
        return value is not None and (value >= target if higher else value <= target)

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Path | None:
        """Write checkpoints/step-N (rank 0); every process gathers its RNGs, carried states and sharded weights."""
        tensors: dict[str, torch.Tensor] = {}
        mine = rng.capture()
        for name in sorted(mine):
            for r, v in enumerate(self.runtime.gather(mine[name])):
                tensors[f"rng.{r}.{name}"] = v.cpu()
        carried, carry_meta = self.recurrent.gather(self.runtime.env)
        tensors.update(carried)
        meta = {
            "step": self.step,
            "tokens": self.tokens,
            "world_size": self.runtime.env.world_size,
            "parallel": self.runtime.parallel,
            "carry": carry_meta,
            "total_steps": self.total_steps,
            **self.budget.state(time.time()),
        }
        return self.folder.save(self.step, self.model, self.optimizer, tensors, meta, self.config.checkpoint.keep)

    # ------------------------------------------------------------------ one call of fit
    @contextmanager
    def _session(self) -> Iterator[_Fit]:
        """The reports of one call of `fit` (`RunLog`, closed at its end), its clocks started."""
        log = RunLog(
            self.folder.metrics, self.config, self.folder.path, self.total_steps, self.step, self.runtime.env.is_main
        )
        start = time.time()
        self.budget.start(start)
        saved_at = self.step if self.folder.last_checkpoint is not None else -1
        try:
            yield _Fit(log, start, self.tokens, saved_at)
        finally:
            log.close()

    def _announce(self, log: RunLog) -> None:
        """The first line of the run (rank 0): what it trains, or where it resumes."""
        if self.step > 0:
            log.message(
                f"resuming {self.folder.path} from step {self.step} of {self.total_steps} "
                f"({self.tokens:,} tokens trained before)"
            )
            return
        if self.restarted:
            log.message(
                f"{self.folder.path} has no checkpoint yet: training it from step 0 with its config.yaml (what its "
                "metrics.jsonl logged after step 0 is dropped)"
            )
        params = sum(p.numel() for p in self.model.parameters())
        env = self.runtime.env
        processes = f" over {env.world_size} processes" if env.enabled else ""
        processes += " (fully sharded)" if self.runtime.sharded else ""
        log.message(
            f"run {self.folder.path}: {self.config.model.name} ({params:,} parameters), task {self.task.name}, "
            f"{self.total_steps} steps of {self.config.train.batch_size} x {self.seq_len} tokens{processes}, "
            f"device {self.runtime.device}"
        )

    def _result(self, run: _Fit | None) -> TrainResult:
        """The `TrainResult` of a call of `fit` (``run``: None when the resumed run had already finished)."""
        common = {"best": self.folder.best, "checkpoint": self.folder.last_checkpoint, "task": self.task}
        if run is None:
            return TrainResult(
                self.folder.path,
                self.step,
                self.total_steps,
                self.tokens,
                0.0,
                {},
                **common,
                finished_before=True,
                model=self.result_model(),
                step_limit=self.step_limit,
                budget_cut=self.budget.enabled and self.step < self.step_limit,
            )
        return TrainResult(
            self.folder.path,
            self.step,
            self.total_steps,
            self.tokens,
            time.time() - run.start,
            run.metrics,
            interrupted=run.stop if isinstance(run.stop, int) else None,
            model=self.result_model(),
            new_tokens=self.tokens - run.tokens_before,
            step_limit=self.step_limit,
            budget_cut=run.stop == "budget" or (run.stop is None and self.step < self.step_limit),  # or planned less
            speeds=self.budget.speeds(),
            **common,
        )

    def result_model(self) -> nn.Module | None:
        """The trained model for a `TrainResult`: itself, or for a sharded run a gathered copy on rank 0's CPU
        (None elsewhere)."""
        if not self.runtime.sharded:
            return self.model
        weights = self.runtime.full_weights(self.model)
        if not self.runtime.env.is_main:
            return None
        model = self.model_cls(self.config.model.config)
        model.load_state_dict(weights)
        return model.train(self.model.training)

    def close(self) -> None:
        """Leave the process group, the DDP wrapper first (freeing its reducer after the group aborted processes)."""
        if self.runtime.env.enabled:
            self.objective = None
            gc.collect()
        self.runtime.close()
        self.folder.close()


def train(
    config: RunConfig,
    *,
    resume: str | Path | None = None,
    resume_from: str | Path | None = None,
    replan: bool = False,
    overwrite: bool = False,
) -> TrainResult:
    """Run (or resume) a training run of ``config``: the library entry point of ``bdh train`` (``replan``, ``overwrite``
    as `Trainer`'s)."""
    trainer = Trainer(
        config,
        resume=Path(resume) if resume else None,
        resume_from=Path(resume_from) if resume_from else None,
        replan=replan,
        overwrite=overwrite,
    )
    try:
        return trainer.fit()
    finally:
        trainer.close()


__all__ = ["TrainResult", "Trainer", "TrainingError", "evaluate", "load_run_config", "train"]
