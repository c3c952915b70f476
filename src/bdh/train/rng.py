"""Every random generator's state (Python, NumPy, PyTorch CPU and CUDA) as integer tensors, for safetensors."""

from __future__ import annotations

import random

import numpy as np
import torch


def capture() -> dict[str, torch.Tensor]:
    """The current states as ``{name: tensor}``."""
    version, internal, gauss = random.getstate()
    out = {
        "python": torch.tensor([version, *internal], dtype=torch.int64),
        "python_gauss": torch.tensor([float("nan") if gauss is None else gauss], dtype=torch.float64),
        "torch_cpu": torch.get_rng_state(),
    }
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    out["numpy_keys"] = torch.from_numpy(np.asarray(keys, dtype=np.int64))
    out["numpy_rest"] = torch.tensor([pos, has_gauss], dtype=torch.int64)
    out["numpy_cached"] = torch.tensor([cached], dtype=torch.float64)
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            out[f"cuda_{i}"] = state
    return out


def restore(states: dict[str, torch.Tensor]) -> None:
    """Set every generator from `capture`'s output (CUDA devices missing from it are left alone)."""
    py = states["python"].tolist()
    gauss = float(states["python_gauss"][0])
    random.setstate((int(py[0]), tuple(int(v) for v in py[1:]), None if np.isnan(gauss) else gauss))
    torch.set_rng_state(states["torch_cpu"].to(torch.uint8))
    rest = states["numpy_rest"].tolist()
    np.random.set_state(
        (
            "MT19937",
            states["numpy_keys"].numpy().astype(np.uint32),
            int(rest[0]),
            int(rest[1]),
            float(states["numpy_cached"][0]),
        )
    )
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            if f"cuda_{i}" in states:
                torch.cuda.set_rng_state(states[f"cuda_{i}"].to(torch.uint8), i)
