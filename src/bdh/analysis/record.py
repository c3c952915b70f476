"""Recorded dynamics of a BDH-GPU model, and the synapse state sigma recovered from them (paper Eq. 16).

`record` keeps per layer and token x, y, attention outputs, values and surprisal; `recover_sigma` and `top_sigma` read
sigma_{t-1,l} = sum_{tau < t} y_{tau,l-1} x_{tau,l}^T U^{t-tau} without forming it (layers 0-based, l >= 1)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from bdh.errors import UserError
from bdh.model import BDH, BDHConfig
from bdh.model.capture import LayerActivations
from bdh.model.kernels import apply_rope
from bdh.model.kernels.pytorch.rope import rope_tables


@dataclass
class Recording:
    """What a model did on a batch of token sequences (all tensors on the CPU, float32)."""

    tokens: torch.Tensor
    # x, y: per layer (B, H, T, N) neuron activations (y gated, before dropout).
    x: list[torch.Tensor]
    y: list[torch.Tensor]
    a: list[torch.Tensor]  # per layer (B, H, T, D) attention outputs before their LayerNorm.
    values: list[torch.Tensor]  # per layer (B, T, D) the layer's input v_{l-1}, the attention values.
    logits: torch.Tensor
    surprisal: torch.Tensor  # (B, T) -log2 p(next token) in bits; NaN at the last position.
    config: BDHConfig
    freqs: torch.Tensor  # (N,) the RoPE frequencies; log_u: (H,) log retention or None.
    log_u: torch.Tensor | None

    @property
    def n_layer(self) -> int:
        return len(self.x)

    @property
    def T(self) -> int:
        return self.tokens.shape[1]

    def flat(self, which: str, layer: int, batch_index: int = 0) -> torch.Tensor:
        """x or y of one layer and sequence as (T, n), neuron j of head h at column h * N + j."""
        act = getattr(self, which)[layer][batch_index]  # H, T, N
        return act.transpose(0, 1).reshape(act.shape[1], -1)


def _layers(cfg: BDHConfig, layers: list[int] | None) -> set[int]:
    """The layers to record: ``layers`` (every layer when None); a one-line `UserError` for one the model lacks."""
    keep = set(range(cfg.n_layer)) if layers is None else set(layers)
    bad = [layer for layer in keep if not 0 <= layer < cfg.n_layer]
    if bad:
        raise UserError(
            f"record: layer {bad[0]} does not exist (the model has {cfg.n_layer} layers: 0..{cfg.n_layer - 1})"
        )
    return keep


def _surprisal(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """(B, T) bits of surprisal of each next token under ``logits`` (the last position has none: NaN)."""
    logp = torch.log_softmax(logits, dim=-1)
    surprisal = torch.full(tokens.shape, float("nan"))
    if tokens.shape[1] > 1:
        nxt = tokens[:, 1:].unsqueeze(-1)
        surprisal[:, :-1] = -logp[:, :-1].gather(-1, nxt).squeeze(-1) / math.log(2)
    return surprisal


@torch.no_grad()
def record(model: BDH, idx: torch.Tensor, *, chunk_size: int = 512, layers: list[int] | None = None) -> Recording:
    """Run ``model`` over ``idx`` (B, T) in eval mode, recording every layer (or ``layers``), in chunks
    of ``chunk_size``."""
    if idx.dim() == 1:
        idx = idx.view(1, -1)
    cfg = model.config
    if not cfg.causal:
        chunk_size = idx.shape[1]  # bidirectional attention has no state: one pass
    keep = _layers(cfg, layers)
    was_training = model.training
    model.eval()
    try:
        device = model.E.device
        idx = idx.to(device)
        parts: dict[str, list[list[torch.Tensor]]] = {
            k: [[] for _ in range(cfg.n_layer)] for k in ("x", "y", "a", "values")
        }
        logits_parts = []
        state = model.init_state(idx.shape[0]) if cfg.causal else None

        def keep_layer(_model: BDH, layer: int, act: LayerActivations) -> None:
            if layer in keep:
                for name in ("x", "y", "a"):
                    parts[name][layer].append(getattr(act, name).float().cpu())
                parts["values"][layer].append(act.values.squeeze(1).float().cpu())

        for s in range(0, idx.shape[1], chunk_size):
            chunk = idx[:, s : s + chunk_size]
            if state is None:
                logits = model(chunk, mode="parallel", hook=keep_layer)
            else:
                logits, state = model.step(chunk, state, mode="parallel", hook=keep_layer)
            logits_parts.append(logits.float().cpu())
    finally:
        model.train(was_training)
    cat = {k: [torch.cat(v, dim=2 if k != "values" else 1) if v else None for v in lists] for k, lists in parts.items()}
    logits = torch.cat(logits_parts, dim=1)
    tokens = idx.cpu()
    surprisal = _surprisal(logits, tokens)
    return Recording(
        tokens=tokens,
        x=cat["x"],
        y=cat["y"],
        a=cat["a"],
        values=cat["values"],
        logits=logits,
        surprisal=surprisal,
        config=cfg,
        freqs=model.freqs.detach().float().cpu(),
        log_u=None if model.log_u is None else model.log_u.detach().float().cpu(),
    )


def head_neurons(config: BDHConfig, head: int) -> torch.Tensor:
    """Flat indices h * N .. (h + 1) * N - 1 of the neurons of ``head``."""
    if not 0 <= head < config.n_head:
        raise UserError(f"head {head} does not exist (the model has {config.n_head} heads: 0..{config.n_head - 1})")
    return torch.arange(head * config.N, (head + 1) * config.N)


def _check_layer(rec: Recording, layer: int, need_previous: bool) -> None:
    if not 0 <= layer < len(rec.x) or rec.x[layer] is None:
        raise UserError(
            f"layer {layer} was not recorded (recorded layers: {[i for i, t in enumerate(rec.x) if t is not None]})"
        )
    if need_previous and (layer == 0 or rec.y[layer - 1] is None):
        raise UserError(
            f"sigma of layer {layer} needs the y of layer {layer - 1}"
            + (
                " (layer 0 reads token embeddings, it has no synapse state sigma)"
                if layer == 0
                else ", which was not recorded"
            )
        )


def _rotated_keys(rec: Recording, layer: int, t: int, batch_index: int) -> torch.Tensor:
    """M_(tau - t) x_tau for tau < t: keys rotated to the reading position t, as (t, n)."""
    cfg = rec.config
    x = rec.x[layer][batch_index][:, :t]  # H, t, N
    if cfg.positional != "none":
        cos, sin = rope_tables(cfg.positional, rec.freqs, -t, t)  # positions tau - t
        x = apply_rope(cfg.positional, x, cos, sin)
    return x.transpose(0, 1).reshape(t, -1)


def _damping(rec: Recording, t: int, cols: torch.Tensor) -> torch.Tensor | None:
    """u_(head(col))^(t - tau) for tau < t: (t, len(cols)), or None without damping."""
    if rec.log_u is None:
        return None
    gap = (t - torch.arange(t, dtype=torch.float32)).view(-1, 1)
    return torch.exp(gap * rec.log_u[cols // rec.config.N].view(1, -1))


def _resolve(rec: Recording, t: int | None) -> int:
    T = rec.T
    t = T if t is None else t
    if not 0 <= t <= T:
        raise UserError(f"t = {t} is outside the recording (0..{T})")
    return t


def recover_sigma(
    rec: Recording,
    layer: int,
    rows: torch.Tensor | None = None,
    cols: torch.Tensor | None = None,
    t: int | None = None,
    rotate: bool = False,
    batch_index: int = 0,
) -> torch.Tensor:
    """A (rows, cols) block of sigma_{t-1, layer} (Eq. 16) over tau < ``t``; ``rotate``: with U's RoPE rotation."""
    _check_layer(rec, layer, need_previous=True)
    t = _resolve(rec, t)
    n = rec.config.n
    rows = torch.arange(n) if rows is None else torch.as_tensor(rows, dtype=torch.long)
    cols = torch.arange(n) if cols is None else torch.as_tensor(cols, dtype=torch.long)
    Y = rec.flat("y", layer - 1, batch_index)[:t, rows]  # t, R
    X = _rotated_keys(rec, layer, t, batch_index)[:, cols] if rotate else rec.flat("x", layer, batch_index)[:t, cols]
    W = _damping(rec, t, cols)
    if W is not None:
        X = X * W
    return Y.T @ X


