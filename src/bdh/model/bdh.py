"""BDH-GPU, the tensor form of the Dragon Hatchling (Kosowski et al. 2025, section 3, appendix E).

Per token and layer l = 1..L, with the weights shared by all layers (paper Definition 4, with the
residual and LayerNorm placement of the official code and appendix E):

    x_l  = ReLU(Dx v_{l-1})                        sparse positive neuron activations   (n)
    a_l  = sum_{tau<t} U^(t-tau) <R x_l(t), R x_l(tau)> v_{l-1}(tau)   linear attention  (h x D)
    y_l  = ReLU(Dy LN(a_l)) * x_l                  gated by the un-rotated x            (n)
    v_l  = LN(v_{l-1} + LN(E y_l))                 dropout on y_l before E              (D)

with v_0 = LN(embed(token)) and logits = v_L @ readout. Keys and queries are the same vector x
(rotated by RoPE R, no softmax, no scaling), values are the layer's input v_{l-1}, and the sum is
strictly causal (a token never attends to itself). LayerNorm has no affine parameters. Heads split the
n neurons into h blocks of N; each head reads its own block and has its own LayerNorm of a.

Names: ``E`` (n x D, stored transposed so that E y is ``y @ E``), ``Dx`` and ``Dy`` (h x D x N, stored
so that Dx v is ``v @ Dx``), ``embed`` (the token encoder f_e) and ``readout`` (the decoder f_d).
`bdh.model.interop` maps them to the official code's names, once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from bdh.errors import UserError

from ..registry import register_model
from .attention import linear_attention, parallel, recurrent
from .config import BDHConfig
from .dropout import drop_mask
from .fused import relu_mul
from .io import PretrainedMixin
from .rope import _compiling, frequencies, rope_apply, rope_tables
from .sparse_step import sparse_token_step
from .state import BDHState


@dataclass
class BDHCapture:
    """What happened inside a forward pass, one entry per layer (all detached).

    Shapes (B batch, T tokens, H heads, N neurons per head, D embedding, V vocabulary):
        x: (B, H, T, N) neuron activations ReLU(Dx v) (before RoPE).
        y: (B, H, T, N) gated activations ReLU(Dy LN(a)) * x (before dropout).
        attention: (B, H, T, T) attention scores <R x_t, R x_tau> after the causal mask and damping
            (row t holds what token t reads from each tau).
        a: (B, H, T, D) attention outputs before their LayerNorm.
        v: (B, T, D) the residual stream after the layer.
        logits: (B, T, V) the readout applied after the layer (logit lens); the last equals the output.
    """

    x: list[torch.Tensor] = field(default_factory=list)
    y: list[torch.Tensor] = field(default_factory=list)
    attention: list[torch.Tensor] = field(default_factory=list)
    a: list[torch.Tensor] = field(default_factory=list)
    v: list[torch.Tensor] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)

    @property
    def n_layer(self) -> int:
        return len(self.x)


@register_model("bdh")
class BDH(PretrainedMixin, nn.Module):
    """The BDH-GPU language model. ``model(idx) -> logits (B, T, vocab_size)``."""

    model_type = "bdh"
    config_class = BDHConfig

    def __init__(self, config: BDHConfig):
        super().__init__()
        if not isinstance(config, BDHConfig):
            raise TypeError(f"BDH: expected a BDHConfig, got {type(config).__name__}")
        self.config = config
        n, D, H, N, V = config.n, config.n_embd, config.n_head, config.N, config.vocab_size
        # Created in the official code's order with its N(0, 0.02) init, so that the same seed gives the
        # same initial weights as pathwaycom/bdh (its nn.Embedding draws once more, then is re-drawn).
        self.E = nn.Parameter(torch.zeros(n, D).normal_(std=0.02))
        self.Dx = nn.Parameter(torch.zeros(H, D, N).normal_(std=0.02))
        self.embed = nn.Embedding(V, D)
        self.Dy = nn.Parameter(torch.zeros(H, D, N).normal_(std=0.02))
        self.readout = nn.Parameter(torch.zeros(D, V).normal_(std=0.02))
        nn.init.normal_(self.embed.weight, mean=0.0, std=0.02)
        self.drop = nn.Dropout(config.dropout)
        self.register_buffer("freqs", frequencies(config))  # persistent, like the official attn.freqs
        retention = config.retention()
        self.register_buffer(
            "log_u", None if retention is None else torch.log(torch.tensor(retention, dtype=torch.float32)), persistent=False
        )

    # ------------------------------------------------------------------ sizes
    def num_params(self) -> int:
        """Trainable parameters, 3 n D + 2 V D (paper section 3.2)."""
        return sum(p.numel() for p in self.parameters())

    def state_size(self) -> int:
        """Recurrent state scalars per layer, n D."""
        return self.config.state_size()

    # ------------------------------------------------------------------ core
    def _ln(self, z: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(z, (z.shape[-1],), None, None, self.config.ln_eps)

    def _read_in(self, y: torch.Tensor) -> torch.Tensor:
        """E y for y (B, H, T, N): the n x D matmul as one N x D product per head, summed over the heads.

        The same sum as ``y.transpose(1, 2).reshape(B, 1, T, n) @ E``, without copying y into that layout
        (one pass over the layer's largest tensor in forward and one in backward). Returns (B, 1, T, D).
        """
        cfg = self.config
        return (y @ self.E.view(cfg.n_head, cfg.N, cfg.n_embd)).sum(dim=1, keepdim=True)

    def _host_dropout(self, z: torch.Tensor, capture: bool) -> bool:
        """Whether this training pass draws its dropout masks with `bdh.model.dropout` (CPU, eager)."""
        cfg = self.config
        return (
            self.training and cfg.dropout > 0 and cfg.dropout_rng == "auto" and not capture
            and z.device.type == "cpu" and not _compiling()
        )

    def _run(
        self,
        idx: torch.Tensor,
        state: BDHState | None,
        form: str,
        *,
        need_state: bool,
        capture: bool = False,
        detach_kv: bool = False,
        inplace: bool = False,
        n_layer: int | None = None,
    ) -> tuple[torch.Tensor, BDHState | None, BDHCapture | None]:
        """The forward pass of every entry point. With ``state``, the block continues that state; with
        ``need_state`` the state after the block is returned (a new object, or with ``inplace``, under
        ``torch.no_grad``, the given one updated in place)."""
        cfg = self.config
        self._check_tokens(idx)
        B, T = idx.shape
        if state is not None:
            self._check_state(state, B)
        pos0 = 0 if state is None else state.pos
        kind = cfg.positional
        cos, sin = rope_tables(kind, self.freqs, pos0, T) if kind != "none" else (None, None)
        log_u = None if self.log_u is None else self.log_u.float()
        cap = BDHCapture() if capture else None
        new_rho: list[torch.Tensor] = []

        passes = cfg.n_layer if n_layer is None else n_layer
        if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
            raise UserError(f"BDH: n_layer (layer passes) must be a positive integer, got {n_layer!r}")
        if state is not None and passes != cfg.n_layer:
            raise UserError("BDH: a different number of layer passes cannot continue a recurrent state")
        v = self._ln(self.embed(idx)).unsqueeze(1)  # B, 1, T, D
        for layer in range(passes):
            x = F.relu(v @ self.Dx)  # B, H, T, N
            xr = rope_apply(kind, x, cos, sin)
            k, val = (xr.detach(), v.detach()) if detach_kv else (xr, v)
            rho = None if state is None else state.rho[layer]
            if capture:
                a, rho_next, scores = parallel(
                    xr, k, val, log_u=log_u, state=rho, need_state=need_state, causal=cfg.causal, return_scores=True
                )
            elif inplace and form == "recurrent":
                a, rho_next = recurrent(xr, k, val, log_u=log_u, state=rho, need_state=True, inplace=True)
            else:
                a, rho_next = linear_attention(
                    xr, k, val, form=form, chunk_size=cfg.chunk_size, log_u=log_u,
                    state=rho, need_state=need_state, causal=cfg.causal,
                )
            if need_state:
                if inplace:
                    if rho_next is not rho:
                        rho.copy_(rho_next)
                else:
                    new_rho.append(rho_next)
            z = self._ln(a) @ self.Dy
            # y = ReLU(Dy LN(a)) * x; eager: one fused autograd function (same values, bdh.model.fused)
            if self._host_dropout(z, capture):
                # dropout's mask zeroes entries inside the fused gate; its 1 / (1 - p) scales y E instead
                y = relu_mul(z, x, drop_mask(z.shape, cfg.dropout, dtype=z.dtype))
                e = self._read_in(y) * (1.0 / (1.0 - cfg.dropout))
            else:
                y = F.relu(z) * x if _compiling() else relu_mul(z, x)  # B, H, T, N
                e = self._read_in(self.drop(y))
            v = self._ln(v + self._ln(e))  # B, 1, T, D
            if cap is not None:
                cap.x.append(x.detach())
                cap.y.append(y.detach())
                cap.attention.append(scores.detach())
                cap.a.append(a.detach())
                cap.v.append(v.squeeze(1).detach())
                cap.logits.append((v.squeeze(1) @ self.readout).detach())
        logits = v.squeeze(1) @ self.readout  # B, T, V
        if need_state and inplace:
            state.pos = pos0 + T
            return logits, state, cap
        new_state = BDHState(torch.stack(new_rho), pos0 + T) if need_state else None
        return logits, new_state, cap

    def forward(
        self, idx: torch.Tensor, *, capture: bool = False, detach_kv: bool = False, n_layer: int | None = None
    ):
        """Logits for a batch of token sequences, computed with the configured attention form.

        Args:
            idx: (B, T) integer tokens in [0, vocab_size).
            capture: also return a `BDHCapture` of every layer (computed with the parallel form,
                which is the one that has token-by-token attention scores).
            detach_kv: cut the gradient through attention keys and values (training without
                backpropagation through time, paper section 7.2); the forward values do not change.
            n_layer: run this many layer passes instead of the configured L (the weights are shared by
                all layers, so a model can be evaluated deeper or shallower than it was trained).
        Returns:
            logits (B, T, vocab_size), or (logits, capture) when ``capture`` is set.
        """
        logits, _, cap = self._run(
            idx, None, self.config.attention, need_state=False, capture=capture, detach_kv=detach_kv, n_layer=n_layer
        )
        return (logits, cap) if capture else logits

    # ------------------------------------------------------------------ recurrent interface
    def init_state(self, batch_size: int = 1, device: torch.device | str | None = None) -> BDHState:
        """An empty recurrent state (rho = 0, position 0) on the model's device."""
        cfg = self.config
        if device is None:
            device = self.E.device
        return BDHState.zeros(cfg.n_layer, batch_size, cfg.n_head, cfg.N, cfg.n_embd, device=device, dtype=torch.float32)

    def step(
        self, tokens: torch.Tensor, state: BDHState, *, form: str | None = None, detach_kv: bool = False
    ) -> tuple[torch.Tensor, BDHState]:
        """Advance the state by one token per sequence or by a chunk of tokens.

        Args:
            tokens: (B,) one token per sequence, or (B, T) a chunk (prefill, or a training window for
                truncated backprop through time; gradients flow unless under ``torch.no_grad``).
            state: the state after the earlier tokens (from `init_state` or a previous step).
            form: attention form for a chunk; default: ``recurrent`` for one token, the configured
                form otherwise (``chunked`` if the configured form is ``recurrent`` and T > 1 is
                long; all forms give the same result).
        Returns:
            (logits, new_state): logits (B, V) for (B,) tokens, (B, T, V) for (B, T); the input
            state is not modified.
        """
        if not self.config.causal:
            raise UserError("BDH.step: a bidirectional model (causal=false) has no recurrent state")
        if not isinstance(state, BDHState):
            raise TypeError(f"BDH.step: state must be a BDHState (from model.init_state), got {type(state).__name__}")
        single = tokens.dim() == 1
        idx = tokens.view(-1, 1) if single else tokens
        if form is None:
            form = "recurrent" if idx.shape[1] == 1 else self.config.attention
        logits, new_state, _ = self._run(idx, state, form, need_state=True, detach_kv=detach_kv)
        return (logits[:, -1] if single else logits), new_state

    @torch.no_grad()
    def stream(
        self,
        prompt: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
        state: BDHState | None = None,
        sparse: bool = False,
    ) -> Iterator[torch.Tensor]:
        """Yield (B,) sampled tokens one at a time, generating on the recurrent state.

        The prompt is read with the chunked form (memory linear in its length); each new token then
        costs one recurrent step, whose time and memory do not grow with the context. Dropout is off.
        ``temperature=0`` is greedy decoding. ``sparse=True`` (a batch of one sequence, no damping)
        makes each step skip the neurons that do not fire (`bdh.model.sparse_step`); the results are
        the same. It is off by default: measured on a 2-core CPU with 2 threads (n = 4096, 2% of y
        firing), it ran at 0.6x to 1.5x the speed of the dense step from run to run
        (docs/performance.md). Measure before turning it on.
        """
        if not self.config.causal:
            raise UserError("BDH.generate: a bidirectional model (causal=false) cannot generate")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise UserError(f"BDH.generate: max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
        if temperature < 0:
            raise UserError(f"BDH.generate: temperature must be >= 0, got {temperature}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise UserError(f"BDH.generate: top_k must be a positive integer or None, got {top_k!r}")
        prompt = prompt.view(1, -1) if prompt.dim() == 1 else prompt
        if prompt.shape[1] == 0:
            raise UserError("BDH.generate: the prompt is empty; give at least one token")
        device = self.E.device
        prompt = prompt.to(device)
        gen = None
        if seed is not None:
            gen = torch.Generator(device=device)
            gen.manual_seed(seed)
        was_training = self.training
        self.eval()
        try:
            state = self.init_state(prompt.shape[0]) if state is None else state.clone()
            logits, state, _ = self._run(prompt, state, "chunked", need_state=True, inplace=True)
            logits = logits[:, -1]
            for i in range(max_new_tokens):
                nxt = sample(logits, temperature, top_k, gen)
                yield nxt
                if i + 1 < max_new_tokens:
                    if sparse:
                        logits = sparse_token_step(self, nxt, state)
                    else:
                        logits, state, _ = self._run(nxt.view(-1, 1), state, "recurrent", need_state=True, inplace=True)
                    logits = logits[:, -1] if logits.dim() == 3 else logits
        finally:
            self.train(was_training)

    @torch.no_grad()
    def generate(
        self,
        prompt: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
        sparse: bool = False,
    ) -> torch.Tensor:
        """The prompt (B, T) or (T,) followed by ``max_new_tokens`` generated tokens, (B, T + new)."""
        prompt2 = prompt.view(1, -1) if prompt.dim() == 1 else prompt
        new = list(self.stream(prompt2, max_new_tokens, temperature=temperature, top_k=top_k, seed=seed, sparse=sparse))
        out = torch.cat([prompt2.to(self.E.device)] + [t.view(-1, 1) for t in new], dim=1)
        return out.view(-1) if prompt.dim() == 1 else out

    # ------------------------------------------------------------------ input checks
    def _check_tokens(self, idx: torch.Tensor) -> None:
        if not isinstance(idx, torch.Tensor):
            raise TypeError(f"BDH: tokens must be a torch.Tensor, got {type(idx).__name__}")
        if idx.dim() != 2:
            raise UserError(f"BDH: tokens must have shape (batch, time), got {tuple(idx.shape)}")
        if idx.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
            raise UserError(f"BDH: tokens must be integers, got {idx.dtype}")
        if idx.shape[1] == 0:
            raise UserError("BDH: got an empty sequence (T = 0)")
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.config.vocab_size):
            bad = int(idx.min()) if int(idx.min()) < 0 else int(idx.max())
            raise UserError(f"BDH: token {bad} is outside the vocabulary [0, {self.config.vocab_size})")

    def _check_state(self, state: BDHState, batch_size: int) -> None:
        cfg = self.config
        want = (cfg.n_layer, batch_size, cfg.n_head, cfg.N, cfg.n_embd)
        if tuple(state.rho.shape) != want:
            raise UserError(f"BDH: state rho has shape {tuple(state.rho.shape)}, this model and batch need {want}")


def sample(
    logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None
) -> torch.Tensor:
    """Draw one token per row of (B, V) logits: greedy at temperature 0, else softmax(logits / T) over the top k."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).view(-1)

