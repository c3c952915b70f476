"""Mamba: the selective state-space model (Gu & Dao 2023, Section 3 and Algorithm 2), in Zoology's language-model frame.

    h_t = exp(Delta_t A) ⊙ h_{t-1} + (Delta_t x_t) B_t,   y_t = h_t C_t + D ⊙ x_t     (Eq. 2 with Eq. 4's Abar, Bbar)

The recurrence runs as a loop (``sequential``, the reference), the loop as one autograd node (``recurrent``), a prefix
scan (``parallel``, Section 3.3) or the compiled CPU loop (``native``: no (b, T, e, N) tensor is formed)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..model.io import PretrainedMixin
from ..model.kernels.cpu import native
from ..sizing import closest_by_params
from ..typed_config import bounded, one_of
from .common import ModelConfig
from .mixer_lm import MixerLM, skeleton_params

SCANS = ("auto", "native", "parallel", "recurrent", "sequential")


@dataclass
class MambaConfig(ModelConfig):
    """Configuration of the Mamba language model (defaults: Mamba's mixer settings at a CPU-sized width)."""

    vocab_size: int = bounded(256, ge=1)
    n_layer: int = bounded(2, ge=1)
    n_embd: int = bounded(64, ge=1)
    d_state: int = bounded(16, ge=1)  # N, the state size per inner channel.
    d_conv: int = bounded(4, ge=1)  # k, taps of the short causal convolution.
    expand: int = bounded(2, ge=1)  # E, inner width e = E d.
    dt_rank: int | None = bounded(None, ge=1)  # r, rank of the Delta projection; null: ceil(d / 16) (Mamba's "auto").
    # dt_min, dt_max, dt_init_floor: the range (log-uniform) and floor of the initial step Delta.
    dt_min: float = bounded(1e-3, gt=0)
    dt_max: float = bounded(0.1, gt=0)
    dt_init_floor: float = bounded(1e-4, gt=0)
    embed_dropout: float = bounded(0.1, ge=0, lt=1)
    # ``parallel`` (the prefix scan), ``sequential`` (the loop), ``recurrent`` (the loop as one autograd node with a
    # hand-written backward), ``native`` (the compiled CPU loop, fp32; setup.py builds it) or ``auto`` (on a CPU
    # ``native`` where built and fp32, else ``recurrent`` with gradients and ``sequential`` without; elsewhere the
    # prefix scan).
    scan: str = one_of("auto", SCANS)
    causal: bool = True  # must be true; present so callers can read it.
    norm_eps: float = bounded(1e-5, gt=0, lt=1)
    #: fields that change how the model runs, not what its weights mean (not a dataclass field: no annotation)
    RUNTIME_FIELDS = frozenset({"scan", "embed_dropout"})

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        if self.dt_min > self.dt_max:
            self._fail("dt_min", f"must not exceed dt_max = {self.dt_max}, got {self.dt_min}")
        if self.causal is not True:
            self._fail("causal", "Mamba's scan runs forward in time; it has no bidirectional form")

    @property
    def inner(self) -> int:
        """e = E d, the inner width."""
        return self.expand * self.n_embd

    @property
    def rank(self) -> int:
        """r, the rank of the Delta projection (``dt_rank``, or ceil(d / 16))."""
        return self.dt_rank if self.dt_rank is not None else math.ceil(self.n_embd / 16)

    def num_params(self) -> int:
        """The parameter count by the formula of docs/baselines.md."""
        d, e, N, k, r = self.n_embd, self.inner, self.d_state, self.d_conv, self.rank
        mixer = 2 * e * d + e * k + e + e * (r + 2 * N) + r * e + e + e * N + e + e * d
        return skeleton_params(self.vocab_size, d, 0, self.n_layer, norm="rms") + self.n_layer * mixer

    def layer_state_size(self) -> int:
        """e N: the SSM state of one layer (Zoology's ``Mamba.state_size``)."""
        return self.inner * self.d_state

    @classmethod
    def for_budget(
        cls, params: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, causal: bool, **extra: Any
    ) -> MambaConfig:
        """The Mamba of ``n_layer`` blocks closest to ``params`` parameters (n_embd a multiple of 2; causal only)."""
        return closest_by_params(
            params, lambda d: cls(vocab_size=vocab_size, n_layer=n_layer, n_embd=d, causal=causal, **extra), step=2
        )


def _scan_dtype(x: torch.Tensor) -> torch.dtype:
    """fp32 for half precisions, fp64 kept: the dtype the scans compute in."""
    return torch.promote_types(x.dtype, torch.float32)


def selective_scan_sequential(
    x: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    h0: torch.Tensor | None = None,
    *,
    final: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The reference loop. x, delta (b, T, e); A (e, N); B, C (b, T, N); D (e,); h0 (b, e, N) or None -> y (b, T, e),
    with ``final`` (y, h_T)."""
    b, T, e = x.shape
    h = x.new_zeros(b, e, A.shape[1]) if h0 is None else h0
    ys = []
    for t in range(T):
        decay = torch.exp(delta[:, t, :, None] * A)  # b e N: Abar
        h = decay * h + (delta[:, t] * x[:, t])[..., None] * B[:, t, None, :]
        ys.append((h * C[:, t, None, :]).sum(-1))
    y = torch.stack(ys, dim=1) + x * D
    return (y, h) if final else y


def _discretized(x: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(Abar, Bbar x) of every step at once (Eq. 4), each (b, T, e, N): exp(Delta_t A) and Delta_t x_t B_t."""
    return torch.exp(delta[..., None] * A), (delta * x)[..., None] * B[:, :, None, :]


class _LinearRecurrence(torch.autograd.Function):
    """H_t = a_t ⊙ H_{t-1} + u_t over dim 1 as one autograd node; backward g_t = gH_t + a_{t+1} ⊙ g_{t+1}."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, u: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
        H = torch.empty_like(u)
        h = h0
        for t in range(u.shape[1]):
            h = torch.addcmul(u[:, t], a[:, t], h, out=H[:, t])
        ctx.save_for_backward(a, H, h0)
        return H

    @staticmethod
    def backward(ctx: Any, gH: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a, H, h0 = ctx.saved_tensors
        g = torch.empty_like(gH)
        T = gH.shape[1]
        g[:, T - 1] = gH[:, T - 1]
        for t in range(T - 2, -1, -1):
            torch.addcmul(gH[:, t], a[:, t + 1], g[:, t + 1], out=g[:, t])
        before = torch.cat([h0[:, None], H[:, :-1]], dim=1)  # H_{t-1}
        return g * before, g, a[:, 0] * g[:, 0]


def selective_scan_recurrent(
    x: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    h0: torch.Tensor | None = None,
    *,
    final: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The loop with decays and inputs formed at once and the loop one autograd node (`_LinearRecurrence`)."""
    b, T, e = x.shape
    h0 = x.new_zeros(b, e, A.shape[1]) if h0 is None else h0
    H = _LinearRecurrence.apply(*_discretized(x, delta, A, B), h0)
    y = torch.einsum("bten,btn->bte", H, C) + x * D
    return (y, H[:, -1]) if final else y


class _NativeScan(torch.autograd.Function):
    """`bdh.model.kernels.cpu.native.selective_scan` (y without D, and h_T) as one autograd node."""

    @staticmethod
    def forward(ctx: Any, x, delta, A, B, C, h0):  # type: ignore[no-untyped-def]
        y, h = native.selective_scan(x, delta, A, B, C, h0)
        ctx.save_for_backward(x, delta, A, B, C, h0)
        return y, h

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor, gh: torch.Tensor | None):  # type: ignore[no-untyped-def]
        x, delta, A, B, C, h0 = ctx.saved_tensors
        dx, ddelta, dA, dB, dC, dh0 = native.selective_scan_back(x, delta, A, B, C, h0, gy, gh)
        return dx, ddelta, dA, dB, dC, (dh0 if h0 is not None else None)


def selective_scan_native(
    x: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    h0: torch.Tensor | None = None,
    *,
    final: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The loop compiled (fp32 CPU tensors, the library built): the states of a (b, e) row stay in a buffer, exp by
    a polynomial, so within fp32 rounding of `selective_scan_sequential`."""
    tensors = (x, delta, A, B, C, D, h0)
    if not native.supports(*tensors) or any(t is not None and t.dtype != torch.float32 for t in tensors):
        raise ValueError("Mamba: scan 'native' needs fp32 CPU tensors and the compiled loops (setup.py)")
    y, h = _NativeScan.apply(x, delta, A, B, C, h0)
    y = y + x * D
    return (y, h) if final else y


def selective_scan_parallel(
    x: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    h0: torch.Tensor | None = None,
    *,
    final: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The same recurrence by a prefix scan (Hillis & Steele 1986): (a, u) then (a', u') is (a' a, a' u + u'),
    log2(T) rounds."""
    T = x.shape[1]
    a, h = _discretized(x, delta, A, B)  # h: u_t, becoming h_t
    offset = 1
    while offset < T:
        h = h + a * F.pad(h[:, :-offset], (0, 0, 0, 0, offset, 0))  # earlier composed with h_0 = 0
        a = a * F.pad(a[:, :-offset], (0, 0, 0, 0, offset, 0), value=1.0)
        offset *= 2
    if h0 is not None:
        h = h + a * h0[:, None]
    y = torch.einsum("bten,btn->bte", h, C) + x * D
    return (y, h[:, -1]) if final else y


class MambaMixer(nn.Module):
    """The selective SSM mixer (module docstring), (b, T, d) -> (b, T, d)."""

    def __init__(self, cfg: MambaConfig):
        super().__init__()
        d, e, N, r = cfg.n_embd, cfg.inner, cfg.d_state, cfg.rank
        self.cfg = cfg
        self.in_proj = nn.Linear(d, 2 * e, bias=False)
        self.conv = nn.Conv1d(e, e, cfg.d_conv, groups=e, padding=cfg.d_conv - 1)
        self.x_proj = nn.Linear(e, r + 2 * N, bias=False)
        self.dt_proj = nn.Linear(r, e)
        self.A_log = nn.Parameter(torch.empty(e, N))
        self.D = nn.Parameter(torch.empty(e))
        self.out_proj = nn.Linear(e, d, bias=False)
        self.reset_special()

    @torch.no_grad()
    def reset_special(self) -> None:
        """Mamba's init: W_dt uniform in +-r^-1/2, softplus(b_dt) log-uniform in [dt_min, dt_max], A_log = log(n + 1), D
        = 1."""
        cfg = self.cfg
        nn.init.uniform_(self.dt_proj.weight, -(cfg.rank**-0.5), cfg.rank**-0.5)
        lo, hi = math.log(cfg.dt_min), math.log(cfg.dt_max)
        dt = torch.exp(torch.rand(cfg.inner) * (hi - lo) + lo).clamp(min=cfg.dt_init_floor)
        self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # the inverse of softplus
        self.A_log.copy_(torch.log(torch.arange(1, cfg.d_state + 1, dtype=torch.float32)).repeat(cfg.inner, 1))
        self.D.fill_(1.0)

    def scan_for(self, device: torch.device, dtype: torch.dtype = torch.float32) -> Callable[..., torch.Tensor]:
        """The scan ``scan`` names for tensors of ``dtype`` (``auto``: on a CPU the compiled loop for fp32 where
        built, else the one-node loop to train and the plain loop to read; elsewhere the prefix scan)."""
        scan = self.cfg.scan
        if scan == "auto" and device.type == "cpu" and dtype == torch.float32 and native.available():
            scan = "native"  # measured fastest on a CPU (docs/baselines.md)
        elif scan == "auto" and device.type == "cpu":
            scan = "recurrent" if torch.is_grad_enabled() else "sequential"
        elif scan == "auto":
            scan = "parallel"
        return {
            "sequential": selective_scan_sequential,
            "recurrent": selective_scan_recurrent,
            "native": selective_scan_native,
            "parallel": selective_scan_parallel,
        }[scan]

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        T = u.shape[1]
        x, z = self.in_proj(u).chunk(2, dim=-1)
        x = self.conv(x.transpose(1, 2))[..., :T]
        return self.ssm(u, x, z, None)[0]

    def ssm(
        self, u: torch.Tensor, x: torch.Tensor, z: torch.Tensor, h0: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The output (b, T, d) from the convolved x (b, e, T) and gate z (b, T, e), and the last state when ``h0``
        is given."""
        N = self.cfg.d_state
        x = F.silu(x.transpose(1, 2))
        dt, B, C = self.x_proj(x).split([self.cfg.rank, N, N], dim=-1)
        delta = F.softplus(self.dt_proj(dt))
        dtype = _scan_dtype(x)
        with torch.autocast(u.device.type, enabled=False):
            args = [t.to(dtype) for t in (x, delta, -torch.exp(self.A_log), B, C, self.D)]
            scan = self.scan_for(u.device, dtype)
            y, h = (scan(*args), None) if h0 is None else scan(*args, h0.to(dtype), final=True)
        return self.out_proj((y * F.silu(z.to(dtype))).to(u.dtype)), h

    def init_state(self, batch_size: int, device: torch.device | str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The SSM state h (b, e, N), in the scan's precision, and the convolution's last k - 1 inputs (b, e, k - 1)."""
        e, k = self.cfg.inner, self.cfg.d_conv
        h = torch.zeros(batch_size, e, self.cfg.d_state, device=device, dtype=torch.promote_types(dtype, torch.float32))
        return {"h": h, "conv": torch.zeros(batch_size, e, k - 1, device=device, dtype=dtype)}

    def step(self, u: torch.Tensor, state: dict[str, torch.Tensor], pos: int) -> tuple[torch.Tensor, dict]:
        """`forward` over a chunk u (b, T, d) continuing ``state`` (convolution inputs and h); the state after
        the chunk."""
        x, z = self.in_proj(u).chunk(2, dim=-1)
        taps = torch.cat([state["conv"].to(x.dtype), x.transpose(1, 2)], dim=-1)  # b e (k - 1 + T)
        x = F.conv1d(taps, self.conv.weight, self.conv.bias, groups=self.cfg.inner)
        y, h = self.ssm(u, x, z, state["h"])
        keep = taps[..., taps.shape[-1] - (self.cfg.d_conv - 1) :]
        return y, {"h": h.to(state["h"].dtype), "conv": keep.to(state["conv"].dtype)}


class Mamba(PretrainedMixin, MixerLM):
    """Mamba language model (causal): `MixerLM` with RMSNorm, one `MambaMixer` per block, no second branch."""

    model_type = "mamba"
    config_class = MambaConfig
    #: a fixed-size state per layer (h and the convolution's last inputs): `MixerLM.init_state` / `step`
    carries_state = True

    def __init__(self, config: MambaConfig):
        if not isinstance(config, MambaConfig):
            raise TypeError(f"Mamba: expected a MambaConfig, got {type(config).__name__}")
        mixers = [MambaMixer(config) for _ in range(config.n_layer)]
        super().__init__(config, mixers, norm="rms", branches=[None] * config.n_layer)
        self.config = config

    @torch.no_grad()
    def init_weights(self) -> None:
        """Mamba's init: embedding N(0, 0.02), W_out PyTorch's init / sqrt(n_layer); then
        each `MambaMixer.reset_special`."""
        nn.init.normal_(self.embed.weight, std=0.02)
        for block in self.blocks:
            w = block.mixer.out_proj.weight
            nn.init.kaiming_uniform_(w, a=math.sqrt(5))  # nn.Linear's own init, so that calling twice is harmless
            w /= math.sqrt(len(self.blocks))

    def state_size(self) -> int:
        """Recurrent state scalars per layer: e N, the SSM state (Zoology's ``Mamba.state_size``)."""
        return self.config.layer_state_size()
