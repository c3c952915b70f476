"""The trainer: one plain loop in the style of nanoGPT, for any registered model on any registered task.

Per optimiser step ``s`` (0-based):

1. the learning rate of step ``s`` (`bdh.train.schedule`),
2. the global batch ``task.batch("train", s, batch_size, seed)`` (a pure function of ``s``, so the data
   position of a run is just its step); each process takes its rows and walks them in micro-batches,
   accumulating gradients (DistributedDataParallel averages them over processes),
3. loss = cross-entropy summed over the scored targets / the number of scored targets of the global batch,
   so one process with accumulation and K processes compute the same gradient,
4. gradient clipping, AdamW (weight decay on matrices only), a NaN check,
5. evaluation every ``eval.every`` steps, checkpoints every ``checkpoint.every`` steps and on SIGINT/SIGTERM.

Recurrent modes (``train.bptt``): ``window`` trains each window from a zero state; ``tbptt`` asks the task for
consecutive windows (``task.stream_batch``) and carries the model's recurrent state from step to step,
detached (truncated backprop through time, paper appendix B.2), resetting it when the stream starts over;
``none`` detaches attention keys and values (no backprop through time, paper section 7.2).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import inspect
import math
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bdh import devices
from bdh.errors import UserError
from bdh.outputs import write_text

from ..model.io import CheckpointError
from ..tasks.base import IGNORE_INDEX
from . import checkpoint as ckpt
from . import distributed as dist_utils
from . import rng, runtime
from .config import RunConfig, batch_layout, build_section_config
from .log import MetricsLog, Progress, TensorBoard
from .memory import check_fits
from .schedule import learning_rate

LN2 = math.log(2.0)
#: steps timed before a ``train.max_minutes`` budget fixes the length of the run (the first is not timed)
CALIBRATION_STEPS = 12
#: share of the budget planned for training steps (the rest: evaluations, checkpoints, the final sample)
BUDGET_SHARE = 0.93
#: plans of a time budget over the run after the first (one every tenth of the planned steps)
REPLANS = 10


#: model fields that change how a model runs, not what its weights mean (may differ under ``train.init_from``)
RUNTIME_FIELDS = frozenset({"dropout", "attention", "chunk_size"})


class TrainingError(UserError):
    """Training cannot go on (NaN loss, a batch that does not fit, a task and model that do not match)."""


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


class Objective(nn.Module):
    """Summed cross-entropy of one micro-batch: the module DistributedDataParallel wraps, so that recurrent
    steps (``model.step``) also go through DDP's forward."""

    def __init__(self, model: nn.Module, bptt: str):
        super().__init__()
        self.model = model
        self.bptt = bptt

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor, state: Any = None):
        if state is not None:
            logits, state = self.model.step(inputs, state)
        elif self.bptt == "none":
            logits = self.model(inputs, detach_kv=True)
        else:
            logits = self.model(inputs)
        loss = F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
        )
        return loss, state


def resolve_device(name: str, env: dist_utils.DistEnv) -> torch.device:
    """The device of this process: ``train.device`` as `bdh.devices.resolve_device` resolves and checks it
    (``auto``: CUDA if available, else CPU); under torchrun ``auto`` and ``cuda`` mean the local GPU."""
    device = devices.resolve_device(name, what="train.device")
    if device.type == "cuda" and device.index is None and env.enabled:
        device = devices.resolve_device(f"cuda:{env.local_rank}", what=f"train.device (LOCAL_RANK {env.local_rank})")
    return device


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """bf16 where the device supports it (``auto``: CUDA with bf16), None for fp32."""
    if precision == "fp32":
        return None
    if precision == "bf16":
        return torch.bfloat16
    if device.type == "cuda" and runtime.detect(device).bf16:
        return torch.bfloat16
    return None


