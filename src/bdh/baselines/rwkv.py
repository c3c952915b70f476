"""RWKV-4 (Peng et al. 2023, "RWKV: Reinventing RNNs for the Transformer Era", Section 4, Eq. 11-17), in Zoology's
language-model frame (time mixing, Figure 2).

    wkv_t = ( sum_{i<t} e^{-(t-1-i) w + k_i} ⊙ v_i + e^{u + k_t} ⊙ v_t )
          / ( sum_{i<t} e^{-(t-1-i) w + k_i}       + e^{u + k_t} )                                   (Eq. 14)

on token-shifted k, v, r (Eq. 11-13), o_t = W_o (sigmoid(r_t) ⊙ wkv_t), channel mixing (Eq. 16-17) second; the WKV in
the RWKV-4 kernel's stable form, ``sequential`` (the reference) or ``chunked``."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..model.io import PretrainedMixin
from ..sizing import closest_by_params
from ..typed_config import bounded, one_of
from .common import ModelConfig
from .mixer_lm import MixerLM, skeleton_params

WKV_FORMS = ("auto", "chunked", "sequential")


@dataclass
class RWKVConfig(ModelConfig):
    """Configuration of the RWKV-4 language model."""

    vocab_size: int = bounded(256, ge=1)
    n_layer: int = bounded(2, ge=1)
    n_embd: int = bounded(64, ge=1)
    # channel-mixing width m as a multiple of d (0: no channel mixing, Zoology Figure 2).
    mlp_ratio: float = bounded(4.0, ge=0, lt=1e6)
    embed_dropout: float = bounded(0.1, ge=0, lt=1)
    # ``chunked``, ``sequential`` (the reference loop) or ``auto`` (on a CPU without gradients, reads and generation,
    # ``sequential``; else ``chunked``); how the model runs, not its weights.
    wkv: str = one_of("auto", WKV_FORMS)
    chunk_size: int = bounded(8, ge=1)  # L, tokens per chunk of the chunked WKV.
    causal: bool = True  # must be true; present so callers can read it.
    ln_eps: float = bounded(1e-5, gt=0, lt=1)
    #: fields that change how the model runs, not what its weights mean (not a dataclass field: no annotation)
    RUNTIME_FIELDS = frozenset({"wkv", "chunk_size", "embed_dropout"})

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        if self.causal is not True:
            self._fail("causal", "RWKV's recurrence runs forward in time; it has no bidirectional form")

    @property
    def hidden(self) -> int:
        """m, the channel-mixing width."""
        return int(round(self.mlp_ratio * self.n_embd))

    def num_params(self) -> int:
        """The parameter count by the formula of docs/baselines.md."""
        d, m = self.n_embd, self.hidden
        layer = 5 * d + 4 * d * d + (2 * d + 2 * d * m + d * d if m else 0)  # time and channel mixing
        return skeleton_params(self.vocab_size, d, 0, self.n_layer, own_branch=m > 0) + self.n_layer * layer

    def layer_state_size(self) -> int:
        """2 d (WKV numerator, denominator) + d (time-mixing shift) + d with channel mixing (its shift)."""
        return (4 if self.hidden else 3) * self.n_embd

    @classmethod
    def for_budget(
        cls, params: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, causal: bool, **extra: Any
    ) -> RWKVConfig:
        """The RWKV of ``n_layer`` blocks closest to ``params`` parameters (n_embd a multiple of 2; causal only)."""
        return closest_by_params(
            params, lambda d: cls(vocab_size=vocab_size, n_layer=n_layer, n_embd=d, causal=causal, **extra), step=2
        )


#: the WKV state carried between tokens: the numerator and denominator of Eq. 14 times e^-p, and p, each (b, d)
WKVState = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def wkv_empty(k: torch.Tensor) -> WKVState:
    """The state before the first token (empty sums, p = -inf) for keys k (b, T, d)."""
    batch, _, d = k.shape
    return k.new_zeros(batch, d), k.new_zeros(batch, d), k.new_full((batch, d), -math.inf)


def wkv_sequential(
    w: torch.Tensor,
    u: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: WKVState | None = None,
    *,
    final: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, WKVState]:
    """The reference: Eq. 14 by the stable recurrence, looping over t; w (decay > 0), u (bonus) (d,); k, v (b, T, d);
    ``state``: (num, den, p) or None -> wkv, with ``final`` (wkv, state)."""
    num, den, p = wkv_empty(k) if state is None else state
    T = k.shape[1]
    out = []
    for t in range(T):
        kt, vt = k[:, t], v[:, t]
        now = u + kt  # the current token, with its bonus
        q = torch.maximum(p, now).detach()
        e_past, e_now = torch.exp(p - q), torch.exp(now - q)
        out.append((e_past * num + e_now * vt) / (e_past * den + e_now))
        past = p - w  # the state one step older
        q = torch.maximum(past, kt).detach()
        e_past, e_now = torch.exp(past - q), torch.exp(kt - q)
        num, den, p = e_past * num + e_now * vt, e_past * den + e_now, q
    wkv = torch.stack(out, dim=1)
    return (wkv, (num, den, p)) if final else wkv


def wkv_chunked(
    w: torch.Tensor,
    u: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    chunk: int,
    state: WKVState | None = None,
    *,
    final: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, WKVState]:
    """Eq. 14 by chunks of ``chunk`` tokens (module docstring); arguments and results as `wkv_sequential`."""
    num, den, p = wkv_empty(k) if state is None else state
    T = k.shape[1]
    out = []
    for start in range(0, T, chunk):
        kc, vc = k[:, start : start + chunk], v[:, start : start + chunk]
        L = kc.shape[1]
        pos = torch.arange(L, device=k.device)
        lag = (pos[:, None] - 1 - pos[None, :]).to(k.dtype)  # t - 1 - i
        logw = kc[:, None, :, :] - lag[None, :, :, None] * w  # b t i d
        logw = torch.where((lag == -1)[None, :, :, None], (u + kc)[:, None], logw)  # i = t: the bonus
        logw = logw.masked_fill((lag < -1)[None, :, :, None], -math.inf)  # i > t: not yet
        log_state = p[:, None] - pos[None, :, None].to(k.dtype) * w  # b t d
        m = torch.maximum(logw.amax(dim=2), log_state).detach()
        e, e_state = torch.exp(logw - m[:, :, None]), torch.exp(log_state - m)
        num_t = torch.einsum("btid,bid->btd", e, vc) + e_state * num[:, None]
        out.append(num_t / (e.sum(dim=2) + e_state * den[:, None]))
        log_in = kc - (L - 1 - pos)[None, :, None].to(k.dtype) * w  # the chunk's tokens, seen from its end
        log_old = p - L * w
        q = torch.maximum(log_in.amax(dim=1), log_old).detach()
        e_in, e_old = torch.exp(log_in - q[:, None]), torch.exp(log_old - q)
        num, den, p = (e_in * vc).sum(dim=1) + e_old * num, e_in.sum(dim=1) + e_old * den, q
    wkv = torch.cat(out, dim=1)
    return (wkv, (num, den, p)) if final else wkv


def token_shift(x: torch.Tensor, last: torch.Tensor | None = None) -> torch.Tensor:
    """x_{t-1} for every t, (b, T, d); before the first token ``last`` (b, d), or zeros when None."""
    if last is None:
        return F.pad(x, (0, 0, 1, -1))
    return torch.cat([last[:, None].to(x.dtype), x[:, :-1]], dim=1)


def ramp(d: int, power: float) -> torch.Tensor:
    """(i / d)^power for channels i = 0..d-1: RWKV-4's initial token-shift mixes."""
    return (torch.arange(d, dtype=torch.float32) / d) ** power


