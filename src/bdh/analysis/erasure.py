"""What erases a fact from BDH's state under the delta rule: each later write's share of the fact's loss.

A fact written at s is one column c per head of the state (Eq. 8, ``state_write: delta``): c_s = u_s b_s k_s, then c_t =
u_t (I - b_t k_t k_t^T) c_{t-1}. So |c_t|^2 = u_t^2 (1 - r_t) |c_{t-1}|^2 with r_t = (2 b_t - b_t^2 |k_t|^2) (k_t .
c_{t-1})^2 / |c_{t-1}|^2: the fact's log-norm falls by an exact sum of e_t = -log(1 - r_t) (damping aside), one term per
later position. `erasure` gives every head's e_t, the fact's column at its question and the question's query."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bdh.errors import UserError

#: the part of a fact's read score its neurons hold (`neurons_holding`)
HELD = 0.9


def carried_erasure(
    keys: torch.Tensor,
    beta: torch.Tensor,
    log_g: torch.Tensor | None,
    writes: torch.Tensor,
    reads: torch.Tensor,
    carried: torch.Tensor | None = None,
    start: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions ``start`` .. ``start + T - 1`` of one sequence, for F facts at once.

    keys (H, T, N) unit write keys; beta, log_g (H, T) (log_g None: no damping); writes, reads (F,) positions; carried
    (F, H, N) or None. Returns (the columns after, frozen from each question on, the erases e (F, H, T), 0 outside write
    < t < read)."""
    H, T, _ = keys.shape
    c = keys.new_zeros(len(writes), H, keys.shape[2]) if carried is None else carried.clone()
    erase = keys.new_zeros(len(writes), H, T)
    for i in range(T):
        t = start + i
        k, b = keys[:, i], beta[:, i]  # (H, N), (H,)
        u = torch.ones_like(b) if log_g is None else log_g[:, i].exp()
        live = ((writes < t) & (t < reads)).to(c.dtype).view(-1, 1, 1)
        proj = (c * k).sum(-1)  # (F, H)
        norm2 = (c * c).sum(-1)
        kk = (k * k).sum(-1)  # (H,): 1 for unit keys, less for a key of zeros or of eps-normalised small norm
        removed = (2 * b - b * b * kk) * proj * proj / norm2.clamp_min(torch.finfo(c.dtype).tiny)
        erase[:, :, i] = -torch.log1p(-removed.clamp(max=1.0 - 1e-12)) * live[:, :, 0]
        after = u.view(1, H, 1) * (c - (b.view(1, H) * proj).unsqueeze(-1) * k)
        c = live * after + (1 - live) * c
        born = (writes == t).to(c.dtype).view(-1, 1, 1)
        c = c + born * (u * b).view(1, H, 1) * k
    return c, erase


@dataclass
class Erasure:
    """For F facts over L layers: ``carried``, ``query`` (L, F, H, N) at the questions, ``erase`` (L, F, H, T)."""

    carried: torch.Tensor
    query: torch.Tensor
    erase: torch.Tensor

    def scores(self) -> torch.Tensor:
        """(L, F, H, N): each neuron's part of each fact's read score, q_i c_i."""
        return self.query * self.carried


class _Hook:
    """A hook over chunked steps carrying each layer's fact columns (`carried_erasure`) and the questions' queries."""

    def __init__(self, writes: torch.Tensor, reads: torch.Tensor):
        self.writes, self.reads = writes, reads
        self.start = 0
        self.carried: dict[int, torch.Tensor] = {}
        self.erase: dict[int, list[torch.Tensor]] = {}
        self.query: dict[int, torch.Tensor] = {}

    def __call__(self, model: torch.nn.Module, layer: int, act) -> None:
        gates = model.state_rule_gates(act.values)
        if gates.get("beta") is None:
            raise UserError("erasure: needs a BDH with the delta rule (state_write: delta)")
        keys, beta = act.keys[0].double(), gates["beta"][0].double()
        log_g = None if gates.get("log_g") is None else gates["log_g"][0].double()
        c, e = carried_erasure(keys, beta, log_g, self.writes, self.reads, self.carried.get(layer), self.start)
        self.carried[layer] = c
        self.erase.setdefault(layer, []).append(e)
        C = keys.shape[1]
        q = self.query.setdefault(layer, torch.zeros_like(c))
        here = (self.reads >= self.start) & (self.reads < self.start + C)
        for f in torch.nonzero(here).flatten().tolist():
            q[f] = act.xr[0, :, int(self.reads[f]) - self.start].double()


