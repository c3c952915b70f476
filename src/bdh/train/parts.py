"""The parts of a run that its config decides, built before the first step: the task and the model config, the
checks that would otherwise fail at step N, the starting weights (``train.init_from``), the objective and the
optimiser.

* `task_and_model_config`: the task, built on the run config's typed ``task``, and the run config's typed
  ``model`` (built once, when the config was read, completed from the task), which must agree with the task
  (`check_agreement`).
* `check_modes`: ``train.bptt`` against what the task and the model can do.
* `load_initial_weights`: a trained model of the same class and configuration (its `runtime_fields` aside).
* `Objective`: the summed cross-entropy of a micro-batch, the module DistributedDataParallel wraps.
* `make_optimizer`: AdamW, weight decay on matrices only.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .. import model_api
from ..model.io import CheckpointError
from ..registry import get_model, get_task
from ..tasks.base import IGNORE_INDEX
from .config import RunConfig
from .errors import TrainingError
from .recurrent import Recurrent, check_tbptt
from .run import checkpoint as ckpt


def task_and_model_config(config: RunConfig) -> tuple[Any, type, Any]:
    """(task, model class, model config) of a run: the task built on the run config's typed ``task``, and the
    run config's typed ``model`` itself, the object built when the config was read (`bdh.train.config.build_model`:
    the fields the task decides that the run leaves out are the task's), checked against the task
    (`check_agreement`)."""
    task = get_task(config.task_name)(config.task)
    check_agreement(task, config.model)
    return task, get_model(config.model_name), config.model


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
    """``train.bptt``: tbptt needs a stream task and a recurrent model (`check_tbptt`), state-passing a recurrent
    model, none a model whose forward can detach attention keys and values."""
    t, name = config.train, config.model_name
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
    """Replace the fresh weights of ``model`` (a ``model_cls``) by those of the trained model at ``source``
    (``train.init_from``, a run or model folder), which must be of the same class and configuration (its
    `bdh.model_api.runtime_fields` aside)."""
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
    "check_agreement",
    "check_modes",
    "load_initial_weights",
    "make_optimizer",
    "task_and_model_config",
]
