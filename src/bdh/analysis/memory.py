"""Which neurons hold a fact across a gap: the rows of BDH's state one position wrote, read back at the last token.

The score of the question t with the fact's position s, u^(t-s) <R x_t, R x_s> (Eq. 8), splits over the neurons;
`trace_fact` gives per layer and head the fact's score, the other positions' score, and the neurons that carry it.
The sequence is read through the state chunk by chunk (`BDH.step`), in flat memory."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bdh.errors import UserError


@dataclass(frozen=True)
class HeadTrace:
    """Layer ``layer``, head ``head``: the read score of the fact (``fact``) and of every other position
    (``other``), each summed over the neurons; ``share`` = fact / (|fact| + |other|)."""

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
    """Neuron ``neuron`` of ``head`` in ``layer``: ``fact``, its part of the fact's read score; ``other``, what every
    other position wrote into its row, as the question reads it; ``written``/``read``, its (rotated) activation at
    the fact and at the question."""

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
    """What `trace_fact` found: the positions, every head's scores, the ``neurons`` that carry the fact's score
    (largest first), and the model's prediction at the question."""

    write: int
    read: int
    heads: list[HeadTrace]
    neurons: list[HeldNeuron]
    predicted: int

    def rows(self) -> list[dict[str, float | int]]:
        """The neurons as JSON-ready rows."""
        return [{**n.__dict__, "purity": n.purity} for n in self.neurons]


class _Recorder:
    """A hook over chunked steps: per layer the decayed key mass sum_tau u^(t-tau) R x_tau of the positions before
    the last token, the key at ``write`` and the query at the last token."""

    def __init__(self, log_u: torch.Tensor | None, write: int, last: int):
        self.log_u, self.write, self.last = log_u, write, last
        self.mass: dict[int, torch.Tensor] = {}
        self.key: dict[int, torch.Tensor] = {}
        self.query: dict[int, torch.Tensor] = {}
        self.start = 0  # absolute position of the chunk being read

    def __call__(self, model: torch.nn.Module, layer: int, act) -> None:
        xr = act.xr[0].float()  # (H, C, N)
        C = xr.shape[1]
        mass = self.mass.get(layer, torch.zeros_like(xr[:, 0]))
        if self.start <= self.write < self.start + C:
            self.key[layer] = xr[:, self.write - self.start].clone()
        if self.start <= self.last < self.start + C:
            self.query[layer] = xr[:, self.last - self.start].clone()
            xr = xr[:, : self.last - self.start]  # the question reads strictly earlier positions
            C = xr.shape[1]
        # mass at the end of this chunk's part: u^C mass + sum_j u^(C-j) xr_j (Eq. 8's S = u (S + k v^T), keys only)
        age = torch.arange(C, 0, -1, device=xr.device, dtype=xr.dtype)
        if self.log_u is None:
            self.mass[layer] = mass + xr.sum(1)
        else:
            lu = self.log_u.to(xr).view(-1, 1)
            self.mass[layer] = torch.exp(lu * C) * mass + (torch.exp(lu * age).unsqueeze(-1) * xr).sum(1)


def trace_fact(model: torch.nn.Module, idx: torch.Tensor, write: int, *, top: int = 8, chunk: int = 2048) -> FactTrace:
    """Read the 1-D token sequence ``idx`` through ``model``'s state (a BDH) and trace the fact written at position
    ``write`` as the last token reads it (module docstring). ``top`` neurons, by their part of the fact's score."""
    if not callable(getattr(model, "init_state", None)) or not hasattr(model, "log_u"):
        raise UserError(f"trace_fact: needs a BDH model, got {type(model).__name__}")
    if not isinstance(idx, torch.Tensor) or idx.dim() != 1 or idx.numel() < 2:
        raise UserError("trace_fact: idx must be a 1-D tensor of at least 2 tokens")
    last = idx.numel() - 1
    if not 0 <= write < last:
        raise UserError(f"trace_fact: the fact's position must lie before the last token ({last}), got {write}")
    log_u = None if model.log_u is None else model.log_u.float()
    rec = _Recorder(log_u, write, last)
    state = model.init_state(1)
    with torch.no_grad():
        for s in range(0, idx.numel(), chunk):
            rec.start = s
            logits, state = model.step(idx[s : s + chunk].view(1, -1).to(state.rho.device), state, hook=rec)
    heads, neurons = [], []
    for layer in sorted(rec.query):
        q, k = rec.query[layer], rec.key[layer]  # (H, N)
        decay = 1.0 if log_u is None else torch.exp(log_u.to(q) * (last - write)).view(-1, 1)
        fact = decay * q * k
        other = q * rec.mass[layer] - fact
        for h in range(q.shape[0]):
            heads.append(HeadTrace(layer, h, float(fact[h].sum()), float(other[h].sum())))
            for i in torch.nonzero(fact[h] != 0).flatten().tolist():
                neurons.append(
                    HeldNeuron(layer, h, i, float(fact[h, i]), float(other[h, i]), float(k[h, i]), float(q[h, i]))
                )
    neurons.sort(key=lambda n: -abs(n.fact))
    return FactTrace(write, last, heads, neurons[:top], int(logits[0, -1].argmax()))


def induction_write(idx: torch.Tensor) -> int:
    """The fact of an induction sequence (`bdh.tasks.induction`, one trigger): the answer, right after the first
    occurrence of the trigger the last token repeats."""
    if not isinstance(idx, torch.Tensor) or idx.dim() != 1 or idx.numel() < 3:
        raise UserError("induction_write: idx must be a 1-D tensor of at least 3 tokens")
    hits = torch.nonzero(idx[:-1] == idx[-1]).flatten()
    if hits.numel() == 0 or int(hits[0]) + 1 >= idx.numel() - 1:
        raise UserError("induction_write: the last token does not occur earlier with an answer after it")
    return int(hits[0]) + 1


__all__ = ["FactTrace", "HeadTrace", "HeldNeuron", "induction_write", "trace_fact"]
