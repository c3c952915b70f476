"""Analytic sizes of a BDH-GPU model: parameters, state, FLOPs and a training-memory estimate.

Parameters (section 3.2): P = 3 n D + 2 V D (+ n D with a key encoder, L sets unshared, + h for ``learn_damping``, + h
(D + 1) each for ``decay_gate`` and the delta write). State (section 4.1): n D per layer. Forward FLOPs per token: 6 n D
per layer, the attention of the form and 2 D V; training 3x."""

from __future__ import annotations

import math

from bdh.errors import UserError
from bdh.sizing import closest_by_params

from .config import BDHConfig


def forward_flops_per_token(config: BDHConfig, block_size: int, form: str | None = None) -> float:
    """Forward FLOPs per token at window ``block_size`` for the given attention form (default: the config's)."""
    n, D, H, L, V = config.n, config.n_embd, config.n_head, config.n_layer, config.vocab_size
    form = form or config.attention
    dense = config.n_encoders * 2 * n * D
    if form == "parallel":
        attn = 2 * block_size * (n + D * H)
    elif form == "chunked":
        c = min(config.chunk_size, block_size)
        attn = 2 * c * (n + D * H) + 4 * n * D
    else:
        attn = 4 * n * D
    return L * (dense + attn) + 2 * D * V


def train_flops_per_token(config: BDHConfig, block_size: int, form: str | None = None) -> float:
    """Forward + backward FLOPs per token: 3x the forward."""
    return 3.0 * forward_flops_per_token(config, block_size, form)


def train_memory_bytes(
    config: BDHConfig,
    batch_size: int,
    block_size: int,
    form: str | None = None,
    dtype: str = "fp32",
    shards: int = 1,
) -> int:
    """Peak training memory estimate: weights, gradients, AdamW moments and saved activations."""
    return config.train_memory_bytes(batch_size, block_size, form=form, dtype=dtype, shards=shards)


def describe(config: BDHConfig, batch_size: int = 8, block_size: int = 256) -> dict[str, float]:
    """Sizes of ``config`` as a dict (what ``bdh info`` prints)."""
    if batch_size < 1 or block_size < 1:
        raise UserError(f"sizes: batch size and block size must be positive, got {batch_size} and {block_size}")
    state = config.state_size()
    return {
        "params": config.num_params(),
        "state_per_layer": state,
        "state_bytes_per_layer": state * 4,
        "state_bytes_total": state * 4 * config.n_layer,
        "train_bytes": train_memory_bytes(config, batch_size, block_size),
        "train_flops_per_token": train_flops_per_token(config, block_size),
        "batch_size": batch_size,
        "block_size": block_size,
    }


def describe_table(config: BDHConfig, batch_size: int = 8, block_size: int = 256) -> str:
    """`describe` as the table ``bdh info`` prints: one row per size, the name padded to one column."""
    info = describe(config, batch_size, block_size)
    direction = "causal" if config.causal else "bidirectional"
    rows = [
        ("layers L", str(config.n_layer)),
        ("embedding D", str(config.n_embd)),
        ("heads h", str(config.n_head)),
        ("neurons n (per head N)", f"{config.n} ({config.N})"),
        ("vocabulary V", str(config.vocab_size)),
        ("attention", f"{config.attention} ({direction}), {config.positional}"),
        ("parameters 3nD + 2VD", f"{info['params']:,} ({_human(info['params'])})"),
        ("state per layer nD", f"{info['state_per_layer']:,} scalars ({_bytes(info['state_bytes_per_layer'])} fp32)"),
        ("state, all layers", _bytes(info["state_bytes_total"])),
        (
            f"training memory, B={batch_size} T={block_size}",
            f"~{_bytes(info['train_bytes'])} ({config.attention} form, fp32, AdamW)",
        ),
        ("forward+backward FLOPs / token", f"{info['train_flops_per_token']:.3g}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _human(n: int) -> str:
    """A count in thousands, millions or billions: ``1.2M``."""
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def _bytes(n: float) -> str:
    """A size in KiB, MiB or GiB: ``3.00 MiB``."""
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{int(n)} B"


def match_budget(config: BDHConfig, params: int) -> BDHConfig:
    """``config`` with its width D set so its parameter count is closest to ``params``, n / D kept; N = n / h whole
    (even with RoPE)."""
    if isinstance(params, bool) or not isinstance(params, int) or params < 1:
        raise UserError(f"match_budget: the budget must be a positive number of parameters, got {params!r}")
    pairs = 2 if config.positional != "none" else 1
    fields = config.to_dict()
    if config.no_expansion:  # n = h D: N = D
        step = pairs
    else:
        if config.n % config.n_embd:
            raise UserError(
                f"match_budget: n = {config.n} is not a multiple of n_embd = {config.n_embd}, so no expansion n / D "
                "can be kept while the width changes"
            )
        mult = config.n // config.n_embd
        step = config.n_head * pairs // math.gcd(mult, config.n_head * pairs)
        fields.update(n_neurons=None, mlp_internal_dim_multiplier=mult)
    return closest_by_params(params, lambda d: BDHConfig.from_dict({**fields, "n_embd": d}), step, limit=None)
