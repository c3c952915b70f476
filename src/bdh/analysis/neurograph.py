"""Neuron graphs of BDH-GPU: G_x = D_x E, G_y = D_y E (section 5.5, Figs. 9, 10) and the synapse graph sigma (section
6.2, Fig. 11); docs/inspect.md.

``G[u, v]`` is the edge v -> u; neuron j of head a is a * N + j. N x N blocks G^(ab) are formed one at a time."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bdh.errors import UserError
from bdh.model import BDH

from . import stats
from .record import Recording, head_neurons, recover_sigma

WHICH = ("x", "y")


# ---------------------------------------------------------------------- blocks of G = D E


def head_block(model: BDH, which: str, a: int, b: int | None = None) -> torch.Tensor:
    """G^(ab) = D[a] E[:, V_b] (N x N, float32, CPU) of D_x (``which='x'``) or D_y; ``b`` defaults to ``a``."""
    cfg = model.config
    cfg.require_paper_layer("the neuron graph", allow=("no_expansion", "ungated", "separate_keys"))  # one E, Dx, Dy
    if which not in WHICH:
        raise UserError(f"which must be 'x' or 'y', got {which!r}")
    b = a if b is None else b
    for h in (a, b):
        if not 0 <= h < cfg.n_head:
            raise UserError(f"head {h} does not exist (the model has {cfg.n_head} heads: 0..{cfg.n_head - 1})")
    D = (model.Dx if which == "x" else model.Dy).detach()[a].float()  # (D, N): column j = row j of D_x[a]
    E_b = model.E.detach()[b * cfg.N : (b + 1) * cfg.N].float()  # (N, D): rows = columns of paper E
    with torch.no_grad():
        return (D.T @ E_b.T).cpu()


def low_rank_baseline(n_rows: int, n_cols: int, d: int, seed: int) -> torch.Tensor:
    """P1 P2^T with i.i.d. N(0, 1) factors of rank d: the random low-rank product of Fig. 9b."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n_rows, d, generator=g) @ torch.randn(n_cols, d, generator=g).T


# ---------------------------------------------------------------------- Fig. 9a: entries


def _sample(values: torch.Tensor, k: int, seed: int) -> np.ndarray:
    flat = values.reshape(-1)
    if flat.numel() <= k:
        return flat.double().numpy()
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, flat.numel(), (k,), generator=g)
    return flat[idx].double().numpy()


@dataclass
class EntryStats:
    """Fig. 9a for one block: histogram split, noise scale sigma_Q, tails beyond k sigma_Q, tail onset."""

    split: stats.SymmetricSplit
    sigma_q: float
    tails: dict[str, dict[str, float]]
    beta1: float | None
    n_entries: int

    def to_dict(self) -> dict[str, Any]:
        right, left = self.split.skew_mass()
        return {
            "n_entries": self.n_entries,
            "sigma_q": self.sigma_q,
            "beta1": self.beta1,
            "beta1_over_sigma_q": None if self.beta1 is None or self.sigma_q == 0 else self.beta1 / self.sigma_q,
            "skew_mass_right": right,
            "skew_mass_left": left,
            "tails": self.tails,
            "mean": float(np.sum(self.split.centers * self.split.counts) / max(self.split.counts.sum(), 1)),
        }


def entry_stats(G: torch.Tensor, n_bins: int = 201, span: float = 12.0, seed: int = 0) -> EntryStats:
    """Entry statistics of a block (Fig. 9a, Eq. 13) in units of its noise scale sigma_Q; beyond ``span`` in
    outer bins."""
    sample = _sample(G, 2_000_000, seed)
    sigma_q = stats.noise_scale(sample)
    lim = span * sigma_q if sigma_q > 0 else float(G.abs().max())
    edges = torch.linspace(-lim, lim, n_bins + 1, dtype=torch.float64)
    counts = torch.histc(G, bins=n_bins, min=-lim, max=lim).double().numpy()  # ignores entries outside
    counts[0] += float((G < -lim).sum())
    counts[-1] += float((G > lim).sum())
    sym = np.minimum(counts, counts[::-1])
    split = stats.SymmetricSplit(
        edges.numpy(), counts.astype(np.int64), sym.astype(np.int64), (counts - sym).astype(np.int64)
    )
    tails = {}
    n = G.numel()
    for k in (3.0, 4.0, 6.0, 8.0):
        tails[f"{k:g}"] = {
            "above": int((G > k * sigma_q).sum()),
            "below": int((G < -k * sigma_q).sum()),
            "gaussian_expected": float(n * 0.5 * math.erfc(k / math.sqrt(2.0))),
        }
    return EntryStats(split, sigma_q, tails, stats.tail_onset(split), int(n))


