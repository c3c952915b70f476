"""The mean-field equations of the self-attention network, exact as N -> infinity (paper section 3):

    m^alpha_{a,t} = (1-eps) sum_g frac_g W^alpha_{g a} tanh(beta sum_b W^o_{g b} Ahat_{b,t-1})
                    + eps (1/N_P) sum_{i<=N_P} W^alpha_{i a} p_{i,t}                       (Eqs. 13, 15, 16)
    Ahat_{a,t}     = sum_tau softmax_tau(gamma_eff sum_b m^q_{b,t} m^k_{b,t-tau}) m^v_{a,t-tau}   (Eq. 14)

tau runs over the window, p_t is the +/-1 code of t mod 2^N_P; Eq. 13 is the consistent form where Eqs. 14-15
differ (docs/dmft.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bdh.errors import UserError

from .weights import PROJECTIONS, DMFTParams, NetworkWeights, position_bits


@dataclass
class MFTrajectory:
    """Recorded steps of a mean-field run (B inverse temperatures, T kept steps, M features)."""

    beta: np.ndarray
    t: np.ndarray
    mo_se: np.ndarray  # (B, T, M) semantic part of m^o_t (first term of Eq. 15), the variable of the paper's figures.
    m: dict[str, np.ndarray]  # projection -> (B, T, M) full overlaps m^alpha_t (semantic + positional).
    att: np.ndarray  # (B, T, M) attention values Ahat_t.
    window: np.ndarray  # (B, L, M) the final Ahat window (Ahat_{T-1}, ..., Ahat_{T-L}) for continuation / Lyapunov.
    t_next: int  # the time index of the next step after the run.


class MeanField:
    """Mean-field dynamics (Eqs. 13-16) of the attention + softmax-output network, batched over beta."""

    def __init__(self, weights: NetworkWeights, params: DMFTParams | None = None):
        self.params = params or DMFTParams(n_features=weights.n_features, n_pe=weights.n_pe)
        if weights.n_features != self.params.n_features or weights.n_pe != self.params.n_pe:
            raise UserError("MeanField: weights and params disagree on n_features or n_pe")
        self.weights = weights
        eps = self.params.epsilon
        # (1-eps) frac_g W^alpha_{g a}: the semantic read-out of each group's magnetisation
        self._se = {a: (1.0 - eps) * weights.frac[:, None] * weights.W[a] for a in PROJECTIONS}
        # eps (1/N_P) W^alpha_pe . p_t for every position of the cycle: (period, M)
        period = self.params.period
        pbits = position_bits(np.arange(period), self.params.n_pe)  # (period, N_P)
        n_pe = max(self.params.n_pe, 1)
        self._pe = {
            a: eps * (pbits @ weights.P[a]) / n_pe if self.params.n_pe else np.zeros((1, weights.n_features))
            for a in PROJECTIONS
        }
        self._So = weights.W["o"]  # (G, M) rows sigma_g of W^o

    # ------------------------------------------------------------------ building blocks
    def pe_term(self, alpha: str, t: np.ndarray | int) -> np.ndarray:
        """eps (1/N_P) sum_i W^alpha_{i a} p_{i,t} (second term of Eq. 15), shape (*t.shape, M)."""
        return self._pe[alpha][np.asarray(t) % self._pe[alpha].shape[0]]

    def magnetisation(self, att: np.ndarray, beta: np.ndarray) -> np.ndarray:
        """Group magnetisations tanh(beta sigma_g . Ahat) for att (B, ..., M) -> (B, ..., G) (Eq. 13)."""
        b = np.asarray(beta, dtype=np.float64).reshape((-1,) + (1,) * (att.ndim - 1))
        return np.tanh(b * (att @ self._So.T))

    def next_token(self, att: np.ndarray, beta: np.ndarray) -> np.ndarray:
        """The next token's group magnetisations given Ahat_t (B, M): tanh(beta sigma_g . Ahat_t) (Eq. 13)."""
        return self.magnetisation(att, beta)

    def semantic(self, alpha: str, u: np.ndarray) -> np.ndarray:
        """(1-eps) sum_g frac_g W^alpha_g u_g: the semantic overlap from group magnetisations u (..., G)."""
        return u @ self._se[alpha]

    def token_overlaps(self, token_groups: np.ndarray, t: int) -> dict[str, np.ndarray]:
        """Overlaps m^alpha of a given token whose group magnetisations are ``token_groups`` (G,), at position t."""
        return {a: self.semantic(a, token_groups) + self.pe_term(a, t) for a in PROJECTIONS}

    def initial_token(self, feature: int = 0) -> np.ndarray:
        """Group magnetisations of the token x_0 = W^o_feature (the paper's initial condition)."""
        return self.weights.W["o"][:, feature].copy()

    def attention(self, mq: np.ndarray, mk: np.ndarray, mv: np.ndarray, valid: int | None = None) -> np.ndarray:
        """Ahat (Eq. 14) for mq (B, M), mk, mv (B, L, M), over the first ``valid`` slots of the window."""
        z = self.params.gamma_eff * np.einsum("bm,bdm->bd", mq, mk)
        if valid is not None and valid < z.shape[1]:
            z[:, valid:] = -np.inf
        z = z - z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        return np.einsum("bd,bdm->bm", p, mv)

    # ------------------------------------------------------------------ simulation
    def simulate(
        self,
        beta: np.ndarray | float,
        n_steps: int,
        n_keep: int | None = None,
        *,
        init_feature: int = 0,
        window: np.ndarray | None = None,
        t0: int = 0,
        record: tuple[str, ...] = ("o",),
    ) -> MFTrajectory:
        """Run every ``beta`` at once, keeping the last ``n_keep`` steps, from W^o_{init_feature} or a ``window`` (B, L,
        M) at ``t0``; ``record``: projections kept in full."""
        beta = np.atleast_1d(np.asarray(beta, dtype=np.float64))
        B, L, M = beta.shape[0], self.params.context, self.params.n_features
        if n_steps < 1:
            raise UserError(f"MeanField.simulate: n_steps must be >= 1, got {n_steps}")
        n_keep = n_steps if n_keep is None else int(n_keep)
        if not 1 <= n_keep <= n_steps:
            raise UserError(f"MeanField.simulate: n_keep must be in [1, n_steps], got {n_keep}")
        mq, mk, mv, mo_se, mcur, valid, t = self._start(beta, init_feature, window, t0)
        start = n_steps - n_keep
        out_mo = np.empty((B, n_keep, M))
        out_att = np.empty((B, n_keep, M))
        out_m = {a: np.empty((B, n_keep, M)) for a in record}
        att_hist = np.zeros((B, L, M))  # Ahat_{t}, Ahat_{t-1}, ... (most recent first)
        for step in range(n_steps):
            att = self.attention(mq, mk, mv, valid)  # Ahat_t
            if step >= start:
                j = step - start
                out_mo[:, j] = mo_se
                out_att[:, j] = att
                for a in record:
                    out_m[a][:, j] = mcur[a]
            att_hist = np.concatenate([att[:, None], att_hist[:, :-1]], axis=1)
            # the next token x_{t+1}: group magnetisations tanh(beta sigma_g . Ahat_t), position t+1
            t += 1
            u = self.next_token(att, beta)  # (B, G)
            mcur = {a: self.semantic(a, u) + self.pe_term(a, t) for a in PROJECTIONS}
            mo_se = self.semantic("o", u)
            mq = mcur["q"]
            mk = np.concatenate([mcur["k"][:, None], mk[:, :-1]], axis=1)
            mv = np.concatenate([mcur["v"][:, None], mv[:, :-1]], axis=1)
            valid = min(valid + 1, L)
        tt = np.arange(t - n_keep, t)
        return MFTrajectory(beta, tt, out_mo, out_m, out_att, att_hist, t)

    def _start(self, beta: np.ndarray, init_feature: int, window: np.ndarray | None, t0: int) -> tuple:
        """`simulate`'s start: W^o_{init_feature} at t = 0, or ``window`` at ``t0``."""
        B, L, M = beta.shape[0], self.params.context, self.params.n_features
        mk = np.zeros((B, L, M))
        mv = np.zeros((B, L, M))
        if window is None:
            m0 = self.token_overlaps(self.initial_token(init_feature), 0)
            mq = np.broadcast_to(m0["q"], (B, M)).copy()
            mk[:, 0] = m0["k"]
            mv[:, 0] = m0["v"]
            mo_se = np.broadcast_to(self.semantic("o", self.initial_token(init_feature)), (B, M)).copy()
            mcur = {a: np.broadcast_to(m0[a], (B, M)).copy() for a in PROJECTIONS}
            return mq, mk, mv, mo_se, mcur, 1, 0
        win = np.broadcast_to(np.asarray(window, dtype=np.float64), (B, L, M))
        t = int(t0)
        u = self.magnetisation(win, beta)  # (B, L, G): token t-d from Ahat_{t-1-d}
        for d in range(L):
            mk[:, d] = self.semantic("k", u[:, d]) + self.pe_term("k", t - d)
            mv[:, d] = self.semantic("v", u[:, d]) + self.pe_term("v", t - d)
        mq = self.semantic("q", u[:, 0]) + self.pe_term("q", t)
        mo_se = self.semantic("o", u[:, 0])
        mcur = {a: self.semantic(a, u[:, 0]) + self.pe_term(a, t) for a in PROJECTIONS}
        return mq, mk, mv, mo_se, mcur, L, t

    # ------------------------------------------------------------------ window map (Lyapunov)
    def _window_parts(self, window: np.ndarray, beta: np.ndarray, t: int):
        L = self.params.context
        u = self.magnetisation(window, beta)  # (B, L, G)
        phases = t - np.arange(L)
        mk = self.semantic("k", u) + self.pe_term("k", phases)  # (B, L, M)
        mv = self.semantic("v", u) + self.pe_term("v", phases)
        mq = self.semantic("q", u[:, 0]) + self.pe_term("q", t)
        z = self.params.gamma_eff * np.einsum("bm,bdm->bd", mq, mk)
        z = z - z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        return u, mq, mk, mv, p

    def window_map(self, window: np.ndarray, beta: np.ndarray, t: int) -> np.ndarray:
        """One step of the dynamics on the Ahat window: (Ahat_{t-1..t-L}) -> (Ahat_{t..t-L+1}), shape (B, L, M)."""
        _, _, _, mv, p = self._window_parts(window, beta, t)
        att = np.einsum("bd,bdm->bm", p, mv)
        return np.concatenate([att[:, None], window[:, :-1]], axis=1)

    def window_map_jvp(
        self, window: np.ndarray, beta: np.ndarray, t: int, tangents: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The window map and its exact derivative on ``tangents`` (B, K, L, M); returns (new_window, new_tangents)."""
        beta = np.asarray(beta, dtype=np.float64).reshape(-1)
        u, mq, mk, mv, p = self._window_parts(window, beta, t)
        du = (beta[:, None, None, None] * (1.0 - u[:, None] ** 2)) * (tangents @ self._So.T)  # (B, K, L, G)
        dmk = self.semantic("k", du)
        dmv = self.semantic("v", du)
        dmq = self.semantic("q", du[:, :, 0])  # (B, K, M)
        g = self.params.gamma_eff
        dz = g * (np.einsum("bkm,bdm->bkd", dmq, mk) + np.einsum("bm,bkdm->bkd", mq, dmk))
        dp = p[:, None] * (dz - np.einsum("bd,bkd->bk", p, dz)[..., None])
        datt = np.einsum("bkd,bdm->bkm", dp, mv) + np.einsum("bd,bkdm->bkm", p, dmv)
        att = np.einsum("bd,bdm->bm", p, mv)
        new_w = np.concatenate([att[:, None], window[:, :-1]], axis=1)
        new_t = np.concatenate([datt[:, :, None], tangents[:, :, :-1]], axis=2)
        return new_w, new_t

    def window_series(self, window: np.ndarray, beta: np.ndarray, t0: int, n_steps: int) -> np.ndarray:
        """Iterate `window_map` and return Ahat_t for each step, shape (B, n_steps, M)."""
        beta = np.atleast_1d(np.asarray(beta, dtype=np.float64))
        w = np.broadcast_to(np.asarray(window, dtype=np.float64), (beta.shape[0],) + np.shape(window)[-2:]).copy()
        out = np.empty((beta.shape[0], n_steps, w.shape[-1]))
        for s in range(n_steps):
            w = self.window_map(w, beta, t0 + s)
            out[:, s] = w[:, 0]
        return out
