"""Gated linear attention (GLA: Yang et al. 2024, "Gated Linear Attention Transformers with Hardware-Efficient
Training", eq. 4-6, section 4.2; Zoology's ``gla`` mixer).

    alpha_t = sigmoid(u_t W_a1 W_a2 + b_a)^(1 / tau),   S_t = diag(alpha_t) S_{t-1} + k_t^T v_t,   o_t = q_t S_t
    y_t = [RMSNorm(o_t) ⊙ Swish(r_t)]_heads W_o

``decay = "fixed"`` is RetNet's per-head gamma_h = 1 - 2^(-5 - h) (Sun et al. 2023, eq. 8)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..model.io import PretrainedMixin
from ..sizing import closest_by_params
from ..typed_config import bounded, one_of
from .common import ModelConfig
from .mixer_lm import HeadSizes, MixerLM

DECAYS = ("data", "fixed")
#: ``fast``: the chunked recurrence; ``pairs``: the same with every chunk by its pairs (slower, any decay);
#: ``reference``: the loop over time
FORMS = ("fast", "pairs", "reference")


@dataclass
class GLAConfig(HeadSizes, ModelConfig):
    """Configuration of the GLA language model (defaults: Zoology's / the paper's GLA layer)."""

    RUNTIME_FIELDS = frozenset({"dropout", "embed_dropout", "form", "chunk_size"})

    vocab_size: int = bounded(256, ge=1)
    seq_len: int = bounded(256, ge=1)
    n_layer: int = bounded(2, ge=1)
    n_embd: int = bounded(128, ge=1)
    n_head: int = bounded(4, ge=1)
    # expand_k, expand_v: D_k / d and D_v / d, the total key and value sizes; each divisible by H.
    expand_k: float = bounded(0.5, gt=0, le=16)
    expand_v: float = bounded(1.0, gt=0, le=16)
    gate_rank: int = bounded(16, ge=1)  # r, the rank of the forget-gate projection.
    gate_tau: float = bounded(16.0, gt=0, lt=1e6)  # tau, alpha = sigmoid(.)^(1/tau) (larger: slower forgetting).
    decay: str = one_of("data", DECAYS)  # ``data`` (GLA's gate alpha_t) or ``fixed`` (RetNet's per-head constant).
    mlp_ratio: float = bounded(4.0, ge=0, lt=1e6)  # MLP width as a multiple of d (0: none, Zoology's MQAR runs).
    embed_dropout: float = bounded(0.1, ge=0, lt=1)
    dropout: float = bounded(0.0, ge=0, lt=1)
    causal: bool = True  # must be true; present so callers can read it.
    ln_eps: float = bounded(1e-5, gt=0, lt=1)
    norm_eps: float = bounded(1e-5, gt=0, lt=1)  # epsilon of the RMSNorm on the heads' outputs.
    form: str = one_of("fast", FORMS)  # ``fast``, ``pairs`` or ``reference`` (`FORMS`); the same function.
    chunk_size: int = bounded(16, ge=1)  # C of the chunked form (its speed: docs/performance.md).

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        self._check_bool("causal")
        self._check_head_sizes()
        if self.causal is not True:
            self._fail("causal", "GLA is a recurrence; it has no bidirectional form")

    def mixer_params(self) -> int:
        d, Dk, Dv, r = self.n_embd, self.key_size, self.value_size, self.gate_rank
        gate = d * r + r * Dk + Dk if self.decay == "data" else 0
        return 2 * d * Dk + 3 * d * Dv + Dv // self.n_head + gate

    @classmethod
    def for_budget(
        cls, params: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, causal: bool, **extra: Any
    ) -> GLAConfig:
        """The GLA of ``n_layer`` layers closest to ``params`` parameters (whole heads; causal only); fewer heads
        (divisors of ``n_head``) are tried when the closest width is more than `HEAD_TOLERANCE` off."""
        ek, ev = extra.get("expand_k", 0.5), extra.get("expand_v", 1.0)

        def closest(heads: int) -> GLAConfig:
            def make(d: int) -> GLAConfig:
                return cls(
                    vocab_size=vocab_size, seq_len=seq_len, n_layer=n_layer, n_embd=d, n_head=heads, causal=causal,
                    **extra,
                )  # fmt: skip

            return closest_by_params(params, make, step=width_step(heads, ek, ev))

        def miss(c: GLAConfig) -> float:
            return abs(c.num_params() - params) / params

        best = closest(n_head)
        if miss(best) > HEAD_TOLERANCE:
            fewer = [closest(h) for h in range(n_head - 1, 0, -1) if n_head % h == 0]
            best = min([best, *fewer], key=miss)  # ties keep the most heads (min keeps the first)
        return best


#: how far from its budget (a share of it) a GLA sized at the asked heads may land before fewer heads are tried
HEAD_TOLERANCE = 0.15


def width_step(n_head: int, expand_k: float, expand_v: float) -> int:
    """The smallest width, a multiple of ``n_head``, whose key and value sizes split over the heads (at most
    64 n_head)."""
    for d in range(n_head, 64 * n_head + 1, n_head):
        if all(float(e * d).is_integer() and int(e * d) % n_head == 0 for e in (expand_k, expand_v)):
            return d
    return n_head


def gla_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_alpha: torch.Tensor,
    S0: torch.Tensor | None = None,
    *,
    final: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The reference loop: q, k, log_alpha (B, H, T, d_k), v (B, H, T, d_v), S0 (B, H, d_k, d_v) or None -> o, with
    ``final`` (o, S_T)."""
    B, H, T, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1]) if S0 is None else S0
    out = []
    for t in range(T):
        S = log_alpha[:, :, t, :, None].exp() * S + k[:, :, t, :, None] * v[:, :, t, None, :]
        out.append((q[:, :, t, None, :] @ S).squeeze(-2))
    o = torch.stack(out, dim=2)
    return (o, S) if final else o


