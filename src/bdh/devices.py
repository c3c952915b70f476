"""Devices by name (``auto``, ``cpu``, ``cuda``, ``cuda:K``, ``mps``), checked to be available: one
`UserError` early."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bdh.errors import UserError

if TYPE_CHECKING:
    import torch

DEVICE_HELP = "auto (CUDA if available, else CPU), cpu, cuda or cuda:K"


def resolve_device(name: str, *, what: str = "--device") -> torch.device:
    """The `torch.device` named ``name``; a `UserError` naming ``what`` if it is unknown or not available."""
    import torch

    if not isinstance(name, str) or not name.strip():
        raise UserError(f"{what}: expected a device name ({DEVICE_HELP}), got {name!r}")
    text = name.strip()
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise UserError(f"{what}: unknown device {name!r}; use {DEVICE_HELP}") from None
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"{what}: {name!r} asked for, but CUDA is not available on this machine (use cpu or auto)")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise UserError(
                f"{what}: {name!r} asked for, but this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1})"
            )
        return device
    if device.type == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise UserError(f"{what}: {name!r} asked for, but MPS is not available on this machine")
        return device
    raise UserError(f"{what}: device type {device.type!r} is not supported; use {DEVICE_HELP}")
