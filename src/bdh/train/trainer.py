"""The trainer: one plain loop in the style of nanoGPT, for any registered model on any registered task.

Per optimiser step ``s`` (0-based):

1. the learning rate of step ``s`` (`bdh.train.schedule`),
2. the global batch ``task.batch("train", s, batch_size, seed)`` (a pure function of ``s``, so the data
   position of a run is just its step); each process takes its rows and walks them in micro-batches,
   accumulating gradients (DistributedDataParallel, or FSDP2 with ``train.parallel: fsdp``, averages them over
   processes; `bdh.train.sharded`),
3. loss = cross-entropy summed over the scored targets / the number of scored targets of the global batch,
   so one process with accumulation and K processes compute the same gradient,
4. gradient clipping, AdamW (weight decay on matrices only), a NaN check,
5. evaluation every ``eval.every`` steps, checkpoints every ``checkpoint.every`` steps and on SIGINT/SIGTERM.

Recurrent modes (``train.bptt``): ``window`` trains each window from a zero state; ``tbptt`` asks the task for
consecutive windows (``task.stream_batch``) and carries the model's recurrent state from step to step,
detached (truncated backprop through time, paper appendix B.2; `bdh.train.recurrent`), resetting it when the
stream starts over; ``none`` detaches attention keys and values (no backprop through time, paper section 7.2).

A time budget (``train.max_minutes``) sets the length of the run from the time its steps take (`bdh.train.budget`).
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bdh import devices
from bdh.errors import Interrupted
from bdh.outputs import empty_folder, folder_entries, folder_lock, write_text

from ..model.config import BDHConfig
from ..model.io import CheckpointError
from ..registry import get_model
from ..tasks.base import IGNORE_INDEX
from . import checkpoint as ckpt
from . import distributed as dist_utils
from . import rng, runtime, sharded
from .budget import TimeBudget
from .config import ConfigError, RunConfig, batch_layout, build_section_config
from .errors import TrainingError
from .evaluate import evaluate
from .log import MetricsLog, Progress, TensorBoard
from .memory import check_fits
from .recurrent import TruncatedBPTT, check_tbptt
from .schedule import learning_rate

LN2 = math.log(2.0)

#: the runtime fields of a model whose config class declares no ``RUNTIME_FIELDS``: BDH's, the names meaning the
#: same in every model (of them the baselines have ``dropout``)
DEFAULT_RUNTIME_FIELDS = BDHConfig.RUNTIME_FIELDS


def runtime_fields(model_config: Any) -> frozenset[str]:
    """The fields of ``model_config`` that change how the model runs, not what its weights mean: they may differ
    from the model ``train.init_from`` starts from (its class's ``RUNTIME_FIELDS``, else `DEFAULT_RUNTIME_FIELDS`)."""
    return frozenset(getattr(type(model_config), "RUNTIME_FIELDS", DEFAULT_RUNTIME_FIELDS))


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
            logits.float().reshape(-1, logits.shape[-1]),
            targets.reshape(-1),
            ignore_index=IGNORE_INDEX,
            reduction="sum",
        )
        return loss, state


def resolve_device(name: str, env: dist_utils.DistEnv) -> torch.device:
    """The device of this process: ``train.device`` as `bdh.devices.resolve_device` resolves and checks it
    (``auto``: CUDA if available, else CPU). A CUDA device always gets its index (``torch.cuda.set_device``
    refuses a bare ``cuda``): under torchrun ``auto`` and ``cuda`` mean the local GPU, otherwise the current one."""
    device = devices.resolve_device(name, what="train.device")
    if device.type == "cuda" and device.index is None:
        if env.enabled:
            index, what = env.local_rank, f"train.device (LOCAL_RANK {env.local_rank})"
        else:
            index, what = torch.cuda.current_device(), "train.device"
        device = devices.resolve_device(f"cuda:{index}", what=what)
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


@dataclass
class _Fit:
    """What one call of `Trainer.fit` keeps besides the trainer's own state."""

    progress: Progress
    board: TensorBoard
    start: float
    tokens_before: int
    saved_at: int  # the step of the last checkpoint (-1: none)
    evaluated_at: int = -1  # the step of the last evaluation
    metrics: dict[str, float] = field(default_factory=dict)  # the last evaluation
    stop: str | int | None = None  # "budget", "target", or the number of the signal that stopped the run
    last_time: float = 0.0  # tokens per second are measured from (last_step, last_time)
    last_step: int = 0


