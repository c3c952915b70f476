"""Based (Arora et al. 2024, "Simple linear attention language models balance the recall-throughput tradeoff", section
3; Zoology's ``based`` MQAR configuration).

Mixers in turn from ``layer_pattern``: ``conv`` (short BaseConv, Zoology eq. 4), ``linear`` (Taylor linear attention,
eq. 2) and ``window`` (softmax attention over the last ``window`` tokens, RoPE), in `MixerLM`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..model.io import PretrainedMixin
from ..sizing import closest_by_params
from ..typed_config import bounded, one_of
from .baseconv import BaseConvConfig, BaseConvLayer
from .common import ModelConfig
from .gpt import rope, rope_cos_sin
from .mixer_lm import MixerLM, skeleton_params
from .taylor_attention import expanded_size, linear_attention_chunked, linear_attention_reference

LAYER_KINDS = ("conv", "linear", "window")
#: ``fast``: chunked linear attention and fused band-masked attention; ``reference``: the quadratic and loop forms
FORMS = ("fast", "reference")


@dataclass
class BasedConfig(ModelConfig):
    """Configuration of the Based language model."""

    RUNTIME_FIELDS = frozenset({"dropout", "embed_dropout", "form", "chunk_size"})

    vocab_size: int = bounded(256, ge=1)
    seq_len: int = bounded(256, ge=1)
    n_layer: int = bounded(2, ge=1)  # layers; layer i mixes with ``layer_pattern[i % len(layer_pattern)]``.
    n_embd: int = bounded(128, ge=1)
    # H, heads of the linear and window attention (Zoology's Based: 1); d divisible by H.
    n_head: int = bounded(1, ge=1)
    # the mixers in turn: ``conv``, ``linear``, ``window``.
    layer_pattern: tuple[str, ...] = one_of(("conv", "linear", "window"), LAYER_KINDS)
    d_feature: int = bounded(16, ge=1)  # f, the query/key size of linear attention before the feature map.
    conv_size: int = bounded(3, ge=1)  # taps of the short convolution.
    window: int = bounded(64, ge=1)  # w, tokens a window layer attends over, itself included.
    window_rope: bool = True
    mlp_ratio: float = bounded(4.0, ge=0, lt=1e6)  # MLP width as a multiple of d (0: none, Zoology's MQAR runs).
    embed_dropout: float = bounded(0.1, ge=0, lt=1)
    dropout: float = bounded(0.0, ge=0, lt=1)
    causal: bool = True  # must be true; present so callers can read it.
    ln_eps: float = bounded(1e-5, gt=0, lt=1)
    # ``fast`` or ``reference`` forms of the attention layers (`FORMS`); the same function.
    form: str = one_of("fast", FORMS)
    chunk_size: int = bounded(64, ge=1)  # C of the chunked linear attention.

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        for name in ("window_rope", "causal"):
            self._check_bool(name)
        if not self.layer_pattern:
            self._fail("layer_pattern", f"must name at least one of {', '.join(LAYER_KINDS)}")
        self.layer_pattern = tuple(self.layer_pattern)
        if self.n_embd % self.n_head:
            self._fail("n_head", f"n_embd = {self.n_embd} must be divisible by n_head = {self.n_head}")
        if self.window_rope and "window" in self.layer_pattern and self.head_size % 2:
            self._fail("n_head", f"RoPE rotates pairs, so the head size must be even, got {self.head_size}")
        if self.causal is not True:
            self._fail("causal", "Based's mixers are causal; it has no bidirectional form")

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    @property
    def hidden(self) -> int:
        """m, the MLP width."""
        return int(round(self.mlp_ratio * self.n_embd))

    def kind(self, layer: int) -> str:
        """The mixer of ``layer``."""
        return self.layer_pattern[layer % len(self.layer_pattern)]

    def mixer_params(self, layer: int) -> int:
        d, kind = self.n_embd, self.kind(layer)
        if kind == "conv":
            return d * d + d + d * self.conv_size + d
        if kind == "linear":
            return 2 * d * self.n_head * self.d_feature + 2 * d * d
        return 4 * d * d + 4 * d

    def num_params(self) -> int:
        """The parameter count by the formula of docs/baselines.md."""
        skeleton = skeleton_params(self.vocab_size, self.n_embd, self.hidden, self.n_layer)
        return skeleton + sum(self.mixer_params(i) for i in range(self.n_layer))

    def layer_state_size(self, layer: int) -> int:
        """Recurrent-state scalars of one layer, as Zoology counts them (docs/baselines.md)."""
        d, kind = self.n_embd, self.kind(layer)
        if kind == "conv":
            return d * self.conv_size
        if kind == "linear":
            return self.n_head * expanded_size(self.d_feature) * (self.head_size + 1)
        return 2 * d * min(self.window, self.seq_len)

    @classmethod
    def for_budget(
        cls, params: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, causal: bool, **extra: Any
    ) -> BasedConfig:
        """The Based of ``n_layer`` layers closest to ``params`` parameters (n_embd a multiple of 2; one head, as
        Zoology's; causal only)."""
        return closest_by_params(
            params,
            lambda d: cls(vocab_size=vocab_size, seq_len=seq_len, n_layer=n_layer, n_embd=d, causal=causal, **extra),
            step=2,
        )


def window_mask(T: int, window: int, device: torch.device) -> torch.Tensor:
    """(T, T) boolean: key s is visible from query t iff t - window < s <= t."""
    t = torch.arange(T, device=device)
    gap = t[:, None] - t[None, :]
    return (gap >= 0) & (gap < window)


def window_mask_after(pos: int, T: int, window: int, device: torch.device) -> torch.Tensor:
    """(T, window - 1 + T) mask: key s visible from query t iff t - window < s <= t, after the w - 1 carried keys."""
    t = pos + torch.arange(T, device=device)
    s = pos - (window - 1) + torch.arange(window - 1 + T, device=device)
    gap = t[:, None] - s[None, :]
    return (gap >= 0) & (gap < window) & (s >= 0)[None, :]


def window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    """Causal softmax attention over the last ``window`` keys (B, H, T, dh), under `window_mask`."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(q.shape[-2], window, q.device))


def window_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    """`window_attention` as a loop over queries: softmax(q_t K_w^T / sqrt(dh)) V_w over the keys t-w+1..t."""
    out = []
    for t in range(q.shape[-2]):
        lo = max(0, t - window + 1)
        scores = q[..., t : t + 1, :] @ k[..., lo : t + 1, :].transpose(-1, -2) / q.shape[-1] ** 0.5
        out.append(scores.softmax(-1) @ v[..., lo : t + 1, :])
    return torch.cat(out, dim=-2)


class TaylorLinearAttention(nn.Module):
    """The ``linear`` mixer: per-head Taylor linear attention, heads concatenated, then W_o (no biases)."""

    def __init__(self, cfg: BasedConfig):
        super().__init__()
        d, H, f = cfg.n_embd, cfg.n_head, cfg.d_feature
        self.cfg = cfg
        self.proj_q = nn.Linear(d, H * f, bias=False)
        self.proj_k = nn.Linear(d, H * f, bias=False)
        self.proj_v = nn.Linear(d, d, bias=False)
        self.out_proj = nn.Linear(d, d, bias=False)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        B, T, d = u.shape
        q, k, v = self.qkv(u)
        if self.cfg.form == "reference":
            y = linear_attention_reference(q, k, v)
        else:
            y = linear_attention_chunked(q, k, v, self.cfg.chunk_size)
        return self.out_proj(y.transpose(1, 2).reshape(B, T, d))

    def qkv(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries and keys (B, H, T, f) and values (B, H, T, d/H) of u (B, T, d)."""
        B, T, d = u.shape
        H, f = self.cfg.n_head, self.cfg.d_feature
        q = self.proj_q(u).view(B, T, H, f).transpose(1, 2)
        k = self.proj_k(u).view(B, T, H, f).transpose(1, 2)
        return q, k, self.proj_v(u).view(B, T, H, d // H).transpose(1, 2)

    def init_state(self, batch_size: int, device: torch.device | str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The sums S = sum phi(k)^T v (B, H, E, d/H) and z = sum phi(k) (B, H, E), in fp32 at least."""
        H, E, wide = self.cfg.n_head, expanded_size(self.cfg.d_feature), torch.promote_types(dtype, torch.float32)
        S = torch.zeros(batch_size, H, E, self.cfg.head_size, device=device, dtype=wide)
        return {"S": S, "z": torch.zeros(batch_size, H, E, device=device, dtype=wide)}

    def step(self, u: torch.Tensor, state: dict[str, torch.Tensor], pos: int) -> tuple[torch.Tensor, dict]:
        """`forward` over a chunk u (B, T, d) continuing the carried sums; the sums after the chunk."""
        B, T, d = u.shape
        q, k, v = self.qkv(u)
        y, (S, z) = linear_attention_chunked(q, k, v, self.cfg.chunk_size, (state["S"], state["z"]), final=True)
        out = self.out_proj(y.transpose(1, 2).reshape(B, T, d))
        return out, {"S": S.to(state["S"].dtype), "z": z.to(state["z"].dtype)}


class WindowAttention(nn.Module):
    """The ``window`` mixer: multi-head softmax attention over the last ``window`` tokens (RoPE on q, k)."""

    def __init__(self, cfg: BasedConfig):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.out_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        B, T, d = u.shape
        q, k, v = self.heads(u, 0)
        attend = window_attention_reference if self.cfg.form == "reference" else window_attention
        return self.out_proj(attend(q, k, v, self.cfg.window).transpose(1, 2).reshape(B, T, d))

    def heads(self, u: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v (B, H, T, d/H) of u (B, T, d), q and k rotated for the positions start..start+T-1."""
        B, T, d = u.shape
        q, k, v = self.qkv(u).view(B, T, 3, self.cfg.n_head, d // self.cfg.n_head).permute(2, 0, 3, 1, 4)
        if self.cfg.window_rope:
            rot = rope_cos_sin(T, d // self.cfg.n_head, 10000.0, u.device, start)
            q, k = rope(q, *rot), rope(k, *rot)
        return q, k, v

    def init_state(self, batch_size: int, device: torch.device | str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The rotated keys and values of the last w - 1 tokens, (B, H, w - 1, d/H) each, zeros before the
        first token."""
        shape = (batch_size, self.cfg.n_head, self.cfg.window - 1, self.cfg.head_size)
        return {
            "k": torch.zeros(shape, device=device, dtype=dtype),
            "v": torch.zeros(shape, device=device, dtype=dtype),
        }

    def step(self, u: torch.Tensor, state: dict[str, torch.Tensor], pos: int) -> tuple[torch.Tensor, dict]:
        """`forward` over a chunk u (B, T, d) starting at ``pos``, after the carried w - 1 keys; the last w - 1 keys
        and values."""
        B, T, d = u.shape
        q, k, v = self.heads(u, pos)
        keys, values = (torch.cat([state[n].to(x.dtype), x], dim=2) for n, x in (("k", k), ("v", v)))
        mask = window_mask_after(pos, T, self.cfg.window, u.device)
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        keep = keys.shape[2] - (self.cfg.window - 1)
        new = {"k": keys[:, :, keep:].to(state["k"].dtype), "v": values[:, :, keep:].to(state["v"].dtype)}
        return self.out_proj(y.transpose(1, 2).reshape(B, T, d)), new


def make_mixer(cfg: BasedConfig, layer: int) -> nn.Module:
    """The sequence mixer of ``layer`` (``layer_pattern``)."""
    kind = cfg.kind(layer)
    if kind == "conv":
        conv = BaseConvConfig(seq_len=cfg.seq_len, n_layer=1, n_embd=cfg.n_embd, kernel_sizes=(cfg.conv_size,))
        return BaseConvLayer(conv, 0)
    return TaylorLinearAttention(cfg) if kind == "linear" else WindowAttention(cfg)


class Based(PretrainedMixin, MixerLM):
    """Based language model (causal). ``model(idx) -> logits (B, T, vocab_size)``."""

    model_type = "based"
    config_class = BasedConfig
    #: a fixed-size state per layer (the convolution's taps, the linear attention's sums, the window's last
    #: w - 1 keys and values): `MixerLM.init_state` / `step`
    carries_state = True

    def __init__(self, config: BasedConfig):
        if not isinstance(config, BasedConfig):
            raise TypeError(f"Based: expected a BasedConfig, got {type(config).__name__}")
        super().__init__(config, [make_mixer(config, i) for i in range(config.n_layer)])
        self.config = config

    def state_sizes(self) -> list[int]:
        """Recurrent-state scalars of each layer (`BasedConfig.layer_state_size`)."""
        return [self.config.layer_state_size(i) for i in range(self.config.n_layer)]

    def state_size(self) -> int:
        """Recurrent-state scalars per layer: the mean of `state_sizes` over layers (rounded down), as BaseConv's."""
        return sum(self.state_sizes()) // self.config.n_layer
