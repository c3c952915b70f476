"""`Runtime`: where and how this process trains (device, autocast, one process / DDP / FSDP) and what depends on it."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch
from torch import nn

from bdh import devices

from ..config import TrainConfig
from . import distributed as dist_utils
from . import hardware, sharded
from .memory import check_fits


def resolve_device(name: str, env: dist_utils.DistEnv) -> torch.device:
    """This process's device from ``train.device`` (``auto``: CUDA, else CPU), CUDA with its index (under
    torchrun, local)."""
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
    if device.type == "cuda" and hardware.detect(device).bf16:
        return torch.bfloat16
    return None


class Runtime:
    """This process: ``env``, ``device``, ``caps``, ``amp_dtype`` (None: fp32), ``sharded``."""

    def __init__(self, train: TrainConfig, process_group: bool = True) -> None:
        """Set up threads, determinism, device, allocator and, unless not ``process_group``, the torchrun
        process group."""
        self.env = dist_utils.from_environment()
        if train.threads is not None:
            torch.set_num_threads(train.threads)
        if train.deterministic:
            torch.use_deterministic_algorithms(True)
        self.device = resolve_device(train.device, self.env)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.caps = hardware.detect(self.device)  # fast paths by capability, never by assumption
        hardware.apply_backend_flags(self.caps)
        if self.device.type == "cpu" and train.keep_freed_memory:
            hardware.keep_freed_memory()
        if process_group:
            dist_utils.init(self.env, self.device)
        #: FSDP2 over the processes (``train.parallel: fsdp`` under torchrun), else DDP or a single process
        self.sharded = self.env.enabled and train.parallel == "fsdp"
        self.amp_dtype = autocast_dtype(train.precision, self.device)

    @property
    def parallel(self) -> str:
        """How the processes share the model: ``none`` (one process), ``ddp`` or ``fsdp``."""
        return ("fsdp" if self.sharded else "ddp") if self.env.enabled else "none"

    def check_memory(self, model_config: Any, micro_batch: int, seq_len: int) -> None:
        """Refuse a micro-batch that does not fit (CPU: shared by the machine's processes; CUDA: one GPU each)."""
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if self.device.type == "cpu" else 1
        check_fits(
            model_config,
            micro_batch,
            seq_len,
            self.device,
            self.amp_dtype,
            processes=local,
            form=getattr(model_config, "attention", None),
            shards=self.env.world_size if self.sharded else 1,
        )

    # ------------------------------------------------------------------ the model across processes
    def shard(self, model: nn.Module) -> None:
        """Shard ``model`` when the run is sharded (before the optimiser is built)."""
        if self.sharded:
            sharded.shard(model, self.device, self.env.world_size)

    def wrap(self, objective: nn.Module) -> nn.Module:
        """The objective as the step calls it: wrapped by DistributedDataParallel under torchrun (unsharded)."""
        if not self.env.enabled or self.sharded:
            return objective
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DDP(objective, device_ids=ids)

    def autocast(self) -> contextlib.AbstractContextManager:
        """Autocast to the run's reduced precision, or nothing for fp32."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def gradient_sync(self, model: nn.Module, objective: nn.Module, sync: bool) -> contextlib.AbstractContextManager:
        """No sync but for a step's last micro-batch (DDP's ``no_sync``, FSDP's local accumulation)."""
        if sync or not self.env.enabled:
            return contextlib.nullcontext()
        return sharded.no_sync(model) if self.sharded else objective.no_sync()

    def full_weights(self, model: nn.Module) -> dict[str, torch.Tensor] | None:
        """The whole weights of a sharded model, gathered by every process (kept by rank 0); None when not sharded."""
        return sharded.full_state_dict(model, keep=self.env.is_main) if self.sharded else None

    def full_optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
        """As `full_weights`, for the optimiser's moments."""
        return sharded.full_optimizer_state(optimizer, keep=self.env.is_main) if self.sharded else None

    # ------------------------------------------------------------------ collectives (no-ops for one process)
    def any(self, flag: bool) -> bool:
        """True on every process if ``flag`` is true on any (to stop all processes together)."""
        return dist_utils.any_flag(flag, self.env, self.device)

    def mean(self, value: float) -> float:
        """The mean of ``value`` over the processes (every process gets the same)."""
        total = dist_utils.all_reduce_sum(torch.tensor([value], device=self.device), self.env)
        return float(total[0]) / self.env.world_size

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        """The sum of ``value`` over the processes."""
        return dist_utils.all_reduce_sum(value, self.env)

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's JSON-able ``obj`` on every process."""
        return dist_utils.broadcast_object(obj, self.env)

    def gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """``tensor`` of every process in rank order (a CPU tensor travels through the device for NCCL)."""
        if self.env.enabled and self.device.type == "cuda":
            tensor = tensor.to(self.device)
        return dist_utils.gather(tensor, self.env)

    def barrier(self) -> None:
        dist_utils.barrier(self.env)

    def close(self) -> None:
        """Leave the process group (every process at once, `bdh.train.runtime.distributed.shutdown`)."""
        dist_utils.shutdown(self.env)


__all__ = ["Runtime", "autocast_dtype", "resolve_device"]
