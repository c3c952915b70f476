"""Refuse a micro-batch that will not fit, before allocating: ``train_memory_bytes`` against free memory."""

from __future__ import annotations

import os

import torch

from bdh.errors import UserError

from ...model_api import memory_estimate

GiB = 2**30


def available_bytes(device: torch.device) -> int | None:
    """Free memory on ``device`` in bytes (None if unknown)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def estimate_bytes(
    model_config,
    micro_batch: int,
    seq_len: int,
    amp_dtype: torch.dtype | None,
    form: str | None = None,
    shards: int = 1,
) -> int | None:
    """Estimated peak training memory of one process (or None); ``shards``: processes the weights are split over."""
    dtype = "bf16" if amp_dtype == torch.bfloat16 else "fp32"
    return memory_estimate(model_config, micro_batch, seq_len, form=form, dtype=dtype, shards=shards)


def check_fits(
    model_config,
    micro_batch: int,
    seq_len: int,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    processes: int = 1,
    form: str | None = None,
    shards: int = 1,
) -> int | None:
    """A one-line ValueError if ``processes`` x the estimate exceeds the available memory."""
    need = estimate_bytes(model_config, micro_batch, seq_len, amp_dtype, form, shards)
    have = available_bytes(device)
    if need is None or have is None:
        return need
    if need * processes > have:
        each = f" x {processes} processes" if processes > 1 else ""
        alone = estimate_bytes(model_config, 1, 1, amp_dtype, form, shards) or 0
        if alone * processes > have:  # no micro-batch fits: the model is the problem
            raise UserError(
                f"model: its weights, gradients and AdamW moments alone need about {alone / GiB:,.1f} GiB{each}, "
                f"but only {have / GiB:.1f} GiB is available on {device}; give a smaller model (model.n_layer, "
                f"model.n_embd, model.n_neurons), or set train.check_memory=false"
            )
        raise UserError(
            f"train.micro_batch_size: a micro-batch of {micro_batch} x {seq_len} tokens "
            f"needs about {need / GiB:,.1f} GiB{each} "
            "to train (estimated: weights, gradients, AdamW moments, activations), "
            f"but only {have / GiB:.1f} GiB is available "
            f"on {device}; lower train.micro_batch_size (gradient accumulation keeps the batch) or task.seq_len, "
            f"or set train.check_memory=false"
        )
    return need
