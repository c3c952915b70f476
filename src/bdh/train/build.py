"""The parts of a run that its config decides, built before the first step.

* `plan_run`: every check before anything is written (processes, device, task and data, model against task,
``train.bptt``, validation split, memory); `check_run_config` adds ``train.init_from`` (``--print-config``).
* `load_initial_weights`: a trained model of the same class and configuration.
* `Objective`: the summed cross-entropy of a micro-batch, the module DDP wraps.
* `make_optimizer`: AdamW, weight decay on matrices only."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .. import model_api
from ..model.io import CheckpointError
from ..registry import get_model
from ..tasks.base import IGNORE_INDEX
from .config import ConfigError, RunConfig, TrainConfig
from .errors import TrainingError
from .evaluate import eval_batch_count
from .recurrent import Recurrent, check_tbptt
from .run import checkpoint as ckpt
from .run.log import check_wandb
from .runtime.device import Runtime
from .runtime.distributed import from_environment


@dataclass
class Plan:
    """A checked run: ``runtime``, ``task``, ``model_cls``, ``rows`` in ``accum`` micro-batches of ``micro``,
    ``seq_len``, ``eval_batch``."""

    runtime: Runtime
    task: Any
    model_cls: type
    rows: int
    micro: int
    accum: int
    seq_len: int
    eval_batch: int


def plan_run(config: RunConfig, *, process_group: bool = True) -> Plan:
    """Every check a run of ``config`` makes before it writes anything, in order (``process_group``: join the group)."""
    t = config.train
    rows, micro, accum = batch_layout(t, max(1, from_environment().world_size))
    runtime = Runtime(t, process_group=process_group)
    if config.log.wandb:
        check_wandb()
    task = config.make_task()
    check_agreement(task, config.model.config)
    model_cls = get_model(config.model.name)
    # tokens per training example: a task may train on shorter sequences than it validates on (MQAR's
    # train_seq_len); the model is sized to task.seq_len, the longest (`check_agreement`)
    seq_len = getattr(task, "train_seq_len", task.seq_len)
    eval_batch = config.eval.batch_size or micro
    eval_batch_count(task, "val", eval_batch, config.eval.batches)
    eval_batch_count(task, "val", eval_batch, config.eval.final())
    check_modes(config, task, model_cls)
    if t.check_memory:
        runtime.check_memory(config.model.config, micro, seq_len)
    return Plan(runtime, task, model_cls, rows, micro, accum, seq_len, eval_batch)


def check_run_config(config: RunConfig, resume: str | Path | None = None) -> None:
    """`plan_run` outside the group, and the ``train.init_from`` model checked unless ``resume``: ``--print-config``."""
    plan = plan_run(config, process_group=False)
    source = config.train.init_from
    if resume is None and source is not None:
        model = plan.model_cls(config.model.config)
        load_initial_weights(model, plan.model_cls, config.model.config, source, plan.runtime.device)


def batch_layout(train: TrainConfig, world_size: int) -> tuple[int, int, int]:
    """(rows per process, micro-batch size, micro-batches per step); a `ConfigError` unless they divide evenly."""
    W = world_size
    if train.batch_size % W:
        raise ConfigError(f"train.batch_size: {train.batch_size} sequences cannot be split evenly over {W} processes")
    rows = train.batch_size // W
    micro = train.micro_batch_size or rows
    if rows % micro:
        raise ConfigError(
            f"train.micro_batch_size: {micro} does not divide the {rows} sequences per process "
            f"(train.batch_size {train.batch_size} over {W} process{'es' if W > 1 else ''})"
        )
    return rows, micro, rows // micro


def check_agreement(task: Any, model_config: Any) -> None:
    """The model embeds the task's vocabulary, takes its sequences and reads them as the task needs."""
    cfg = model_config
    vocab = getattr(cfg, "vocab_size", task.vocab_size)
    if vocab < task.vocab_size:
        raise TrainingError(f"model.vocab_size: {vocab} is smaller than the task's vocabulary ({task.vocab_size})")
    if getattr(cfg, "seq_len", task.seq_len) < task.seq_len:
        raise TrainingError(f"model.seq_len: {cfg.seq_len} is shorter than the task's sequences ({task.seq_len})")
    if getattr(cfg, "causal", task.causal) != task.causal:
        raise TrainingError(f"model.causal: the task {task.name!r} needs causal={task.causal}")


