"""DeltaNet (Yang et al. 2024, "Parallelizing Linear Transformers with the Delta Rule over Sequence Length", eq. 1-2,
section 3) and Gated DeltaNet (Yang, Kautz, Hatamizadeh 2025, eq. 10), per head:

    q, k, v = SiLU(ShortConv([q; k; v] = u W_qkv)),   q, k L2-normalised,   b_t = sigmoid(u_t W_b)
    a_t = 1 (DeltaNet)   or   a_t = exp(-exp(A_log) softplus(u_t W_a + dt_bias)) (Gated DeltaNet, Mamba2's gate)
    S_t = a_t S_{t-1} (I - b_t k_t k_t^T) + b_t v_t k_t^T,   o_t = S_t q_t / sqrt(d_k)        (S_t: d_v x d_k)
    y_t = [RMSNorm(o_t) (⊙ SiLU(u_t W_g) with the output gate)]_heads W_o

`delta_rule_recurrent` is the reference loop, `delta_rule_chunked` the chunkwise (UT transform) form training runs."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..model.io import PretrainedMixin
from ..sizing import closest_by_params
from ..typed_config import bounded, one_of
from .common import ModelConfig
from .gla import width_step
from .mixer_lm import HeadSizes, MixerLM

#: ``chunked``: the chunkwise (UT transform) form; ``reference``: the loop over time
FORMS = ("chunked", "reference")


@dataclass
class DeltaNetConfig(HeadSizes, ModelConfig):
    """Configuration of the DeltaNet language model (the paper's layer in Zoology's frame, `MixerLM`)."""

    RUNTIME_FIELDS = frozenset({"dropout", "embed_dropout", "form", "chunk_size"})
    #: whether the state decays by Gated DeltaNet's a_t (the subclass); DeltaNet's a_t = 1
    GATED: ClassVar[bool] = False

    vocab_size: int = bounded(256, ge=1)
    seq_len: int = bounded(256, ge=1)
    n_layer: int = bounded(2, ge=1)
    n_embd: int = bounded(128, ge=1)
    n_head: int = bounded(4, ge=1)
    # expand_k, expand_v: D_k / d and D_v / d, the total key and value sizes; each a multiple of H.
    expand_k: float = bounded(1.0, gt=0, le=16)
    expand_v: float = bounded(1.0, gt=0, le=16)
    # taps of the short causal convolution on q, k, v (the paper's 4); 0: none (SiLU only).
    conv_size: int = bounded(4, ge=0, le=64)
    output_gate: bool = False  # RMSNorm(o) ⊙ SiLU(u W_g) before W_o (Gated DeltaNet's output), else RMSNorm(o).
    mlp_ratio: float = bounded(4.0, ge=0, lt=1e6)  # MLP width as a multiple of d (0: none).
    embed_dropout: float = bounded(0.1, ge=0, lt=1)
    dropout: float = bounded(0.0, ge=0, lt=1)
    causal: bool = True  # must be true; present so callers can read it.
    ln_eps: float = bounded(1e-5, gt=0, lt=1)
    norm_eps: float = bounded(1e-5, gt=0, lt=1)  # epsilon of the RMSNorm on the heads' outputs.
    form: str = one_of("chunked", FORMS)  # ``chunked`` or ``reference`` (`FORMS`); the same function.
    chunk_size: int = bounded(16, ge=1, le=1024)  # C of the chunked form.

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        self._check_bool("causal")
        self._check_bool("output_gate")
        self._check_head_sizes()
        if self.causal is not True:
            self._fail("causal", "the delta rule is a recurrence; it has no bidirectional form")

    def mixer_params(self) -> int:
        """One layer's mixer: W_qkv, the convolution, W_b, the RMSNorm, W_o (and W_g; W_a, A_log, dt_bias)."""
        d, Dk, Dv, H = self.n_embd, self.key_size, self.value_size, self.n_head
        channels = 2 * Dk + Dv
        count = d * channels + channels * self.conv_size + d * H + Dv // H + Dv * d
        count += d * Dv if self.output_gate else 0
        return count + (d * H + 2 * H if self.GATED else 0)

    @classmethod
    def for_budget(
        cls, params: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, causal: bool, **extra: Any
    ) -> DeltaNetConfig:
        """The model of ``n_layer`` layers, ``n_head`` heads closest to ``params`` parameters (whole heads for keys
        and values)."""
        step = width_step(n_head, extra.get("expand_k", 1.0), extra.get("expand_v", 1.0))

        def make(d: int) -> DeltaNetConfig:
            return cls(
                vocab_size=vocab_size, seq_len=seq_len, n_layer=n_layer, n_embd=d, n_head=n_head, causal=causal,
                **extra,
            )  # fmt: skip

        return closest_by_params(params, make, step=step)


