"""The state rule of BDH-GPU: how a layer's state rho is written and forgotten (docs/model.md, "State rules").

Eq. 8 writes rho += k v^T and forgets by the fixed damping U (``plain``). Ours, beyond the paper, each chosen by the
config and named here once, from the config to the kernels (`state_rule`, `bdh.model.names.STATE_RULES`):

    learned   U's u_h = sigmoid(a_h), a_h a parameter per head                       (``learn_damping``)
    gated     a retention per token, u_t = u_h sigmoid(w_h . v_t + c_h)              (``decay_gate``, GLA / Mamba-2)
    delta     rho += b_t k (v - rho^T k)^T, unit keys, b_t = g(w_h . v_t + c_h)      (``state_write: delta``, DeltaNet;
              its ``write_gate`` g: sigmoid, hard, or annealed from one to the other; its keys ``write_keys``:
              BDH's positive R x, centred, or signed R (Dx v) before the ReLU; ``write_topk``), with ``decay_gate``'s
              u_t when set

`StateRuleMixin` gives the model a rule's parameters, their start and its per-token gates (log u_t, b_t), the inputs the
kernels of `bdh.model.kernels.pytorch.state_rules` take; `bdh.model.kernels.naive.naive_state_rule` is the loop
they are tested against. A new rule: its config field, its name in `state_rule`, its parameters and gates here, its
write in the loop and in the kernels (CONTRIBUTING.md, "Kernels")."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bdh.errors import UserError

from .config import DECAY_GATE_HALF_LIFE, LEARNED_MAX_HALF_LIFE, BDHConfig
from .kernels.pytorch.state_rules import unit_keys
from .kernels.pytorch.write_keys import shape_write_keys

#: the parameters of the rules, in the order they are drawn (after the paper's weights)
PARAMETERS = ("decay_logit", "decay_w", "decay_b", "write_w", "write_b")


def state_rule(config: BDHConfig) -> str:
    """The name of the config's state rule (`bdh.model.names.STATE_RULES`), the one the kernels are chosen by."""
    if config.state_write == "delta":
        return "delta"
    return "gated" if config.decay_gate else ("learned" if config.learn_damping else "plain")