class TimeMix(nn.Module):
    """RWKV-4 time mixing (Eq. 11-15), (b, T, d) -> (b, T, d)."""

    def __init__(self, cfg: RWKVConfig, layer: int):
        super().__init__()
        d = cfg.n_embd
        self.cfg = cfg
        early = 1.0 - layer / cfg.n_layer  # 1 at the first layer, towards 0 at the last
        late = layer / max(cfg.n_layer - 1, 1)  # 0 at the first layer, 1 at the last
        ch = torch.arange(d, dtype=torch.float32) / max(d - 1, 1)
        self.time_decay = nn.Parameter(-5 + 8 * ch ** (0.7 + 1.3 * late))
        zigzag = 0.5 * (torch.tensor([(i + 1) % 3 - 1 for i in range(d)], dtype=torch.float32))
        self.time_first = nn.Parameter(math.log(0.3) + zigzag)
        self.mix_k = nn.Parameter(ramp(d, early))
        self.mix_v = nn.Parameter(ramp(d, early) + 0.3 * late)
        self.mix_r = nn.Parameter(ramp(d, 0.5 * early))
        self.key, self.value, self.receptance = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.output = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mix(x, None)[0]

    def init_state(self, batch_size: int, device: torch.device | str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The WKV sums and their shift p (`wkv_empty`; fp32 at least, as the WKV runs) and the last input (b, d)."""
        wide = torch.promote_types(dtype, torch.float32)
        num, den, p = wkv_empty(torch.empty(batch_size, 0, self.cfg.n_embd, device=device, dtype=wide))
        return {
            "num": num,
            "den": den,
            "p": p,
            "last": torch.zeros(batch_size, self.cfg.n_embd, device=device, dtype=dtype),
        }

    def step(self, x: torch.Tensor, state: dict[str, torch.Tensor], pos: int) -> tuple[torch.Tensor, dict]:
        """`forward` over a chunk x (b, T, d) continuing ``state``; the state after the chunk."""
        y, (num, den, p) = self.mix(x, state)
        wide = state["num"].dtype
        return y, {"num": num.to(wide), "den": den.to(wide), "p": p.to(wide), "last": x[:, -1].to(state["last"].dtype)}

    def wkv_for(self, device: torch.device) -> Callable[..., Any]:
        """The WKV ``wkv`` names (``auto``: the loop on a CPU without gradients, else the chunked form)."""
        form = self.cfg.wkv
        if form == "auto":
            form = "sequential" if device.type == "cpu" and not torch.is_grad_enabled() else "chunked"
        return wkv_sequential if form == "sequential" else functools.partial(wkv_chunked, chunk=self.cfg.chunk_size)

    def mix(self, x: torch.Tensor, state: dict[str, torch.Tensor] | None) -> tuple[torch.Tensor, WKVState | None]:
        """The time mixing of x (b, T, d); and the WKV state after the last token when ``state`` is given."""
        prev = token_shift(x, None if state is None else state["last"])
        k = self.key(x * self.mix_k + prev * (1 - self.mix_k))
        v = self.value(x * self.mix_v + prev * (1 - self.mix_v))
        r = torch.sigmoid(self.receptance(x * self.mix_r + prev * (1 - self.mix_r)))
        dtype = torch.promote_types(k.dtype, torch.float32)
        with torch.autocast(x.device.type, enabled=False):
            w, u = torch.exp(self.time_decay.to(dtype)), self.time_first.to(dtype)
            run = self.wkv_for(x.device)
            if state is None:
                wkv, carried = run(w, u, k.to(dtype), v.to(dtype)), None
            else:
                start = tuple(state[name].to(dtype) for name in ("num", "den", "p"))
                wkv, carried = run(w, u, k.to(dtype), v.to(dtype), state=start, final=True)
        return self.output((r * wkv).to(x.dtype)), carried


class ChannelMix(nn.Module):
    """RWKV-4 channel mixing (Eq. 16-17), (b, T, d) -> (b, T, d)."""

    def __init__(self, cfg: RWKVConfig, layer: int):
        super().__init__()
        d, m = cfg.n_embd, cfg.hidden
        early = 1.0 - layer / cfg.n_layer
        self.mix_k = nn.Parameter(ramp(d, early))
        self.mix_r = nn.Parameter(ramp(d, early))
        self.key = nn.Linear(d, m, bias=False)
        self.receptance = nn.Linear(d, d, bias=False)
        self.value = nn.Linear(m, d, bias=False)

    def forward(self, x: torch.Tensor, last: torch.Tensor | None = None) -> torch.Tensor:
        """Channel mixing of x (b, T, d); ``last`` (b, d): the input before the chunk (None: zeros, a start)."""
        prev = token_shift(x, last)
        k = torch.square(torch.relu(self.key(x * self.mix_k + prev * (1 - self.mix_k))))
        return torch.sigmoid(self.receptance(x * self.mix_r + prev * (1 - self.mix_r))) * self.value(k)

    def init_state(self, batch_size: int, device: torch.device | str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The last input of the token shift, (b, d)."""
        return {"last": torch.zeros(batch_size, self.key.in_features, device=device, dtype=dtype)}

    def step(self, x: torch.Tensor, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """`forward` over a chunk continuing ``state``; the state after it."""
        return self.forward(x, state["last"]), {"last": x[:, -1].to(state["last"].dtype)}


class RWKV(PretrainedMixin, MixerLM):
    """RWKV-4 language model (causal): `MixerLM`, one `TimeMix` per block, `ChannelMix` second (none if ``mlp_ratio
    = 0``)."""

    model_type = "rwkv"
    config_class = RWKVConfig
    #: a fixed-size state per layer (the WKV sums, the token shifts' last inputs): `MixerLM.init_state` / `step`
    carries_state = True
    #: the residual outputs W_o and W'_v, N(0, 0.02 / sqrt(2 n_layer)) (`MixerLM.init_weights`)
    output_projections = ("mixer.output.weight", "branch.value.weight")

    def __init__(self, config: RWKVConfig):
        if not isinstance(config, RWKVConfig):
            raise TypeError(f"RWKV: expected a RWKVConfig, got {type(config).__name__}")
        layers = range(config.n_layer)
        mixers = [TimeMix(config, i) for i in layers]
        branches = [ChannelMix(config, i) if config.hidden else None for i in layers]
        super().__init__(config, mixers, norm="layer", branches=branches)
        self.config = config

    def state_size(self) -> int:
        """Recurrent state scalars per layer (`RWKVConfig.layer_state_size`)."""
        return self.config.layer_state_size()
