"""GPT: a GPT-2-style pre-LayerNorm Transformer (Radford et al. 2019; the nanoGPT layout).

Causal or bidirectional; learned, rotary or no positions; ``share_layers`` applies one block ``n_layer`` times
(Hyper-SET's "recurrent Transformer"), and ``forward(idx, n_layer=k)`` runs k passes."""

from __future__ import annotations

import dataclasses
import math
from collections import deque
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
from .common import ModelConfig, check_tokens, count_params, normal_init
from .grid import SudokuPositions, check_board_length, peer_mask
from .state import KVCache

POSITIONAL = ("learned", "rope", "none", "sudoku")


@dataclass
class GPTConfig(ModelConfig):
    """Configuration of the GPT baseline."""

    RUNTIME_FIELDS = ModelConfig.RUNTIME_FIELDS | recurrence.FIELDS

    vocab_size: int = bounded(256, ge=1)
    # T, the longest sequence (size of the learned position table; the KV cache of state_size).
    seq_len: int = bounded(256, ge=1)
    n_layer: int = bounded(4, ge=1)  # L, blocks (or passes of the one block with ``share_layers``).
    n_embd: int = bounded(128, ge=1)
    n_head: int = bounded(4, ge=1)  # heads; d must be divisible by n_head (and d / n_head even for RoPE).
    mlp_ratio: float = bounded(4.0, ge=0, lt=1e6)  # hidden width of the MLP as a multiple of d (0: no MLP).
    # dropout on attention probabilities, the residual branches and the embeddings.
    dropout: float = bounded(0.0, ge=0, lt=1)
    causal: bool = True
    # ``learned`` absolute embeddings (GPT-2), ``rope`` (rotary, Su et al. 2021), ``none``, or ``sudoku`` (learned row,
    # column and box embeddings of a 9 x 9 board, `bdh.baselines.grid`; seq_len 81).
    positional: str = one_of("learned", POSITIONAL)
    rope_theta: float = bounded(10000.0, gt=1)
    bias: bool = True  # biases in linear layers and LayerNorms (GPT-2: yes).
    tie_embeddings: bool = True  # readout = embedding matrix transposed (GPT-2: yes).
    share_layers: bool = False  # one block applied n_layer times (weight-shared depth).
    ln_eps: float = bounded(1e-5, gt=0, lt=1)
    # ``all`` tokens (or the earlier ones, causal), or ``sudoku``: each cell only the cells of its row, column and box
    # (the peer mask of `bdh.baselines.grid`; bidirectional, seq_len 81).
    attend: str = one_of("all", ("all", "sudoku"))
    # random_depth, deep_supervision: recurrent depth in training, with ``share_layers`` (`bdh.model.recurrence`).
    random_depth: tuple[int, int] | None = None  # checked by recurrence.depth_complaint
    deep_supervision: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        for name in ("causal", "bias", "tie_embeddings", "share_layers", "deep_supervision"):
            self._check_bool(name)
        if (bad := recurrence.depth_complaint(self.random_depth, self.deep_supervision, self.share_layers)) is not None:
            self._fail(*bad)
        if self.n_embd % self.n_head:
            self._fail("n_head", f"n_embd = {self.n_embd} must be divisible by n_head = {self.n_head}")
        if self.positional == "rope" and (self.n_embd // self.n_head) % 2:
            self._fail(
                "n_head",
                f"RoPE rotates pairs, so the head size n_embd / n_head must be even, got {self.n_embd // self.n_head}",
            )
        for name in ("positional", "attend"):
            if (why := check_board_length(getattr(self, name), self.seq_len)) is not None:
                self._fail(name, why)
        if self.attend == "sudoku" and self.causal:
            self._fail("attend", "sudoku attends over the whole board; it needs causal=false")

    @property
    def hidden(self) -> int:
        """m, the MLP hidden width."""
        return int(round(self.mlp_ratio * self.n_embd))

    def num_params(self) -> int:
        """The parameter count by the formula of docs/baselines.md."""
        d, m, V, b = self.n_embd, self.hidden, self.vocab_size, int(self.bias)
        if m:
            per_block = 4 * d * d + 2 * d * m + 2 * d * (1 + b) + b * (5 * d + m)
        else:  # attention only: no MLP and no second LayerNorm
            per_block = 4 * d * d + d * (1 + b) + b * 4 * d
        table = {"learned": self.seq_len * d, "sudoku": 27 * d}.get(self.positional, 0)
        emb = V * d + table + (0 if self.tie_embeddings else V * d)
        return emb + (1 if self.share_layers else self.n_layer) * per_block + d * (1 + b)

    @classmethod
    def for_budget(
        cls, params: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, causal: bool, **extra: Any
    ) -> GPTConfig:
        """The GPT of ``n_layer`` distinct blocks closest to ``params`` parameters (`gpt_config_for_params`)."""
        return gpt_config_for_params(
            params, n_layer=n_layer, n_head=n_head, vocab_size=vocab_size, seq_len=seq_len, causal=causal, **extra
        )


def rope_cos_sin(
    T: int, dim: int, theta: float, device: torch.device, start: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary tables (T, dim/2) for positions start..start+T-1, frequencies theta^(-2i/dim)."""
    inv = theta ** (-torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    ang = torch.arange(start, start + T, device=device, dtype=torch.float32)[:, None] * inv[None, :]
    return ang.cos(), ang.sin()


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the two halves of the last dimension of x (B, H, T, dh) by the position angles."""
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).type_as(x)


class Block(nn.Module):
    """One pre-LN block: h + Attn(LN(h)), then h + MLP(LN(h))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        d, b = cfg.n_embd, cfg.bias
        self.cfg = cfg
        self.ln1 = nn.LayerNorm(d, eps=cfg.ln_eps, bias=b)
        self.qkv = nn.Linear(d, 3 * d, bias=b)
        self.proj = nn.Linear(d, d, bias=b)
        self.ln2 = nn.LayerNorm(d, eps=cfg.ln_eps, bias=b) if cfg.hidden else None
        self.fc = nn.Linear(d, cfg.hidden, bias=b) if cfg.hidden else None
        self.fc2 = nn.Linear(cfg.hidden, d, bias=b) if cfg.hidden else None
        self.drop = nn.Dropout(cfg.dropout)
        self.register_buffer("peers", peer_mask(cfg.seq_len) if cfg.attend == "sudoku" else None, persistent=False)

    def forward(self, h: torch.Tensor, rot: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        q, k, v = self.heads(h, rot)
        p = self.cfg.dropout if self.training else 0.0
        T = h.shape[1]
        mask = None if self.peers is None else self.peers[:T, :T]
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=self.cfg.causal)
        return self.finish(h, a)

    def heads(
        self, h: torch.Tensor, rot: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V (B, H, T, d/H) of LN(h), Q and K rotated by ``rot`` (RoPE) when given."""
        B, T, d = h.shape
        q, k, v = self.qkv(self.ln1(h)).view(B, T, 3, self.cfg.n_head, d // self.cfg.n_head).permute(2, 0, 3, 1, 4)
        if rot is not None:
            q, k = rope(q, *rot), rope(k, *rot)
        return q, k, v

    def finish(self, h: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """The block's output from its input h (B, T, d) and the heads' attention a (B, H, T, d/H)."""
        B, T, d = h.shape
        h = h + self.drop(self.proj(a.transpose(1, 2).reshape(B, T, d)))
        if self.fc is not None:
            h = h + self.drop(self.fc2(F.gelu(self.fc(self.ln2(h)))))
        return h

    def step(
        self, h: torch.Tensor, rot: tuple[torch.Tensor, torch.Tensor] | None, keys: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`forward` over a chunk h (B, T, d) after the cached keys and values (B, H, t, d/H); (h, keys,
        values) appended."""
        q, k, v = self.heads(h, rot)
        keys, values = torch.cat([keys, k.to(keys.dtype)], dim=2), torch.cat([values, v.to(values.dtype)], dim=2)
        T, t = h.shape[1], keys.shape[2] - h.shape[1]
        mask = None if T == 1 else torch.arange(T, device=h.device)[:, None] + t >= torch.arange(t + T, device=h.device)
        p = self.cfg.dropout if self.training else 0.0
        a = F.scaled_dot_product_attention(q, keys.to(q.dtype), values.to(q.dtype), attn_mask=mask, dropout_p=p)
        return self.finish(h, a), keys, values


class GPT(PretrainedMixin, nn.Module):
    """GPT-2-style Transformer baseline. ``model(idx) -> logits (B, T, vocab_size)``."""

    model_type = "gpt"
    config_class = GPTConfig
    #: its state for generation is a KV cache, growing with the tokens read (`init_state` / `step`)
    state_grows = True
    carries_state = False

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"GPT: expected a GPTConfig, got {type(config).__name__}")
        self.config = cfg = config
        d = cfg.n_embd
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.pos = nn.Embedding(cfg.seq_len, d) if cfg.positional == "learned" else None
        self.grid = SudokuPositions(d) if cfg.positional == "sudoku" else None
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(1 if cfg.share_layers else cfg.n_layer))
        self.ln_f = nn.LayerNorm(d, eps=cfg.ln_eps, bias=cfg.bias)
        self.readout = None if cfg.tie_embeddings else nn.Linear(d, cfg.vocab_size, bias=False)
        self.apply(normal_init)
        for name, p in self.named_parameters():  # GPT-2: residual projections scaled by 1/sqrt(2 L)
            if name.endswith(("proj.weight", "fc2.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def num_params(self) -> int:
        """Trainable parameters (equal to `GPTConfig.num_params`, the docstring formula)."""
        return count_params(self)

    @property
    def depth(self) -> int:
        """Layer passes of a forward (the bench's ``n_layer`` column): ``config.n_layer``."""
        return self.config.n_layer

    @property
    def weight_shared(self) -> bool:
        """Whether every pass applies one block (``share_layers``): ``forward(idx, n_layer=k)`` runs any depth."""
        return bool(self.config.share_layers)

    def state_size(self) -> int:
        """The KV cache per layer at seq_len: 2 * seq_len * n_embd scalars (Zoology's ``MHA.state_size``)."""
        return 2 * self.config.seq_len * self.config.n_embd

    def forward(self, idx: torch.Tensor, n_layer: int | None = None) -> torch.Tensor:
        """Logits (B, T, V); ``n_layer`` (with ``share_layers``) applies the shared block that many times."""
        return self.head(deque(self._hidden(idx, n_layer), maxlen=1)[0])  # the last pass's stream

    def pass_logits(self, idx: torch.Tensor, n_layer: int | None = None) -> Iterator[torch.Tensor]:
        """The logits (B, T, V) after each of the ``n_layer`` block passes, lazily (a loss at every pass)."""
        return map(self.head, self._hidden(idx, n_layer))

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) of the residual stream h (B, T, d): the final LayerNorm, then the readout."""
        h = self.ln_f(h)
        return F.linear(h, self.embed.weight) if self.readout is None else self.readout(h)

    def _hidden(self, idx: torch.Tensor, n_layer: int | None) -> Iterator[torch.Tensor]:
        """The checks of `forward` (at once), then the residual stream after each block pass (lazily)."""
        cfg = self.config
        check_tokens("GPT", idx, cfg.vocab_size, cfg.seq_len if cfg.positional in ("learned", "sudoku") else None)
        n_layer = recurrence.passes_of(n_layer, cfg.random_depth, self.training)
        passes = cfg.n_layer if n_layer is None else n_layer
        if n_layer is not None:
            if isinstance(n_layer, bool) or not isinstance(n_layer, int) or n_layer < 1:
                raise UserError(f"GPT: n_layer must be a positive integer, got {n_layer!r}")
            if not cfg.share_layers and n_layer != cfg.n_layer:
                raise UserError(
                    f"GPT: n_layer = {n_layer} needs share_layers=true (this model has {cfg.n_layer} distinct blocks)"
                )
        return self._blocks(idx, passes)

    def _blocks(self, idx: torch.Tensor, passes: int) -> Iterator[torch.Tensor]:
        cfg = self.config
        T = idx.shape[1]
        h = self.embed(idx) + self._positions(0, T, idx.device)
        h = self.drop(h)
        rot = (
            rope_cos_sin(T, cfg.n_embd // cfg.n_head, cfg.rope_theta, idx.device) if cfg.positional == "rope" else None
        )
        for i in range(passes):
            h = self.blocks[0 if cfg.share_layers else i](h, rot)
            yield h

    def _positions(self, start: int, T: int, device: torch.device) -> torch.Tensor | float:
        """The added position embeddings of tokens start..start+T-1 (T, d), or 0 (RoPE, none)."""
        if self.pos is not None:
            return self.pos(torch.arange(start, start + T, device=device))
        if self.grid is not None:
            return self.grid(start + T)[start:]
        return 0.0

    # ------------------------------------------------------------------ the KV cache
    def init_state(self, batch_size: int = 1, device: torch.device | str | None = None) -> KVCache:
        """An empty KV cache (`bdh.baselines.state.KVCache`: nothing read, position 0) on the model's device."""
        if not self.config.causal:
            raise UserError("GPT: a bidirectional model (causal=false) has no KV cache: every token sees the future")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise UserError(f"GPT.init_state: batch_size must be a positive integer, got {batch_size!r}")
        cfg, weight = self.config, self.embed.weight
        shape = (batch_size, cfg.n_head, 0, cfg.n_embd // cfg.n_head)
        empty = [torch.zeros(shape, device=weight.device if device is None else device, dtype=weight.dtype)]
        return KVCache(empty * cfg.n_layer, empty * cfg.n_layer, 0)

    def cache_nbytes(self, tokens: int, batch_size: int = 1, element_size: int = 4) -> int:
        """Bytes of the KV cache after ``tokens`` tokens of ``batch_size`` sequences: 2 L B t d scalars."""
        return 2 * self.config.n_layer * batch_size * tokens * self.config.n_embd * element_size

    def step(self, tokens: torch.Tensor, state: KVCache) -> tuple[torch.Tensor, KVCache]:
        """Read one token (B,) or a chunk (B, T) after the cached ones, as `forward` over everything read; returns
        (logits, the cache with the chunk appended; ``state`` is not changed). Learned positions: at most seq_len
        in all."""
        cfg = self.config
        single = isinstance(tokens, torch.Tensor) and tokens.dim() == 1
        idx = tokens.view(-1, 1) if single else tokens
        check_tokens("GPT.step", idx, cfg.vocab_size)
        self._check_cache(state, idx.shape[0])
        start, T = state.pos, idx.shape[1]
        h = self.embed(idx)
        if cfg.positional in ("learned", "sudoku") and start + T > cfg.seq_len:
            raise UserError(
                f"GPT.step: positions up to {start + T} pass seq_len = {cfg.seq_len}; learned positions cannot "
                "read past the trained length (positional: rope or none can)"
            )
        h = self.drop(h + self._positions(start, T, idx.device))
        dh = cfg.n_embd // cfg.n_head
        rot = rope_cos_sin(T, dh, cfg.rope_theta, idx.device, start) if cfg.positional == "rope" else None
        keys, values = [], []
        for i in range(cfg.n_layer):
            h, k, v = self.blocks[0 if cfg.share_layers else i].step(h, rot, state.keys[i], state.values[i])
            keys.append(k)
            values.append(v)
        logits = self.head(h)
        return (logits[:, -1] if single else logits), KVCache(keys, values, start + T)

    def _check_cache(self, state: object, batch_size: int) -> None:
        cfg = self.config
        if not isinstance(state, KVCache):
            raise UserError(f"GPT.step: state must be a KVCache (from model.init_state), got {type(state).__name__}")
        want = (cfg.n_head, state.pos, cfg.n_embd // cfg.n_head)
        shapes = {tuple(t.shape[1:]) for t in (*state.keys, *state.values)}
        if len(state.keys) != cfg.n_layer or len(state.values) != cfg.n_layer or shapes != {want}:
            raise UserError(f"GPT.step: the cache is not this model's ({cfg.n_layer} passes of {want} keys and values)")
        if state.batch_size != batch_size:
            raise UserError(f"GPT.step: the cache holds {state.batch_size} sequences, the tokens {batch_size}")


def gpt_config_for_params(budget: int, **fields) -> GPTConfig:
    """The GPTConfig with the parameter count closest to ``budget``, varying only n_embd (multiples of n_head, 2x
    for RoPE)."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise UserError(f"gpt_config_for_params: budget must be a positive integer, got {budget!r}")
    if "n_embd" in fields:
        raise UserError("gpt_config_for_params: n_embd is what is sized; do not give it")
    given = {f.name: f.default for f in dataclasses.fields(GPTConfig)} | fields
    step = given["n_head"] * (2 if given["positional"] == "rope" else 1)
    base = GPTConfig(**fields, n_embd=step)  # a width every head count divides (the default may not be one)
    return closest_by_params(budget, lambda d: base.replace(n_embd=d), step=step, limit=None)
