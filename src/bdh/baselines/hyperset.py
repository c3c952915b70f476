"""Hyper-SET: the Hyperspherical Energy Transformer with recurrent depth (Hu, Zou, Xu, ICML; arXiv 2502.11646).

One weight-tied layer iterated ``n_recur`` times, each an alternating-minimisation step of E = E_ATTN + E_FF on the
sphere: symmetric attention with tied Q = K = V = W_h (Eq. 7-8, so bidirectional only), a tied feed-forward step (Eq.
10), step sizes alpha_t, gamma_t from the iteration index (Eq. 11-12)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bdh.errors import UserError

from ..model import recurrence
from ..model.io import PretrainedMixin
from ..sizing import closest_by_params
from ..typed_config import bounded, one_of
from .common import ModelConfig, check_tokens, count_params
from .grid import SudokuPositions, check_board_length, peer_mask


@dataclass
class HyperSETConfig(ModelConfig):
    """Configuration of Hyper-SET (defaults: a small version of the paper's Sudoku model, docs/baselines.md)."""

    RUNTIME_FIELDS = ModelConfig.RUNTIME_FIELDS | recurrence.FIELDS

    vocab_size: int = bounded(10, ge=1)
    seq_len: int = bounded(81, ge=1)  # T, tokens per example (size of the learned position table).
    n_embd: int = bounded(128, ge=1)
    n_head: int = bounded(4, ge=1)  # H subspaces of size p = d / H.
    ff_mult: int = bounded(4, ge=1)  # M / d, the width of the feed-forward basis D.
    n_recur: int = bounded(24, ge=1)  # iterations of the shared layer during training (the default depth).
    time_freq: int = bounded(512, ge=1)  # F, sinusoidal features of the iteration index t.
    # ``x0`` (condition the step sizes on the embedded input) or ``xt`` (on the current X).
    step_condition: str = one_of("x0", ("x0", "xt"))
    embed_dropout: float = bounded(0.1, ge=0, lt=1)
    # ``learned`` absolute embeddings (Sudoku), ``sinusoidal``, ``none``, or ``sudoku`` (learned row, column and box
    # embeddings of a 9 x 9 board, `bdh.baselines.grid`; seq_len 81).
    positional: str = one_of("learned", ("learned", "sinusoidal", "none", "sudoku"))
    causal: bool = False  # must be false (the symmetric attention is bidirectional); present so callers can read it.
    rms_eps: float = bounded(1e-6, gt=0, lt=1)
    # ``all`` tokens, or ``sudoku``: each cell only the cells of its row, column and box (the peer mask of
    # `bdh.baselines.grid`, symmetric, so the attention is still the gradient of an energy; seq_len 81).
    attend: str = one_of("all", ("all", "sudoku"))
    # random_depth, deep_supervision: recurrent depth in training (`bdh.model.recurrence`).
    random_depth: tuple[int, int] | None = None  # checked by recurrence.depth_complaint
    deep_supervision: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        if self.n_embd % self.n_head:
            self._fail("n_head", f"n_embd = {self.n_embd} must be divisible by n_head = {self.n_head}")
        if self.time_freq % 2:
            self._fail("time_freq", f"must be even (sine and cosine pairs), got {self.time_freq}")
        for name in ("positional", "attend"):
            if (why := check_board_length(getattr(self, name), self.seq_len)) is not None:
                self._fail(name, why)
        self._check_bool("deep_supervision")
        if (bad := recurrence.depth_complaint(self.random_depth, self.deep_supervision, True)) is not None:
            self._fail(*bad)
        if self.causal is not False:
            self._fail("causal", "Hyper-SET's row+column softmax attention is bidirectional; it has no causal form")

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    @property
    def ff_width(self) -> int:
        return self.ff_mult * self.n_embd

    def num_params(self) -> int:
        """The parameter count by the formula of docs/baselines.md."""
        d, V, M, Fq, p = self.n_embd, self.vocab_size, self.ff_width, self.time_freq, self.head_size
        total = V * d + {"learned": self.seq_len * d, "sudoku": 27 * d}.get(self.positional, 0)
        total += d * d + d * M + p + M
        total += (Fq * d + d) + (d * d + d) + (2 * d * d + 2 * d)
        return total + d + V * d

    @classmethod
    def for_budget(
        cls, params: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, causal: bool, **extra: Any
    ) -> HyperSETConfig:
        """The Hyper-SET of ``n_layer`` iterations closest to ``params`` parameters (``extra`` e.g. ``time_freq``)."""
        return closest_by_params(
            params,
            lambda d: cls(
                vocab_size=vocab_size, seq_len=seq_len, n_embd=d, n_head=n_head, n_recur=n_layer, causal=causal, **extra
            ),
            step=n_head,
        )


def sinusoid(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Transformer sinusoidal features of positions/iterations t (...,) -> (..., dim)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    ang = t.float()[..., None] * freqs
    return torch.cat([ang.cos(), ang.sin()], dim=-1)


class HyperSETLayer(nn.Module):
    """The shared layer: the attention step (Eq. 8) then the feed-forward step (Eq. 10)."""

    def __init__(self, cfg: HyperSETConfig):
        super().__init__()
        d, M = cfg.n_embd, cfg.ff_width
        self.H, self.p = cfg.n_head, cfg.head_size
        self.W = nn.Parameter(torch.randn(d, d) / math.sqrt(d))  # columns: the subspace bases W_h
        self.D = nn.Parameter(torch.randn(d, M) / math.sqrt(d))  # columns: the feed-forward basis d_m
        self.norm_h = nn.RMSNorm(self.p, eps=cfg.rms_eps)
        self.norm_m = nn.RMSNorm(M, eps=cfg.rms_eps)
        self.register_buffer("peers", peer_mask(cfg.seq_len) if cfg.attend == "sudoku" else None, persistent=False)

    def scores(self, z: torch.Tensor) -> torch.Tensor:
        """S_h = Ẑ_h Ẑ_h^T / sqrt(p) (B, H, N, N), -inf between cells that are not peers with ``attend: sudoku``."""
        s = (z @ z.transpose(-1, -2)) / math.sqrt(self.p)
        N = z.shape[2]
        return s if self.peers is None else s.masked_fill(~self.peers[:N, :N], float("-inf"))

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """Σ_h (softmax_row(S_h) + softmax_col(S_h)) Ẑ_h W_h^T, (B, N, d) -> (B, N, d)."""
        B, N, d = x.shape
        z = self.norm_h((x @ self.W).view(B, N, self.H, self.p).transpose(1, 2))  # B, H, N, p
        s = self.scores(z)
        a = s.softmax(dim=-1) + s.softmax(dim=-2)
        return (a @ z).transpose(1, 2).reshape(B, N, d) @ self.W.t()

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """ReLU(RMSNorm(X D)) D^T."""
        return F.relu(self.norm_m(x @ self.D)) @ self.D.t()

    def forward(self, x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
        x = x - alpha * self.attention(x)
        return x + gamma * self.feed_forward(x)


class StepSizes(nn.Module):
    """α_t, γ_t = Linear(GELU(e_t + c)), e_t = MLP(sinusoid_F(t)) (Eq. 11-12), output layer zero-init."""

    def __init__(self, cfg: HyperSETConfig):
        super().__init__()
        d = cfg.n_embd
        self.freq = cfg.time_freq
        self.time = nn.Sequential(nn.Linear(cfg.time_freq, d), nn.GELU(), nn.Linear(d, d))
        self.out = nn.Linear(d, 2 * d)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, t: int, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        e = self.time(sinusoid(torch.tensor([t], device=cond.device), self.freq))  # 1, d
        return self.out(F.gelu(e + cond)).chunk(2, dim=-1)


class HyperSET(PretrainedMixin, nn.Module):
    """Hyper-SET (bidirectional). ``model(idx, n_layer=None) -> logits (B, T, vocab_size)``."""

    model_type = "hyperset"
    config_class = HyperSETConfig

    def __init__(self, config: HyperSETConfig):
        super().__init__()
        if not isinstance(config, HyperSETConfig):
            raise TypeError(f"HyperSET: expected a HyperSETConfig, got {type(config).__name__}")
        self.config = cfg = config
        d = cfg.n_embd
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.pos = nn.Parameter(torch.randn(cfg.seq_len, d) * 0.02) if cfg.positional == "learned" else None
        self.grid = SudokuPositions(d) if cfg.positional == "sudoku" else None
        if cfg.positional == "sinusoidal":
            self.register_buffer("sin_pos", sinusoid(torch.arange(cfg.seq_len), d), persistent=False)
        self.drop = nn.Dropout(cfg.embed_dropout)
        self.layer = HyperSETLayer(cfg)
        self.steps = StepSizes(cfg)
        self.norm_f = nn.RMSNorm(d, eps=cfg.rms_eps)
        self.readout = nn.Linear(d, cfg.vocab_size, bias=False)

    def num_params(self) -> int:
        """Trainable parameters (equal to `HyperSETConfig.num_params`, the docstring formula)."""
        return count_params(self)

    @property
    def depth(self) -> int:
        """Iterations of the one layer in a forward (the bench's ``n_layer`` column): ``config.n_recur``."""
        return self.config.n_recur

    @property
    def weight_shared(self) -> bool:
        """Always: every iteration applies the one layer, so ``forward(idx, n_layer=k)`` runs any depth."""
        return True

    def state_size(self) -> int:
        """No recurrent state; as for an encoder, the keys attended over per iteration: seq_len * n_embd scalars."""
        return self.config.seq_len * self.config.n_embd

    def forward(self, idx: torch.Tensor, n_layer: int | None = None, *, return_trajectory: bool = False):
        """Logits (B, T, V) after ``n_layer`` iterations (default n_recur, or ``random_depth`` in training); with
        ``return_trajectory`` also every X_t (detached)."""
        traj = []
        for x in self._iterates(idx, n_layer):
            if return_trajectory:
                traj.append(x.detach())
        logits = self.head(x)
        return (logits, traj) if return_trajectory else logits

    def pass_logits(self, idx: torch.Tensor, n_layer: int | None = None) -> Iterator[torch.Tensor]:
        """The logits (B, T, V) after each of the ``n_layer`` iterations, lazily (a loss at every iteration)."""
        return map(self.head, self._iterates(idx, n_layer))

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) of token states X (B, T, d): RMSNorm, then the readout."""
        return self.readout(self.norm_f(x))

    def _iterates(self, idx: torch.Tensor, n_layer: int | None) -> Iterator[torch.Tensor]:
        """The checks of `forward` (at once), then X_t after each iteration t = 1..n_layer (lazily)."""
        cfg = self.config
        check_tokens("HyperSET", idx, cfg.vocab_size, cfg.seq_len)
        n_layer = recurrence.passes_of(n_layer, cfg.random_depth, self.training)
        passes = cfg.n_recur if n_layer is None else n_layer
        if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
            raise UserError(f"HyperSET: n_layer must be a positive integer, got {n_layer!r}")
        return self._iterate(idx, passes)

    def _iterate(self, idx: torch.Tensor, passes: int) -> Iterator[torch.Tensor]:
        cfg = self.config
        T = idx.shape[1]
        x = self.embed(idx)
        if self.pos is not None:
            x = x + self.pos[:T]
        elif self.grid is not None:
            x = x + self.grid(T)
        elif cfg.positional == "sinusoidal":
            x = x + self.sin_pos[:T]
        x = self.drop(x)
        x0 = x
        for t in range(1, passes + 1):
            alpha, gamma = self.steps(t, x0 if cfg.step_condition == "x0" else x)
            x = self.layer(x, alpha, gamma)
            yield x

    @torch.no_grad()
    def energy(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(E_ATTN, E_FF) of token states x (B, N, d), Eq. 2-4, summed over the batch (gains omitted)."""
        B, N, d = x.shape
        lay = self.layer
        z = F.rms_norm((x @ lay.W).view(B, N, lay.H, lay.p).transpose(1, 2), (lay.p,))
        beta = 1.0 / math.sqrt(lay.p)
        e_attn = torch.logsumexp(lay.scores(z), dim=-1).sum() / beta  # beta z_i.z_j, over the peers with a mask
        e_ff = -0.5 * F.relu(F.rms_norm(x @ lay.D, (lay.D.shape[1],))).pow(2).sum()
        return e_attn, e_ff
