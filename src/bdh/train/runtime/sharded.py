"""Fully sharded data parallel (FSDP2, ``train.parallel: fsdp``): BDH's shared weights are one unit, each of ``blocks``
another; checkpoints are gathered whole (docs/training.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn


def _dtensor_type() -> type | None:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a build without distributed support
        return None
    return DTensor


def is_sharded(module: nn.Module) -> bool:
    """Whether ``module``'s parameters are FSDP shards (DTensors)."""
    dtensor = _dtensor_type()
    return dtensor is not None and any(isinstance(p, dtensor) for p in module.parameters())


def units(model: nn.Module) -> list[nn.Module]:
    """The submodules sharded on their own: each of a ``blocks`` list applied once per forward (BDH has none)."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or getattr(getattr(model, "config", None), "share_layers", False):
        return []
    return list(blocks)


def shard(model: nn.Module, device: torch.device, world_size: int) -> nn.Module:
    """Shard ``model`` in place over ``world_size`` processes (FSDP2), before the optimiser; ``step`` gathers
    like ``forward``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    mesh = init_device_mesh(device.type, (world_size,))
    for unit in units(model):
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if callable(getattr(model, "step", None)):
        register_fsdp_forward_method(model, "step")
    return model


@contextlib.contextmanager
def no_sync(model: nn.Module) -> Iterator[None]:
    """Accumulate gradients locally (no reduce-scatter) inside the block: micro-batches before the last."""
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def _full(value, keep: bool):
    dtensor = _dtensor_type()
    if dtensor is not None and isinstance(value, dtensor):
        value = value.full_tensor()  # all-gather: every process takes part
    if not isinstance(value, torch.Tensor):
        return value
    return value.detach().cpu() if keep else None


def full_state_dict(module: nn.Module, keep: bool = True) -> dict[str, torch.Tensor]:
    """``module.state_dict()`` gathered into full CPU tensors (every process calls it; ``keep=False``
    returns ``{}``)."""
    out = {name: _full(value, keep) for name, value in module.state_dict().items()}
    return out if keep else {}


def load_full_state_dict(module: nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Load full tensors (a checkpoint written by any process count) into a sharded ``module``."""
    from torch.distributed.tensor import distribute_tensor

    dtensor = _dtensor_type()
    current = module.state_dict()
    pieces = {}
    for name, value in tensors.items():
        target = current.get(name)
        if dtensor is not None and isinstance(target, dtensor):
            value = value.to(device=target.device, dtype=target.dtype)
            value = distribute_tensor(value, target.device_mesh, target.placements)
        pieces[name] = value
    module.load_state_dict(pieces)


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The parameters in the order of ``optimizer.state_dict()``'s integer keys."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def full_optimizer_state(optimizer: torch.optim.Optimizer, keep: bool = True) -> dict:
    """``optimizer.state_dict()`` with the moments gathered into full CPU tensors (every process calls it)."""
    sd = optimizer.state_dict()
    state = {idx: {name: _full(value, keep) for name, value in entry.items()} for idx, entry in sd["state"].items()}
    return {"state": state, "param_groups": sd["param_groups"]} if keep else {}


def shard_optimizer_tensors(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor]) -> dict:
    """Checkpoint tensors ``optimizer.{index}.{name}`` of full size cut into the shards of their parameters."""
    from torch.distributed.tensor import distribute_tensor

    dtensor = _dtensor_type()
    params = _params(optimizer)
    out = {}
    for key, value in tensors.items():
        _, idx, _name = key.split(".", 2)
        p = params[int(idx)] if idx.isdigit() and int(idx) < len(params) else None
        if dtensor is not None and isinstance(p, dtensor) and value.dim() > 0:
            value = distribute_tensor(value.to(device=p.device, dtype=p.dtype), p.device_mesh, p.placements)
        out[key] = value
    return out
