"""Data-parallel training under ``torchrun``: the process group (``nccl``, ``gloo``) and the trainer's few collectives;
every process takes its rows of one global batch."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bdh.errors import UserError


@dataclass
class DistEnv:
    """Where this process sits: ``rank`` of ``world_size`` processes, ``local_rank`` on its machine."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def from_environment() -> DistEnv:
    """The process's place as set by torchrun (a single process when the variables are absent)."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        raise UserError("WORLD_SIZE, RANK and LOCAL_RANK must be integers (as torchrun sets them)") from None
    return DistEnv(rank, world, local)


def init(env: DistEnv, device: torch.device) -> None:
    """Join the process group (nccl for CUDA devices, gloo otherwise) when there are several processes."""
    if env.enabled and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, rank=env.rank, world_size=env.world_size)


def shutdown(env: DistEnv) -> None:
    """Leave the process group once every process is here (a group torn down early aborts the others at exit)."""
    if env.enabled and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def all_reduce_sum(value: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """The sum over processes (the value itself for one process)."""
    if env.enabled:
        value = value.clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def any_flag(flag: bool, env: DistEnv, device: torch.device) -> bool:
    """True on every process if ``flag`` is true on any (used to stop all processes together)."""
    if not env.enabled:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def gather(tensor: torch.Tensor, env: DistEnv) -> list[torch.Tensor]:
    """The same-shaped ``tensor`` of every process, in rank order (on every process)."""
    if not env.enabled:
        return [tensor]
    out = [torch.empty_like(tensor) for _ in range(env.world_size)]
    dist.all_gather(out, tensor.contiguous())
    return out


def barrier(env: DistEnv) -> None:
    if env.enabled:
        dist.barrier()


def broadcast_object(obj, env: DistEnv):
    """Rank 0's JSON-able ``obj`` on every process (used for the run folder path)."""
    if not env.enabled:
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]