def make_optimizer(model: nn.Module, config: RunConfig, fused: bool) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices (parameters of 2+ dimensions) and none on vectors."""
    o = config.optim
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": o.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kwargs: dict[str, Any] = {"lr": o.lr, "betas": tuple(o.betas), "eps": o.eps}
    if fused:
        kwargs["fused"] = True
    return torch.optim.AdamW(groups, **kwargs)


def _state_tensors(state: Any, prefix: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A recurrent state dataclass as tensors (its tensor fields) and JSON (the rest)."""
    tensors, scalars = {}, {}
    for f in dataclasses.fields(state):
        value = getattr(state, f.name)
        if isinstance(value, torch.Tensor):
            tensors[f"{prefix}.{f.name}"] = value.detach()
        else:
            scalars[f.name] = value
    return tensors, scalars


class Trainer:
    """Builds everything a run needs from a `RunConfig` and runs the loop; see the module docstring."""

    def __init__(self, config: RunConfig, *, resume: Path | None = None, resume_from: Path | None = None,
                 replan: bool = False):
        """``resume``: a run folder to continue (from ``resume_from``, else its newest checkpoint);
        ``replan``: the resume sets the length of the run anew (see `Trainer._resume_length`)."""
        config.validate()  # every check on the config alone lives there (also run by --print-config)
        self.config = config
        self.env = dist_utils.from_environment()
        t = config.train
        if t.threads is not None:
            torch.set_num_threads(t.threads)
        if t.deterministic:
            torch.use_deterministic_algorithms(True)
        self.device = resolve_device(t.device, self.env)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.caps = runtime.detect(self.device)  # fast paths by capability, never by assumption
        runtime.apply_backend_flags(self.caps)
        if self.device.type == "cpu" and t.keep_freed_memory:
            runtime.keep_freed_memory()
        dist_utils.init(self.env, self.device)
        self.amp_dtype = autocast_dtype(t.precision, self.device)

        # task, model and their agreement
        task_cls, task_config = build_section_config("task", config.task)
        self.task = task_cls(task_config)
        model_spec = dict(config.model)
        self.model_cls, _ = build_section_config("model", model_spec)
        fields = {f.name for f in dataclasses.fields(self.model_cls.config_class)}
        for key, value in (("vocab_size", self.task.vocab_size), ("causal", self.task.causal), ("seq_len", self.task.seq_len)):
            if key in fields and key not in model_spec:
                model_spec[key] = value
        _, self.model_config = build_section_config("model", model_spec)
        vocab = getattr(self.model_config, "vocab_size", self.task.vocab_size)
        if vocab < self.task.vocab_size:
            raise TrainingError(f"model.vocab_size: {vocab} is smaller than the task's vocabulary ({self.task.vocab_size})")
        if getattr(self.model_config, "seq_len", self.task.seq_len) < self.task.seq_len:
            raise TrainingError(
                f"model.seq_len: {self.model_config.seq_len} is shorter than the task's sequences ({self.task.seq_len})"
            )
        if getattr(self.model_config, "causal", self.task.causal) != self.task.causal:
            raise TrainingError(f"model.causal: the task {self.task.name!r} needs causal={self.task.causal}")
        config.model = {"name": config.model["name"], **self.model_config.to_dict()}

        # batch layout: global batch -> rows of this process -> micro-batches
        self.rows, self.micro, self.accum = batch_layout(t, self.env.world_size)
        self.seq_len = self.task.seq_len
        self.tokens_per_step = t.batch_size * self.seq_len
        total = t.max_steps
        if t.max_tokens is not None:
            total = min(total, max(1, -(-t.max_tokens // self.tokens_per_step)))
        self.total_steps = self.step_limit = total
        self.budget_fixed = t.max_minutes is None
        self.elapsed_before = 0.0  # seconds spent by earlier processes of a resumed run
        self.eval_batch = config.eval.batch_size or self.micro
        eval_batch_count(self.task, "val", self.eval_batch, config.eval.batches)  # an endless split fails here, not at step N
        self._check_modes()
        if t.check_memory:
            local = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if self.device.type == "cpu" else 1
            check_fits(self.model_config, self.micro, self.seq_len, self.device, self.amp_dtype, processes=local,
                       form=getattr(self.model_config, "attention", None))

        # model (initialised from the seed, like the official code) and optimiser
        torch.manual_seed(t.seed)
        np.random.seed(t.seed % 2**32)
        random.seed(t.seed)
        self.model = self.model_cls(self.model_config).to(self.device)
        if t.init_from is not None and resume is None:
            self._init_from(t.init_from)
        if self.env.rank:  # dropout differs between processes; rank 0 keeps the single-process stream
            torch.manual_seed(t.seed + 1_000_003 * self.env.rank)
        self.optimizer = make_optimizer(self.model, config, self.caps.fused_adamw)
        self.objective: nn.Module = Objective(runtime.compile_or_eager(self.model) if t.compile else self.model, t.bptt)
        if self.env.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.objective = DDP(self.objective, device_ids=ids)
        self.carry: list[Any] = [None] * self.accum  # recurrent state per micro-batch (tbptt)

        # run folder, resume
        self.step, self.tokens, self.best = 0, 0, None
        self.last_checkpoint: Path | None = None
        self.run_dir = self._make_run_dir(resume)
        if resume is not None:
            self._resume(resume_from, replan)
        #: a resumed run that had already reached its end: `fit` returns at once and nothing is written
        self.finished_before = resume is not None and self.step >= self.total_steps
        self.metrics = MetricsLog(self.run_dir / "metrics.jsonl")
        if self.env.is_main and not self.finished_before:
            write_text(self.run_dir / "config.yaml", config.to_yaml())
            if resume is not None:
                self.metrics.truncate_after(self.step)
        self._signal: int | None = None
        self._fit_start = time.time()

    # ------------------------------------------------------------------ setup helpers
    def _init_from(self, source: str) -> None:
        """Replace the fresh weights by those of a trained model of the same class and configuration."""
        from bdh.model.io import CheckpointError, check_state_dict, load_tensors, read_model_config

        path = ckpt.resolve_model_dir(source)
        cls, cfg = read_model_config(path)
        if cls is not self.model_cls:
            raise TrainingError(f"train.init_from: {path} holds a {cls.__name__}, the run trains a {self.model_cls.__name__}")
        mine, theirs = self.model_config.to_dict(), cfg.to_dict()
        diff = sorted(k for k in set(mine) | set(theirs) if k not in RUNTIME_FIELDS and mine.get(k) != theirs.get(k))
        if diff:
            shown = ", ".join(f"{k}: {theirs.get(k)!r} there, {mine.get(k)!r} here" for k in diff[:3])
            raise TrainingError(f"train.init_from: {path} has another model configuration ({shown})")
        tensors = load_tensors(path / "model.safetensors", device=self.device)
        try:
            check_state_dict(self.model, tensors, str(path))
        except CheckpointError as exc:
            raise TrainingError(f"train.init_from: {exc}") from None
        self.model.load_state_dict(tensors)

    def _check_modes(self) -> None:
        bptt = self.config.train.bptt
        if bptt == "tbptt":
            if not hasattr(self.task, "stream_batch"):
                raise TrainingError(f"train.bptt: tbptt needs consecutive windows, and task {self.task.name!r} has no stream_batch")
            if not (hasattr(self.model_cls, "init_state") and hasattr(self.model_cls, "step")):
                raise TrainingError(f"train.bptt: tbptt needs a recurrent model (init_state/step); {self.config.model['name']!r} has none")
            self.task.lane_windows("train", self.config.train.batch_size)  # fails early if the split is too short
        if bptt == "none" and "detach_kv" not in inspect.signature(self.model_cls.forward).parameters:
            raise TrainingError(f"train.bptt: none needs a model whose forward takes detach_kv; {self.config.model['name']!r} does not")

    def _make_run_dir(self, resume: Path | None) -> Path:
        if resume is not None:
            return Path(resume)
        path = None
        if self.env.is_main:
            if self.config.run_dir:
                p = Path(self.config.run_dir)
                if p.exists() and any(p.iterdir()):
                    raise TrainingError(f"run_dir: {p} already exists and is not empty; resume it with --resume {p}, or pick another run_dir")
            else:
                base = Path("runs") / datetime.now().strftime("%Y%m%d-%H%M%S")
                p, k = base, 1
                while p.exists():
                    k += 1
                    p = base.with_name(f"{base.name}-{k}")
            p.mkdir(parents=True, exist_ok=True)
            path = str(p)
        path = dist_utils.broadcast_object(path, self.env)
        self.config.run_dir = path
        return Path(path)

    def _resume(self, resume_from: Path | None, replan: bool) -> None:
        found = ckpt.list_checkpoints(self.run_dir)
        path = resume_from or (found[-1] if found else None)
        if path is None:
            raise CheckpointError(f"{self.run_dir}: no checkpoint to resume from (checkpoints/step-N)")
        try:
            state = ckpt.load_checkpoint(path, self.model, self.optimizer, self.device)
        except CheckpointError as exc:
            previous = ckpt.latest_good(self.run_dir, before=path)
            hint = (f"; the previous good checkpoint {previous.name} is still there: resume from it with --checkpoint {previous.name}"
                    if previous else "")
            raise CheckpointError(f"{exc}{hint}") from None
        meta = state.meta
        self.step, self.tokens, self.best = int(meta["step"]), int(meta["tokens"]), meta.get("best")
        self._resume_length(meta, path, replan)
        self.last_checkpoint = path
        saved_world = int(meta.get("world_size", 1))
        r = self.env.rank
        if saved_world != self.env.world_size and self.config.train.bptt == "tbptt":
            raise CheckpointError(f"{path}: written by {saved_world} processes; a tbptt run must resume with the same number")
        rng_states = {k.split(".", 2)[2]: v for k, v in state.tensors.items() if k.startswith(f"rng.{r}.")}
        if rng_states:
            rng.restore(rng_states)
        else:  # a process the checkpoint did not have: a fresh stream, still seeded
            torch.manual_seed(self.config.train.seed + 1_000_003 * r + self.step)
        carry_meta = meta.get("carry", {})
        for j in range(self.accum):
            prefix = f"carry.{r}.{j}"
            tensors = {k[len(prefix) + 1 :]: v.to(self.device) for k, v in state.tensors.items() if k.startswith(prefix + ".")}
            if tensors:
                self.carry[j] = self.model.init_state(self.micro).__class__(**tensors, **carry_meta.get(f"{r}.{j}", {}))

    def _resume_length(self, meta: dict[str, Any], path: Path, replan: bool) -> None:
        """The length of a resumed run: the one a time budget fixed (saved in the checkpoint), unless
        ``replan`` (the resume sets ``train.max_steps`` or ``train.max_tokens``): then the config's limit,
        with the time budget counted again from the resume. A limit below the checkpoint's step is refused."""
        t = self.config.train
        if self.step_limit < self.step:
            key = "train.max_tokens" if self.step_limit < t.max_steps else "train.max_steps"
            raise TrainingError(f"{key}: the run would end at step {self.step_limit}, before its checkpoint {path.name} "
                                f"at step {self.step}; give a {key} that reaches step {self.step} or more")
        if replan:
            return  # total_steps = the new limit; elapsed_before = 0: a fresh time budget
        self.elapsed_before = float(meta.get("elapsed", 0.0))
        if t.max_minutes is not None and meta.get("budget_fixed"):
            self.total_steps, self.budget_fixed = int(meta["total_steps"]), True

    # ------------------------------------------------------------------ one step
    def _autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def train_step(self, step: int) -> tuple[float, float]:
        """One optimiser step on global batch ``step``; returns (loss, gradient norm before clipping)."""
        t = self.config.train
        reset = False
        if t.bptt == "tbptt":
            inputs, targets, reset = self.task.stream_batch("train", step, t.batch_size, t.seed)
        else:
            inputs, targets = self.task.batch("train", step, t.batch_size, t.seed)
        count = int((targets != IGNORE_INDEX).sum())
        if count == 0:
            raise TrainingError(f"task {self.task.name!r}: batch {step} has no scored targets")
        lo = self.env.rank * self.rows
        inputs, targets = inputs[lo : lo + self.rows].to(self.device), targets[lo : lo + self.rows].to(self.device)
        scale = self.env.world_size / count  # DDP averages over processes, so each sums its share x W
        total = torch.zeros((), device=self.device)
        for j in range(self.accum):
            x = inputs[j * self.micro : (j + 1) * self.micro]
            y = targets[j * self.micro : (j + 1) * self.micro]
            state = None
            if t.bptt == "tbptt":
                state = self.model.init_state(self.micro) if (reset or self.carry[j] is None) else self.carry[j]
            sync = j == self.accum - 1 or not self.env.enabled
            ctx = contextlib.nullcontext() if sync else self.objective.no_sync()
            with ctx:
                with self._autocast():
                    loss_sum, new_state = self.objective(x, y, state)
                (loss_sum * scale).backward()
            if new_state is not None:
                self.carry[j] = new_state.detach()
            total += loss_sum.detach()
        total = dist_utils.all_reduce_sum(total, self.env)
        clip = self.config.optim.grad_clip
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip is not None else float("inf"))
        loss = float(total) / count
        if math.isfinite(loss):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss, float(norm)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, model: nn.Module | None = None, batches: int | None = None) -> dict[str, float]:
        """Validation loss, bits per token and the task's metrics, token-weighted over the eval batches."""
        model = model or self.model
        return evaluate(model, self.task, self.eval_batch, batches if batches is not None else self.config.eval.batches,
                        self.config.train.seed, self._autocast)

    # ------------------------------------------------------------------ checkpoints
    def _trainer_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """RNG states and carried recurrent states of every process (gathered to all; rank 0 writes)."""
        tensors: dict[str, torch.Tensor] = {}
        mine = rng.capture()
        for name in sorted(mine):
            value = mine[name].to(self.device) if self.env.enabled and self.device.type == "cuda" else mine[name]
            for r, v in enumerate(dist_utils.gather(value, self.env)):
                tensors[f"rng.{r}.{name}"] = v.cpu()
        carry_meta: dict[str, Any] = {}
        for j, state in enumerate(self.carry):
            if state is None:
                continue
            ts, scalars = _state_tensors(state, "x")
            for name, value in ts.items():
                for r, v in enumerate(dist_utils.gather(value, self.env)):
                    tensors[f"carry.{r}.{j}.{name[2:]}"] = v.cpu()
            for r in range(self.env.world_size):
                carry_meta[f"{r}.{j}"] = scalars  # positions advance identically on every process
        return tensors, carry_meta

    def save(self) -> Path | None:
        """Write checkpoints/step-N (rank 0); every process takes part in gathering the state."""
        tensors, carry_meta = self._trainer_state()
        path = None
        if self.env.is_main:
            meta = {"step": self.step, "tokens": self.tokens, "best": self.best, "world_size": self.env.world_size,
                    "carry": carry_meta, "total_steps": self.total_steps, "budget_fixed": self.budget_fixed,
                    "elapsed": self.elapsed_before + time.time() - self._fit_start}
            path = ckpt.save_checkpoint(self.run_dir, self.step, self.model, self.optimizer, tensors, meta, self.config.checkpoint.keep)
        dist_utils.barrier(self.env)
        self.last_checkpoint = self.run_dir / "checkpoints" / f"step-{self.step}"
        return path

    def _update_best(self, metrics: dict[str, float]) -> None:
        name, higher = self.task.target_metric
        key = f"val_{name}"
        if key not in metrics:
            key = "val_loss"
            higher = False
        value = metrics[key]
        if self.best is None or (value > self.best["value"] if higher else value < self.best["value"]):
            self.best = {"step": self.step, "metric": key, "value": value}
            if self.env.is_main:
                ckpt.save_best(self.run_dir, self.model, {"step": self.step, "tokens": self.tokens, "metric": key,
                                                          "value": value, "metrics": metrics})

    def _target_reached(self, metrics: dict[str, float]) -> bool:
        target = self.config.train.target
        if target is None:
            return False
        name, higher = self.task.target_metric
        value = metrics.get(f"val_{name}")
        return value is not None and (value >= target if higher else value <= target)

    # ------------------------------------------------------------------ the loop
    def _on_signal(self, signum, frame) -> None:
        if self._signal is not None:
            raise KeyboardInterrupt
        self._signal = signum

    def fit(self) -> TrainResult:
        """Train until the step, token or target limit, or a signal; always leaves a checkpoint.
        A resumed run that had already reached its end returns at once, writing nothing."""
        if self.finished_before:
            return TrainResult(self.run_dir, self.step, self.total_steps, self.tokens, 0.0, {}, self.best,
                               checkpoint=self.last_checkpoint, model=self.model, task=self.task, finished_before=True)
        cfg = self.config
        main = self.env.is_main
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                handlers[sig] = signal.signal(sig, self._on_signal)
        progress = Progress(self.total_steps, self.step, cfg.log.progress if main else "none")
        board = TensorBoard(self.run_dir / "tensorboard", cfg.log.tensorboard and main)
        start = self._fit_start = time.time()
        tokens_before = self.tokens
        budget = None if cfg.train.max_minutes is None else cfg.train.max_minutes * 60.0 - self.elapsed_before
        timed_from = None  # (step, training seconds so far) where the current timing started
        step_seconds = 0.0  # time spent in training steps (not evaluations or checkpoints)
        metrics: dict[str, float] = {}
        stop = None
        saved_at = self.step if self.last_checkpoint is not None else -1
        evaluated_at = -1
        try:
            if main and self.step > 0:
                progress.message(f"resuming {self.run_dir} from step {self.step} of {self.total_steps} "
                                 f"({self.tokens:,} tokens trained before)")
            if main and self.step == 0:
                progress.message(
                    f"run {self.run_dir}: {self.config.model['name']} ({sum(p.numel() for p in self.model.parameters()):,} parameters), "
                    f"task {self.task.name}, {self.total_steps} steps of {self.config.train.batch_size} x {self.seq_len} tokens"
                    f"{f' over {self.env.world_size} processes' if self.env.enabled else ''}, device {self.device}"
                )
            self.model.train()
            last_time, last_step = time.time(), self.step
            while self.step < self.total_steps:
                lr = learning_rate(self.step, lr=cfg.optim.lr, min_lr=cfg.optim.min_lr, warmup_steps=self.warmup_steps(),
                                   total_steps=self.total_steps, decay=cfg.optim.decay)
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                step_start = time.time()
                loss, norm = self.train_step(self.step)
                step_seconds += time.time() - step_start
                if not math.isfinite(loss):
                    good = self.last_checkpoint.name if self.last_checkpoint else "none (no checkpoint was written yet)"
                    raise TrainingError(
                        f"loss is {loss} at step {self.step + 1}; training stopped; the last good checkpoint is {good} "
                        f"in {self.run_dir} (try a lower optim.lr or optim.grad_clip)"
                    )
                self.step += 1
                self.tokens += self.tokens_per_step
                now = time.time()
                tok_s = (self.step - last_step) * self.tokens_per_step / max(now - last_time, 1e-9)
                if main:
                    progress.update(self.step, loss, tok_s)
                    if self.step % cfg.log.every == 0 or self.step == self.total_steps:
                        record = {"kind": "train", "step": self.step, "loss": loss, "lr": lr, "grad_norm": norm,
                                  "tokens": self.tokens, "tok_per_s": tok_s, "time": now - start}
                        self.metrics.write(record)
                        board.scalars("train", record, self.step)
                last_time, last_step = now, self.step
                if budget is not None:
                    if timed_from is None:
                        timed_from = (self.step, step_seconds)  # the first step (warm-up, allocation) is not timed
                    elif self.step - timed_from[0] >= self._replan_every():
                        per_step = (step_seconds - timed_from[1]) / (self.step - timed_from[0])
                        self._plan_budget(per_step, now, start, budget, progress)
                        timed_from = (self.step, step_seconds)
                    if dist_utils.any_flag(now - start >= budget, self.env, self.device) and stop is None:
                        progress.message(f"time budget of train.max_minutes={cfg.train.max_minutes} spent at step {self.step}")
                        stop = "budget"
                if dist_utils.any_flag(self._signal is not None, self.env, self.device):
                    stop = self._signal or signal.SIGTERM
                due_eval = (cfg.eval.every and self.step % cfg.eval.every == 0) or self.step == self.total_steps
                if due_eval and (stop is None or stop == "budget"):
                    metrics = self._eval_and_log(progress, board, loss, tok_s)
                    evaluated_at = self.step
                    last_time = time.time()  # tokens/s measures training, not evaluation
                    if self._target_reached(metrics):
                        progress.message(f"target {cfg.train.target} of val_{self.task.target_metric[0]} reached at step {self.step}")
                        stop = "target"
                due_ckpt = (cfg.checkpoint.every and self.step % cfg.checkpoint.every == 0) or self.step == self.total_steps
                if due_ckpt or stop is not None:
                    self.save()
                    saved_at = self.step
                    last_time = time.time()
                if stop is not None:
                    break
            if saved_at != self.step:
                self.save()
            if stop in (None, "budget") and evaluated_at != self.step:
                metrics = self._eval_and_log(progress, board, float("nan"), 0.0)
        finally:
            progress.close()
            board.close()
            for sig, old in handlers.items():
                signal.signal(sig, old)
        interrupted = stop if isinstance(stop, int) else None
        return TrainResult(self.run_dir, self.step, self.total_steps, self.tokens, time.time() - start, metrics,
                           self.best, interrupted, self.last_checkpoint, self.model, self.task,
                           new_tokens=self.tokens - tokens_before)

    def warmup_steps(self) -> int:
        """``optim.warmup_steps``; under a time budget at most a tenth of the (possibly shortened) run."""
        warmup = self.config.optim.warmup_steps
        if self.config.train.max_minutes is not None:
            warmup = min(warmup, max(1, self.total_steps // 10))
        return warmup

    def _replan_every(self) -> int:
        """Steps between two plans of a time budget: `CALIBRATION_STEPS` for the first, then a tenth of the
        planned run, so that a machine whose speed changes (a brief load at the start) is followed before
        the run ends: each plan uses the time per step since the last one."""
        return CALIBRATION_STEPS if not self.budget_fixed else max(CALIBRATION_STEPS, self.total_steps // REPLANS)

    def _plan_budget(self, per_step: float, now: float, start: float, budget: float, progress: Progress) -> None:
        """Set the length of the run so that it fits the time budget, from the measured time per training step.

        Called after `CALIBRATION_STEPS` steps, then every tenth of the planned run (`_replan_every`) with
        the time per step since the last plan; the run may grow back up to ``train.max_steps`` / ``max_tokens``.
        The same plan is made on every process (the time per step is averaged over them).
        """
        per_step = float(dist_utils.all_reduce_sum(torch.tensor([per_step], device=self.device), self.env)[0]) / self.env.world_size
        every = self.config.eval.every
        # an evaluation reads eval.batches x eval batch windows forward only: about a third of a step per row
        per_eval = (self.config.eval.batches or 16) * per_step * self.eval_batch / max(self.rows, 1) / 3
        cap = self.step_limit
        fits = cap
        for _ in range(3):  # the number of evaluations depends on the length of the run
            evals = (max(0, fits // every - self.step // every) if every else 0) + 1
            remaining = budget * BUDGET_SHARE - (now - start) - evals * per_eval
            fits = min(cap, self.step + max(0, int(remaining / per_step)))
        fits = max(self.step + 1, fits)
        if fits != self.total_steps and abs(fits - self.total_steps) > 0.03 * self.total_steps:
            self.total_steps = fits
            progress.total = fits
            if progress.bar is not None:
                progress.bar.total = fits
                progress.bar.refresh()
            progress.message(
                f"{per_step:.2f} s/step measured at step {self.step}: {fits} steps fit train.max_minutes="
                f"{self.config.train.max_minutes} (the schedule decays over them)"
            )
        self.budget_fixed = True

    def _eval_and_log(self, progress: Progress, board: TensorBoard, loss: float, tok_s: float) -> dict[str, float]:
        metrics: dict[str, float] = {}
        if self.env.is_main:
            self.model.eval()
            metrics = self.evaluate()
            self.model.train()
            record = {"kind": "eval", "step": self.step, "tokens": self.tokens, **metrics}
            self.metrics.write(record)
            board.scalars("eval", metrics, self.step)
            progress.eval_line(self.step, loss, tok_s, metrics)
        metrics = dist_utils.broadcast_object(metrics, self.env)
        if metrics:
            self._update_best(metrics)
        return metrics

    def close(self) -> None:
        """Leave the process group. The DistributedDataParallel wrapper goes first: its reducer holds work
        of the group, and freeing that at interpreter exit, after the group, aborted a process now and then."""
        if self.env.enabled and self.objective is not self.model:
            self.objective = None
            gc.collect()
        dist_utils.shutdown(self.env)


def eval_batch_count(task: Any, split: str, batch_size: int, batches: int | None) -> int:
    """How many batches an evaluation of ``split`` reads: ``batches``, at most one pass over the split;
    a `TrainingError` if the split is endless and ``batches`` is None."""
    n = task.num_batches(split, batch_size)
    n = batches if n is None else (n if batches is None else min(n, batches))
    if n is None:
        raise TrainingError(f"eval.batches: task {task.name!r} has an endless {split} split; give a number")
    return n


@torch.no_grad()
def evaluate(model: nn.Module, task: Any, batch_size: int, batches: int | None, seed: int, autocast=contextlib.nullcontext,
             split: str = "val") -> dict[str, float]:
    """Token-weighted validation metrics of ``model`` over the first ``batches`` batches of ``split``
    (all of them when None): ``val_loss`` (nats per scored token), ``val_bpb`` (bits per token; bits per
    byte for byte-level text) and every metric of ``task.metrics`` as ``val_<name>``."""
    device = next(model.parameters()).device
    n = eval_batch_count(task, split, batch_size, batches)
    was_training = model.training
    model.eval()
    loss_sum, count, sums, weights = 0.0, 0, {}, {}
    try:
        for i in range(n):
            inputs, targets = task.batch(split, i, batch_size, seed)
            inputs, targets = inputs.to(device), targets.to(device)
            with autocast():
                logits = model(inputs)
            logits = logits.float()
            c = int((targets != IGNORE_INDEX).sum())
            if c == 0:
                continue
            loss_sum += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                              ignore_index=IGNORE_INDEX, reduction="sum"))
            count += c
            for key, value in task.metrics(logits, targets, inputs).items():
                # weighted by the scored tokens of the batches that report the key (per-slice metrics
                # appear only in their slice's batches)
                sums[key] = sums.get(key, 0.0) + float(value) * c
                weights[key] = weights.get(key, 0) + c
    finally:
        model.train(was_training)
    if count == 0:
        return {}
    out = {f"val_{k}": v / weights[k] for k, v in sums.items()}
    out["val_loss"] = loss_sum / count
    out["val_bpb"] = out["val_loss"] / LN2
    return out


def train(config: RunConfig, *, resume: str | Path | None = None, resume_from: str | Path | None = None,
          replan: bool = False) -> TrainResult:
    """Run (or resume) a training run described by ``config``; the library entry point of ``bdh train``.
    ``replan``: a resume that sets the length of the run anew (see `Trainer._resume_length`)."""
    trainer = Trainer(config, resume=Path(resume) if resume else None, resume_from=Path(resume_from) if resume_from else None,
                      replan=replan)
    try:
        return trainer.fit()
    finally:
        trainer.close()


def load_run_config(run_dir: str | Path) -> dict[str, Any]:
    """The raw resolved config of a run folder (RUN_DIR/config.yaml)."""
    from .config import read_config_file

    path = Path(run_dir) / "config.yaml"
    if not Path(run_dir).is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run folder")
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: not a run folder (no config.yaml)")
    return read_config_file(path)


__all__ = ["Objective", "TrainResult", "Trainer", "TrainingError", "evaluate", "load_run_config", "train"]
