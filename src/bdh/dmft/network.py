"""The finite-size network of the paper (section 2, Eqs. 4-8): 1-bit tokens and weights, softmax
attention over the context window, a softmax output sampled bit by bit, tokens fed back.

For N = N_se + N_P neurons, with x_t in {+-1}^N (N_se semantic bits and the N_P bits of position t):

    m^alpha_{a,t} = (1-eps) W^alpha_se . x_{se,t} / N_se + eps W^alpha_pe . p_t / N_P      (overlaps, Eq. 11/15)
    Ahat_t        = sum_tau softmax_tau(gamma/(N^2 sqrt M) q_t . k_{t-tau}) v_{t-tau} / N   (Eqs. 4-5)
                  = sum_tau softmax_tau(gamma_eff m^q_t . m^k_{t-tau}) m^v_{t-tau}
    P(x_{i,t+1} = +1) = (1 + tanh(beta sum_b W^o_{i b} Ahat_{b,t})) / 2                    (Eq. 6)

The output softmax over the 2^N_se tokens has logits linear in the bits, so it factorises exactly
into independent bits (the last line). Two exact samplers:

* ``"bits"``: draw every semantic bit (cost O(N) per step);
* ``"binomial"``: neurons in a group share their weights and field, so only the number of +1 bits
  per group matters: n_g ~ Binomial(N_g, (1 + tanh h_g)/2) (cost independent of N).

As N -> infinity the overlaps converge to the mean-field equations (`bdh.dmft.meanfield`), with
fluctuations of order 1/sqrt(N) ("thermal fluctuations", end of section 3).
"""

from __future__ import annotations

import numpy as np

from bdh.errors import UserError

from .meanfield import MeanField
from .weights import DMFTParams, NetworkWeights

SAMPLERS = ("binomial", "bits")


class FiniteNetwork(MeanField):
    """The finite network with ``n_se`` semantic neurons, batched over (beta, sample) rows.

    `simulate` is the same loop as the mean field's, with the group magnetisations of each new token
    *sampled* instead of averaged. Row b of the batch uses beta[b]; repeat a beta to get independent
    samples. Random draws come from one ``numpy.random.Generator`` seeded with ``seed``.
    """

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