@dataclass
class GatedDeltaNetConfig(DeltaNetConfig):
    """Gated DeltaNet: `DeltaNetConfig` with the decay a_t and, by default, the output gate (the paper's layer)."""

    GATED: ClassVar[bool] = True

    output_gate: bool = True
    # dt_min, dt_max, dt_init_floor: the range (log-uniform) and floor of softplus(dt_bias) at initialisation
    # (Mamba2's); A = exp(A_log) starts uniform in [1, 16].
    dt_min: float = bounded(1e-3, gt=0, lt=1e3)
    dt_max: float = bounded(0.1, gt=0, lt=1e3)
    dt_init_floor: float = bounded(1e-4, gt=0, lt=1e3)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dt_min > self.dt_max:
            self._fail("dt_min", f"must not exceed dt_max = {self.dt_max}, got {self.dt_min}")


def _wide(*xs: torch.Tensor) -> list[torch.Tensor]:
    """The tensors in fp32 at least (fp64 kept): the precision the delta rule runs in."""
    dtype = torch.promote_types(xs[0].dtype, torch.float32)
    return [x.to(dtype) for x in xs]


def delta_rule_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_a: torch.Tensor | None = None,
    S0: torch.Tensor | None = None,
    *,
    final: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The reference loop of S_t, o_t above. q, k (B, H, T, d_k); v (B, H, T, d_v); beta, log_a (B, H, T) (log_a None:
    a_t = 1); S0 (B, H, d_v, d_k) or None -> o (B, H, T, d_v), with ``final`` (o, S_T)."""
    B, H, T, K = q.shape
    S = q.new_zeros(B, H, v.shape[-1], K) if S0 is None else S0
    eye = torch.eye(K, dtype=q.dtype, device=q.device)
    out = []
    for t in range(T):
        kt, b = k[:, :, t], beta[:, :, t, None, None]
        a = 1.0 if log_a is None else log_a[:, :, t, None, None].exp()
        S = a * S @ (eye - b * kt[..., :, None] * kt[..., None, :]) + b * v[:, :, t, :, None] * kt[..., None, :]
        out.append((S @ q[:, :, t, :, None]).squeeze(-1))
    o = torch.stack(out, dim=2)
    return (o, S) if final else o


def _chunks(chunk: int, *xs: torch.Tensor) -> list[torch.Tensor]:
    """Each (B, H, T, ...) tensor as (B, H, n, C, ...), zero-padded (zero keys, b = 0, log a = 0: no write,
    no decay)."""
    T = xs[0].shape[2]
    pad = -T % chunk
    out = []
    for x in xs:
        if pad:
            x = F.pad(x, (0, 0) * (x.dim() - 3) + (0, pad))
        out.append(x.reshape(*x.shape[:2], (T + pad) // chunk, chunk, *x.shape[3:]))
    return out


def delta_rule_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_a: torch.Tensor | None = None,
    S0: torch.Tensor | None = None,
    *,
    chunk: int,
    final: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The chunkwise form of `delta_rule_recurrent` (same arguments), in fp32 at least. With R = S^T and gamma_t =
    prod_{s<=t} a_s in the chunk, the pseudo-values U solve (I + A) U = diag(b) V - diag(b gamma) K R_0, A_ts = b_t
    (gamma_t / gamma_s) k_t.k_s for s < t (the UT transform); then o_t = gamma_t R_0^T q_t + sum_{s<=t} (gamma_t /
    gamma_s) (q_t.k_s) u_s, each ratio as exp(c_t - c_s) <= 1."""
    out_dtype, T = v.dtype, q.shape[2]
    g = torch.zeros_like(beta) if log_a is None else log_a
    q, k, v, beta, g = _wide(q, k, v, beta, g)
    q, k, v, beta, g = _chunks(min(chunk, T), q, k, v, beta, g)
    C = q.shape[-2]
    c = g.cumsum(-1)  # (B, H, n, C), decreasing along the chunk
    lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    ratio = torch.where(lower, c[..., :, None] - c[..., None, :], float("-inf")).exp()  # gamma_t / gamma_s, s <= t
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    A = (beta[..., :, None] * (k @ k.transpose(-1, -2)) * ratio).tril(-1)
    solve = functools.partial(torch.linalg.solve_triangular, eye + A, upper=False, unitriangular=True)
    U0 = solve(beta[..., None] * v)  # (B, H, n, C, d_v)
    W = solve((beta * c.exp())[..., None] * k)  # (B, H, n, C, d_k)
    P = (q @ k.transpose(-1, -2)) * ratio  # (B, H, n, C, C), zero above the diagonal
    q_start = q * c.exp()[..., None]
    k_end = k * (c[..., -1:] - c).exp()[..., None]
    decay = c[..., -1].exp()  # (B, H, n)
    B, H, n = q.shape[:3]
    R = q.new_zeros(B, H, k.shape[-1], v.shape[-1]) if S0 is None else S0.transpose(-1, -2).to(q.dtype)
    out = []
    for i in range(n):
        U = U0[:, :, i] - W[:, :, i] @ R
        out.append(q_start[:, :, i] @ R + P[:, :, i] @ U)
        R = decay[:, :, i, None, None] * R + k_end[:, :, i].transpose(-1, -2) @ U
    o = torch.stack(out, dim=2).reshape(B, H, n * C, -1)[:, :, :T].to(out_dtype)
    return (o, R.transpose(-1, -2)) if final else o