def erasure(model: torch.nn.Module, idx: torch.Tensor, writes: list[int], reads: list[int], chunk: int = 2048):
    """The `Erasure` of the facts written at ``writes`` and read at ``reads`` of the 1-D ``idx`` (a delta-rule BDH)."""
    if not callable(getattr(model, "init_state", None)) or not hasattr(model, "state_rule_gates"):
        raise UserError(f"erasure: needs a BDH model, got {type(model).__name__}")
    if not isinstance(idx, torch.Tensor) or idx.dim() != 1 or len(writes) != len(reads) or not writes:
        raise UserError("erasure: idx must be a 1-D tensor and writes and reads lists of equal length, not empty")
    if not all(0 <= w < r < idx.numel() for w, r in zip(writes, reads)):
        raise UserError(f"erasure: every fact must be written before its question, inside the {idx.numel()} tokens")
    hook = _Hook(torch.tensor(writes), torch.tensor(reads))
    state = model.init_state(1)
    end = max(reads) + 1  # nothing after the last question is needed
    with torch.no_grad():
        for s in range(0, end, chunk):
            hook.start = s
            _, state = model.step(idx[s : min(s + chunk, end)].view(1, -1).to(state.rho.device), state, hook=hook)
    layers = sorted(hook.carried)
    return Erasure(
        torch.stack([hook.carried[layer] for layer in layers]),
        torch.stack([hook.query[layer] for layer in layers]),
        torch.stack([torch.cat(hook.erase[layer], dim=-1) for layer in layers]),
    )


def neurons_holding(scores: torch.Tensor, part: float = HELD) -> int:
    """The fewest neurons whose positive parts of ``scores`` (N,) sum to ``part`` of the positive total (0: none)."""
    pos = scores.clamp_min(0).sort(descending=True).values
    total = float(pos.sum())
    if total <= 0:
        return 0
    return int((pos.cumsum(0) < part * total).sum()) + 1


def _kinds(idx: torch.Tensor, writes: list[int], reads: list[int], vocab_size: int) -> list[str]:
    """Each position's kind: ``pair``, ``question``, ``key-like filler``, ``value-like filler`` or ``filler``
    (token 0)."""
    pairs = {w for w in writes} | {w - 1 for w in writes}
    asked = {r for r in reads} | {r + 1 for r in reads}
    out = []
    for t, token in enumerate(idx.tolist()):
        kind = "pair" if t in pairs else "question" if t in asked else None
        like = "key-like filler" if 1 <= token < vocab_size // 2 else "value-like filler" if token else "filler"
        out.append(kind or like)
    return out


def fact_rows(
    er: Erasure, idx: torch.Tensor, writes: list[int], reads: list[int], vocab_size: int, top: int = 3
) -> list[dict]:
    """Per fact, in the head reading most of it: its neurons, the log-norm erased, the erase's share by kind of
    position, and the ``top`` tokens that erased most."""
    kinds = _kinds(idx, writes, reads, vocab_size)
    scores = er.scores()  # (L, F, H, N)
    rows = []
    for f, (w, r) in enumerate(zip(writes, reads)):
        per_head = scores[:, f].sum(-1)  # (L, H)
        layer, head = divmod(int(per_head.argmax()), per_head.shape[1])
        s, e = scores[layer, f, head], er.erase[layer, f, head, : idx.numel()]
        erased = float(e.sum())
        by_kind: dict[str, float] = {}
        for kind, value in zip(kinds, e.tolist()):
            by_kind[kind] = by_kind.get(kind, 0.0) + value
        per_token = torch.zeros(vocab_size, dtype=e.dtype).index_add_(0, idx[: e.numel()].cpu(), e.cpu())
        worst = per_token.argsort(descending=True)[:top].tolist()
        rows.append(
            {"write": w, "read": r, "key": int(idx[w - 1]), "layer": layer, "head": head}
            | {"neurons": neurons_holding(s), "neuron": int(s.argmax()), "score": float(s.sum()), "erased": erased}
            | {"by_kind": {k: v / erased if erased > 0 else 0.0 for k, v in sorted(by_kind.items())}}
            | {"erasers": [_eraser(t, per_token, e, idx, kinds, erased) for t in worst if per_token[t] > 0]}
        )
    return rows


def _eraser(token: int, per_token: torch.Tensor, e: torch.Tensor, idx: torch.Tensor, kinds: list[str], total: float):
    at = torch.nonzero(idx[: e.numel()].cpu() == token).flatten()
    where = int(at[e.cpu()[at].argmax()])
    return {"token": token, "share": float(per_token[token]) / total, "kind": kinds[where], "count": int(at.numel())}


def erasure_summary(rows: list[dict]) -> dict:
    """`fact_rows` in brief: neurons per fact, the erase's share by kind (``untouched``: nothing erased),
    ``shared`` neurons."""
    counts = sorted(r["neurons"] for r in rows)
    kinds = sorted({k for r in rows for k in r["by_kind"]})
    total = sum(r["erased"] for r in rows)
    by_neuron: dict[str, set[int]] = {}
    for r in rows:
        by_neuron.setdefault(f"L{r['layer']}H{r['head']}#{r['neuron']}", set()).add(r["key"])
    return {
        "neurons_median": counts[len(counts) // 2],
        "neurons_min": counts[0],
        "neurons_max": counts[-1],
        "by_kind": {
            k: sum(r["erased"] * r["by_kind"].get(k, 0.0) for r in rows) / total if total > 0 else 0.0 for k in kinds
        },  # fmt: skip
        "untouched": sum(r["erased"] == 0 for r in rows),
        "shared": {n: sorted(keys) for n, keys in sorted(by_neuron.items()) if len(keys) > 1},
    }
