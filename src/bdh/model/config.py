"""`BDHConfig`: the typed, validated configuration of a BDH-GPU model (docs/model.md, "Configuration").

Names follow the paper (section 3, appendix E): ``n_embd`` is D, ``n_head`` is h, ``n`` the neurons (``n_neurons``,
or the official ``mlp_internal_dim_multiplier`` times D), N = n / h per head. The defaults are the official
``pathwaycom/bdh`` ones. Four ablations (`ABLATIONS`, off by default) take BDH apart; `bdh.model.bdh` gives their
equations."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import UserError
from ..model_api import ModelConfig, complete
from ..typed_config import bounded, one_of
from . import recurrence
from .names import ATTENTION_FORMS, POSITIONAL, STATE_WRITES, WRITE_GATES, WRITE_KEYS

DROPOUT_RNGS = ("auto", "torch")
#: the neuron count n is given by one of these, n_neurons or mlp_internal_dim_multiplier x n_embd
SIZE_FIELDS = ("n_neurons", "mlp_internal_dim_multiplier")
#: the official code's multiplier, used when neither size field is given
DEFAULT_MULTIPLIER = 128
OFFICIAL_ROPE_THETA = 2.0**16
STANDARD_ROPE_THETA = 10000.0
#: bytes per activation of each training dtype (`BDHConfig.train_memory_bytes`)
BYTES = {"fp32": 4, "bf16": 2}
#: the boolean fields that take BDH apart, each off in the official model
ABLATIONS = ("separate_keys", "ungated", "no_expansion", "unshared_layers")
#: the fields that tell BDH a board's structure (ours; off in the official model), each with its off value
BOARD_OPTIONS = {"attend": "all", "input_positions": "none"}


def alibi_retention(n_head: int) -> tuple[float, ...]:
    """Per-head retention factors u_h of the ALiBi-style damping U = diag(u) (paper Eq. 8): ALiBi's slopes
    m_h = 2^(-8 h / H) (Press et al. 2022; the paper gives none) as the multiplicative u_h = exp(-m_h) per token, since
    BDH has no softmax to add ``-m_h (t - tau)`` to."""
    return tuple(math.exp(-(2.0 ** (-8.0 * (h + 1) / n_head))) for h in range(n_head))


#: the half-lives (in tokens) of the fastest and the slowest head of the ``multiscale`` damping
MULTISCALE_HALF_LIVES = (16.0, 16384.0)
#: the half-lives (in tokens) of the fastest and the slowest of the fast heads of the ``local-global`` damping
LOCAL_HALF_LIVES = (1.0, 8.0)
#: the named per-head damping presets
DAMPING_PRESETS = ("alibi", "multiscale", "local-global")
#: ``learn_damping`` starts from u_h = sigmoid(a_h) < 1: an undamped head (u = 1) starts at this half-life in tokens
LEARNED_MAX_HALF_LIFE = 2.0**20
#: ``decay_gate`` starts every head at this half-life in tokens (its bias; the token's term starts small)
DECAY_GATE_HALF_LIFE = 1024.0


def multiscale_retention(n_head: int, half_lives: tuple[float, float] = MULTISCALE_HALF_LIVES) -> tuple[float, ...]:
    """Per-head retention factors u_h = 2^(-1 / half-life_h), half-lives spread geometrically from ``half_lives[0]`` to
    ``half_lives[1]`` tokens (RetNet's spread over heads, wider); one head takes the geometric mean."""
    lo, hi = half_lives
    if n_head == 1:
        return (2.0 ** (-1.0 / math.sqrt(lo * hi)),)
    return tuple(2.0 ** (-1.0 / (lo * (hi / lo) ** (h / (n_head - 1)))) for h in range(n_head))


def local_global_retention(n_head: int, half_lives: tuple[float, float] = LOCAL_HALF_LIVES) -> tuple[float, ...]:
    """Per-head retention factors u_h: the first half of the heads local (half-lives spread over ``half_lives``: the
    only sense of order a model without positions has), the others undamped (u = 1); one head is undamped. Ours, not the
    paper's (docs/long-context.md)."""
    fast = n_head // 2
    if fast == 0:
        return (1.0,)
    lo, hi = half_lives
    spread = [lo * (hi / lo) ** (h / (fast - 1)) if fast > 1 else lo for h in range(fast)]
    return tuple(2.0 ** (-1.0 / life) for life in spread) + (1.0,) * (n_head - fast)


@dataclass
class BDHConfig(ModelConfig):
    """Configuration of a BDH-GPU model (paper Definition 4 with the appendix E layout)."""

    n_layer: int = bounded(6, ge=1)  # L, the number of layer passes (the weights E, Dx, Dy are shared by all layers).
    n_embd: int = bounded(256, ge=1)  # D, the embedding (low-rank) dimension.
    n_head: int = bounded(4, ge=1)  # h, heads; each owns a block of N = n / h neurons and its own LayerNorm of a*.
    # n, total neurons. Give this or ``mlp_internal_dim_multiplier``, not both.
    n_neurons: int | None = bounded(None, ge=1)
    # the official code's way to size n (n = multiplier * D).
    mlp_internal_dim_multiplier: int | None = bounded(None, ge=1)
    vocab_size: int = bounded(256, ge=1)  # size of the token alphabet (256 for bytes).
    dropout: float = bounded(0.1, ge=0, lt=1)  # dropout probability on the gated product x*y (official placement).
    # where training draws the dropout masks of CPU tensors from: ``auto`` (a fast NumPy generator seeded from
    # PyTorch's, `bdh.model.kernels.pytorch.dropout`; on other devices and under ``torch.compile``, PyTorch's own) or
    # ``torch`` (``nn.Dropout`` everywhere: the official code's masks draw for draw). The masks follow the same
    # distribution either way.
    dropout_rng: str = one_of("auto", DROPOUT_RNGS)
    # True for next-token prediction (strictly causal: tau < t, a token never sees itself); False for bidirectional
    # attention over the whole sequence (board tasks).
    causal: bool = True
    # ``rope`` (official: frequencies in turns, theta 2^16, pair-shared frequencies, interleaved pairs),
    # ``rope-standard`` (base 10000, halves), or ``none``.
    positional: str = one_of("rope", POSITIONAL)
    # the RoPE base; ``None`` takes 2^16 for ``rope`` and 10000 for ``rope-standard``.
    rope_theta: float | None = bounded(None, gt=1)
    # the diagonal state damping U of Eq. 8 as a retention factor u in (0, 1]: ``None`` (no damping, the official
    # model), one float for all heads, one float per head, ``"alibi"`` for ALiBi's per-head slopes (see
    # `alibi_retention`), ``"multiscale"`` for half-lives spread from 16 to 16384 tokens over the heads
    # (`multiscale_retention`), or ``"local-global"``: half the heads local (half-lives 1 to 8 tokens), the rest
    # undamped (`local_global_retention`; with ``positional: none``, the state that keeps a fact).
    damping: float | Sequence[float] | str | None = None
    # ours: u_h = sigmoid(a_h) with a_h a parameter per head, initialised from ``damping`` (which must be set; u = 1
    # starts at a half-life of `LEARNED_MAX_HALF_LIFE` tokens).
    learn_damping: bool = False
    # ours (GLA, Mamba-2): a retention per token and head, u_{t,h} = u_h sigmoid(w_h . v_t + c_h) from the layer input
    # v_t (u_h of ``damping``, 1 without), so the state forgets on some tokens only.
    decay_gate: bool = False
    # ``add`` (Eq. 8: S += k v^T) or ``delta`` (ours, DeltaNet: S += b_t k (v - S^T k)^T with unit keys k = x / |x| and
    # b_t = sigmoid(w_h . v_t + c_h) per token and head); decayed by U after the write.
    state_write: str = one_of("add", STATE_WRITES)
    # the delta rule's b_t = g(w_h . v_t + c_h): ``sigmoid``, or ``hard`` (ours: the hard sigmoid clamp(z / 6 + 1/2, 0,
    # 1), the same start at z = 0 but exactly 0 for z <= -3, so a token the gate shuts writes nothing at all, however
    # many such tokens follow).
    # ``annealed`` (ours): (1 - m) sigmoid(z) + m hardsigmoid(z), m = min(1, s / gate_anneal_steps) after s training
    # passes (`bdh.model.state_rules`): the sigmoid at the start, the hard gate from ``gate_anneal_steps`` on.
    write_gate: str = one_of("sigmoid", WRITE_GATES)
    # the training passes over which ``write_gate: annealed`` goes from the sigmoid to the hard gate (a step of k
    # micro-batches is k passes); null for the other gates.
    gate_anneal_steps: int | None = bounded(None, ge=1)
    # the delta rule's write keys (ours; the reads keep BDH's positive keys): ``unit`` k / |k|, ``centred`` (k - mean
    # k) / |k - mean k| over the head's neurons, signed keys that overlap less, or ``signed``: the key before its
    # ReLU, R (D v) / |R (D v)| (D = Dx, or D_k with ``separate_keys``).
    write_keys: str = one_of("unit", WRITE_KEYS)
    # ours: the delta rule writes through the ``write_topk`` largest neurons of each key only (the rest zeroed, then
    # unit), so a write corrects only those rows of the state; None: every neuron.
    write_topk: int | None = bounded(None, ge=1)
    # ours: the heads whose writes ``write_topk`` cuts (empty: every head), e.g. only the undamped head of
    # ``local-global`` damping, whose state keeps facts, while the local head's full keys carry the order.
    write_topk_heads: tuple[int, ...] = bounded((), ge=0)
    # which of the three equivalent forms computes linear attention: ``parallel`` (quadratic masked), ``chunked`` (state
    # carried between chunks) or ``recurrent`` (token by token on the state rho).
    attention: str = one_of("parallel", ATTENTION_FORMS)
    chunk_size: int = bounded(128, ge=1)  # tokens per chunk for the ``chunked`` form.
    # epsilon of the parameter-free LayerNorm (PyTorch's default, as the official code).
    ln_eps: float = bounded(1e-5, gt=0)
    # ablation, Q != K: keys k = R ReLU(v D_k) from an encoder of their own, queries q = R x as before (the gate still
    # multiplies by the query side x).
    separate_keys: bool = False
    ungated: bool = False  # ablation, y = ReLU(Dy LN(a)) without the product with x.
    no_expansion: bool = False  # ablation, n = h D (N = D neurons per head); leave both size fields out.
    unshared_layers: bool = False  # ablation, L separate sets of E, Dx, Dy (and D_k), one per layer.
    # random_depth, deep_supervision: recurrent depth in training, for shared layers (`bdh.model.recurrence`).
    random_depth: tuple[int, int] | None = None  # checked by recurrence.depth_complaint
    deep_supervision: bool = False
    # ours, for a 9 x 9 board read bidirectionally (causal=false; `bdh.baselines.grid`, `BOARD_OPTIONS`): ``sudoku``
    # masks the scores q k^T of Eq. 4 to each cell's row, column and box (its 20 peers and itself); ``all``: Eq. 4.
    attend: str = one_of("all", ("all", "sudoku"))
    # ours: ``sudoku`` adds a learned row + column + box embedding of each cell to the token's, v_0 = LN(embed(token)
    # + grid(cell)) (27 D parameters); ``none``: RoPE (``positional``) is the only position BDH reads.
    input_positions: str = one_of("none", ("none", "sudoku"))
    _n: int = field(init=False, repr=False, compare=False, default=0)
    #: fields that change how the model runs, not what its weights mean (a ClassVar of `bdh.model_api.ModelConfig`,
    #: not a dataclass field); a trained model may go on training with other values (``train.init_from``)
    RUNTIME_FIELDS = frozenset({"dropout", "dropout_rng", "attention", "chunk_size"}) | recurrence.FIELDS
    #: a section giving one neuron-count field drops the other from the default it completes, and turning
    #: ``no_expansion`` on (which fixes n) drops both (`bdh.model_api.complete`): the one place this rule lives
    REPLACES = {SIZE_FIELDS[0]: SIZE_FIELDS[1:], SIZE_FIELDS[1]: SIZE_FIELDS[:1], "no_expansion": SIZE_FIELDS}

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        self._validate()

    # ------------------------------------------------------------------ derived sizes
    @property
    def n(self) -> int:
        """Total number of neurons n."""
        return self._n

    @property
    def N(self) -> int:
        """Neurons per head, N = n / h."""
        return self._n // self.n_head

    @property
    def theta(self) -> float:
        """The RoPE base actually used."""
        if self.rope_theta is not None:
            return float(self.rope_theta)
        return STANDARD_ROPE_THETA if self.positional == "rope-standard" else OFFICIAL_ROPE_THETA

    def ablations(self) -> tuple[str, ...]:
        """The ablations (`ABLATIONS`) this config turns on; () for the official architecture."""
        return tuple(name for name in ABLATIONS if getattr(self, name))

    def require_paper_layer(self, what: str, allow: tuple[str, ...] = ()) -> None:
        """A one-line `UserError` naming ``what`` when this config turns on an ablation outside ``allow``: for the
        tools that read the paper's weights (Eq. 8's E, Dx, Dy shared by all layers, keys = queries, the gate)."""
        extra = [name for name in self.ablations() + self.state_rules() + self.board_options() if name not in allow]
        if extra:
            raise UserError(f"{what}: needs the paper's architecture, and this model has {', '.join(extra)}")

    def state_rules(self) -> tuple[str, ...]:
        """The state options beyond Eq. 8's fixed U this config turns on (``learn_damping``, ``decay_gate``,
        ``state_write``); () for the paper's state."""
        on = (self.learn_damping, self.decay_gate, self.state_write != "add")
        return tuple(name for name, o in zip(("learn_damping", "decay_gate", "state_write"), on) if o)

    def board_options(self) -> tuple[str, ...]:
        """The board's structure this config gives BDH (`BOARD_OPTIONS` away from their off values); () for none."""
        return tuple(name for name, off in BOARD_OPTIONS.items() if getattr(self, name) != off)

    @property
    def n_encoders(self) -> int:
        """Encoder matrices of n x D numbers per weight set: E, Dx, Dy, and D_k with separate keys."""
        return 4 if self.separate_keys else 3

    @property
    def weight_sets(self) -> int:
        """Sets of encoder weights: 1 (shared by all layers, the paper's model) or L (``unshared_layers``)."""
        return self.n_layer if self.unshared_layers else 1

    def retention(self) -> tuple[float, ...] | None:
        """Per-head retention factors u_h of the damping U, or None when there is no damping."""
        d = self.damping
        if d is None:
            return None
        if isinstance(d, str):
            return {"alibi": alibi_retention, "multiscale": multiscale_retention}.get(d, local_global_retention)(
                self.n_head
            )
        if isinstance(d, (int, float)):
            return (float(d),) * self.n_head
        return tuple(float(u) for u in d)

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        """What the declared ranges cannot say: the rules between fields, the neuron count n, the damping."""
        for name in ABLATIONS:
            self._check_bool(name)
        if self.n_neurons is not None and self.mlp_internal_dim_multiplier is not None:
            self._fail("n_neurons", "give either n_neurons or mlp_internal_dim_multiplier, not both")
        given = [name for name in SIZE_FIELDS if getattr(self, name) is not None]
        if self.no_expansion and given:
            self._fail("no_expansion", f"fixes n = n_head * n_embd, so {given[0]} must be left out")
        if self.no_expansion:
            n = self.n_head * self.n_embd
        elif self.n_neurons is not None:
            n = self.n_neurons
        else:
            n = (self.mlp_internal_dim_multiplier or DEFAULT_MULTIPLIER) * self.n_embd
        if n % self.n_head:
            self._fail("n_neurons", f"n = {n} must be divisible by n_head = {self.n_head}")
        self._n = n
        self._check_bool("causal")
        if self.positional != "none" and self.N % 2:
            self._fail("n_neurons", f"RoPE rotates pairs of neurons, so neurons per head must be even, got {self.N}")
        if not self.causal and self.attention != "parallel":
            self._fail(
                "attention",
                "bidirectional attention (causal=false) has no recurrent state; "
                f"use attention='parallel', got {self.attention!r}",
            )
        self._validate_damping()
        self._validate_state_rules()
        self._check_bool("deep_supervision")
        for name in self.board_options():
            if self.causal:
                self._fail(name, "sudoku reads the whole board at once; it needs causal=false")
        shared = not self.unshared_layers
        if (bad := recurrence.depth_complaint(self.random_depth, self.deep_supervision, shared)) is not None:
            self._fail(*bad)

    def _validate_damping(self) -> None:
        d = self.damping
        if d is None:
            return
        presets = ", ".join(repr(p) for p in DAMPING_PRESETS[:-1]) + f" or {DAMPING_PRESETS[-1]!r}"
        expected = f"must be null, a retention factor in (0, 1], a list of one per head, {presets}"
        if isinstance(d, str):
            if d not in DAMPING_PRESETS:
                self._fail("damping", f"{expected}; got {d!r}")
            return
        values = [d] if isinstance(d, (int, float)) and not isinstance(d, bool) else d
        try:
            values = list(values)
        except TypeError:
            self._fail("damping", f"{expected}; got {d!r}")
        if not isinstance(d, (int, float)) and len(values) != self.n_head:
            self._fail("damping", f"a list needs one retention factor per head ({self.n_head}), got {len(values)}")
        for u in values:
            if isinstance(u, bool) or not isinstance(u, (int, float)) or not 0.0 < u <= 1.0:
                self._fail("damping", f"retention factors must lie in (0, 1], got {u!r}")
        if isinstance(d, list):
            self.damping = tuple(float(u) for u in d)

    def _validate_state_rules(self) -> None:
        for name in ("learn_damping", "decay_gate"):
            self._check_bool(name)
        if self.learn_damping and self.damping is None:
            self._fail("learn_damping", "learns the retention of damping, so set damping too (e.g. 'local-global')")
        if not self.causal and (self.decay_gate or self.state_write != "add"):
            name = "decay_gate" if self.decay_gate else "state_write"
            self._fail(name, "reads tokens in order through the state, so it needs causal attention (causal=true)")
        if self.write_gate != "sigmoid" and self.state_write != "delta":
            self._fail("write_gate", "is the delta rule's write strength, so set state_write: delta too")
        if (self.write_gate == "annealed") != (self.gate_anneal_steps is not None):
            self._fail("gate_anneal_steps", "is set with write_gate: annealed, and only then (give both or neither)")
        if self.write_gate == "annealed" and self.deep_supervision:
            self._fail("write_gate", "annealed counts forward's passes, and deep_supervision trains through others")
        for name, default in (("write_keys", "unit"), ("write_topk", None)):
            if getattr(self, name) != default and self.state_write != "delta":
                self._fail(name, "shapes the delta rule's write keys, so set state_write: delta too")
        if self.write_topk is not None and self.write_topk > self.N:
            self._fail("write_topk", f"must be at most the {self.N} neurons per head, got {self.write_topk}")
        if self.write_topk is not None and self.write_keys != "unit":
            self._fail("write_topk", f"keeps a key's largest neurons, so needs write_keys: unit, not {self.write_keys}")
        if heads := self.write_topk_heads:
            if self.write_topk is None:
                self._fail("write_topk_heads", "names the heads write_topk cuts, so set write_topk too")
            if len(set(heads)) != len(heads) or max(heads) >= self.n_head:
                self._fail("write_topk_heads", f"must name distinct heads of 0..{self.n_head - 1}, got {list(heads)}")

    # ------------------------------------------------------------------ sizes
    def num_params(self) -> int:
        """Trainable parameters: 3 n D + 2 V D (paper section 3.2: E, Dx, Dy plus embedding and readout); with
        the ablations, (3 or 4 with D_k) n D per weight set, times L for ``unshared_layers``; plus h for
        ``learn_damping`` and h (D + 1) each for ``decay_gate`` and the delta ``state_write`` (shared by layers); 27 D
        for ``input_positions: sudoku``."""
        rules = self.learn_damping + (self.decay_gate + (self.state_write == "delta")) * (self.n_embd + 1)
        encoders = self.weight_sets * self.n_encoders * self.n * self.n_embd
        grid = 27 * self.n_embd if self.input_positions == "sudoku" else 0  # row, column and box tables
        return encoders + 2 * self.vocab_size * self.n_embd + rules * self.n_head + grid

    def state_size(self) -> int:
        """Scalars of recurrent state rho per layer: h heads x N x D = n D (paper section 4.1)."""
        return self.n * self.n_embd

    # ------------------------------------------------------------------ (de)serialisation (TypedConfig)
    def train_memory_bytes(
        self, micro_batch: int, seq_len: int, *, form: str | None = None, dtype: str = "fp32", shards: int = 1
    ) -> int:
        """An estimate of peak training memory (`bdh.model_api.ModelConfigAPI`): fp32 weights, gradients and AdamW
        moments (16 bytes per parameter; 16 / ``shards`` plus 8 while a step runs in a sharded run, the model being
        one FSDP unit) and the saved activations: about five (B, T, n) tensors per layer, the (B, h, T, T) scores of
        the parallel form, every state of the recurrent form (the chunked form recomputes its states), plus about
        3 B T V for the logits."""
        n, D, H, L, V = self.n, self.n_embd, self.n_head, self.n_layer, self.vocab_size
        B, T = micro_batch, seq_len
        form = form or self.attention
        act = BYTES[dtype]
        params = self.num_params()
        weights = params * 4 * 4  # fp32 weights, gradients, two AdamW moments
        if shards > 1:
            weights = weights // shards + params * 4 * 2
        per_layer = (5 + 2 * self.separate_keys) * B * T * n * act + (B * T * n if self.dropout > 0 else 0)
        temporaries = 2 * B * T * n * act
        if form == "parallel":
            per_layer += B * H * T * T * act
        elif form == "chunked":
            c = min(self.chunk_size, T)
            temporaries += 3 * B * n * D * 4 + 3 * B * H * c * c * act
            if self.state_rules():  # the plain chunked form: autograd keeps the state before every chunk
                per_layer += -(-T // c) * B * n * D * 4
        else:
            per_layer += T * B * n * D * 4  # every intermediate state is kept for backward
        logits = 3 * B * T * V * 4
        return int(weights + L * per_layer + temporaries + logits)

    def replace(self, **changes: Any) -> BDHConfig:
        """A copy with some fields changed (validated again)."""
        return BDHConfig.from_dict(complete(BDHConfig, self.to_dict(), changes))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)
