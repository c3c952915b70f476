"""Official ``pathwaycom/bdh`` checkpoints, both ways: where the official names meet the paper's.

=====================  ====================  ===========  ==========================================
paper / bdh            official bdh.py       shape        role
=====================  ====================  ===========  ==========================================
``E``                  ``decoder``           (n, D)       encoder n -> D (E y is ``y @ E``)
``Dx``                 ``encoder``           (h, D, N)    decoder D -> n giving x = ReLU(Dx v)
``Dy``                 ``encoder_v``         (h, D, N)    decoder D -> n giving y = ReLU(Dy LN(a)) * x
``embed.weight``       ``embed.weight``      (V, D)       token encoder f_e
``readout``            ``lm_head``           (D, V)       decoder f_d to logits
``freqs``              ``attn.freqs``        (N,)         RoPE frequencies (official: (1, 1, 1, N))
``n_embd``             ``n_embd``                         D
``n_neurons``          ``mlp_internal_dim_multiplier * n_embd``
=====================  ====================  ===========  ==========================================

``torch.compile``'s ``_orig_mod.`` prefixes are stripped."""

from __future__ import annotations

import os
import pickle

import torch

from bdh.errors import UserError

from .bdh import BDH
from .config import BDHConfig
from .io import CheckpointError, checked_file

# ours -> official
NAME_MAP: dict[str, str] = {
    "E": "decoder",
    "Dx": "encoder",
    "Dy": "encoder_v",
    "embed.weight": "embed.weight",
    "readout": "lm_head",
    "freqs": "attn.freqs",
}
#: official tensors that carry nothing the forward pass uses (an early snapshot had ``lm_gate``).
IGNORED_OFFICIAL = ("lm_gate",)


def strip_compile_prefix(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Remove the ``_orig_mod.`` prefix that ``torch.compile`` adds to parameter names."""
    prefix = "_orig_mod."
    return {(k[len(prefix) :] if k.startswith(prefix) else k): v for k, v in state_dict.items()}


def from_official(
    state_dict: dict[str, torch.Tensor],
    *,
    n_layer: int = 6,
    n_embd: int = 256,
    n_head: int = 4,
    mlp_internal_dim_multiplier: int = 128,
    vocab_size: int = 256,
    dropout: float = 0.1,
) -> BDH:
    """A `BDH` from an official state dict and config fields; a one-line `CheckpointError` for a bad tensor."""
    if not isinstance(state_dict, dict):
        raise CheckpointError(f"official checkpoint: expected a dict of tensors, got {type(state_dict).__name__}")
    config = BDHConfig(
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        mlp_internal_dim_multiplier=mlp_internal_dim_multiplier,
        vocab_size=vocab_size,
        dropout=dropout,
    )
    sd = strip_compile_prefix(state_dict)
    inverse = {official: ours for ours, official in NAME_MAP.items()}
    model = BDH(config)
    expected = model.state_dict()
    converted: dict[str, torch.Tensor] = {}
    for key, tensor in sd.items():
        if key in IGNORED_OFFICIAL:
            continue
        if key not in inverse:
            raise CheckpointError(
                f"official checkpoint: unexpected tensor {key!r} (known: {', '.join(sorted(inverse))})"
            )
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"official checkpoint: {key!r} is a {type(tensor).__name__}, not a tensor")
        ours = inverse[key]
        want = expected[ours].shape
        if ours == "freqs":
            tensor = tensor.reshape(-1)
        if tuple(tensor.shape) != tuple(want):
            raise CheckpointError(
                f"official checkpoint: {key!r} has shape {tuple(tensor.shape)}, the given config needs {tuple(want)}"
                " (check n_embd, n_head, mlp_internal_dim_multiplier, vocab_size)"
            )
        converted[ours] = tensor.to(expected[ours].dtype)
    if "freqs" not in converted:  # older checkpoints without the buffer: the formula is the same
        converted["freqs"] = expected["freqs"]
    missing = sorted(set(expected) - set(converted))
    if missing:
        raise CheckpointError(f"official checkpoint: missing tensor {NAME_MAP[missing[0]]!r}")
    model.load_state_dict(converted)
    return model


def to_official(model: BDH) -> dict[str, torch.Tensor]:
    """The model's tensors under the official names and shapes (a state dict for pathwaycom/bdh's ``BDH``)."""
    cfg = model.config
    cfg.require_paper_layer("to_official", allow=("no_expansion",))  # n = h D is a multiplier of h there
    if cfg.positional != "rope" or cfg.damping is not None or not cfg.causal or cfg.theta != 2.0**16:
        raise UserError(
            "to_official: the official model has causal attention, official RoPE (theta 2^16) and no damping; "
            "this model differs (positional, rope_theta, damping or causal)"
        )
    if cfg.n % cfg.n_embd:
        raise UserError(
            f"to_official: n = {cfg.n} is not a multiple of n_embd = {cfg.n_embd}, "
            "so no mlp_internal_dim_multiplier describes it"
        )
    out = {}
    for ours, tensor in model.state_dict().items():
        official = NAME_MAP[ours]
        t = tensor.detach().clone()
        if ours == "freqs":
            t = t.view(1, 1, 1, -1)
        out[official] = t
    return out


def official_config(model: BDH) -> dict[str, int | float]:
    """The official ``BDHConfig`` fields that describe ``model``."""
    cfg = model.config
    return {
        "n_layer": cfg.n_layer,
        "n_embd": cfg.n_embd,
        "dropout": cfg.dropout,
        "n_head": cfg.n_head,
        "mlp_internal_dim_multiplier": cfg.n // cfg.n_embd,
        "vocab_size": cfg.vocab_size,
    }


def load_official_file(path: str | os.PathLike, **config: int | float) -> BDH:
    """Read an official ``.pt`` checkpoint with ``weights_only=True`` and convert it.

    A bare state dict or one under ``model`` / ``state_dict``; a ``config`` / ``model_args`` dict there fills the fields
    not given."""
    path = checked_file(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        if isinstance(exc, pickle.UnpicklingError) or "Weights only load failed" in str(exc):
            reason = (
                "not a checkpoint of tensors, or one holding objects that would need unpickling, which is never done"
            )
        else:
            reason = (str(exc).splitlines()[0] if str(exc) else type(exc).__name__)[:200]
        raise CheckpointError(f"{path}: cannot be read as a weights-only PyTorch checkpoint ({reason})") from None
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: expected a dict of tensors, found a {type(obj).__name__}")
    stored_config: dict = {}
    for key in ("model", "state_dict", "model_state_dict"):
        if key in obj and isinstance(obj[key], dict):
            for ckey in ("config", "model_args", "model_config"):
                if isinstance(obj.get(ckey), dict):
                    stored_config = obj[ckey]
            obj = obj[key]
            break
    fields = ("n_layer", "n_embd", "n_head", "mlp_internal_dim_multiplier", "vocab_size", "dropout")
    merged = {k: stored_config[k] for k in fields if k in stored_config}
    merged.update({k: v for k, v in config.items() if v is not None})
    try:
        return from_official(obj, **merged)
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
