"""Test-time depth sweeps for weight-shared models (Hyper-SET's protocol, Hu et al. Fig. 3): one layer applied L times,
run with other pass counts.

The model is ``model_fn(idx, k) -> logits`` or a module called as ``model(idx, n_layer=k)`` in eval mode; one with
``pass_logits`` runs once to the largest count (`iterate`), optionally stopping each board once its answer settles."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

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
def iterate(
    model: torch.nn.Module, idx: torch.Tensor, passes: Sequence[int], *, stop: bool = False
) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    """({k: predictions (B, T)} for every k of ``passes``, passes run (B,)) from one ``pass_logits`` run. With ``stop``,
    a sequence whose prediction did not change between passes keeps that answer; the run ends once all settle."""
    want = sorted(set(passes))
    out: dict[int, torch.Tensor] = {}
    used = torch.full((idx.shape[0],), want[-1], dtype=torch.long, device=idx.device)
    settled = torch.zeros(idx.shape[0], dtype=torch.bool, device=idx.device)
    answer = prev = None
    for k, logits in enumerate(model.pass_logits(idx, want[-1]), start=1):
        pred = logits.argmax(dim=-1)
        answer = pred if answer is None else torch.where(settled[:, None], answer, pred)
        if stop and prev is not None:
            now = (pred == prev).all(dim=1) & ~settled
            used[now] = k
            settled = settled | now
        prev = pred
        if k in want:
            out[k] = answer
        if stop and bool(settled.all()):
            break
    return {k: out.get(k, answer) for k in want}, used


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
    stop: bool = False,
) -> dict[int, dict[str, float]]:
    """``{n_passes: metrics}`` over the first ``max_batches`` batches of ``split``, weighted by examples; with ``stop``
    (`iterate`) also ``mean_passes``."""
    _check_passes(passes)
    if hasattr(model_fn, "pass_logits") and isinstance(model_fn, torch.nn.Module):
        model_fn.eval()
        return _iterated_sweep(
            model_fn, task, passes, _batches(task, split, batch_size, seed, max_batches), device, stop
        )
    if stop:
        raise UserError("depth_sweep: stop needs a model with pass_logits (the logits after every pass)")
    fn = _as_fn(model_fn)
    batches = _batches(task, split, batch_size, seed, max_batches)
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


def _check_passes(passes: Sequence[int]) -> None:
    if not passes:
        raise UserError("depth_sweep: give at least one pass count")
    for k in passes:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise UserError(f"depth_sweep: pass counts must be positive integers, got {k!r}")


def _batches(task, split: str, batch_size: int, seed: int, max_batches: int | None) -> list:
    n = task.num_batches(split, batch_size)
    if n is None and max_batches is None:
        raise UserError("depth_sweep: the split is an endless stream; give max_batches")
    if max_batches is not None:
        n = max_batches if n is None else min(n, max_batches)
    return [task.batch(split, i, batch_size, seed) for i in range(n)]


def _iterated_sweep(model, task, passes, batches, device, stop: bool) -> dict[int, dict[str, float]]:
    """`depth_sweep` by `iterate`: the predictions scored by the task's metrics as one-hot logits."""
    sums: dict[int, dict[str, float]] = {k: {} for k in passes}
    weight = 0
    for x, y in batches:
        if device is not None:
            x, y = x.to(device), y.to(device)
        preds, used = iterate(model, x, passes, stop=stop)
        vocab = getattr(model.config, "vocab_size", task.vocab_size)
        for k, pred in preds.items():
            m = task.metrics(F.one_hot(pred, vocab).float(), y, x)
            if stop:
                m["mean_passes"] = float(used.clamp(max=k).float().mean())
            for name, value in m.items():
                if not math.isnan(value):
                    sums[k][name] = sums[k].get(name, 0.0) + value * len(x)
        weight += len(x)
    return {k: {name: total / weight for name, total in sums[k].items()} for k in passes}
