"""BaseConv (Arora et al. 2023, "Zoology", Definition 4.1, Eq. 4 and appendix B), in Zoology's ``LanguageModel``.

    y = (u W + b_1) ⊙ (h * u + b_2) + u        (Eq. 4, plus the residual of Listing 1)

h is a causal per-channel filter, per layer from ``kernel_sizes``: short (``k`` taps) or as long as the sequence, by FFT
(explicit, Listing 1, or implicit, Listing 2)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from ..model.io import PretrainedMixin
from ..sizing import closest_by_params
from ..typed_config import bounded, one_of
from .common import ModelConfig, check_tokens, count_params

LONG = -1
LONG_FILTERS = ("implicit", "explicit")


def fft_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Causal per-channel convolution y[c, t] = sum_{s<=t} k[c, s] u[c, t-s] by FFT, zero-padded to 2T; u (B, d, T), k
    (d, T' >= T)."""
    T = u.shape[-1]
    n = 2 * T
    k = k[..., :T]
    y = torch.fft.irfft(torch.fft.rfft(u.float(), n=n) * torch.fft.rfft(k.float(), n=n), n=n)[..., :T]
    return y.to(u.dtype)


@dataclass
class BaseConvConfig(ModelConfig):
    """Configuration of the BaseConv language model."""

    vocab_size: int = bounded(256, ge=1)
    # T, the longest sequence (length of explicit long filters and implicit filter features).
    seq_len: int = bounded(256, ge=1)
    n_layer: int = bounded(2, ge=1)
    n_embd: int = bounded(128, ge=1)
    # filter size per layer, taken in turn (k > 0 short, -1 long); Zoology: [3, -1].
    kernel_sizes: Sequence[int] = (3, LONG)
    # ``implicit`` (Listing 2, Zoology's default) or ``explicit`` (Listing 1).
    long_filter: str = one_of("implicit", LONG_FILTERS)
    # filter_emb_dim, filter_hidden: e and q, features and hidden width of the implicit filter (e odd, >= 3).
    filter_emb_dim: int = bounded(3, ge=3)
    filter_hidden: int = bounded(16, ge=1)
    mlp_ratio: float = bounded(4.0, ge=0, lt=1e6)  # MLP hidden width as a multiple of d (0: none, Zoology Figure 2).
    embed_dropout: float = bounded(0.1, ge=0, lt=1)
    dropout: float = bounded(0.0, ge=0, lt=1)
    # ``none`` (Zoology's choice for convolutions) or ``learned`` absolute embeddings.
    positional: str = one_of("none", ("none", "learned"))
    causal: bool = True  # must be true; present so callers can read it.
    ln_eps: float = bounded(1e-5, gt=0, lt=1)

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        if self.filter_emb_dim % 2 == 0:
            self._fail("filter_emb_dim", f"must be odd (time plus cosine/sine pairs), got {self.filter_emb_dim}")
        ks = self.kernel_sizes
        if (
            isinstance(ks, (str, bytes))
            or not isinstance(ks, Sequence)
            or not ks
            or any(isinstance(k, bool) or not isinstance(k, int) or not (k == LONG or k >= 1) for k in ks)
        ):
            self._fail("kernel_sizes", f"must be a non-empty list of positive sizes or -1 (long), got {ks!r}")
        self.kernel_sizes = tuple(ks)
        if self.causal is not True:
            self._fail("causal", "BaseConv's convolutions are causal; it has no bidirectional form")

    def kernel_size(self, layer: int) -> int:
        return self.kernel_sizes[layer % len(self.kernel_sizes)]

    @property
    def hidden(self) -> int:
        return int(round(self.mlp_ratio * self.n_embd))

    def filter_params(self, layer: int) -> int:
        d, k = self.n_embd, self.kernel_size(layer)
        if k != LONG:
            return d * k + d
        if self.long_filter == "explicit":
            return d * self.seq_len + d
        e, q = self.filter_emb_dim, self.filter_hidden
        return e * q + q + q * d + d + d

    def num_params(self) -> int:
        """The parameter count by the formula of docs/baselines.md."""
        d, m, V = self.n_embd, self.hidden, self.vocab_size
        total = V * d + (self.seq_len * d if self.positional == "learned" else 0) + 2 * d
        for layer in range(self.n_layer):
            total += 2 * d + d * d + d + self.filter_params(layer)
            if m:
                total += 2 * d + 2 * d * m + m + d
        return total

    @classmethod
    def for_budget(
        cls, params: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, causal: bool, **extra: Any
    ) -> BaseConvConfig:
        """The BaseConv of ``n_layer`` layers closest to ``params`` parameters (n_embd a multiple of 2; causal only)."""
        return closest_by_params(
            params,
            lambda d: cls(vocab_size=vocab_size, seq_len=seq_len, n_layer=n_layer, n_embd=d, causal=causal, **extra),
            step=2,
        )

    def layer_state_size(self, layer: int) -> int:
        k = self.kernel_size(layer)
        return self.n_embd * (self.seq_len if k == LONG else k)