class StateRuleMixin:
    """The state rule's parameters and per-token gates, mixed into the `nn.Module` `bdh.model.bdh.BDH`."""

    config: BDHConfig
    log_u: torch.Tensor | None

    def _state_rule_parameters(self, config: BDHConfig) -> None:
        """Register the rule's parameters (None where the rule has none) and draw their start."""
        H, D, delta = config.n_head, config.n_embd, config.state_write == "delta"
        shapes = {"decay_logit": (H,)} if config.learn_damping else {}
        shapes.update({"decay_w": (D, H), "decay_b": (H,)} if config.decay_gate else {})
        shapes.update({"write_w": (D, H), "write_b": (H,)} if delta else {})
        for name in PARAMETERS:
            self.register_parameter(name, nn.Parameter(torch.empty(shapes[name])) if name in shapes else None)
        # ``write_gate: annealed``: the training passes so far (as BatchNorm's num_batches_tracked), saved with weights
        passes = torch.zeros((), dtype=torch.int64) if config.write_gate == "annealed" else None
        self.register_buffer("gate_passes", passes)
        with torch.no_grad():
            self.init_state_rules()

    def init_state_rules(self, keep=None) -> None:
        """The state rule's parameters at their start, but those ``keep(p)`` holds for: a_h = logit(u_h) of
        ``damping`` (u = 1 capped at a half-life of LEARNED_MAX_HALF_LIFE tokens), the decay gate at
        DECAY_GATE_HALF_LIFE, b_t near 1/2."""

        def fresh(p: nn.Parameter | None) -> bool:
            return p is not None and not (keep is not None and keep(p))

        if fresh(self.decay_logit):
            u = torch.tensor(self.config.retention(), dtype=torch.float64)
            self.decay_logit.copy_(torch.logit(u.clamp(max=2.0 ** (-1.0 / LEARNED_MAX_HALF_LIFE))))
        for w in (self.decay_w, self.write_w):
            if fresh(w):
                w.normal_(std=0.02)
        if fresh(self.decay_b):  # sigmoid(bias) = 2^(-1 / half-life)
            self.decay_b.fill_(math.log(1.0 / (2.0 ** (1.0 / DECAY_GATE_HALF_LIFE) - 1.0)))
        if fresh(self.write_b):
            self.write_b.zero_()

    def retention_log(self) -> torch.Tensor | None:
        """log u_h (h,) of the damping U: the config's, or log sigmoid(a_h) when learned; None without damping."""
        if self.decay_logit is not None:
            return F.logsigmoid(self.decay_logit)
        return None if self.log_u is None else self.log_u.float()

    def state_rule(self) -> str:
        """The name of this model's state rule (`state_rule`)."""
        return state_rule(self.config)

    def state_rule_gates(self, v: torch.Tensor) -> dict[str, torch.Tensor | None]:
        """The rule's gates from the layer input v (B, 1, T, D), each (B, h, T) or None: ``log_g`` = log u_t (U's
        u_h times the decay gate), ``beta`` = b_t, the delta rule's write strength; {} for a rule without (Eq. 8's
        U, learned or not). The keywords the kernels of a rule take (`bdh.model.kernels.Kernels.attend`)."""
        cfg = self.config
        if not (cfg.decay_gate or cfg.state_write == "delta"):
            return {}
        v = v.squeeze(1)
        log_u = self.retention_log()
        log_g = None if log_u is None else log_u.view(1, -1, 1).expand(v.shape[0], -1, v.shape[1])
        if cfg.decay_gate:
            gate = F.logsigmoid((v @ self.decay_w).float() + self.decay_b).transpose(1, 2)  # log of u_t / u_h
            log_g = gate if log_g is None else log_g + gate
        beta = None
        if cfg.state_write == "delta":
            z = ((v @ self.write_w).float() + self.write_b).transpose(1, 2)
            beta = F.hardsigmoid(z) if cfg.write_gate == "hard" else torch.sigmoid(z)
            if cfg.write_gate == "annealed":  # (1 - m) sigmoid + m hard: exactly the sigmoid at m = 0, hard at 1
                m = self.gate_hardness()
                beta = (1.0 - m) * beta + m * F.hardsigmoid(z)
        return {"log_g": log_g, "beta": beta}

    def gate_hardness(self) -> float:
        """m of ``write_gate: annealed``: min(1, s / gate_anneal_steps) after s training passes."""
        return min(1.0, int(self.gate_passes) / self.config.gate_anneal_steps)

    def count_training_pass(self) -> None:
        """One more pass for the annealed gate's m, where the model trains (training mode, gradients on)."""
        if self.gate_passes is not None and self.training and torch.is_grad_enabled():
            self.gate_passes += 1

    def state_rule_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """The keys the rule writes with: unit keys k / |k| for the delta rule (centred or cut to their top-k
        neurons first by ``write_keys`` / ``write_topk``, `shape_write_keys`; ``signed``: ``keys`` are the layer's
        keys before their ReLU, made unit here), else ``keys`` themselves."""
        if self.config.state_write != "delta":
            return keys
        if (rule := self.write_key_rule()) is not None:
            centred, topk, heads = rule
            keys = shape_write_keys(keys, centred=centred, topk=topk, heads=heads)
        return unit_keys(keys)

    def write_key_rule(self) -> tuple[bool, int | None, tuple[int, ...] | None] | None:
        """(centred, topk, heads) of the delta rule's write keys, the ``write_key`` of `naive_state_rule`; None for
        plain unit keys, of the positive keys or of the signed ones (or no delta rule)."""
        cfg = self.config
        if cfg.state_write != "delta" or (cfg.write_keys in ("unit", "signed") and cfg.write_topk is None):
            return None
        return cfg.write_keys == "centred", cfg.write_topk, cfg.write_topk_heads or None

    @property
    def soft_gated(self) -> bool:
        """Whether the delta rule writes through the sigmoid gate (``write_gate: sigmoid``, or ``annealed``, hard from
        its ``gate_anneal_steps``-th training pass on), read by `hard_gated`."""
        return self.config.state_write == "delta" and self.config.write_gate in ("sigmoid", "annealed")

    def hard_gated(self, top1_heads: tuple[int, ...] = ()) -> StateRuleMixin:
        """The same weights in a model whose delta rule writes through the hard gate (``write_gate: hard``): a
        read-time change; the gate's logits are unchanged and b_t is exactly 0 where they are <= -3, so the tokens
        the gate shuts write nothing (docs/long-context.md, "Recall through a gap"). ``top1_heads``: the writes of
        those heads also go to their key's largest neuron alone (``write_topk: 1``, ``write_topk_heads``), the
        other heads' keys and every query as trained. A copy: ``self`` is kept."""
        if not self.soft_gated:
            raise UserError(
                "a hard read needs a BDH whose delta rule writes through the sigmoid gate "
                "(state_write: delta, write_gate: sigmoid or annealed); "
                f"this one has state_write: {self.config.state_write}"
                + (f", write_gate: {self.config.write_gate}" if self.config.state_write == "delta" else "")
            )
        changes: dict = dict(write_gate="hard", gate_anneal_steps=None)
        if top1_heads:
            if self.config.write_topk is not None:
                raise UserError(
                    f"a hard read with top-1 heads needs unit write keys; this one has write_topk: "
                    f"{self.config.write_topk}"
                )
            changes.update(write_topk=1, write_topk_heads=tuple(top1_heads))
        return self.reconfigured(**changes)

    def reconfigured(self, **changes: Any) -> StateRuleMixin:
        """The same weights in a model of this config with ``changes`` (read-time fields: no weight may change), on
        the same device and dtype, in the same mode; the annealed gate's pass count is kept only where the new
        config counts passes. A copy: ``self`` is kept."""
        weight = next(self.parameters())
        twin = type(self)(dataclasses.replace(self.config, **changes))
        counts = "gate_passes" in twin.state_dict()
        twin.load_state_dict({k: t for k, t in self.state_dict().items() if k != "gate_passes" or counts})
        return twin.to(device=weight.device, dtype=weight.dtype).train(self.training)
