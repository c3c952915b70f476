"""Which neurons hold a fact across a gap: the rows of BDH's state one position wrote, read back at the last token.

The state after t tokens sums, over positions s, (key s wrote, carried to t) x (b_s v_s); the question's coefficient on
v_s splits over the neurons. `trace_fact` gives per layer and head the fact's coefficient, the other positions', and the
neurons that carry it, for every state rule (the model's own rule on two value channels)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from bdh.errors import UserError
from bdh.model.kernels.pytorch import state_rules
from bdh.tasks.base import IGNORE_INDEX


@dataclass(frozen=True)
class HeadTrace:
    """The fact's read score (``fact``) and every other position's (``other``), summed over neurons; ``share``."""

    layer: int
    head: int
    fact: float
    other: float

    @property
    def share(self) -> float:
        total = abs(self.fact) + abs(self.other)
        return self.fact / total if total > 0 else 0.0


@dataclass(frozen=True)
class HeldNeuron:
    """One neuron's part of the fact's score (``fact``), of the others' (``other``), and its activation at each end."""

    layer: int
    head: int
    neuron: int
    fact: float
    other: float
    written: float
    read: float

    @property
    def purity(self) -> float:
        """fact / (|fact| + |other|): 1 when nothing but the fact was written into the row."""
        total = abs(self.fact) + abs(self.other)
        return self.fact / total if total > 0 else 0.0


@dataclass(frozen=True)
class FactTrace:
    """What `trace_fact` found: positions, every head's scores, the carrying ``neurons``, the prediction."""

    write: int
    read: int
    heads: list[HeadTrace]
    neurons: list[HeldNeuron]
    predicted: int

    def rows(self) -> list[dict[str, float | int]]:
        """The neurons as JSON-ready rows."""
        return [{**n.__dict__, "purity": n.purity} for n in self.neurons]

    def to_dict(self) -> dict:
        """JSON-ready: the positions, the prediction, every head with its share, the neurons with their purity."""
        return {
            "write": self.write,
            "read": self.read,
            "predicted": self.predicted,
            "heads": [{**h.__dict__, "share": h.share} for h in self.heads],
            "neurons": self.rows(),
        }


#: tokens per block of the traced copy of the state's rule (a block's cost per token grows with its length)
RULE_CHUNK = 64


class _Recorder:
    """A hook carrying per layer a two-channel copy of the state's rule: values 1 everywhere and 1 at ``write`` only."""

    def __init__(self, write: int, last: int):
        self.write, self.last = write, last
        self.state: dict[int, torch.Tensor] = {}  # (1, H, N, 2) after the positions read so far
        self.key: dict[int, torch.Tensor] = {}
        self.query: dict[int, torch.Tensor] = {}
        self.start = 0  # absolute position of the chunk being read

    def __call__(self, model: torch.nn.Module, layer: int, act) -> None:
        q, keys = act.xr.double(), act.keys.double()  # (1, H, C, N)
        C = q.shape[2]
        gates = model.state_rule_gates(act.values)
        log_g, beta = gates.get("log_g"), gates.get("beta")
        log_u = model.retention_log()
        if log_g is None and log_u is not None:  # Eq. 8's U: the same retention at every token
            log_g = log_u.view(1, -1, 1).expand(1, -1, C)
        if self.start <= self.write < self.start + C:
            self.key[layer] = keys[0, :, self.write - self.start].float()
        end = min(C, self.last - self.start)  # the question reads strictly earlier positions
        if self.start <= self.last < self.start + C:
            self.query[layer] = q[0, :, self.last - self.start]
        if end <= 0:
            return
        pos = torch.arange(self.start, self.start + end, device=q.device)
        values = torch.stack([torch.ones_like(pos), pos == self.write], -1).to(q).view(1, 1, end, 2)
        _, self.state[layer] = state_rules.chunked(
            q[:, :, :end],
            keys[:, :, :end],
            values,
            chunk_size=RULE_CHUNK,
            log_g=None if log_g is None else log_g[:, :, :end].double(),
            beta=None if beta is None else beta[:, :, :end].double(),
            state=self.state.get(layer),
            need_state=True,
        )


def check_write(write: Any, length: int, who: str) -> None:
    """A one-line error (``who: ...``) unless ``write`` is before the last of ``length`` tokens."""
    if isinstance(write, bool) or not isinstance(write, int) or not 0 <= write < length - 1:
        last = length - 1
        raise UserError(f"{who}: the fact's position must lie before the input's last token ({last}), got {write!r}")


