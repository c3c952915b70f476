"""Parameters and 1-bit weights of Poc-López & Aguilera's (2024) self-attention network.

M features per projection alpha in {o, v, q, k}, each column +/-1 over N_se semantic neurons plus N_P positional bits
(appendix C); `NetworkWeights` stores groups of neurons sharing a row, with their fractions."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bdh.errors import UserError
from bdh.typed_config import TypedConfig, bounded

#: the four projections of the paper, in the order used everywhere in this package
PROJECTIONS = ("o", "v", "q", "k")


@dataclass(frozen=True)
class DMFTParams(TypedConfig):
    """Scalar parameters of the model (paper section 4, the values of its figures by default)."""

    n_features: int = bounded(3, ge=1)  # M, features per projection.
    context: int = bounded(4, ge=1)  # L, the context window (tokens attended to, the current one included).
    n_pe: int = bounded(2, ge=0)  # N_P, positional bits; the position is t mod 2^N_P (paper: L = 2^N_P).
    epsilon: float = bounded(0.02, ge=0, le=1)  # weight of the positional encoding in the overlaps (Eq. 15).
    # attention inverse temperature (Eq. 5); the softmax multiplies m^q . m^k by gamma / sqrt(M) (`gamma_eff`, from the
    # normalisation U = N^2 sqrt(M)).
    gamma: float = 220.0

    @property
    def gamma_eff(self) -> float:
        """The multiplier of m^q . m^k inside the attention softmax: gamma / sqrt(M) (Eq. 5 with U = N^2 sqrt(M))."""
        return self.gamma / float(np.sqrt(self.n_features))

    @property
    def period(self) -> int:
        """Period of the positional code, 2^N_P."""
        return 2**self.n_pe


def position_bits(t: np.ndarray | int, n_pe: int) -> np.ndarray:
    """The +/-1 code p_t of t mod 2^N_P, (*t.shape, n_pe), most significant bit first (position 0: all -1)."""
    t = np.asarray(t) % (2**n_pe)
    shifts = np.arange(n_pe - 1, -1, -1)
    return (((t[..., None] >> shifts) & 1) * 2 - 1).astype(np.float64)


@dataclass
class NetworkWeights:
    """1-bit weights as groups sharing a row: ``frac`` (G,) their fractions, ``W`` (G, M) and ``P`` (N_P, M)
    per projection."""

    frac: np.ndarray
    W: dict[str, np.ndarray]
    P: dict[str, np.ndarray]
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.frac = np.asarray(self.frac, dtype=np.float64)
        if self.frac.ndim != 1 or not np.isclose(self.frac.sum(), 1.0) or (self.frac <= 0).any():
            raise UserError("NetworkWeights: frac must be positive fractions that sum to 1")
        G = self.frac.shape[0]
        shapes = {a: np.shape(self.W[a]) for a in PROJECTIONS}
        M = shapes["o"][1]
        for a in PROJECTIONS:
            self.W[a] = np.asarray(self.W[a], dtype=np.float64)
            self.P[a] = np.asarray(self.P[a], dtype=np.float64).reshape(-1, M)
            if self.W[a].shape != (G, M):
                raise UserError(f"NetworkWeights: W[{a!r}] has shape {self.W[a].shape}, expected {(G, M)}")
            if not np.isin(self.W[a], (-1.0, 1.0)).all() or not np.isin(self.P[a], (-1.0, 1.0)).all():
                raise UserError("NetworkWeights: weights must be +1 or -1")

    @property
    def n_features(self) -> int:
        return self.W["o"].shape[1]

    @property
    def n_pe(self) -> int:
        return self.P["o"].shape[0]

    def pair_correlation(self, alpha: str, beta_: str = "o") -> np.ndarray:
        """<W^beta_b W^alpha_a>_i over the semantic neurons, as a (M, M) matrix indexed [b, a] (App. B)."""
        return np.einsum("g,gb,ga->ba", self.frac, self.W[beta_], self.W[alpha])

    def group_sizes(self, n_se: int) -> np.ndarray:
        """Neurons per group in a finite network of n_se semantic neurons (must divide exactly)."""
        sizes = self.frac * n_se
        if not np.allclose(sizes, np.round(sizes)):
            raise UserError(
                f"NetworkWeights: {n_se} semantic neurons cannot be split into groups of fractions {self.frac}"
            )
        return np.round(sizes).astype(np.int64)

    def full_matrices(self, n_se: int) -> dict[str, np.ndarray]:
        """Explicit (n_se + N_P, M) weight matrices: each group row repeated over its neurons, then the PE rows."""
        sizes = self.group_sizes(n_se)
        return {a: np.vstack([np.repeat(self.W[a], sizes, axis=0), self.P[a]]) for a in PROJECTIONS}


def segment_weights(
    signs: dict[str, np.ndarray], pe: dict[str, np.ndarray], meta: dict | None = None
) -> NetworkWeights:
    """Weights made of equal segments (paper appendix C): ``signs[alpha]`` is (n_segments, M)."""
    n_seg = np.shape(signs["o"])[0]
    return NetworkWeights(
        np.full(n_seg, 1.0 / n_seg),
        {a: np.array(signs[a], float) for a in PROJECTIONS},
        {a: np.array(pe[a], float) for a in PROJECTIONS},
        dict(meta or {}),
    )


def random_segment_weights(seed: int, params: DMFTParams | None = None, n_segments: int = 3) -> NetworkWeights:
    """Segment weights drawn with our own generator: every segment sign and PE bit is +/-1 with p = 1/2."""
    params = params or DMFTParams()
    rng = np.random.default_rng(seed)
    M = params.n_features
    signs = {a: rng.choice([-1.0, 1.0], size=(n_segments, M)) for a in PROJECTIONS}
    pe = {a: rng.choice([-1.0, 1.0], size=(params.n_pe, M)) for a in PROJECTIONS}
    return segment_weights(signs, pe, {"source": "random_segment_weights", "seed": seed, "n_segments": n_segments})


def paper_weights(
    seed: int = 1, n_se: int = 99, n_segments: int = 3, params: DMFTParams | None = None
) -> NetworkWeights:
    """The weights of the paper's figures (appendix C, seed 1), replaying the authors' draws from numpy's
    legacy generator."""
    params = params or DMFTParams()
    M, n_pe = params.n_features, params.n_pe
    rs = np.random.RandomState(seed)
    rs.randint(2, size=(M, n_se))  # drawn first and discarded
    full = {a: rs.randint(2, size=(M, n_se)) * 2 - 1 for a in PROJECTIONS}
    pe = {a: full[a][:, n_se - n_pe :].T.astype(float) for a in PROJECTIONS}  # (N_P, M)
    signs = {a: np.zeros((n_segments, M)) for a in PROJECTIONS}
    for a in PROJECTIONS:
        for feat in range(M):
            for s in range(n_segments):
                signs[a][s, feat] = float(rs.randint(2, size=1)[0] * 2 - 1)
    return segment_weights(
        signs, pe, {"source": "paper_weights", "seed": seed, "n_se_draw": n_se, "n_segments": n_segments}
    )
