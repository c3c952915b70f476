"""The language model around a sequence mixer (Zoology's ``LanguageModel``, Arora et al. 2023, section 4), shared by
Based, GLA, Hyena, Mamba, RWKV, DeltaNet: embedding, blocks h += mixer(Norm(h)), h += branch(Norm(h)), final norm, tied
readout. Zoology's init runs first, each submodule's ``reset_special()`` last."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from .common import check_tokens, count_params, normal_init
from .state import MixerState, Tensors, check_state, part, prefixed

#: parameter names (suffixes) of the residual-branch output projections, initialised N(0, 0.02 / sqrt(2 L))
OUTPUT_PROJECTIONS = ("out_proj.weight", "fc2.weight")

#: the norms a `MixerLM` can use: name -> (module, the config field of its epsilon, its parameters per width)
NORMS: dict[str, tuple[type[nn.Module], str, int]] = {
    "layer": (nn.LayerNorm, "ln_eps", 2),
    "rms": (nn.RMSNorm, "norm_eps", 1),
}


def norm_params(norm: str, d: int) -> int:
    """Parameters of one norm of width d: 2 d for LayerNorm (gain and bias), d for RMSNorm (gain)."""
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {sorted(NORMS)}, got {norm!r}")
    return NORMS[norm][2] * d


def skeleton_params(
    vocab_size: int, d: int, hidden: int, n_layer: int, *, norm: str = "layer", own_branch: bool = False
) -> int:
    """Parameters of `MixerLM` without its mixers; ``hidden``: the MLP's width (0: none)."""
    if hidden and own_branch:
        raise ValueError("a block has either the MLP (hidden > 0) or a branch of its own, not both")
    n = norm_params(norm, d)
    mlp = n + 2 * d * hidden + hidden + d if hidden else 0
    return vocab_size * d + n + n_layer * (n + mlp + (n if own_branch else 0))


class HeadSizes:
    """Head split, parameters and state of a config with ``expand_k``, ``expand_v``, ``mlp_ratio`` (GLA, DeltaNet)."""

    def _check_head_sizes(self) -> None:
        for name in ("expand_k", "expand_v"):
            size = getattr(self, name) * self.n_embd
            if size != int(size) or int(size) % self.n_head or size < self.n_head:
                self._fail(name, f"{name} * n_embd = {size:g} must be a positive multiple of n_head = {self.n_head}")

    @property
    def key_size(self) -> int:
        """D_k, all heads together."""
        return int(self.expand_k * self.n_embd)

    @property
    def value_size(self) -> int:
        """D_v, all heads together."""
        return int(self.expand_v * self.n_embd)

    @property
    def hidden(self) -> int:
        """m, the MLP width."""
        return int(round(self.mlp_ratio * self.n_embd))

    def num_params(self) -> int:
        """The parameter count by the formula of docs/baselines.md."""
        return (
            skeleton_params(self.vocab_size, self.n_embd, self.hidden, self.n_layer)
            + self.n_layer * self.mixer_params()
        )

    def layer_state_size(self) -> int:
        """H d_k d_v: the state S of every head (a convolution's cache is not counted, as Mamba's)."""
        return self.key_size * self.value_size // self.n_head


class MLP(nn.Module):
    """Zoology's MLP branch: W_2 GELU(W_1 x + c_1) + c_2, width d -> m -> d."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class MixerBlock(nn.Module):
    """h + mixer(Norm(h)), then h + branch(Norm(h)) when the block has a second branch (pre-norm)."""

    def __init__(self, mixer: nn.Module, branch: nn.Module | None, make_norm: Callable[[], nn.Module], dropout: float):
        super().__init__()
        self.ln1 = make_norm()
        self.mixer = mixer
        self.ln2 = make_norm() if branch is not None else None
        self.branch = branch
        self.drop = nn.Dropout(dropout)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + self.drop(self.mixer(self.ln1(h)))
        if self.branch is not None:
            h = h + self.drop(self.branch(self.ln2(h)))  # type: ignore[misc]
        return h

    def init_state(self, batch_size: int, device: torch.device | str, dtype: torch.dtype) -> Tensors:
        """The block's empty state: ``mixer.<name>`` tensors, and ``branch.<name>`` when the branch has a state."""
        state = prefixed("mixer", self.mixer.init_state(batch_size, device, dtype))
        if callable(getattr(self.branch, "init_state", None)):
            state |= prefixed("branch", self.branch.init_state(batch_size, device, dtype))  # type: ignore[union-attr]
        return state

    def step(self, h: torch.Tensor, state: Tensors, pos: int) -> tuple[torch.Tensor, Tensors]:
        """`forward` over a chunk h (B, T, d) after ``pos`` tokens, continuing ``state``; the state after it."""
        y, mixed = self.mixer.step(self.ln1(h), part("mixer", state), pos)
        h, new = h + self.drop(y), prefixed("mixer", mixed)
        if self.branch is not None:
            if callable(getattr(self.branch, "step", None)):
                y, branched = self.branch.step(self.ln2(h), part("branch", state))  # type: ignore[union-attr,misc]
                new |= prefixed("branch", branched)
            else:
                y = self.branch(self.ln2(h))  # type: ignore[misc]
            h = h + self.drop(y)
        return h, new