def trace_fact(model: torch.nn.Module, idx: torch.Tensor, write: int, *, top: int = 8, chunk: int = 2048) -> FactTrace:
    """Trace the fact written at ``write`` of the 1-D ``idx`` as the last token reads it; ``top`` neurons."""
    if not callable(getattr(model, "init_state", None)) or not hasattr(model, "log_u"):
        raise UserError(f"trace_fact: needs a BDH model, got {type(model).__name__}")
    if not isinstance(idx, torch.Tensor) or idx.dim() != 1 or idx.numel() < 2:
        raise UserError("trace_fact: idx must be a 1-D tensor of at least 2 tokens")
    check_write(write, idx.numel(), "trace_fact")
    last = idx.numel() - 1
    rec = _Recorder(write, last)
    state = model.init_state(1)
    with torch.no_grad():
        for s in range(0, idx.numel(), chunk):
            rec.start = s
            logits, state = model.step(idx[s : s + chunk].view(1, -1).to(state.rho.device), state, hook=rec)
    heads, neurons = [], []
    for layer in sorted(rec.query):
        q, S = rec.query[layer], rec.state[layer][0]  # (H, N), (H, N, 2)
        fact = (q * S[..., 1]).float()  # per neuron: the question's coefficient on the fact's value
        other = (q * S[..., 0]).float() - fact
        k, q = rec.key[layer], q.float()
        for h in range(q.shape[0]):
            heads.append(HeadTrace(layer, h, float(fact[h].sum()), float(other[h].sum())))
            for i in torch.nonzero(fact[h] != 0).flatten().tolist():
                neurons.append(
                    HeldNeuron(layer, h, i, float(fact[h, i]), float(other[h, i]), float(k[h, i]), float(q[h, i]))
                )
    neurons.sort(key=lambda n: -abs(n.fact))
    return FactTrace(write, last, heads, neurons[:top], int(logits[0, -1].argmax()))


def induction_write(idx: torch.Tensor) -> int:
    """The fact of an induction sequence: the answer, right after the trigger's first occurrence."""
    if not isinstance(idx, torch.Tensor) or idx.dim() != 1 or idx.numel() < 3:
        raise UserError("induction_write: idx must be a 1-D tensor of at least 3 tokens")
    hits = torch.nonzero(idx[:-1] == idx[-1]).flatten()
    if hits.numel() == 0 or int(hits[0]) + 1 >= idx.numel() - 1:
        raise UserError("induction_write: the last token does not occur earlier with an answer after it")
    return int(hits[0]) + 1


def recall_facts(x: torch.Tensor, y: torch.Tensor) -> list[tuple[int, int]]:
    """(write, read) of every question of a recall-gap sequence: the pair's value and the question's key."""
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or not isinstance(y, torch.Tensor) or y.shape != x.shape:
        raise UserError("recall_facts: x and y must be 1-D tensors of the same length")
    facts = []
    for read in torch.nonzero(y != IGNORE_INDEX).flatten().tolist():
        hits = torch.nonzero(x[:read] == x[read]).flatten()
        if hits.numel() and int(hits[0]) + 1 < read:
            facts.append((int(hits[0]) + 1, read))
    if not facts:
        raise UserError("recall_facts: no question's key occurs earlier with a value after it")
    return sorted(facts)


def key_map(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Which neuron holds each key's facts, over traced pairs (dicts of ``key``, ``layer``, ``head``, ``neuron``).

    Returns ``keys`` ({key: {neuron "L<layer>H<head>#<i>": pairs}}) and the counts ``pairs``, ``keys``, ``repeated``,
    ``consistent`` (held by one neuron every time), ``neurons``, and ``shared`` neurons."""
    held: dict[int, dict[str, int]] = {}
    for p in pairs:
        label = "none" if p["neuron"] is None else f"L{p['layer']}H{p['head']}#{p['neuron']}"
        counts = held.setdefault(int(p["key"]), {})
        counts[label] = counts.get(label, 0) + 1
    usual: dict[str, list[int]] = {}
    for key, counts in held.items():
        found = {n: c for n, c in counts.items() if n != "none"}
        if found:
            usual.setdefault(max(found, key=found.__getitem__), []).append(key)
    repeated = [k for k, c in held.items() if sum(c.values()) > 1]
    return {
        "pairs": len(pairs),
        "keys": {k: held[k] for k in sorted(held)},
        "repeated": len(repeated),
        "consistent": sum(len(held[k]) == 1 and "none" not in held[k] for k in repeated),
        "neurons": len(usual),
        "shared": {n: sorted(ks) for n, ks in sorted(usual.items()) if len(ks) > 1},
    }


def longest_gap(
    task: Any, length: int, *, n: int = 64, seed: int = 0, rows: int = 8
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(x, y, row) of the test sequence among the first ``rows`` whose fact lies furthest from its question."""
    from bdh.tasks.lengths import fixed_test_set

    best = None
    for row in range(min(rows, n)):
        x, y = fixed_test_set(task, length, n=n, seed=seed, rows=[row])
        if best is None or induction_write(x[0]) < induction_write(best[0][0]):
            best = (x, y, row)
    return best


__all__ = [
    "FactTrace",
    "HeadTrace",
    "HeldNeuron",
    "check_write",
    "induction_write",
    "key_map",
    "longest_gap",
    "recall_facts",
    "trace_fact",
]