class DeltaNetMixer(nn.Module):
    """The (Gated) DeltaNet layer of the module docstring, (B, T, d) -> (B, T, d)."""

    def __init__(self, cfg: DeltaNetConfig):
        super().__init__()
        d, Dk, Dv, H = cfg.n_embd, cfg.key_size, cfg.value_size, cfg.n_head
        self.cfg = cfg
        self.channels = 2 * Dk + Dv
        self.proj_qkv = nn.Linear(d, self.channels, bias=False)
        k = cfg.conv_size
        self.conv = nn.Conv1d(self.channels, self.channels, k, groups=self.channels, bias=False) if k else None
        self.proj_b = nn.Linear(d, H, bias=False)
        self.proj_g = nn.Linear(d, Dv, bias=False) if cfg.output_gate else None
        if cfg.GATED:
            self.proj_a = nn.Linear(d, H, bias=False)
            self.A_log = nn.Parameter(torch.empty(H))
            self.dt_bias = nn.Parameter(torch.empty(H))
        self.norm = nn.RMSNorm(Dv // H, eps=cfg.norm_eps)
        self.out_proj = nn.Linear(Dv, d, bias=False)
        self.reset_special()

    @torch.no_grad()
    def reset_special(self) -> None:
        """Mamba2's gate init: A = exp(A_log) uniform in [1, 16], softplus(dt_bias) log-uniform in [dt_min, dt_max]."""
        cfg = self.cfg
        if not cfg.GATED:
            return
        H = cfg.n_head
        self.A_log.copy_(torch.empty(H).uniform_(1, 16).log())
        lo, hi = math.log(cfg.dt_min), math.log(cfg.dt_max)  # type: ignore[attr-defined]
        dt = torch.exp(torch.rand(H) * (hi - lo) + lo).clamp(min=cfg.dt_init_floor)  # type: ignore[attr-defined]
        self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # the inverse of softplus

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.mix(u, None, None)[0]

    def init_state(self, batch_size: int, device: torch.device | str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The state S of every head (B, H, d_v, d_k), fp32 at least, and the convolution's last k - 1 inputs."""
        H, dk, dv = self.cfg.n_head, self.cfg.key_size // self.cfg.n_head, self.cfg.value_size // self.cfg.n_head
        wide = torch.promote_types(dtype, torch.float32)
        taps = max(self.cfg.conv_size - 1, 0)
        return {
            "S": torch.zeros(batch_size, H, dv, dk, device=device, dtype=wide),
            "conv": torch.zeros(batch_size, self.channels, taps, device=device, dtype=dtype),
        }

    def step(self, u: torch.Tensor, state: dict[str, torch.Tensor], pos: int) -> tuple[torch.Tensor, dict]:
        """`forward` over a chunk u (B, T, d) continuing ``state`` (convolution inputs and S); the state after
        the chunk."""
        y, S, taps = self.mix(u, state["S"], state["conv"])
        return y, {"S": S.to(state["S"].dtype), "conv": taps.to(state["conv"].dtype)}

    def qkv(self, u: torch.Tensor, before: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """SiLU(ShortConv(u W_qkv)) (B, T, 2 D_k + D_v) continuing ``before`` (zeros when None), and the last k -
        1 inputs."""
        x = self.proj_qkv(u).transpose(1, 2)  # (B, channels, T)
        taps = self.cfg.conv_size - 1
        if self.conv is None:
            return F.silu(x).transpose(1, 2), x[..., :0]
        before = x.new_zeros(*x.shape[:2], taps) if before is None else before.to(x.dtype)
        x = torch.cat([before, x], dim=-1)
        keep = x[..., x.shape[-1] - taps :]
        return F.silu(self.conv(x)).transpose(1, 2), keep

    def log_a(self, u: torch.Tensor) -> torch.Tensor | None:
        """log a_t (B, H, T) = -exp(A_log) softplus(u W_a + dt_bias), in fp32 at least; None for DeltaNet."""
        if not self.cfg.GATED:
            return None
        logits = self.proj_a(u)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return (-self.A_log.exp() * F.softplus(logits + self.dt_bias)).transpose(1, 2)

    def mix(
        self, u: torch.Tensor, S0: torch.Tensor | None, before: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """The output (B, T, d), the state after the last step when ``S0`` is given, the convolution's last inputs."""
        B, T, _ = u.shape
        H, Dk = self.cfg.n_head, self.cfg.key_size
        x, taps = self.qkv(u, before)
        q, k, v = (t.reshape(B, T, H, -1).transpose(1, 2) for t in x.split([Dk, Dk, self.cfg.value_size], dim=-1))
        q, k = F.normalize(q, dim=-1) * (Dk // H) ** -0.5, F.normalize(k, dim=-1)
        beta = torch.sigmoid(self.proj_b(u)).transpose(1, 2)
        log_a = self.log_a(u)
        with torch.autocast(u.device.type, enabled=False):
            q, k, v, beta = _wide(q, k, v, beta)
            log_a = None if log_a is None else log_a.to(q.dtype)
            S0 = None if S0 is None else S0.to(q.dtype)
            if self.cfg.form == "reference":
                rule = delta_rule_recurrent
            else:
                rule = functools.partial(delta_rule_chunked, chunk=self.cfg.chunk_size)
            o, S = (rule(q, k, v, beta, log_a), None) if S0 is None else rule(q, k, v, beta, log_a, S0, final=True)
        o = self.norm(o.transpose(1, 2).to(self.norm.weight.dtype))  # in the weights' precision
        if self.proj_g is not None:
            o = o * F.silu(self.proj_g(u)).view(B, T, H, -1)
        return self.out_proj(o.reshape(B, T, -1).to(u.dtype)), S, taps


class DeltaNet(PretrainedMixin, MixerLM):
    """DeltaNet language model (causal): `MixerLM` with one `DeltaNetMixer` per block."""

    model_type = "deltanet"
    config_class: type[DeltaNetConfig] = DeltaNetConfig
    #: a fixed-size state per layer (S of every head, the convolution's last inputs): `MixerLM.init_state` / `step`
    carries_state = True

    def __init__(self, config: DeltaNetConfig):
        want = self.config_class
        if type(config) is not want:
            raise TypeError(f"{type(self).__name__}: expected a {want.__name__}, got {type(config).__name__}")
        super().__init__(config, [DeltaNetMixer(config) for _ in range(config.n_layer)])
        self.config = config

    def state_size(self) -> int:
        """Recurrent-state scalars per layer: H d_v d_k (`DeltaNetConfig.layer_state_size`)."""
        return self.config.layer_state_size()


class GatedDeltaNet(DeltaNet):
    """Gated DeltaNet language model (causal): DeltaNet whose state decays by a_t, with the output gate."""

    model_type = "gated-deltanet"
    config_class = GatedDeltaNetConfig