class MixerLM(nn.Module):
    """Embedding, one `MixerBlock` per mixer, final norm, tied readout."""

    config: Any
    #: whether the mixers carry a fixed-size state (`init_state` / `step`); a subclass whose mixers do says so
    carries_state: bool = False
    #: why a model that carries none has none (the one-line error of `init_state`)
    no_state_reason: str = "its mixers carry no recurrent state"
    #: suffixes of the parameter names that `init_weights` scales by 1 / sqrt(2 L)
    output_projections: tuple[str, ...] = OUTPUT_PROJECTIONS

    def __init__(
        self,
        cfg: Any,
        mixers: Sequence[nn.Module],
        *,
        norm: str = "layer",
        branches: Sequence[nn.Module | None] | None = None,
    ):
        super().__init__()
        d = cfg.n_embd
        norm_params(norm, d)  # a clear error for an unknown norm
        module, eps_field, _ = NORMS[norm]
        eps = getattr(cfg, eps_field)

        def make_norm() -> nn.Module:
            return module(d, eps=eps)

        if branches is None:
            branches = [MLP(d, cfg.hidden) if cfg.hidden else None for _ in mixers]
        if len(branches) != len(mixers):
            raise ValueError(f"MixerLM: {len(mixers)} mixers but {len(branches)} branches")
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.drop = nn.Dropout(cfg.embed_dropout)
        dropout = getattr(cfg, "dropout", 0.0)
        self.blocks = nn.ModuleList(MixerBlock(m, b, make_norm, dropout) for m, b in zip(mixers, branches))
        self.ln_f = make_norm()
        self.init_weights()
        for sub in self.modules():  # the mixers' own special initialisations, last
            reset = getattr(sub, "reset_special", None)
            if callable(reset):
                reset()

    @torch.no_grad()
    def init_weights(self) -> None:
        """Zoology's initialisation (module docstring)."""
        self.apply(normal_init)
        for name, p in self.named_parameters():
            if name.endswith(self.output_projections):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * len(self.blocks)))

    @property
    def depth(self) -> int:
        """Layer passes of a forward (the bench's ``n_layer`` column): the blocks, one per layer."""
        return len(self.blocks)

    def num_params(self) -> int:
        """Trainable parameters (equal to the config's ``num_params``, the formula of docs/baselines.md)."""
        return count_params(self)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        check_tokens(type(self).__name__, idx, cfg.vocab_size, getattr(cfg, "seq_len", None))
        h = self.drop(self.embed(idx))
        for block in self.blocks:
            h = block(h)
        return F.linear(self.ln_f(h), self.embed.weight)

    # ------------------------------------------------------------------ the carried state
    def init_state(self, batch_size: int = 1, device: torch.device | str | None = None) -> MixerState:
        """An empty state (every block's, position 0) on the model's device (`bdh.baselines.state.MixerState`)."""
        name = type(self).__name__
        if not self.carries_state:
            raise UserError(f"{name}: no recurrent state to carry: {self.no_state_reason}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise UserError(f"{name}.init_state: batch_size must be a positive integer, got {batch_size!r}")
        weight = self.embed.weight
        device = weight.device if device is None else device
        layers = [block.init_state(batch_size, device, weight.dtype) for block in self.blocks]
        return MixerState(getattr(self, "model_type", name), layers, 0)

    def step(self, tokens: torch.Tensor, state: MixerState) -> tuple[torch.Tensor, MixerState]:
        """Read one token (B,) or a chunk (B, T) continuing ``state`` (not changed), as `forward`;
        (logits, new_state)."""
        name = type(self).__name__
        single = isinstance(tokens, torch.Tensor) and tokens.dim() == 1
        idx = tokens.view(-1, 1) if single else tokens
        check_tokens(f"{name}.step", idx, self.config.vocab_size)
        check_state(name, state, self.init_state(1, device="meta"), idx.shape[0])
        h = self.drop(self.embed(idx))
        layers = []
        for block, carried in zip(self.blocks, state.layers):
            h, carried = block.step(h, carried, state.pos)
            layers.append(carried)
        logits = F.linear(self.ln_f(h), self.embed.weight)
        return (logits[:, -1] if single else logits), MixerState(state.model, layers, state.pos + idx.shape[1])
