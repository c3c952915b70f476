"""Reading a forward pass layer by layer: the hook protocol, and `BDHCapture`, the hook that keeps everything.

``hook=`` of `BDH.forward` and `BDH.step` is called after every layer with the model, the layer index and a
`LayerActivations`. Hooks see the pass's own tensors (detach what you keep) and change nothing, except that a hooked
training pass draws its dropout masks with PyTorch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from .kernels.pytorch import state_rules
from .kernels.pytorch.attention import scores


@dataclass(frozen=True)
class LayerActivations:
    """One layer of one pass (B batch, H heads, T tokens, N neurons per head, D embedding)."""

    values: torch.Tensor  # (B, 1, T, D) the layer's input v_{l-1}, the attention values.
    x: torch.Tensor  # (B, H, T, N) neuron activations ReLU(Dx v_{l-1}), before RoPE.
    xr: torch.Tensor  # (B, H, T, N) the rotated x, the attention's keys and queries.
    a: torch.Tensor  # (B, H, T, D) attention outputs, before their LayerNorm.
    y: torch.Tensor | None  # (B, H, T, N) gated activations ReLU(Dy LN(a)) * x, before dropout (None in a pass no
    # hook reads, where the Triton read-in forms y inside E y: `bdh.model.kernels.triton.read_in`).
    v: torch.Tensor  # (B, 1, T, D) the layer's output v_l.
    # (B, H, T, N) the attention's keys: xr itself (Q = K), or R ReLU(D_k v_{l-1}) with ``separate_keys``;
    # unit-normalised under the delta rule.
    keys: torch.Tensor


class LayerHook(Protocol):
    def __call__(self, model: torch.nn.Module, layer: int, act: LayerActivations) -> None: ...


@dataclass
class BDHCapture:
    """A hook that keeps, detached, one entry per layer of (B batch, T tokens, H heads, N neurons per head):

    x: (B, H, T, N) ReLU(Dx v) before RoPE;  y: (B, H, T, N) ReLU(Dy LN(a)) * x before dropout;
    attention: (B, H, T, T) the weight of v_tau in a_t (masked, damped; `state_rules.scores`);
    a: (B, H, T, D) before its LayerNorm;  v: (B, T, D) after the layer;  logits: (B, T, V) the logit lens."""

    x: list[torch.Tensor] = field(default_factory=list)
    y: list[torch.Tensor] = field(default_factory=list)
    attention: list[torch.Tensor] = field(default_factory=list)
    a: list[torch.Tensor] = field(default_factory=list)
    v: list[torch.Tensor] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)

    @property
    def n_layer(self) -> int:
        return len(self.x)

    @torch.no_grad()
    def __call__(self, model: torch.nn.Module, layer: int, act: LayerActivations) -> None:
        log_u = model.retention_log()
        v = act.v.squeeze(1).detach()
        self.x.append(act.x.detach())
        self.y.append(act.y.detach())
        gates = model.state_rule_gates(act.values)  # a retention per token, the delta rule's b_t: {} for Eq. 8's
        if gates:
            self.attention.append(state_rules.scores(act.xr, act.keys, **gates).detach())
        else:
            self.attention.append(scores(act.xr, act.keys, log_u, model.config.causal).detach())
        self.a.append(act.a.detach())
        self.v.append(v)
        self.logits.append(v @ model.readout)
