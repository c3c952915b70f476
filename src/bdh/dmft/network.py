"""The finite-size network (section 2, Eqs. 4-8): 1-bit tokens and weights, windowed softmax attention, output sampled
bit by bit and fed back.

    P(x_{i,t+1} = +1) = (1 + tanh(beta sum_b W^o_{i b} Ahat_{b,t})) / 2                    (Eq. 6)

``"bits"`` draws each bit (O(N)), ``"binomial"`` the +1 count per weight group (independent of N)."""

from __future__ import annotations

import numpy as np

from bdh.errors import UserError

from .meanfield import MeanField
from .weights import DMFTParams, NetworkWeights

SAMPLERS = ("binomial", "bits")


class FiniteNetwork(MeanField):
    """The finite network of ``n_se`` neurons over (beta, sample) rows: the mean field with magnetisations sampled."""

    def __init__(
        self,
        weights: NetworkWeights,
        n_se: int,
        params: DMFTParams | None = None,
        *,
        sampler: str = "binomial",
        seed: int = 0,
    ):
        super().__init__(weights, params)
        if sampler not in SAMPLERS:
            raise UserError(f"FiniteNetwork: sampler must be one of {SAMPLERS}, got {sampler!r}")
        self.n_se = int(n_se)
        self.sizes = weights.group_sizes(self.n_se)  # (G,)
        self.sampler = sampler
        self.rng = np.random.default_rng(seed)
        if sampler == "bits":
            self._starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])  # groups are contiguous
            self._Wo_full = np.repeat(weights.W["o"], self.sizes, axis=0)  # (N_se, M)

    def next_token(self, att: np.ndarray, beta: np.ndarray) -> np.ndarray:
        """Sample the next token and return its group magnetisations (2 n_g^+ - N_g) / N_g, shape (B, G)."""
        beta = np.asarray(beta, dtype=np.float64).reshape(-1, 1)
        if self.sampler == "binomial":
            prob = 0.5 * (1.0 + np.tanh(beta * (att @ self._So.T)))  # (B, G)
            n_plus = self.rng.binomial(self.sizes[None, :], prob)
            return (2.0 * n_plus - self.sizes) / self.sizes
        h = beta * (att @ self._Wo_full.T)  # (B, N_se) fields h_i
        x = np.where(self.rng.random(h.shape) < 0.5 * (1.0 + np.tanh(h)), 1.0, -1.0)
        return np.add.reduceat(x, self._starts, axis=1) / self.sizes