class PositionalFeatures(nn.Module):
    """z_t = [t / (T-1), Re exp(-i f w_t), Im exp(-i f w_t)] for the implicit long filter (Listing 2)."""

    def __init__(self, emb_dim: int, seq_len: int):
        super().__init__()
        bands = (emb_dim - 1) // 2
        t = torch.linspace(0, 1, seq_len)[:, None]
        w = 2 * math.pi * torch.arange(seq_len, dtype=torch.float32)[:, None] / seq_len
        f = torch.linspace(1e-4, bands - 1, bands)[None, :]
        self.register_buffer("z", torch.cat([t, torch.cos(f * w), -torch.sin(f * w)], dim=-1), persistent=False)

    def forward(self, T: int) -> torch.Tensor:
        return self.z[:T]


class BaseConvLayer(nn.Module):
    """y = (u W + b_1) ⊙ (h * u + b_2) + u on (B, T, d) (Eq. 4 with Listing 1's residual)."""

    def __init__(self, cfg: BaseConvConfig, layer: int):
        super().__init__()
        d = cfg.n_embd
        self.k = cfg.kernel_size(layer)
        self.projection = nn.Linear(d, d)
        self.conv: nn.Conv1d | None = None
        self.filter: nn.Parameter | None = None
        self.filter_mlp: nn.Sequential | None = None
        if self.k != LONG:
            self.conv = nn.Conv1d(d, d, self.k, groups=d, padding=self.k - 1)
        else:
            self.bias = nn.Parameter(torch.zeros(d))
            if cfg.long_filter == "explicit":
                self.filter = nn.Parameter(torch.randn(d, cfg.seq_len))
            else:
                self.pos = PositionalFeatures(cfg.filter_emb_dim, cfg.seq_len)
                self.filter_mlp = nn.Sequential(
                    nn.Linear(cfg.filter_emb_dim, cfg.filter_hidden), nn.ReLU(), nn.Linear(cfg.filter_hidden, d)
                )

    def long_filter(self, T: int) -> torch.Tensor:
        """The filter h (d, T) of a long layer."""
        if self.filter is not None:
            return self.filter[:, :T]
        return self.filter_mlp(self.pos(T)).transpose(0, 1)  # type: ignore[misc]

    def init_state(self, batch_size: int, device: torch.device | str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """A short filter's last k - 1 inputs, (B, d, k - 1); a long filter reads the whole history (refused)."""
        if self.conv is None:
            raise UserError("BaseConv: a long-filter layer reads the whole input history; it has no finite state")
        d, k = self.projection.in_features, self.k
        return {"taps": torch.zeros(batch_size, d, k - 1, device=device, dtype=dtype)}

    def step(self, u: torch.Tensor, state: dict[str, torch.Tensor], pos: int) -> tuple[torch.Tensor, dict]:
        """`forward` (a short filter) over a chunk u (B, T, d), the filter reading the carried inputs before it."""
        taps = torch.cat([state["taps"].to(u.dtype), u.transpose(1, 2)], dim=-1)  # B, d, k - 1 + T
        u_conv = F.conv1d(taps, self.conv.weight, self.conv.bias, groups=taps.shape[1])  # type: ignore[union-attr]
        keep = taps[..., taps.shape[-1] - (self.k - 1) :].to(state["taps"].dtype)
        return u_conv.transpose(1, 2) * self.projection(u) + u, {"taps": keep}

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        T = u.shape[1]
        ut = u.transpose(1, 2)  # B, d, T
        if self.conv is not None:
            u_conv = self.conv(ut)[..., :T]
        else:
            u_conv = fft_conv(ut, self.long_filter(T)) + self.bias[:, None]
        return u_conv.transpose(1, 2) * self.projection(u) + u


class Block(nn.Module):
    def __init__(self, cfg: BaseConvConfig, layer: int):
        super().__init__()
        d = cfg.n_embd
        self.ln1 = nn.LayerNorm(d, eps=cfg.ln_eps)
        self.mixer = BaseConvLayer(cfg, layer)
        self.ln2 = nn.LayerNorm(d, eps=cfg.ln_eps) if cfg.hidden else None
        self.mlp = nn.Sequential(nn.Linear(d, cfg.hidden), nn.GELU(), nn.Linear(cfg.hidden, d)) if cfg.hidden else None
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + self.drop(self.mixer(self.ln1(h)))
        if self.mlp is not None:
            h = h + self.drop(self.mlp(self.ln2(h)))
        return h


class BaseConv(PretrainedMixin, nn.Module):
    """BaseConv language model (causal). ``model(idx) -> logits (B, T, vocab_size)``."""

    model_type = "baseconv"
    config_class = BaseConvConfig

    def __init__(self, config: BaseConvConfig):
        super().__init__()
        if not isinstance(config, BaseConvConfig):
            raise TypeError(f"BaseConv: expected a BaseConvConfig, got {type(config).__name__}")
        self.config = cfg = config
        self.embed = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.pos = nn.Embedding(cfg.seq_len, cfg.n_embd) if cfg.positional == "learned" else None
        self.drop = nn.Dropout(cfg.embed_dropout)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.ln_eps)

    def num_params(self) -> int:
        """Trainable parameters (equal to `BaseConvConfig.num_params`, the docstring formula)."""
        return count_params(self)

    def init_state(self, batch_size: int = 1, device: torch.device | str | None = None) -> None:
        """Refused in one line: BaseConv carries no state (`carries_state` is false; Based's short convolutions do)."""
        if LONG in self.config.kernel_sizes:
            reason = "its long filters read the whole input history"
        else:
            reason = "a BaseConv of short filters only is not given one here (Based's convolution layers carry theirs)"
        raise UserError(f"BaseConv: no recurrent state to carry: {reason}")

    @property
    def depth(self) -> int:
        """Layer passes of a forward (the bench's ``n_layer`` column): ``config.n_layer``."""
        return self.config.n_layer

    def state_sizes(self) -> list[int]:
        """Recurrent state scalars of each layer: d k (short filter) or d seq_len (long filter)."""
        return [self.config.layer_state_size(i) for i in range(self.config.n_layer)]

    def state_size(self) -> int:
        """Recurrent state scalars per layer: the mean of `state_sizes` over layers (rounded down)."""
        return sum(self.state_sizes()) // self.config.n_layer

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        check_tokens("BaseConv", idx, cfg.vocab_size, cfg.seq_len)
        h = self.embed(idx)
        if self.pos is not None:
            h = h + self.pos(torch.arange(idx.shape[1], device=idx.device))
        h = self.drop(h)
        for block in self.blocks:
            h = block(h)
        return F.linear(self.ln_f(h), self.embed.weight)