#: the largest decay of one chunk, -sum_t log alpha_t, at which the chunked form still factors exp(b_t - b_s) as
#: exp(b_t) exp(-b_s): e^40 (about 2e17) leaves fp32 (to about 3e38) room for |q k| d_k; beyond it the pairs' form
LOG_SPAN = 40.0


def _within_scaled(
    q: torch.Tensor, q_from_start: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: torch.Tensor
) -> torch.Tensor:
    """The within-chunk part, sum_{s<=t} (q_t . k_s exp(b_t - b_s)) v_s, as two matmuls of (q_t exp(b_t)) and
    (k_s exp(-b_s)); the chunks decaying past `LOG_SPAN` in some channel by their pairs (`_within_pairs`)."""
    chunk = b.shape[-2]
    later = torch.ones(chunk, chunk, dtype=torch.bool, device=b.device).triu(1)  # s > t
    k_to_start = k * (-b.clamp(min=-LOG_SPAN)).exp()  # k_s exp(-b_s); the clamp acts only in steeper chunks
    within = (q_from_start @ k_to_start.transpose(-1, -2)).masked_fill(later, 0.0) @ v
    steep = (b[..., -1, :] < -LOG_SPAN).any(-1)  # (B, H, n)
    if bool(steep.any()):  # those chunks by their pairs (the clamp made them wrong, not inf)
        at = steep.nonzero(as_tuple=True)
        within = within.index_put(at, _within_pairs(q[at], k[at], v[at], b[at]))
    return within


def _within_pairs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The within-chunk part with every factor exp(b_t - b_s) <= 1 formed pair by pair (any decay; C^2 d_k)."""
    chunk = b.shape[-2]
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=b.device).tril()[..., None]
    pair = torch.where(causal, b[..., :, None, :] - b[..., None, :, :], float("-inf")).exp()  # exp(b_t - b_s), s<=t
    scores = (q[..., :, None, :] * k[..., None, :, :] * pair).sum(-1)  # (B, H, n, C, C)
    return scores @ v


def gla_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_alpha: torch.Tensor,
    chunk: int,
    S0: torch.Tensor | None = None,
    *,
    final: bool = False,
    pairs: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The chunkwise form of `gla_recurrent` (same arguments), fp32 at least, any T: within a chunk two matmuls
    (`_within_scaled`; every chunk by its pairs with ``pairs``), across chunks the carried state."""
    out_dtype = v.dtype
    dtype = torch.promote_types(q.dtype, torch.float32)
    q, k, v, g = (x.to(dtype) for x in (q, k, v, log_alpha))
    B, H, T, K = q.shape
    chunk = min(chunk, T)  # no padding beyond the sequence
    pad = -T % chunk
    if pad:
        q, k, v, g = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v, g))
    n = (T + pad) // chunk
    q, k, v, g = (x.reshape(B, H, n, chunk, x.shape[-1]) for x in (q, k, v, g))
    b = g.cumsum(-2)  # (B, H, n, C, d_k), decreasing along the chunk
    q_from_start = q * b.exp()  # q_t exp(b_t): the query's decay since the chunk began, <= 1
    within = _within_pairs(q, k, v, b) if pairs else _within_scaled(q, q_from_start, k, v, b)
    k_to_end = k * (b[..., -1:, :] - b).exp()
    chunk_kv = k_to_end.transpose(-1, -2) @ v  # (B, H, n, d_k, d_v)
    chunk_decay = b[..., -1, :].exp()  # (B, H, n, d_k)
    S = q.new_zeros(B, H, K, v.shape[-1]) if S0 is None else S0.to(dtype)
    starts = []
    for c in range(n):
        starts.append(S)
        S = chunk_decay[:, :, c, :, None] * S + chunk_kv[:, :, c]
    across = q_from_start @ torch.stack(starts, dim=2)
    o = (within + across).reshape(B, H, n * chunk, -1)[:, :, :T].to(out_dtype)
    return (o, S) if final else o