class Trainer:
    """Builds everything a run needs from a `RunConfig` and runs the loop; see the module docstring.

    Its parts: the time budget (`bdh.train.budget.TimeBudget`, ``self.budget``) and the recurrent states
    truncated backprop through time carries (`bdh.train.recurrent.TruncatedBPTT`, ``self.recurrent``).
    """

    def __init__(
        self,
        config: RunConfig,
        *,
        resume: Path | None = None,
        resume_from: Path | None = None,
        replan: bool = False,
        overwrite: bool = False,
        check_only: bool = False,
    ):
        """``resume``: a run folder to continue (from ``resume_from``, else its newest checkpoint);
        ``replan``: the resume sets the length of the run anew (see `Trainer._resume_length`); ``overwrite``:
        a non-empty ``run_dir`` is emptied and the run starts anew in it (refused otherwise); ``check_only``:
        stop after the checks, before the process group, the optimiser and the run folder (`check_run_config`)."""
        config.validate()  # every check on the config alone lives there
        self.config = config
        self.env = dist_utils.from_environment()
        self._setup_process(process_group=not check_only)
        self._setup_task_and_model_config()
        self._setup_layout()
        self._check_run()
        init_from = config.train.init_from if resume is None else None
        if check_only:  # the model train.init_from names: found, verified, of this class and configuration
            if init_from is not None:
                self.model = self.model_cls(self.model_config)
                self._init_from(init_from)
            return
        self._setup_model(init_from=init_from)
        #: the run folder's lock (`bdh.outputs.folder_lock`, rank 0), held until `close`
        self._lock = contextlib.ExitStack()
        try:
            self._setup_run_dir(resume, resume_from, replan, overwrite)
        except BaseException:
            self._lock.close()
            raise
        self._signal: int | None = None
        self.budget.start(time.time())

    # ------------------------------------------------------------------ setup, in the order __init__ runs it
    def _setup_process(self, process_group: bool = True) -> None:
        """Threads, determinism, the device and its fast paths, the process group (unless not ``process_group``)
        and the autocast dtype."""
        t = self.config.train
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
        if process_group:
            dist_utils.init(self.env, self.device)
        #: FSDP2 over the processes (``train.parallel: fsdp`` under torchrun), else DDP or a single process
        self.sharded = self.env.enabled and t.parallel == "fsdp"
        self.amp_dtype = autocast_dtype(t.precision, self.device)

    def _setup_task_and_model_config(self) -> None:
        """The task, then the model config, built once: the fields the task decides (``vocab_size``, ``causal``,
        ``seq_len``) that the run leaves out are the task's; checked against the task, written back to the run
        config (its config.yaml then holds every field)."""
        config = self.config
        task_cls, task_config = build_section_config("task", config.task)
        self.task = task_cls(task_config)
        self.model_cls = get_model(config.model["name"])
        spec = dict(config.model)
        fields = {f.name for f in dataclasses.fields(self.model_cls.config_class)}
        for key in ("vocab_size", "causal", "seq_len"):
            if key in fields and key not in spec:
                spec[key] = getattr(self.task, key)
        _, self.model_config = build_section_config("model", spec)
        self._check_agreement()
        config.model = {"name": config.model["name"], **self.model_config.to_dict()}

    def _check_agreement(self) -> None:
        """The model embeds the task's vocabulary, takes its sequences and reads them as the task needs."""
        task, cfg = self.task, self.model_config
        vocab = getattr(cfg, "vocab_size", task.vocab_size)
        if vocab < task.vocab_size:
            raise TrainingError(f"model.vocab_size: {vocab} is smaller than the task's vocabulary ({task.vocab_size})")
        if getattr(cfg, "seq_len", task.seq_len) < task.seq_len:
            raise TrainingError(f"model.seq_len: {cfg.seq_len} is shorter than the task's sequences ({task.seq_len})")
        if getattr(cfg, "causal", task.causal) != task.causal:
            raise TrainingError(f"model.causal: the task {task.name!r} needs causal={task.causal}")

    def _setup_layout(self) -> None:
        """The batch layout (global batch -> rows of this process -> micro-batches), the length of the run (its
        step and token limits), the evaluation batch and the time budget."""
        t = self.config.train
        self.rows, self.micro, self.accum = batch_layout(t, self.env.world_size)
        # tokens per training example: a task may train on shorter sequences than it validates on (MQAR's
        # train_seq_len); the model is sized to task.seq_len, the longest (_setup_task_and_model_config)
        self.seq_len = getattr(self.task, "train_seq_len", self.task.seq_len)
        self.tokens_per_step = t.batch_size * self.seq_len
        total = t.max_steps
        if t.max_tokens is not None:
            total = min(total, max(1, -(-t.max_tokens // self.tokens_per_step)))
        self.total_steps = self.step_limit = total
        self.eval_batch = self.config.eval.batch_size or self.micro
        self.budget = TimeBudget(
            t.max_minutes,
            eval_every=self.config.eval.every,
            eval_batches=self.config.eval.batches or 16,
            eval_batch=self.eval_batch,
            train_rows=self.rows,
        )

    def _check_run(self) -> None:
        """What would otherwise fail at step N: an endless validation split without ``eval.batches``, a
        ``train.bptt`` mode the task or the model cannot train, a micro-batch that does not fit in memory."""
        t = self.config.train
        eval_batch_count(self.task, "val", self.eval_batch, self.config.eval.batches)
        self._check_modes()
        if t.check_memory:
            local = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if self.device.type == "cpu" else 1
            check_fits(
                self.model_config,
                self.micro,
                self.seq_len,
                self.device,
                self.amp_dtype,
                processes=local,
                form=getattr(self.model_config, "attention", None),
                shards=self.env.world_size if self.sharded else 1,
            )

    def _check_modes(self) -> None:
        """``train.bptt``: tbptt needs a stream task and a recurrent model (`check_tbptt`), none a model whose
        forward can detach attention keys and values."""
        bptt, name = self.config.train.bptt, self.config.model["name"]
        if bptt == "tbptt":
            check_tbptt(self.task, self.model_cls, name, self.config.train.batch_size, self.config.train.tbptt_windows)
        if bptt == "none" and "detach_kv" not in inspect.signature(self.model_cls.forward).parameters:
            raise TrainingError(f"train.bptt: none needs a model whose forward takes detach_kv; {name!r} does not")

    def _setup_model(self, init_from: str | None) -> None:
        """The model (initialised from the seed, like the official code, or from ``init_from``), the optimiser,
        the objective (wrapped by DistributedDataParallel under torchrun) and the states tbptt carries."""
        t = self.config.train
        torch.manual_seed(t.seed)
        np.random.seed(t.seed % 2**32)
        random.seed(t.seed)
        self.model = self.model_cls(self.model_config).to(self.device)
        if init_from is not None:
            self._init_from(init_from)
        if self.env.rank:  # dropout differs between processes; rank 0 keeps the single-process stream
            torch.manual_seed(t.seed + 1_000_003 * self.env.rank)
        if self.sharded:  # before the optimiser: sharding replaces the parameters by DTensors
            sharded.shard(self.model, self.device, self.env.world_size)
        self.optimizer = make_optimizer(self.model, self.config, self.caps.fused_adamw)
        self.objective: nn.Module = Objective(runtime.compile_or_eager(self.model) if t.compile else self.model, t.bptt)
        if self.env.enabled and not self.sharded:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.objective = DDP(self.objective, device_ids=ids)
        self.recurrent = TruncatedBPTT(self.task, self.model, self.micro, self.accum, t.tbptt_windows)

    def _init_from(self, source: str) -> None:
        """Replace the fresh weights by those of a trained model of the same class and configuration (its
        `runtime_fields` aside)."""
        from bdh.model.io import check_state_dict, load_tensors, read_model_config

        path = ckpt.resolve_model_dir(source)
        cls, cfg = read_model_config(path)
        if cls is not self.model_cls:
            raise TrainingError(
                f"train.init_from: {path} holds a {cls.__name__}, the run trains a {self.model_cls.__name__}"
            )
        mine, theirs, free = self.model_config.to_dict(), cfg.to_dict(), runtime_fields(self.model_config)
        diff = sorted(k for k in set(mine) | set(theirs) if k not in free and mine.get(k) != theirs.get(k))
        if diff:
            shown = ", ".join(f"{k}: {theirs.get(k)!r} there, {mine.get(k)!r} here" for k in diff[:3])
            raise TrainingError(f"train.init_from: {path} has another model configuration ({shown})")
        tensors = load_tensors(path / "model.safetensors", device=self.device)
        try:
            check_state_dict(self.model, tensors, str(path))
        except CheckpointError as exc:
            raise TrainingError(f"train.init_from: {exc}") from None
        self.model.load_state_dict(tensors)

    def _setup_run_dir(self, resume: Path | None, resume_from: Path | None, replan: bool, overwrite: bool) -> None:
        """The run folder (a new one, or the resumed one with the state of its checkpoint), locked, its metrics
        log and its config.yaml."""
        self.step, self.tokens, self.best = 0, 0, None
        self.last_checkpoint: Path | None = None
        self.restarted = False  # a resume of a run that had no checkpoint yet: it starts again from step 0
        self.run_dir = self._make_run_dir(resume, overwrite)
        if resume is not None:
            self._resume(resume_from, replan)
        #: a resumed run that had already reached its end: `fit` returns at once and nothing is written
        self.finished_before = resume is not None and self.step >= self.total_steps
        self.metrics = MetricsLog(self.run_dir / "metrics.jsonl")
        if self.env.is_main and not self.finished_before:
            if resume is not None:  # first: a metrics.jsonl that must be refused leaves config.yaml as it was
                self.metrics.truncate_after(self.step)
            write_text(self.run_dir / "config.yaml", self.config.to_yaml())

    def _make_run_dir(self, resume: Path | None, overwrite: bool) -> Path:
        """The run folder: ``resume``, else ``run_dir`` (refused unless new or empty, or ``overwrite``), else
        runs/<timestamp> (followed by ``-<name>`` when the config names the run); made and locked by rank 0
        (`bdh.outputs.folder_lock`: one writer per run folder), its path broadcast to every process and written
        to the run config."""
        path = None
        if self.env.is_main:
            if resume is not None:
                p = Path(resume)
            elif self.config.run_dir:
                p = Path(self.config.run_dir)
            else:
                stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
                base = Path("runs") / (f"{stamp}-{self.config.name}" if self.config.name else stamp)
                p, k = base, 1
                while p.exists():
                    k += 1
                    p = base.with_name(f"{base.name}-{k}")
            self._lock.enter_context(folder_lock(p))
            if resume is None and folder_entries(p):
                if not overwrite:
                    raise TrainingError(
                        f"run_dir: {p} already exists and is not empty; continue it with bdh train --resume {p}, "
                        "start it anew with --overwrite, or pick another run_dir"
                    )
                empty_folder(p)
            path = str(p)
        path = dist_utils.broadcast_object(path, self.env)
        self.config.run_dir = path
        return Path(path)

    def _resume(self, resume_from: Path | None, replan: bool) -> None:
        """Load the checkpoint ``resume_from`` (else the newest): weights, optimiser, position, best metric,
        the length of the run, this process's random streams and carried recurrent states."""
        found = ckpt.list_checkpoints(self.run_dir)
        path = resume_from or (found[-1] if found else None)
        if path is None:  # stopped before its first checkpoint: its config.yaml is all there is, start again
            self.restarted = True
            if self.config.train.init_from is not None:
                self._init_from(self.config.train.init_from)
            return
        try:
            state = ckpt.load_checkpoint(path, self.model, self.optimizer, self.device)
        except CheckpointError as exc:
            previous = ckpt.latest_good(self.run_dir, before=path)
            hint = (
                f"; the previous good checkpoint {previous.name} is still there: resume from it with "
                f"--checkpoint {previous.name}"
                if previous
                else ""
            )
            raise CheckpointError(f"{exc}{hint}") from None
        meta = state.meta
        self.step, self.tokens, self.best = int(meta["step"]), int(meta["tokens"]), meta.get("best")
        self._resume_length(meta, path, replan)
        self.last_checkpoint = path
        saved_world = int(meta.get("world_size", 1))
        r = self.env.rank
        if saved_world != self.env.world_size and self.config.train.bptt == "tbptt":
            raise CheckpointError(
                f"{path}: written by {saved_world} processes; a tbptt run must resume with the same number"
            )
        rng_states = {k.split(".", 2)[2]: v for k, v in state.tensors.items() if k.startswith(f"rng.{r}.")}
        if rng_states:
            rng.restore(rng_states)
        else:  # a process the checkpoint did not have: a fresh stream, still seeded
            torch.manual_seed(self.config.train.seed + 1_000_003 * r + self.step)
        self.recurrent.restore(state.tensors, meta.get("carry", {}), r, self.device)

    def _resume_length(self, meta: dict[str, Any], path: Path, replan: bool) -> None:
        """The length of a resumed run: the one a time budget fixed (saved in the checkpoint), unless
        ``replan`` (the resume sets ``train.max_steps`` or ``train.max_tokens``): then the config's limit,
        with the time budget counted again from the resume. A limit below the checkpoint's step is refused."""
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

    # ------------------------------------------------------------------ one step
    def _autocast(self) -> contextlib.AbstractContextManager:
        """Autocast to the run's reduced precision, or nothing for fp32."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def _gradient_sync(self, sync: bool) -> contextlib.AbstractContextManager:
        """Nothing for the last micro-batch of a step (gradients are averaged over the processes then); for the
        others, DDP's ``no_sync`` or FSDP's local accumulation, so that each step communicates once."""
        if sync or not self.env.enabled:
            return contextlib.nullcontext()
        return sharded.no_sync(self.model) if self.sharded else self.objective.no_sync()

    def train_step(self, step: int) -> tuple[float, float]:
        """One optimiser step on global batch ``step``; returns (loss, gradient norm before clipping)."""
        t = self.config.train
        tbptt, reset = t.bptt == "tbptt", False
        if tbptt:
            inputs, targets, reset = self.recurrent.batch(step, t.batch_size, t.seed)
        else:
            inputs, targets = self.task.batch("train", step, t.batch_size, t.seed)
        count = int((targets != IGNORE_INDEX).sum())
        if count == 0:
            raise TrainingError(f"task {self.task.name!r}: batch {step} has no scored targets")
        lo = self.env.rank * self.rows
        inputs, targets = inputs[lo : lo + self.rows].to(self.device), targets[lo : lo + self.rows].to(self.device)
        scale = self.env.world_size / count  # DDP and FSDP average over processes, so each sums its share x W
        total = torch.zeros((), device=self.device)
        for j in range(self.accum):
            x = inputs[j * self.micro : (j + 1) * self.micro]
            y = targets[j * self.micro : (j + 1) * self.micro]
            state = self.recurrent.state(j, reset) if tbptt else None
            with self._gradient_sync(j == self.accum - 1):
                with self._autocast():
                    loss_sum, new_state = self.objective(x, y, state)
                (loss_sum * scale).backward()
            if new_state is not None:
                self.recurrent.keep(j, new_state)
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
        """Validation loss and bits per token (per scored token) and the task's metrics (each batch weighted by
        its examples) over the eval batches (`bdh.train.evaluate`)."""
        model = model or self.model
        return evaluate(
            model,
            self.task,
            self.eval_batch,
            batches if batches is not None else self.config.eval.batches,
            self.config.train.seed,
            self._autocast,
        )

    # ------------------------------------------------------------------ checkpoints
    def _trainer_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """RNG states and carried recurrent states of every process (gathered to all; rank 0 writes)."""
        tensors: dict[str, torch.Tensor] = {}
        mine = rng.capture()
        for name in sorted(mine):
            value = mine[name].to(self.device) if self.env.enabled and self.device.type == "cuda" else mine[name]
            for r, v in enumerate(dist_utils.gather(value, self.env)):
                tensors[f"rng.{r}.{name}"] = v.cpu()
        carried, carry_meta = self.recurrent.gather(self.env)
        tensors.update(carried)
        return tensors, carry_meta

    def save(self) -> Path | None:
        """Write checkpoints/step-N (rank 0); every process takes part in gathering the state."""
        tensors, carry_meta = self._trainer_state()
        weights = optimizer_state = None
        if self.sharded:  # gathered by every process, written by rank 0: full tensors that load anywhere
            weights = sharded.full_state_dict(self.model, keep=self.env.is_main)
            optimizer_state = sharded.full_optimizer_state(self.optimizer, keep=self.env.is_main)
        path = None
        if self.env.is_main:
            meta = {
                "step": self.step,
                "tokens": self.tokens,
                "best": self.best,
                "world_size": self.env.world_size,
                "parallel": ("fsdp" if self.sharded else "ddp") if self.env.enabled else "none",
                "carry": carry_meta,
                "total_steps": self.total_steps,
                "budget_fixed": self.budget.fixed,
                "elapsed": self.budget.elapsed(time.time()),
            }
            path = ckpt.save_checkpoint(
                self.run_dir,
                self.step,
                self.model,
                self.optimizer,
                tensors,
                meta,
                self.config.checkpoint.keep,
                weights=weights,
                optimizer_state=optimizer_state,
            )
        dist_utils.barrier(self.env)
        self.last_checkpoint = self.run_dir / "checkpoints" / f"step-{self.step}"
        return path

    def _update_best(self, metrics: dict[str, float]) -> None:
        """Keep the best evaluation (by the task's target metric, else val_loss) and write best/ (rank 0)."""
        name, higher = self.task.target_metric
        key = f"val_{name}"
        if key not in metrics:
            key = "val_loss"
            higher = False
        value = metrics[key]
        if self.best is None or (value > self.best["value"] if higher else value < self.best["value"]):
            self.best = {"step": self.step, "metric": key, "value": value}
            weights = sharded.full_state_dict(self.model, keep=self.env.is_main) if self.sharded else None
            if self.env.is_main:
                ckpt.save_best(
                    self.run_dir,
                    self.model,
                    {"step": self.step, "tokens": self.tokens, "metric": key, "value": value, "metrics": metrics},
                    weights=weights,
                )

    def _target_reached(self, metrics: dict[str, float]) -> bool:
        """True when ``metrics`` reach ``train.target`` on the task's target metric."""
        target = self.config.train.target
        if target is None:
            return False
        name, higher = self.task.target_metric
        value = metrics.get(f"val_{name}")
        return value is not None and (value >= target if higher else value <= target)

    # ------------------------------------------------------------------ the loop
    def fit(self) -> TrainResult:
        """Train until the step, token or target limit, the time budget or a signal; always leaves a checkpoint.
        A resumed run that had already reached its end returns at once, writing nothing."""
        if self.finished_before:
            return TrainResult(
                self.run_dir,
                self.step,
                self.total_steps,
                self.tokens,
                0.0,
                {},
                self.best,
                checkpoint=self.last_checkpoint,
                model=self.result_model(),
                task=self.task,
                finished_before=True,
            )
        with self._signals_caught(), self._fit_session() as run:
            self._announce(run.progress)
            self.model.train()
            run.last_time, run.last_step = time.time(), self.step
            while self.step < self.total_steps:
                loss, tok_s, now = self._train_and_log(run)
                if self.budget.enabled and self._budget_spent(now, run.progress):
                    run.stop = "budget"
                if dist_utils.any_flag(self._signal is not None, self.env, self.device):
                    run.stop = self._signal or signal.SIGTERM
                if self._due(self.config.eval.every) and run.stop in (None, "budget"):
                    self._evaluate_in_loop(run, loss, tok_s)
                if self._due(self.config.checkpoint.every) or run.stop is not None:
                    self.save()
                    run.saved_at, run.last_time = self.step, time.time()
                if run.stop is not None:
                    break
            if run.saved_at != self.step:
                self.save()
            if run.stop in (None, "budget") and run.evaluated_at != self.step:
                run.metrics = self._eval_and_log(run.progress, run.board, float("nan"), 0.0)
        interrupted = run.stop if isinstance(run.stop, int) else None
        # the budget either stopped the run or planned fewer steps than its limits allow (then run.stop is None)
        budget_cut = run.stop == "budget" or (run.stop is None and self.step < self.step_limit)
        return TrainResult(
            self.run_dir,
            self.step,
            self.total_steps,
            self.tokens,
            time.time() - run.start,
            run.metrics,
            self.best,
            interrupted,
            self.last_checkpoint,
            self.result_model(),
            self.task,
            new_tokens=self.tokens - run.tokens_before,
            step_limit=self.step_limit,
            budget_cut=budget_cut,
        )

    def result_model(self) -> nn.Module | None:
        """The trained model a `TrainResult` hands over: the model itself, or for a sharded run (whose shards
        need every process) a plain copy with the gathered weights, on the CPU of rank 0 (None elsewhere),
        usable after the process group is gone (the sample after training, `bdh.experiments`)."""
        if not self.sharded:
            return self.model
        weights = sharded.full_state_dict(self.model, keep=self.env.is_main)
        if not self.env.is_main:
            return None
        model = self.model_cls(self.model_config)
        model.load_state_dict(weights)
        return model.train(self.model.training)

    def _on_signal(self, signum: int, frame: Any) -> None:
        """The first signal ends the run after the current step; a second one at once (`Interrupted`)."""
        if self._signal is not None:
            raise Interrupted(signum)
        self._signal = signum

    @contextlib.contextmanager
    def _signals_caught(self) -> Iterator[None]:
        """SIGINT and SIGTERM end the run after the current step (`_on_signal`; in the main thread only)."""
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                handlers[sig] = signal.signal(sig, self._on_signal)
        try:
            yield
        finally:
            for sig, old in handlers.items():
                signal.signal(sig, old)

    @contextlib.contextmanager
    def _fit_session(self) -> Iterator[_Fit]:
        """The progress display and TensorBoard of one call of `fit` (closed at its end), its clocks started."""
        main = self.env.is_main
        progress = Progress(self.total_steps, self.step, self.config.log.progress if main else "none")
        board = TensorBoard(
            self.run_dir / "tensorboard", self.config.log.tensorboard and main, wandb=self.config if main else None
        )
        start = time.time()
        self.budget.start(start)
        try:
            yield _Fit(progress, board, start, self.tokens, self.step if self.last_checkpoint is not None else -1)
        finally:
            progress.close()
            board.close()

    def _announce(self, progress: Progress) -> None:
        """The first line of the run (rank 0): what it trains, or where it resumes."""
        if not self.env.is_main:
            return
        if self.step > 0:
            progress.message(
                f"resuming {self.run_dir} from step {self.step} of {self.total_steps} "
                f"({self.tokens:,} tokens trained before)"
            )
            return
        if self.restarted:
            progress.message(f"{self.run_dir} has no checkpoint yet: training it from step 0 with its config.yaml")
        params = sum(p.numel() for p in self.model.parameters())
        processes = f" over {self.env.world_size} processes" if self.env.enabled else ""
        processes += " (fully sharded)" if self.sharded else ""
        progress.message(
            f"run {self.run_dir}: {self.config.model['name']} ({params:,} parameters), task {self.task.name}, "
            f"{self.total_steps} steps of {self.config.train.batch_size} x {self.seq_len} tokens{processes}, "
            f"device {self.device}"
        )

    def _train_and_log(self, run: _Fit) -> tuple[float, float, float]:
        """One optimiser step at the scheduled learning rate, checked, counted, shown and logged:
        (loss, tokens per second, the time it ended)."""
        cfg = self.config
        lr = learning_rate(
            self.step,
            lr=cfg.optim.lr,
            min_lr=cfg.optim.min_lr,
            warmup_steps=self.warmup_steps(),
            total_steps=self.total_steps,
            decay=cfg.optim.decay,
        )
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        step_start = time.time()
        loss, norm = self.train_step(self.step)
        self.budget.count(time.time() - step_start)
        self._check_loss(loss)
        self.step += 1
        self.tokens += self.tokens_per_step
        now = time.time()
        tok_s = (self.step - run.last_step) * self.tokens_per_step / max(now - run.last_time, 1e-9)
        if self.env.is_main:
            run.progress.update(self.step, loss, tok_s)
            if self.step % cfg.log.every == 0 or self.step == self.total_steps:
                record = {
                    "kind": "train",
                    "step": self.step,
                    "loss": loss,
                    "lr": lr,
                    "grad_norm": norm,
                    "tokens": self.tokens,
                    "tok_per_s": tok_s,
                    "time": now - run.start,
                }
                self.metrics.write(record)
                run.board.scalars("train", record, self.step)
        run.last_time, run.last_step = now, self.step
        return loss, tok_s, now

    def _check_loss(self, loss: float) -> None:
        """A `TrainingError` naming the last good checkpoint when the loss of the step is not finite."""
        if math.isfinite(loss):
            return
        good = self.last_checkpoint.name if self.last_checkpoint else "none (no checkpoint was written yet)"
        raise TrainingError(
            f"loss is {loss} at step {self.step + 1}; training stopped; the last good checkpoint is {good} "
            f"in {self.run_dir} (try a lower optim.lr or optim.grad_clip)"
        )

    def _due(self, every: int) -> bool:
        """True when the step just finished is a multiple of ``every`` (0: never) or the last one."""
        return bool(every and self.step % every == 0) or self.step == self.total_steps

    def _evaluate_in_loop(self, run: _Fit, loss: float, tok_s: float) -> None:
        """A scheduled evaluation; the run is to stop (``run.stop``) when it reaches ``train.target``."""
        run.metrics = self._eval_and_log(run.progress, run.board, loss, tok_s)
        run.evaluated_at = self.step
        run.last_time = time.time()  # tokens/s measures training, not evaluation
        if self._target_reached(run.metrics):
            run.progress.message(
                f"target {self.config.train.target} of val_{self.task.target_metric[0]} reached at step {self.step}"
            )
            run.stop = "target"

    def warmup_steps(self) -> int:
        """``optim.warmup_steps``; under a time budget at most a tenth of the (possibly shortened) run."""
        warmup = self.config.optim.warmup_steps
        if self.budget.enabled:
            warmup = min(warmup, max(1, self.total_steps // 10))
        return warmup

    def _budget_spent(self, now: float, progress: Progress) -> bool:
        """After a step under ``train.max_minutes``: plan the length of the run anew when a plan is due
        (`TimeBudget.measure`); True, with a line, when the budget is spent on any process."""
        per_step = self.budget.measure(self.step, self.total_steps)
        if per_step is not None:
            self._plan_budget(per_step, now, progress)
        if not dist_utils.any_flag(self.budget.spent(now), self.env, self.device):
            return False
        progress.message(f"time budget of train.max_minutes={self.config.train.max_minutes} spent at step {self.step}")
        return True

    def _plan_budget(self, per_step: float, now: float, progress: Progress) -> None:
        """Set the length of the run to what fits the time budget (`TimeBudget.plan`) at ``per_step`` seconds
        per step, averaged over the processes so that every process makes the same plan."""
        per_step = float(dist_utils.all_reduce_sum(torch.tensor([per_step], device=self.device), self.env)[0])
        per_step /= self.env.world_size
        fits = self.budget.plan(per_step, now, self.step, self.total_steps, self.step_limit)
        if fits is None:
            return
        self.total_steps = progress.total = fits
        if progress.bar is not None:
            progress.bar.total = fits
            progress.bar.refresh()
        progress.message(
            f"{per_step:.2f} s/step measured at step {self.step}: {fits} steps fit train.max_minutes="
            f"{self.config.train.max_minutes} (the schedule decays over them)"
        )

    def _eval_and_log(self, progress: Progress, board: TensorBoard, loss: float, tok_s: float) -> dict[str, float]:
        """Evaluate (rank 0), log and show the result, share it with every process and keep the best."""
        metrics: dict[str, float] = {}
        if self.sharded:  # a sharded forward gathers the weights from every process: all evaluate, rank 0 logs
            self.model.eval()
            metrics = self.evaluate()
            self.model.train()
        if self.env.is_main:
            if not self.sharded:
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
        self._lock.close()


def eval_batch_count(task: Any, split: str, batch_size: int, batches: int | None) -> int:
    """How many batches an evaluation of ``split`` reads: ``batches``, at most one pass over the split;
    a `TrainingError` if the split is endless and ``batches`` is None."""
    n = task.num_batches(split, batch_size)
    n = batches if n is None else (n if batches is None else min(n, batches))
    if n is None:
        raise TrainingError(f"eval.batches: task {task.name!r} has an endless {split} split; give a number")
    return n


def train(
    config: RunConfig,
    *,
    resume: str | Path | None = None,
    resume_from: str | Path | None = None,
    replan: bool = False,
    overwrite: bool = False,
) -> TrainResult:
    """Run (or resume) a training run described by ``config``; the library entry point of ``bdh train``.
    ``replan``: a resume that sets the length of the run anew (see `Trainer._resume_length`); ``overwrite``:
    start anew in a non-empty ``run_dir``."""
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


def check_run_config(config: RunConfig, resume: str | Path | None = None) -> RunConfig:
    """Every check a run of ``config`` makes before it writes anything, by `Trainer` itself (``check_only``):
    the config (`RunConfig.validate`), this machine, the task and its data, the memory the model needs,
    ``train.init_from``. Returns the config as the run resolves it (the model section completed from the task);
    ``bdh train --print-config`` prints it. ``resume``: the config is that run's (``init_from`` is not read)."""
    Trainer(config, resume=Path(resume) if resume is not None else None, check_only=True)
    return config


def load_run_config(run_dir: str | Path) -> dict[str, Any]:
    """The raw resolved config of a run folder (RUN_DIR/config.yaml)."""
    from .config import read_config_file

    path = Path(run_dir) / "config.yaml"
    if not Path(run_dir).is_dir():
        if os.path.lexists(run_dir):
            raise TrainingError(f"{run_dir}: not a folder; give a run folder (it holds config.yaml)")
        raise FileNotFoundError(f"{run_dir}: no such run folder")
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{run_dir}: not a run folder (no config.yaml)")
    anew = f"restore the file, or start the run anew with bdh train --run-dir {run_dir} --overwrite"
    try:
        data = read_config_file(path)
    except ConfigError as exc:  # not YAML, not text, not a regular file: damaged
        raise TrainingError(f"{exc}; {anew}") from None
    keys = [f.name for f in dataclasses.fields(RunConfig)]  # written whole at the start of a run, run_dir last
    missing = [k for k in keys if k not in data]
    if missing:
        what = "is empty" if not data else f"has no {missing[0]!r} ({len(missing)} of its {len(keys)} keys missing)"
        raise TrainingError(f"{path}: {what}: cut short or damaged; bdh does not guess the lost values: {anew}")
    return data


__all__ = [
    "Objective",
    "TrainResult",
    "Trainer",
    "TrainingError",
    "check_run_config",
    "evaluate",
    "load_run_config",
    "train",
]