def head_polarity(blocks: dict[int, EntryStats], k: str = "4") -> dict[str, Any]:
    """Per head: entries beyond +-k sigma_Q and the head "excitatory", "inhibitory" or "symmetric" (section 5.5)."""
    heads = {}
    for h, st in sorted(blocks.items()):
        t = st.tails[k]
        above, below = t["above"], t["below"]
        kind = "excitatory" if above > 2 * below + 10 else "inhibitory" if below > 2 * above + 10 else "symmetric"
        heads[str(h)] = {
            "above": above,
            "below": below,
            "gaussian_expected": t["gaussian_expected"],
            "pos_neg_ratio": (above + 1.0) / (below + 1.0),
            "kind": kind,
        }
    return {
        "k_sigma": float(k),
        "heads": heads,
        "inhibitory_looking": [int(h) for h, v in heads.items() if v["kind"] == "inhibitory"],
        "excitatory_looking": [int(h) for h, v in heads.items() if v["kind"] == "excitatory"],
    }


# ---------------------------------------------------------------------- Fig. 9b: modularity


def threshold_for_edges(G: torch.Tensor, m: int, exclude_diagonal: bool = True) -> float:
    """The beta such that G_{>=beta} has about m entries (off the diagonal if asked), without copying G."""
    if m < 1:
        raise UserError(f"threshold_for_edges: m must be positive, got {m}")
    square = exclude_diagonal and G.shape[0] == G.shape[1]
    n_cols = G.shape[1]
    extra = G.shape[0] if square else 0
    k = min(m + extra, G.numel())
    vals, idx = torch.topk(G.reshape(-1), k)
    if square:
        vals = vals[idx // n_cols != idx % n_cols]
    return float(vals[min(m, vals.numel()) - 1])


def undirected_edges(G: torch.Tensor, beta: float) -> np.ndarray:
    """Edges {u, v}, u < v, where G[u,v] >= beta or G[v,u] >= beta, no self-loops (Fig. 9b's simplest reading)."""
    A = G >= beta
    A = A | A.T
    A.fill_diagonal_(False)
    u, v = torch.nonzero(torch.triu(A, diagonal=1), as_tuple=True)
    return torch.stack([u, v], dim=1).numpy()


def louvain_modularity(n_nodes: int, edges: np.ndarray, seeds: int = 3, seed: int = 0) -> tuple[float, int]:
    """Newman modularity of Louvain's best partition over ``seeds`` runs, and its community count (0 without edges)."""
    import networkx as nx

    if len(edges) == 0:
        return 0.0, n_nodes
    g = nx.Graph()
    g.add_nodes_from(range(n_nodes))
    g.add_edges_from(map(tuple, edges.tolist()))
    best = (-1.0, 0)
    for s in range(seeds):
        parts = nx.community.louvain_communities(g, seed=seed + s)
        q = float(nx.community.modularity(g, parts))
        if q > best[0]:
            best = (q, len(parts))
    return best


def _er_edges(n_nodes: int, m: int, seed: int) -> np.ndarray:
    """m distinct undirected edges {u, v}, u != v, drawn uniformly (Erdos-Renyi G(n, m))."""
    rng = np.random.default_rng(seed)
    m = min(m, n_nodes * (n_nodes - 1) // 2)
    keys = np.empty(0, dtype=np.int64)
    while keys.size < m:
        u = rng.integers(0, n_nodes, size=2 * (m - keys.size) + 16)
        v = rng.integers(0, n_nodes, size=u.size)
        ok = u != v
        lo, hi = np.minimum(u, v)[ok], np.maximum(u, v)[ok]
        keys = np.unique(np.concatenate([keys, lo * n_nodes + hi]))
    keys = rng.permutation(keys)[:m]
    return np.stack([keys // n_nodes, keys % n_nodes], axis=1)


def subsample_nodes(n: int, max_nodes: int, seed: int) -> torch.Tensor:
    """At most ``max_nodes`` sorted random node indices out of n (all of them when n <= max_nodes)."""
    if n <= max_nodes:
        return torch.arange(n)
    g = torch.Generator().manual_seed(seed)
    return torch.sort(torch.randperm(n, generator=g)[:max_nodes]).values


def modularity_sweep(
    G: torch.Tensor,
    d: int,
    avg_degrees: tuple[float, ...] = (2.0, 8.0, 32.0),
    seeds: int = 3,
    seed: int = 0,
    sigma_q: float | None = None,
) -> list[dict[str, Any]]:
    """Fig. 9b: per average degree k, the modularity of G at m = k n* entries against Erdos-Renyi and
    low-rank graphs."""
    n = G.shape[0]
    P = low_rank_baseline(n, n, d, seed + 7919)
    out = []
    for k in avg_degrees:
        m = max(1, int(round(k * n)))
        beta = threshold_for_edges(G, m)
        e = undirected_edges(G, beta)
        q, c = louvain_modularity(n, e, seeds, seed)
        q_er, _ = louvain_modularity(n, _er_edges(n, len(e), seed + 1), seeds, seed)
        beta_p = threshold_for_edges(P, m)
        e_p = undirected_edges(P, beta_p)
        q_lr, _ = louvain_modularity(n, e_p, seeds, seed)
        out.append(
            {
                "avg_degree_target": k,
                "directed_entries": m,
                "edges": int(len(e)),
                "beta": beta,
                "beta_over_sigma_q": None if not sigma_q else beta / sigma_q,
                "Q": q,
                "communities": c,
                "Q_er": q_er,
                "Q_lowrank": q_lr,
                "lowrank_edges": int(len(e_p)),
                "gap_er": q - q_er,
                "gap_lowrank": q - q_lr,
            }
        )
    return out


# ---------------------------------------------------------------------- Fig. 10: degrees


def degrees(G: torch.Tensor, beta: float, exclude_diagonal: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(in-degree per row / target, out-degree per column / source) of the directed graph G_{>=beta}."""
    A = G >= beta
    if exclude_diagonal and A.shape[0] == A.shape[1]:
        A = A.clone()
        A.fill_diagonal_(False)
    return A.sum(dim=1).numpy(), A.sum(dim=0).numpy()


def _fit(k: np.ndarray) -> dict[str, Any] | None:
    f = stats.fit_degrees(k)
    return None if f is None else f.to_dict()


def degree_analysis(G: torch.Tensor, m: int, d: int, offset: int = 0, hubs: int = 10, seed: int = 0) -> dict[str, Any]:
    """Fig. 10: degrees of G_{>=beta} at m entries, with fits, hubs and the random low-rank product's summary."""
    beta = threshold_for_edges(G, m)
    k_in, k_out = degrees(G, beta)
    P = low_rank_baseline(G.shape[0], G.shape[1], d, seed + 104729)
    p_in, p_out = degrees(P, threshold_for_edges(P, m))
    top_in = np.argsort(-k_in)[:hubs]
    top_out = np.argsort(-k_out)[:hubs]
    return {
        "beta": beta,
        "edges": int(k_in.sum()),
        "in": {"summary": stats.degree_summary(k_in), "fit": _fit(k_in)},
        "out": {"summary": stats.degree_summary(k_out), "fit": _fit(k_out)},
        "lowrank_in": stats.degree_summary(p_in),
        "lowrank_out": stats.degree_summary(p_out),
        "hubs_in": [{"neuron": int(offset + j), "degree": int(k_in[j])} for j in top_in],
        "hubs_out": [{"neuron": int(offset + j), "degree": int(k_out[j])} for j in top_out],
        "_degrees": {"in": k_in, "out": k_out, "lowrank_in": p_in, "lowrank_out": p_out},
    }


def pick_head(stats_x: dict[int, EntryStats]) -> int:
    """The head whose G_x block has the largest excess of positive over negative 4-sigma entries."""
    return max(stats_x, key=lambda h: stats_x[h].tails["4"]["above"] - stats_x[h].tails["4"]["below"])


def default_head(model: BDH, seed: int = 0) -> int:
    """`pick_head` over the entry statistics of every head's G_x block of ``model``."""
    return pick_head({h: entry_stats(head_block(model, "x", h), seed=seed) for h in range(model.config.n_head)})


# ---------------------------------------------------------------------- Fig. 11: the sigma graph


def default_sigma_layer(n_layer: int) -> int:
    """The layer of Fig. 11 scaled to the model: the paper reads layer 5 of 8 (0-based, clipped to 1..L-1)."""
    return min(max(1, (5 * n_layer) // 8), n_layer - 1)


def firing_rates(rec: Recording, which: str, layer: int, neurons: torch.Tensor) -> np.ndarray:
    """Share of recorded tokens (all sequences) at which each neuron is non-zero in x or y of ``layer``."""
    act = getattr(rec, which)[layer]  # B, H, T, N
    B, H, T, N = act.shape
    flat = (act > 0).transpose(1, 2).reshape(B * T, H * N)
    return flat[:, neurons].float().mean(dim=0).numpy()


def sigma_graph(
    rec: Recording,
    layer: int,
    head: int,
    max_rows: int = 8192,
    quantiles: tuple[float, ...] = (0.9, 0.99),
    rotate: bool = True,
    seed: int = 0,
    batch_index: int = 0,
) -> dict[str, Any]:
    """Fig. 11: sigma_{T-1, layer} (Eq. 16) of sequence ``batch_index``, ``head``'s x-neurons against up to ``max_rows``
    y-neurons, positive entries, an edge above each quantile; degrees beside firing rates."""
    cfg = rec.config
    rows = subsample_nodes(cfg.n, max_rows, seed)
    cols = head_neurons(cfg, head)
    S = recover_sigma(rec, layer, rows=rows, cols=cols, rotate=rotate, batch_index=batch_index)
    pos = S[S > 0]
    fr_y = firing_rates(rec, "y", layer - 1, rows)
    fr_x = firing_rates(rec, "x", layer, cols)
    out: dict[str, Any] = {
        "layer": layer,
        "head": head,
        "rotate": rotate,
        "rows": int(len(rows)),
        "cols": int(len(cols)),
        "tokens": int(rec.T),
        "positive_share": float(pos.numel() / max(S.numel(), 1)),
        "negative_share": float((S < 0).sum() / max(S.numel(), 1)),
        "firing_rate_y": {"mean": float(fr_y.mean()), "silent_share": float((fr_y == 0).mean())},
        "firing_rate_x": {"mean": float(fr_x.mean()), "silent_share": float((fr_x == 0).mean())},
        "thresholds": [],
    }
    if pos.numel() == 0:
        return out
    sample = _sample(pos, 2_000_000, seed)
    for qv in quantiles:
        out["thresholds"].append(_sigma_threshold(S, qv, float(np.quantile(sample, qv)), fr_y, fr_x))
    out["_firing"] = {"y": fr_y, "x": fr_x}
    return out


def _sigma_threshold(S: torch.Tensor, quantile: float, theta: float, fr_y: np.ndarray, fr_x: np.ndarray) -> dict:
    """The sigma graph at quantile ``theta``: edges, degrees with fits, rank correlation with the firing rates."""
    A = S > theta
    k_out = A.sum(dim=1).numpy()  # per y-neuron (row)
    k_in = A.sum(dim=0).numpy()  # per x-neuron (column)
    return {
        "quantile": quantile,
        "theta": theta,
        "edges": int(A.sum()),
        "out": {
            "summary": stats.degree_summary(k_out),
            "fit": _fit(k_out),
            "spearman_with_firing_rate": stats.spearman(k_out, fr_y),
        },
        "in": {
            "summary": stats.degree_summary(k_in),
            "fit": _fit(k_in),
            "spearman_with_firing_rate": stats.spearman(k_in, fr_x),
        },
        "_degrees": {"out": k_out, "in": k_in},
    }


def strip_private(obj: Any) -> Any:
    """A copy of a nested result without the keys starting with '_' (raw arrays kept for figures)."""
    if isinstance(obj, dict):
        return {k: strip_private(v) for k, v in obj.items() if not str(k).startswith("_")}
    if isinstance(obj, list):
        return [strip_private(v) for v in obj]
    return obj