def top_sigma(
    rec: Recording,
    layer: int,
    k: int,
    rows: torch.Tensor | None = None,
    cols: torch.Tensor | None = None,
    t: int | None = None,
    rotate: bool = False,
    block: int = 4096,
    batch_index: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``k`` largest entries of sigma_{t-1, layer} as (values, rows, cols), in blocks (memory O(block^2 + k))."""
    if k < 1:
        raise UserError(f"top_sigma: k must be positive, got {k}")
    _check_layer(rec, layer, need_previous=True)
    t = _resolve(rec, t)
    n = rec.config.n
    rows = torch.arange(n) if rows is None else torch.as_tensor(rows, dtype=torch.long)
    cols = torch.arange(n) if cols is None else torch.as_tensor(cols, dtype=torch.long)
    Yall = rec.flat("y", layer - 1, batch_index)[:t]
    Xall = _rotated_keys(rec, layer, t, batch_index) if rotate else rec.flat("x", layer, batch_index)[:t]
    best_v = torch.empty(0)
    best_r = torch.empty(0, dtype=torch.long)
    best_c = torch.empty(0, dtype=torch.long)
    for r0 in range(0, len(rows), block):
        rsel = rows[r0 : r0 + block]
        Y = Yall[:, rsel]
        for c0 in range(0, len(cols), block):
            csel = cols[c0 : c0 + block]
            X = Xall[:, csel]
            W = _damping(rec, t, csel)
            blk = Y.T @ (X * W if W is not None else X)
            kk = min(k, blk.numel())
            v, flat = torch.topk(blk.reshape(-1), kk)
            cand_v = torch.cat([best_v, v])
            cand_r = torch.cat([best_r, rsel[flat // blk.shape[1]]])
            cand_c = torch.cat([best_c, csel[flat % blk.shape[1]]])
            keep = torch.topk(cand_v, min(k, cand_v.numel())).indices
            best_v, best_r, best_c = cand_v[keep], cand_r[keep], cand_c[keep]
    return best_v, best_r, best_c


def attention_state(rec: Recording, layer: int, head: int, t: int | None = None, batch_index: int = 0) -> torch.Tensor:
    """A head's state (N, D) after tokens 0..t-1: S = sum_{tau < t} u^(t - tau) (R_tau x_tau) v_tau^T,
    as ``state.rho``."""
    _check_layer(rec, layer, need_previous=False)
    head_neurons(rec.config, head)
    t = _resolve(rec, t)
    cfg = rec.config
    x = rec.x[layer][batch_index, head, :t]  # t, N
    if cfg.positional != "none":
        cos, sin = rope_tables(cfg.positional, rec.freqs, 0, t)
        x = apply_rope(cfg.positional, x, cos, sin)
    v = rec.values[layer][batch_index, :t]  # t, D
    if rec.log_u is not None:
        w = torch.exp(rec.log_u[head] * (t - torch.arange(t, dtype=torch.float32)))
        v = v * w.view(-1, 1)
    return x.T @ v
