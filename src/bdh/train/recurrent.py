"""Truncated backprop through time (``train.bptt=tbptt``, paper appendix B.2): the task (`StreamTask`) and model
(`Recurrent`) it needs, `TruncatedBPTT` (the states carried, detached and checkpointed), and `StreamingModel`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import torch

from ..model_api import carries_state
from ..tasks.base import StreamTask
from .errors import TrainingError
from .runtime import distributed as dist_utils


@runtime_checkable
class Recurrent(Protocol):
    """A model with a recurrent state (BDH, and baselines declaring `carries_state`); the state is a dataclass of
    tensors and plain values (or with ``flat()`` / ``unflat``) with a ``detach()``."""

    def init_state(self, batch_size: int = 1) -> Any:
        """An empty state for ``batch_size`` sequences on the model's device."""
        ...

    def step(self, tokens: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """(logits, the state after ``tokens``) for a (B, T) window read from ``state``; gradients flow."""
        ...


@runtime_checkable
class StreamingModel(Protocol):
    """A model that generates on its recurrent state, one token at a time (`bdh.model.BDH.stream`)."""

    def stream(self, prompt: torch.Tensor, max_new_tokens: int, **options: Any) -> Iterator[torch.Tensor]:
        """Read ``prompt``, then yield (B,) sampled tokens one at a time."""
        ...


def check_tbptt(
    task: Any, model_cls: type, model_name: str, batch_size: int, stream_windows: int | None = None
) -> None:
    """A `TrainingError` unless ``task`` streams and ``model_cls`` is `Recurrent`, or if the split is too short for
    the lanes."""
    if not isinstance(task, StreamTask):
        raise TrainingError(f"train.bptt: tbptt needs consecutive windows, and task {task.name!r} has no stream_batch")
    if not (issubclass(model_cls, Recurrent) and carries_state(model_cls)):
        raise TrainingError(
            f"train.bptt: tbptt needs a fixed-size recurrent state (init_state/step); {model_name!r} has none"
        )
    if stream_windows is None:
        task.lane_windows("train", batch_size)
    else:
        task.stream_batch("train", 0, 1, 0, stream_windows=stream_windows)


def _state_tensors(state: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A recurrent state as (detached tensor fields, plain values), or as its ``flat()`` says."""
    if callable(getattr(state, "flat", None)):
        tensors, scalars = state.flat()
        return {k: v.detach() for k, v in tensors.items()}, scalars
    tensors, scalars = {}, {}
    for f in dataclasses.fields(state):
        value = getattr(state, f.name)
        if isinstance(value, torch.Tensor):
            tensors[f.name] = value.detach()
        else:
            scalars[f.name] = value
    return tensors, scalars


class TruncatedBPTT:
    """The states a run carries between steps, ``carry[j]`` per micro-batch ``j`` (None: none yet); kept in
    every mode."""

    def __init__(self, task: Any, model: Any, micro: int, accum: int, stream_windows: int | None = None) -> None:
        """``micro``: sequences per micro-batch; ``accum``: micro-batches per step; ``stream_windows``: windows
        per stream."""
        self.task = task
        self.model = model
        self.micro = micro
        self.stream_windows = stream_windows
        self.carry: list[Any] = [None] * accum

    def batch(self, step: int, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """Global batch ``step`` of consecutive training windows: (inputs, targets, reset)."""
        if self.stream_windows is None:
            return self.task.stream_batch("train", step, batch_size, seed)
        return self.task.stream_batch("train", step, batch_size, seed, stream_windows=self.stream_windows)

    def state(self, j: int, reset: bool) -> Any:
        """The state micro-batch ``j`` starts from: empty at the start or on ``reset``, else the last step's."""
        return self.model.init_state(self.micro) if (reset or self.carry[j] is None) else self.carry[j]

    def keep(self, j: int, state: Any) -> None:
        """Carry ``state`` (after micro-batch ``j``) to the next step, cut from the autograd graph."""
        self.carry[j] = state.detach()

    # ------------------------------------------------------------------ checkpoints
    def gather(self, env: dist_utils.DistEnv) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Every process's states for a checkpoint: tensors ``carry.<rank>.<j>.<field>``, plain fields
        by ``<rank>.<j>``."""
        tensors: dict[str, torch.Tensor] = {}
        meta: dict[str, Any] = {}
        for j, state in enumerate(self.carry):
            if state is None:
                continue
            ts, scalars = _state_tensors(state)
            for name, value in ts.items():
                for r, v in enumerate(dist_utils.gather(value, env)):
                    tensors[f"carry.{r}.{j}.{name}"] = v.cpu()
            for r in range(env.world_size):
                meta[f"{r}.{j}"] = scalars  # positions advance identically on every process
        return tensors, meta

    def restore(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any], rank: int, device: torch.device) -> None:
        """Take this process's carried states from a checkpoint's ``tensors`` and ``meta`` (see `gather`)."""
        for j in range(len(self.carry)):
            prefix = f"carry.{rank}.{j}"
            mine = {k[len(prefix) + 1 :]: v.to(device) for k, v in tensors.items() if k.startswith(prefix + ".")}
            if mine:
                kind, plain = type(self.model.init_state(self.micro)), meta.get(f"{rank}.{j}", {})
                build = getattr(kind, "unflat", None)
                self.carry[j] = build(mine, **plain) if callable(build) else kind(**mine, **plain)


__all__ = ["Recurrent", "StreamingModel", "TruncatedBPTT", "check_tbptt"]