def check_modes(config: RunConfig, task: Any, model_cls: type) -> None:
    """``train.bptt``: tbptt needs a stream task and a recurrent model, state-passing a recurrent model, none
    detachable keys."""
    t, name = config.train, config.model.name
    if t.bptt == "tbptt":
        check_tbptt(task, model_cls, name, t.batch_size, t.tbptt_windows)
    if t.bptt == "state-passing" and not (issubclass(model_cls, Recurrent) and model_api.carries_state(model_cls)):
        raise TrainingError(
            f"train.bptt: state-passing needs a fixed-size recurrent state (init_state/step); {name!r} has none"
        )
    if t.bptt == "none" and "detach_kv" not in inspect.signature(model_cls.forward).parameters:
        raise TrainingError(f"train.bptt: none needs a model whose forward takes detach_kv; {name!r} does not")
    check_rows = getattr(task, "check_training_rows", None)  # a task whose training rows must be long enough
    if check_rows is not None:
        check_rows(t.bptt, t.tbptt_windows)


def load_initial_weights(
    model: nn.Module, model_cls: type, model_config: Any, source: str, device: torch.device
) -> None:
    """Load the weights of the trained model at ``source`` (``train.init_from``), of the same class
    and configuration."""
    from bdh.model.io import check_state_dict, load_tensors, read_model_config

    path = ckpt.resolve_model_dir(source)
    cls, cfg = read_model_config(path)
    if cls is not model_cls:
        raise TrainingError(f"train.init_from: {path} holds a {cls.__name__}, the run trains a {model_cls.__name__}")
    mine, theirs, free = model_config.to_dict(), cfg.to_dict(), model_api.runtime_fields(type(model_config))
    diff = sorted(k for k in set(mine) | set(theirs) if k not in free and mine.get(k) != theirs.get(k))
    if diff:
        shown = ", ".join(f"{k}: {theirs.get(k)!r} there, {mine.get(k)!r} here" for k in diff[:3])
        raise TrainingError(f"train.init_from: {path} has another model configuration ({shown})")
    tensors = load_tensors(path / "model.safetensors", device=device)
    try:
        check_state_dict(model, tensors, str(path))
    except CheckpointError as exc:
        raise TrainingError(f"train.init_from: {exc}") from None
    model.load_state_dict(tensors)


class Objective(nn.Module):
    """Summed cross-entropy of a micro-batch (DDP wraps it, ``model.step`` too); with ``deep_supervision``, the mean
    over passes."""

    def __init__(self, model: nn.Module, bptt: str):
        super().__init__()
        self.model = model
        self.bptt = bptt

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor, state: Any = None):
        if state is not None:
            logits, state = self.model.step(inputs, state)
        elif self.bptt == "none":
            logits = self.model(inputs, detach_kv=True)
        elif getattr(self.model.config, "deep_supervision", False):  # a loss at every pass (bdh.model.recurrence)
            losses = [summed_cross_entropy(z, targets) for z in self.model.pass_logits(inputs)]
            return torch.stack(losses).mean(), state
        else:
            logits = self.model(inputs)
        return summed_cross_entropy(logits, targets), state


def summed_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The cross-entropy of logits (..., V) against targets (...), summed over the scored targets (fp32)."""
    return F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
    )


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


__all__ = [
    "Objective",
    "Plan",
    "check_agreement",
    "check_modes",
    "check_run_config",
    "load_initial_weights",
    "make_optimizer",
    "plan_run",
]
