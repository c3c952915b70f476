"""The language model around a sequence mixer (Zoology's ``LanguageModel``, Arora et al. 2023, section 4 and
the code's ``model.py``), shared by the baselines that differ only in their mixers (Based, GLA, Hyena).

    h_0    = Dropout_e( E[tokens] )                                 no positions: the mixers carry order
    h'     = h + Dropout( mixer_l( LN(h) ) )                        mixer_l: the layer's sequence mixer
    h      = h' + Dropout( W_2 GELU( W_1 LN(h') + c_1 ) + c_2 )     MLP of width m (absent when m = 0)
    logits = LN(h_L) E^T                                            readout tied to the embedding

Initialisation as Zoology's: linear and embedding weights N(0, 0.02), biases 0, the mixers' output
projections and the MLP's second layer N(0, 0.02 / sqrt(2 L)).

Parameter count of the skeleton (`skeleton_params`; V, d, m, L):
    V d + 2 d [final LN] + L ( 2 d [LN] + [2 d + 2 d m + m + d if m > 0] )   plus the mixers' own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .common import check_tokens, count_params

#: parameter names (suffixes) of the residual-branch output projections, initialised N(0, 0.02 / sqrt(2 L))
OUTPUT_PROJECTIONS = ("out_proj.weight", "fc2.weight")


def skeleton_params(vocab_size: int, d: int, hidden: int, n_layer: int) -> int:
    """Parameters of `MixerLM` without its mixers (the formula of the module docstring)."""
    mlp = 2 * d + 2 * d * hidden + hidden + d if hidden else 0
    return vocab_size * d + 2 * d + n_layer * (2 * d + mlp)


class MixerBlock(nn.Module):
    """h + mixer(LN(h)), then h + MLP(LN(h)) (pre-LN)."""

    def __init__(self, mixer: nn.Module, d: int, hidden: int, dropout: float, ln_eps: float):
        super().__init__()
        self.ln1 = nn.LayerNorm(d, eps=ln_eps)
        self.mixer = mixer
        self.ln2 = nn.LayerNorm(d, eps=ln_eps) if hidden else None
        self.fc1 = nn.Linear(d, hidden) if hidden else None
        self.fc2 = nn.Linear(hidden, d) if hidden else None
        self.drop = nn.Dropout(dropout)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + self.drop(self.mixer(self.ln1(h)))
        if self.fc1 is not None:
            h = h + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(h)))))  # type: ignore[misc]
        return h


class MixerLM(nn.Module):
    """Embedding, one `MixerBlock` per mixer, final LayerNorm, tied readout. ``model(idx) -> logits (B, T, V)``.

    ``cfg`` needs ``vocab_size``, ``seq_len``, ``n_embd``, ``hidden`` (the MLP width), ``embed_dropout``,
    ``dropout`` and ``ln_eps``; a subclass builds its mixers and passes them in."""

    config: Any

    def __init__(self, cfg: Any, mixers: Sequence[nn.Module]):
        super().__init__()
        d = cfg.n_embd
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.drop = nn.Dropout(cfg.embed_dropout)
        self.blocks = nn.ModuleList(MixerBlock(m, d, cfg.hidden, cfg.dropout, cfg.ln_eps) for m in mixers)
        self.ln_f = nn.LayerNorm(d, eps=cfg.ln_eps)
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith(OUTPUT_PROJECTIONS):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * len(mixers)))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def num_params(self) -> int:
        """Trainable parameters (equal to the config's ``num_params``, the formula of the model's docstring)."""
        return count_params(self)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        check_tokens(type(self).__name__, idx, cfg.vocab_size, cfg.seq_len)
        h = self.drop(self.embed(idx))
        for block in self.blocks:
            h = block(h)
        return F.linear(self.ln_f(h), self.embed.weight)
