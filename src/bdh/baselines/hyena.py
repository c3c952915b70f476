"""Hyena (Poli et al. 2023, "Hyena Hierarchy", Section 3, Definition 3.1, Algorithms 1-3), the order-2 operator of
Zoology's Figure 2.

    (x1, x2, v) = conv_k(u W_in + b_in);  v = x1 ⊙ v;  v = h * v + D ⊙ v;  y = (x2 ⊙ v) W_out + b_out

h is the implicit long filter (Algorithm 2, Eq. 7): an FFN of sine-activated positional features times an exponential
decay window, applied by FFT or directly (``conv``, the O(T^2) reference)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..model.io import PretrainedMixin
from ..sizing import closest_by_params
from ..typed_config import bounded, one_of
from .baseconv import PositionalFeatures, fft_conv
from .common import ModelConfig
from .mixer_lm import MixerLM

CONV_FORMS = ("fft", "direct")


@dataclass
class HyenaConfig(ModelConfig):
    """Configuration of the Hyena language model (defaults: Zoology's Hyena operator at a CPU-sized width)."""

    vocab_size: int = bounded(256, ge=1)
    seq_len: int = bounded(256, ge=1)  # T, the longest sequence (the length of the implicit filter's features).
    n_layer: int = bounded(2, ge=1)
    n_embd: int = bounded(64, ge=1)
    short_filter: int = bounded(3, ge=1)  # k, taps of the short causal filters on the projections.
    filter_order: int = bounded(64, ge=1)  # q, width of the implicit filter's FFN.
    filter_emb_dim: int = bounded(3, ge=3)  # e, positional features of the implicit filter (odd, >= 3).
    filter_layers: int = bounded(2, ge=0)  # n, inner q -> q layers of the FFN.
    filter_freq: float = bounded(1.0, gt=0)  # the initial frequency of the sine activations.
    # decay_fast, decay_slow, decay_target: the decay window reaches ``decay_target`` at the fraction ``decay_fast`` of
    # the length in the fastest channel and ``decay_slow`` in the slowest.
    decay_fast: float = bounded(0.3, gt=0)
    decay_slow: float = bounded(1.5, gt=0)
    decay_target: float = bounded(1e-2, gt=0, lt=1)
    mlp_ratio: float = bounded(4.0, ge=0, lt=1e6)  # MLP hidden width as a multiple of d (0: none, Zoology Figure 2).
    embed_dropout: float = bounded(0.1, ge=0, lt=1)
    dropout: float = bounded(0.0, ge=0, lt=1)
    # ``fft`` (fast) or ``direct`` (the O(T^2) reference); how the model runs, not its weights.
    conv: str = one_of("fft", CONV_FORMS)
    causal: bool = True  # must be true; present so callers can read it.
    ln_eps: float = bounded(1e-5, gt=0, lt=1)
    #: fields that change how the model runs, not what its weights mean (not a dataclass field: no annotation)
    RUNTIME_FIELDS = frozenset({"conv", "embed_dropout", "dropout"})

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        if self.filter_emb_dim % 2 == 0:
            self._fail("filter_emb_dim", f"must be odd (time plus cosine/sine pairs), got {self.filter_emb_dim}")
        if self.decay_fast > self.decay_slow:
            self._fail("decay_fast", f"must not exceed decay_slow = {self.decay_slow}, got {self.decay_fast}")
        if self.causal is not True:
            self._fail("causal", "Hyena's long convolutions are causal; it has no bidirectional form")

    @property
    def hidden(self) -> int:
        """m, the MLP hidden width."""
        return int(round(self.mlp_ratio * self.n_embd))

    def num_params(self) -> int:
        """The parameter count by the formula of docs/baselines.md."""
        d, k, m = self.n_embd, self.short_filter, self.hidden
        e, q, n = self.filter_emb_dim, self.filter_order, self.filter_layers
        implicit = e * q + q + n * (q * q + q) + q * d + q + d
        layer = 2 * d + 3 * d * d + 3 * d + 3 * d * k + 3 * d + d * d + d + implicit
        layer += 2 * d + 2 * d * m + m + d if m else 0
        return self.vocab_size * d + 2 * d + self.n_layer * layer

    def layer_state_size(self) -> int:
        """d T: the long convolution's input history at T = seq_len (Zoology's ``Hyena.state_size``)."""
        return self.n_embd * self.seq_len

    @classmethod
    def for_budget(
        cls, params: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, causal: bool, **extra: Any
    ) -> HyenaConfig:
        """The Hyena of ``n_layer`` blocks closest to ``params`` parameters (n_embd a multiple of 2, ``filter_order`` by
        `budget_filter_order` unless ``extra`` gives one; causal only)."""

        def config(d: int) -> HyenaConfig:
            fields = {"filter_order": budget_filter_order(d), **extra}
            return cls(vocab_size=vocab_size, seq_len=seq_len, n_layer=n_layer, n_embd=d, causal=causal, **fields)

        return closest_by_params(params, config, step=2)


def budget_filter_order(n_embd: int) -> int:
    """The filter FFN's width at a budget: Zoology's 64 from width 32 on, 2 d below (the filter must not outweigh
    the model)."""
    return min(64, 2 * n_embd)


def direct_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The reference of `fft_conv`, by the (d, T, T) lower-triangular Toeplitz matrix K[c, t, j] = k[c, t - j]."""
    T = u.shape[-1]
    pos = torch.arange(T, device=u.device)
    lag = pos[:, None] - pos[None, :]  # t - j
    toeplitz = k[:, lag.clamp(min=0)] * (lag >= 0).to(k.dtype)  # d, T, T
    return torch.einsum("ctj,bcj->bct", toeplitz, u)


class ImplicitFilter(nn.Module):
    """h_t = FFN(z_t) ⊙ window_t (module docstring), the long filter (d, T)."""

    def __init__(self, cfg: HyenaConfig):
        super().__init__()
        q = cfg.filter_order
        self.pos = PositionalFeatures(cfg.filter_emb_dim, cfg.seq_len)
        inner = (nn.Linear(q, q) for _ in range(cfg.filter_layers))
        self.layers = nn.ModuleList([nn.Linear(cfg.filter_emb_dim, q), *inner])
        self.out = nn.Linear(q, cfg.n_embd, bias=False)
        self.freq = nn.Parameter(torch.full((q,), float(cfg.filter_freq)))
        slow, fast = (math.log(cfg.decay_target) / pct for pct in (cfg.decay_slow, cfg.decay_fast))
        self.register_buffer("alpha", torch.linspace(slow, fast, cfg.n_embd).abs(), persistent=False)

    def forward(self, T: int) -> torch.Tensor:
        z = self.pos(T)  # T, e; z[:, 0] = t / (T_max - 1)
        a = z
        for layer in self.layers:
            a = torch.sin(self.freq * layer(a))
        window = torch.exp(-z[:, :1] * self.alpha)  # T, d
        return (self.out(a) * window).transpose(0, 1)


class HyenaOperator(nn.Module):
    """The order-2 Hyena operator (module docstring), (B, T, d) -> (B, T, d)."""

    def __init__(self, cfg: HyenaConfig):
        super().__init__()
        d = cfg.n_embd
        self.conv_form = cfg.conv
        self.in_proj = nn.Linear(d, 3 * d)
        self.short = nn.Conv1d(3 * d, 3 * d, cfg.short_filter, groups=3 * d, padding=cfg.short_filter - 1)
        self.filter = ImplicitFilter(cfg)
        self.D = nn.Parameter(torch.randn(d))
        self.out_proj = nn.Linear(d, d)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        T = u.shape[1]
        x1, x2, v = self.short(self.in_proj(u).transpose(1, 2))[..., :T].chunk(3, dim=1)  # B, d, T each
        v = x1 * v
        long = fft_conv if self.conv_form == "fft" else direct_conv
        v = long(v, self.filter(T)) + self.D[:, None] * v
        return self.out_proj((x2 * v).transpose(1, 2))


class Hyena(PretrainedMixin, MixerLM):
    """Hyena language model (causal): `bdh.baselines.mixer_lm.MixerLM` around one `HyenaOperator` per layer."""

    model_type = "hyena"
    config_class = HyenaConfig
    #: no fixed-size state: `MixerLM.init_state` refuses, in one line, with this reason
    no_state_reason = "its long convolution reads the whole input history (an implicit filter as long as seq_len)"

    def __init__(self, config: HyenaConfig):
        if not isinstance(config, HyenaConfig):
            raise TypeError(f"Hyena: expected a HyenaConfig, got {type(config).__name__}")
        super().__init__(config, [HyenaOperator(config) for _ in range(config.n_layer)])
        self.config = config

    def state_size(self) -> int:
        """Recurrent state scalars per layer: d seq_len (Zoology's ``Hyena.state_size``)."""
        return self.config.layer_state_size()
