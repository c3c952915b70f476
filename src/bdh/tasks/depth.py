"""Test-time depth sweeps for weight-shared models (Hyper-SET's protocol, Hu et al. Fig. 3): a model that applies one
layer L times, run with other pass counts at test time. The model is a callable ``model_fn(idx, k) -> logits`` or
a module called as ``model(idx, n_layer=k)`` in eval mode, so tasks stay independent of model classes."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from bdh.errors import UserError

ModelFn = Callable[[torch.Tensor, int], torch.Tensor]


def _as_fn(model: ModelFn | torch.nn.Module) -> ModelFn:
    if isinstance(model, torch.nn.Module):
        model.eval()
        return lambda idx, k: model(idx, n_layer=k)
    if not callable(model):
        raise UserError(
            f"depth_sweep: expected a model or a callable (idx, n_layer) -> logits, got {type(model).__name__}"
        )
    return model


@torch.no_grad()
def depth_sweep(
    model_fn: ModelFn | torch.nn.Module,
    task,
    passes: Sequence[int],
    *,
    batch_size: int = 256,
    seed: int = 0,
    split: str = "val",
    max_batches: int | None = None,
    device: torch.device | str | None = None,
) -> dict[int, dict[str, float]]:
    """``{n_passes: metrics}``: the task's metrics over (the first ``max_batches`` batches of) ``split`` at each pass
    count, the batches built once; batches weighted by their examples."""
    fn = _as_fn(model_fn)
    if not passes:
        raise UserError("depth_sweep: give at least one pass count")
    for k in passes:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise UserError(f"depth_sweep: pass counts must be positive integers, got {k!r}")
    n = task.num_batches(split, batch_size)
    if n is None and max_batches is None:
        raise UserError("depth_sweep: the split is an endless stream; give max_batches")
    if max_batches is not None:
        n = max_batches if n is None else min(n, max_batches)
    batches = [task.batch(split, i, batch_size, seed) for i in range(n)]
    out: dict[int, dict[str, float]] = {}
    for k in passes:
        sums: dict[str, float] = {}
        weight = 0
        for x, y in batches:
            if device is not None:
                x, y = x.to(device), y.to(device)
            m = task.metrics(fn(x, k).float(), y, x)
            for name, value in m.items():
                if not math.isnan(value):
                    sums[name] = sums.get(name, 0.0) + value * len(x)
            weight += len(x)
        out[k] = {name: total / weight for name, total in sums.items()}
    return out