def retnet_log_decay(n_head: int) -> torch.Tensor:
    """log gamma_h, gamma_h = 1 - 2^(-5 - h) for h = 0..H-1 (RetNet's fixed per-head decay)."""
    return torch.log1p(-torch.exp2(-5.0 - torch.arange(n_head, dtype=torch.float64))).float()


class GatedLinearAttention(nn.Module):
    """The GLA mixer (module docstring): projections, forget gate, recurrence, RMSNorm, Swish output gate."""

    def __init__(self, cfg: GLAConfig):
        super().__init__()
        d, Dk, Dv = cfg.n_embd, cfg.key_size, cfg.value_size
        self.cfg = cfg
        self.proj_q = nn.Linear(d, Dk, bias=False)
        self.proj_k = nn.Linear(d, Dk, bias=False)
        self.proj_v = nn.Linear(d, Dv, bias=False)
        self.proj_r = nn.Linear(d, Dv, bias=False)
        self.gate = (
            nn.Sequential(nn.Linear(d, cfg.gate_rank, bias=False), nn.Linear(cfg.gate_rank, Dk))
            if cfg.decay == "data"
            else None
        )
        self.register_buffer("fixed_log_decay", retnet_log_decay(cfg.n_head), persistent=False)
        self.norm = nn.RMSNorm(Dv // cfg.n_head, eps=cfg.norm_eps)
        self.out_proj = nn.Linear(Dv, d, bias=False)

    def log_alpha(self, u: torch.Tensor) -> torch.Tensor:
        """log alpha_t (B, H, T, d_k): log sigmoid(u W_a1 W_a2 + b_a) / tau, or RetNet's constant."""
        B, T, _ = u.shape
        H, dk = self.cfg.n_head, self.cfg.key_size // self.cfg.n_head
        if self.gate is None:
            return self.fixed_log_decay.to(u.dtype)[None, :, None, None].expand(B, H, T, dk)
        logits = self.gate(u)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # the gates decay in fp32 at least
        return (F.logsigmoid(logits) / self.cfg.gate_tau).view(B, T, H, dk).transpose(1, 2)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.mix(u, None)[0]

    def init_state(self, batch_size: int, device: torch.device | str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The state S of every head, (B, H, d_k, d_v), in fp32 at least (the chunked form's precision)."""
        H, dk, dv = self.cfg.n_head, self.cfg.key_size // self.cfg.n_head, self.cfg.value_size // self.cfg.n_head
        wide = torch.promote_types(dtype, torch.float32)
        return {"S": torch.zeros(batch_size, H, dk, dv, device=device, dtype=wide)}

    def step(self, u: torch.Tensor, state: dict[str, torch.Tensor], pos: int) -> tuple[torch.Tensor, dict]:
        """`forward` over a chunk u (B, T, d) starting from the carried S; the state after the chunk."""
        y, S = self.mix(u, state["S"])
        return y, {"S": S.to(state["S"].dtype)}

    def mix(self, u: torch.Tensor, S0: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The mixer's output (B, T, d); and the state after the last step when ``S0`` (the one before) is given."""
        B, T, _ = u.shape
        H, dk, dv = self.cfg.n_head, self.cfg.key_size // self.cfg.n_head, self.cfg.value_size // self.cfg.n_head
        q = self.proj_q(u).view(B, T, H, dk).transpose(1, 2) * dk**-0.5
        k = self.proj_k(u).view(B, T, H, dk).transpose(1, 2)
        v = self.proj_v(u).view(B, T, H, dv).transpose(1, 2)
        g = self.log_alpha(u)
        if self.cfg.form == "reference":
            scan, g, S0 = gla_recurrent, g.to(q.dtype), None if S0 is None else S0.to(q.dtype)
        else:
            scan = functools.partial(gla_chunked, chunk=self.cfg.chunk_size, pairs=self.cfg.form == "pairs")
        o, S = (scan(q, k, v, g), None) if S0 is None else scan(q, k, v, g, S0=S0, final=True)
        o = o.transpose(1, 2)
        o = self.norm(o.to(self.norm.weight.dtype))  # in the weights' precision (fp32 under bf16 autocast)
        o = o * F.silu(self.proj_r(u)).view(B, T, H, dv)
        return self.out_proj(o.reshape(B, T, H * dv)), S


class GLA(PretrainedMixin, MixerLM):
    """GLA language model (causal). ``model(idx) -> logits (B, T, vocab_size)``."""

    model_type = "gla"
    config_class = GLAConfig
    #: a fixed-size state per layer (S of every head): `MixerLM.init_state` / `step`
    carries_state = True

    def __init__(self, config: GLAConfig):
        if not isinstance(config, GLAConfig):
            raise TypeError(f"GLA: expected a GLAConfig, got {type(config).__name__}")
        super().__init__(config, [GatedLinearAttention(config) for _ in range(config.n_layer)])
        self.config = config

    def state_size(self) -> int:
        """Recurrent-state scalars per layer: H d_k d_v (`GLAConfig.layer_state_size`)."""
        return self.config.layer_state_size()
