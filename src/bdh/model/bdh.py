"""BDH-GPU, the tensor form of the Dragon Hatchling (Kosowski et al. 2025, section 3, appendix E).

Per token and layer l = 1..L, with the weights shared by all layers (Definition 4, with the official code's residual and
LayerNorm placement):

    x_l  = ReLU(Dx v_{l-1})                        sparse positive neuron activations   (n)
    a_l  = sum_{tau<t} U^(t-tau) <R x_l(t), R x_l(tau)> v_{l-1}(tau)   linear attention  (h x D)
    y_l  = ReLU(Dy LN(a_l)) * x_l                  gated by the un-rotated x            (n)
    v_l  = LN(v_{l-1} + LN(E y_l))                 dropout on y_l before E              (D)

with v_0 = LN(embed(token)), logits = v_L @ readout, keys = queries (RoPE R, no softmax), a strictly causal sum,
LayerNorms without affine parameters, and h heads of N neurons. The ablations and state options of `BDHConfig` are
tabled in docs/model.md."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bdh.baselines.grid import SudokuPositions, peer_mask
from bdh.errors import UserError

from . import recurrence
from .capture import BDHCapture, LayerActivations, LayerHook
from .config import BDHConfig
from .generation import GenerationMixin
from .io import PretrainedMixin
from .kernels import Kernels, Pass, bind, choose
from .kernels.naive import naive_state_rule
from .kernels.pytorch.rope import frequencies, rope_plain, rope_tables
from .state import BDHState
from .state_rules import StateRuleMixin
from .tokens import check_tokens

__all__ = ["BDH", "BDHCapture", "LayerActivations"]


class LayerWeights(NamedTuple):
    """A layer's encoders: the shared E, Dx, Dy (or its own, ``unshared_layers``); ``Dk`` of ``separate_keys``
    or None."""

    E: torch.Tensor
    Dx: torch.Tensor
    Dy: torch.Tensor
    Dk: torch.Tensor | None


class BDH(GenerationMixin, PretrainedMixin, StateRuleMixin, nn.Module):
    """The BDH-GPU language model. ``model(idx) -> logits (B, T, vocab_size)``."""

    model_type = "bdh"
    config_class = BDHConfig
    #: a fixed-size recurrent state (rho, `init_state` / `step`): any length reads in flat memory
    carries_state = True

    def __init__(self, config: BDHConfig):
        super().__init__()
        if not isinstance(config, BDHConfig):
            raise TypeError(f"BDH: expected a BDHConfig, got {type(config).__name__}")
        self.config = config
        n, D, H, N, V = config.n, config.n_embd, config.n_head, config.N, config.vocab_size
        sets = (config.n_layer,) if config.unshared_layers else ()  # a leading L: one weight set per layer
        # Created in the official code's order with its N(0, 0.02) init, so that the same seed gives the
        # same initial weights as pathwaycom/bdh (its nn.Embedding draws once more, then is re-drawn).
        self.E = nn.Parameter(torch.zeros(*sets, n, D).normal_(std=0.02))
        self.Dx = nn.Parameter(torch.zeros(*sets, H, D, N).normal_(std=0.02))
        self.embed = nn.Embedding(V, D)
        self.Dy = nn.Parameter(torch.zeros(*sets, H, D, N).normal_(std=0.02))
        self.readout = nn.Parameter(torch.zeros(D, V).normal_(std=0.02))
        nn.init.normal_(self.embed.weight, mean=0.0, std=0.02)
        Dk = nn.Parameter(torch.zeros(*sets, H, D, N).normal_(std=0.02)) if config.separate_keys else None
        self.register_parameter("Dk", Dk)  # drawn last: the official weights above keep their draws
        # persistent, like the official attn.freqs
        self.register_buffer("freqs", frequencies(config.positional, config.N, config.theta))
        retention = config.retention()
        log_u = None if retention is None else torch.log(torch.tensor(retention, dtype=torch.float32))
        self.register_buffer("log_u", log_u, persistent=False)
        self._state_rule_parameters(config)
        # ours, drawn after the official weights: a board's row + column + box embedding (``input_positions``)
        self.grid = SudokuPositions(D) if config.input_positions == "sudoku" else None

    def num_params(self) -> int:
        """Trainable parameters, 3 n D + 2 V D (paper section 3.2; `BDHConfig.num_params` with the ablations)."""
        return sum(p.numel() for p in self.parameters())

    def state_size(self) -> int:
        """Recurrent state scalars per layer, n D."""
        return self.config.state_size()

    @property
    def depth(self) -> int:
        """Layer passes of a forward (the bench's ``n_layer`` column): ``config.n_layer``."""
        return self.config.n_layer

    @property
    def weight_shared(self) -> bool:
        """Always: the layers share E, Dx, Dy, so ``forward(idx, n_layer=k)`` runs any depth."""
        return True

    # ------------------------------------------------------------------ the equations
    def ln(self, z: torch.Tensor) -> torch.Tensor:
        """LayerNorm over the last dimension, without affine parameters (as the official code)."""
        return F.layer_norm(z, (z.shape[-1],), None, None, self.config.ln_eps)

    def embed_tokens(self, idx: torch.Tensor) -> torch.Tensor:
        """v_0 = LN(embed(token)), (B, 1, T, D); LN(embed(token) + grid(cell)) with ``input_positions: sudoku``."""
        h = self.embed(idx)
        return self.ln(h if self.grid is None else h + self.grid(idx.shape[1])).unsqueeze(1)

    def score_mask(self, T: int, device: torch.device) -> torch.Tensor | None:
        """The (T, T) pairs a query reads with ``attend: sudoku`` (a cell's row, column and box), or None (Eq. 4)."""
        return peer_mask(T, device) if self.config.attend == "sudoku" else None

    def weights(self, layer: int) -> LayerWeights:
        """The encoders of layer ``layer``: the shared E, Dx, Dy (Eq. 8), or its own with ``unshared_layers``."""
        own = self.config.unshared_layers
        E, Dx, Dy, Dk = (w[layer] if own and w is not None else w for w in (self.E, self.Dx, self.Dy, self.Dk))
        return LayerWeights(E, Dx, Dy, Dk)

    def layer(self, v: torch.Tensor, rho: torch.Tensor | None, k: Kernels, w: LayerWeights):
        """One layer (Eq. 8): v_{l-1} (B, 1, T, D) and its state rho -> (v_l, rho after the block, activations)."""
        x, xr = k.encode(v, w.Dx)  # x_l = ReLU(Dx v_{l-1}) and the queries R x_l                   (B, H, T, N)
        keys = xr if w.Dk is None else k.encode(v, w.Dk)[1]  # R x_l (Q = K), or R ReLU(D_k v_{l-1})
        if self.config.write_keys == "signed":  # ours: the delta rule writes with the keys before their ReLU
            keys = k.rotate(k.heads(v, w.Dx if w.Dk is None else w.Dk))  # R (D v_{l-1}), signed
        keys = self.state_rule_keys(keys)  # unit keys for the delta rule
        gates = self.state_rule_gates(v)  # the state rule's log u_t, b_t per token, or none
        a, rho = k.attend(xr, keys, v, state=rho, **gates)  # a_l = sum_tau U^(t-tau) <R x_t, keys_tau> v_tau
        z = k.heads(self.ln(a), w.Dy)  # Dy LN(a_l)
        if self.config.ungated or k.gated_read_in is None:
            y = k.activate(z) if self.config.ungated else k.gate(z, x)  # y_l = ReLU(Dy LN(a_l)) * x_l   (B, H, T, N)
            e = k.read_in(y, w.E)
        else:
            y, e = None, k.gated_read_in(z, x, w.E)  # E y_l with y_l formed inside the product (never written)
        v_out = self.ln(v + self.ln(e))  # v_l = LN(v_{l-1} + LN(E y_l))
        return v_out, rho, LayerActivations(values=v, x=x, xr=xr, a=a, y=y, v=v_out, keys=keys)

    def run(
        self,
        idx: torch.Tensor,
        state: BDHState | None,
        p: Pass,
        hook: LayerHook | None = None,
        n_layer: int | None = None,
    ) -> tuple[torch.Tensor, BDHState | None]:
        """Logits (B, T, V) of the layers over v_0, continuing ``state``; the state after (``p.need_state``)."""
        check_tokens("BDH", idx, self.config.vocab_size)
        if state is not None:
            self._check_state(state, idx.shape[0])
        passes = self._passes(n_layer, state)
        logits, rhos = self.stack(idx, None if state is None else state.rho, self.kernels(p), passes, hook)
        self.count_training_pass()  # ``write_gate: annealed``: its m moves after each training pass
        if not p.need_state:
            return logits, None
        if p.inplace:
            state.pos = p.start + p.length
            return logits, state
        return logits, BDHState(torch.stack(rhos), p.start + p.length)

    def stack(
        self,
        idx: torch.Tensor,
        rho: torch.Tensor | None,
        k: Kernels,
        passes: int,
        hook: LayerHook | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """Logits (B, T, V) of ``passes`` layers over v_0, layer l continuing ``rho[l]`` with kernels ``k``; and
        the states."""
        v, rhos = self.embed_tokens(idx), []
        for layer in range(passes):
            v, r, act = self.layer(v, None if rho is None else rho[layer], k, self.weights(layer))
            rhos.append(r)
            if hook is not None:
                hook(self, layer, act)
        return v.squeeze(1) @ self.readout, rhos

    def kernels(self, p: Pass) -> Kernels:
        """The kernels of a pass, named by `choose`'s table and bound at its RoPE tables by `bind`."""
        cfg = self.config
        none = cfg.positional == "none"
        tables = (None, None) if none else rope_tables(cfg.positional, self.freqs, p.start, p.length)
        choice = choose(
            replace(p, mask=self.score_mask(p.length, self.E.device)),
            positional=cfg.positional,
            log_u=self.retention_log(),
            causal=cfg.causal,
            chunk_size=cfg.chunk_size,
            dropout=cfg.dropout,
            dropout_rng=cfg.dropout_rng,
            training=self.training,
            autograd=torch.is_grad_enabled() and self.E.requires_grad,
            device=self.E.device,
            state_rule=self.state_rule(),
            query_keys=self.query_keys(),
        )
        return bind(choice, tables)

    def query_keys(self) -> bool:
        """Whether the delta rule writes with the unit queries R x / |R x| (no ``separate_keys``, ``write_keys:
        unit``, no ``write_topk``): its UT form then makes them from the queries (`Choice.query_keys`)."""
        cfg = self.config
        return cfg.state_write == "delta" and self.Dk is None and cfg.write_keys == "unit" and cfg.write_topk is None

    # ------------------------------------------------------------------ entry points
    def forward(
        self,
        idx: torch.Tensor,
        *,
        mode: str | None = None,
        capture: bool = False,
        hook: LayerHook | None = None,
        detach_kv: bool = False,
        n_layer: int | None = None,
    ):
        """Logits (B, T, vocab_size) for ``idx`` (B, T), or (logits, `BDHCapture`) with ``capture``.

        ``mode``: the attention form; ``hook(model, layer, LayerActivations)`` runs after every layer; ``detach_kv``
        cuts the gradient through keys and values (no BPTT, section 7.2); ``n_layer``: passes of the shared weights."""
        cap = BDHCapture() if capture else None
        hooks = [h for h in (hook, cap) if h is not None]
        p = Pass(mode or self.config.attention, 0, _length(idx), detach_kv=detach_kv, hooked=bool(hooks))
        logits, _ = self.run(idx, None, p, _chain(hooks), n_layer)
        return (logits, cap) if capture else logits

    def pass_logits(self, idx: torch.Tensor, n_layer: int | None = None) -> Iterator[torch.Tensor]:
        """The logits (B, T, V) after each of ``n_layer`` passes (default L), lazily: v_k @ readout."""
        check_tokens("BDH", idx, self.config.vocab_size)
        passes = self._passes(n_layer, None)
        return self._pass_logits(idx, self.kernels(Pass(self.config.attention, 0, _length(idx))), passes)

    def _pass_logits(self, idx: torch.Tensor, k: Kernels, passes: int) -> Iterator[torch.Tensor]:
        v = self.embed_tokens(idx)
        for layer in range(passes):
            v = self.layer(v, None, k, self.weights(layer))[0]
            yield v.squeeze(1) @ self.readout

    def slow_forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) by the reference forward: Eq. 8 in plain PyTorch, eval mode only, what tests/model compares
        every form, ablation and scheme of `forward` with (and with `naive_official_forward`):

            v_0 = LN(embed(idx))                                               f_e, then LN
            x_l = ReLU(Dx v_{l-1})                                             Eq. 8, n neurons in h heads
            q_l = R x_l,   k_l = q_l  (or R ReLU(D_k v_{l-1}), separate_keys)  U's rotation (RoPE)
            a_l = (M * U * q_l k_l^T) v_{l-1}                                  Eq. 4: a_t = sum_tau U^(t-tau) ...
            y_l = ReLU(Dy LN(a_l)) * x_l   (without * x_l, ungated)            Eq. 8, the gate
            v_l = LN(v_{l-1} + LN(E y_l))                                      Eq. 8, the read-in over all heads
            logits = v_L readout                                               f_d

        With ``decay_gate`` or the delta rule, their loop `naive_state_rule`; ``attend: sudoku`` keeps a cell's peers in
        M; ``input_positions: sudoku`` adds grid(t) to v_0."""
        cfg = self.config
        check_tokens("BDH.slow_forward", idx, cfg.vocab_size)
        if self.training and cfg.dropout > 0:
            raise UserError("BDH.slow_forward: the reference runs without dropout; call model.eval() first")
        B, T = idx.shape
        t = torch.arange(T, device=idx.device)
        gap = (t.view(-1, 1) - t.view(1, -1)).abs().to(self.E.dtype)  # |t - tau|
        M = (t.view(-1, 1) > t.view(1, -1)) if cfg.causal else torch.ones_like(gap, dtype=torch.bool)  # tau < t
        if cfg.attend == "sudoku":  # ours: only a cell's row, column and box (bdh.baselines.grid)
            M = M & peer_mask(T, idx.device)
        log_u = self.retention_log()  # log u_h, the config's or learned
        u = (torch.ones(1, device=gap.device) if log_u is None else torch.exp(log_u)).to(gap.dtype).view(-1, 1, 1)
        MU = M * u**gap  # U^(t - tau) where the mask keeps tau, (h or 1, T, T)
        cos, sin = rope_tables(cfg.positional, self.freqs, 0, T) if cfg.positional != "none" else (None, None)

        def R(z: torch.Tensor) -> torch.Tensor:
            return z if cos is None else rope_plain(cfg.positional, z, cos, sin)

        h = self.embed(idx) if self.grid is None else self.embed(idx) + self.grid(T)  # ours: + row, column, box
        v = self.ln(h).unsqueeze(1)  # v_0 (B, 1, T, D)
        for layer in range(cfg.n_layer):
            E, Dx, Dy, Dk = self.weights(layer)
            x = F.relu(v @ Dx)  # x_l (B, h, T, N)
            q = R(x)
            k = q if Dk is None else R(F.relu(v @ Dk))
            if cfg.write_keys == "signed":  # the delta rule's write keys before the ReLU, R (D v), D = Dx or D_k
                k = R(v @ (Dx if Dk is None else Dk))
            gates = self.state_rule_gates(v)  # log u_t, b_t of decay_gate and the delta rule, or none
            if gates:  # the state rule's loop
                rule = self.write_key_rule()  # centred / top-k write keys: shaped token by token in the loop
                keys = self.state_rule_keys(k) if rule is None else k
                a = naive_state_rule(q, keys, v, write_key=rule, **gates)[0]
            else:
                a = (MU * (q @ k.transpose(-1, -2))) @ v  # a_l (B, h, T, D)
            y = F.relu(self.ln(a) @ Dy)
            y = y if cfg.ungated else y * x  # y_l (B, h, T, N)
            Ey = y.transpose(1, 2).reshape(B, 1, T, cfg.n) @ E  # E y_l: the h N neurons as one n-vector
            v = self.ln(v + self.ln(Ey))  # v_l (B, 1, T, D)
        return v.squeeze(1) @ self.readout

    def init_state(self, batch_size: int = 1, device: torch.device | str | None = None) -> BDHState:
        """An empty recurrent state (rho = 0, position 0) on the model's device."""
        cfg = self.config
        device = self.E.device if device is None else device
        return BDHState.zeros(cfg.n_layer, batch_size, cfg.n_head, cfg.N, cfg.n_embd, device=device)

    def step(
        self,
        tokens: torch.Tensor,
        state: BDHState,
        *,
        mode: str | None = None,
        inplace: bool = False,
        detach_kv: bool = False,
        hook: LayerHook | None = None,
    ) -> tuple[torch.Tensor, BDHState]:
        """Advance the state by one token (B,) or a chunk (B, T), gradients flowing unless under ``no_grad``; returns
        (logits, new_state).

        ``mode``: default ``recurrent`` for one token, else the configured form; ``sparse``: one token of one sequence;
        ``inplace``: update ``state`` itself (under ``no_grad``)."""
        if not self.config.causal:
            raise UserError("BDH.step: a bidirectional model (causal=false) has no recurrent state")
        if not isinstance(state, BDHState):
            raise TypeError(f"BDH.step: state must be a BDHState (from model.init_state), got {type(state).__name__}")
        single = isinstance(tokens, torch.Tensor) and tokens.dim() == 1
        idx = tokens.view(-1, 1) if single else tokens
        mode = mode or ("recurrent" if _length(idx) == 1 else self.config.attention)
        p = Pass(
            mode,
            state.pos,
            _length(idx),
            carried=True,
            need_state=True,
            inplace=inplace,
            detach_kv=detach_kv,
            hooked=hook is not None,
        )
        logits, new_state = self.run(idx, state, p, hook)
        return (logits[:, -1] if single else logits), new_state

    # ------------------------------------------------------------------ input checks
    def _passes(self, n_layer: int | None, state: BDHState | None) -> int:
        if state is None:  # a forward over a whole sequence: in training, perhaps a drawn count (random_depth)
            n_layer = recurrence.passes_of(n_layer, self.config.random_depth, self.training)
        passes = self.config.n_layer if n_layer is None else n_layer
        if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
            raise UserError(f"BDH: n_layer (layer passes) must be a positive integer, got {n_layer!r}")
        if state is not None and passes != self.config.n_layer:
            raise UserError("BDH: a different number of layer passes cannot continue a recurrent state")
        if self.config.unshared_layers and passes != self.config.n_layer:
            raise UserError(f"BDH: a model with unshared layers runs its {self.config.n_layer} layers, not {passes}")
        return passes

    def _check_state(self, state: BDHState, batch_size: int) -> None:
        cfg = self.config
        want = (cfg.n_layer, batch_size, cfg.n_head, cfg.N, cfg.n_embd)
        if tuple(state.rho.shape) != want:
            raise UserError(f"BDH: state rho has shape {tuple(state.rho.shape)}, this model and batch need {want}")


def hard_read(model: nn.Module, top1_heads: tuple[int, ...] = ()) -> BDH:
    """``model`` read through the delta rule's hard write gate (a copy in eval mode; ``top1_heads``: those heads'
    writes through their key's largest neuron, `BDH.hard_gated`), or a one-line `UserError`."""
    if not isinstance(model, BDH):
        raise UserError(f"a hard read needs a BDH; this model is a {type(model).__name__}")
    return model.hard_gated(top1_heads).eval()


def _length(idx: object) -> int:
    """T of a (B, T) tensor, 0 for anything else (the token check then says what is wrong)."""
    return idx.shape[-1] if isinstance(idx, torch.Tensor) and idx.dim() >= 1 else 0


def _chain(hooks: list[LayerHook]) -> LayerHook | None:
    """One hook calling each of ``hooks`` in turn, or None."""
    if len(hooks) < 2:
        return hooks[0] if hooks else None

    def every(model: nn.Module, layer: int, act: LayerActivations) -> None:
        for hook in hooks:
            hook(model, layer, act)

    return every
