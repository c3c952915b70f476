"""Sentence scores of synapses (paper section 6.3, Eq. 16): the value of sigma_l[i, j] at the end of a
sentence and its largest Hebbian increment, for all N^2 synapses of a head at once or for chosen ones;
the traces of one synapse along a byte string (Figs. 12-13); its increments per sentence."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bdh.analysis.record import Recording, head_neurons, record, recover_sigma
from bdh.errors import UserError
from bdh.model import BDH
from bdh.tasks.multilingual import LabelledSentence

from .sentences import sentence_bytes

#: (rows, cols) within a head: a list of synapses
Pairs = tuple[np.ndarray, np.ndarray]


@dataclass
class Scores:
    """Sentence scores of synapses: (sentences, candidates) float32 per statistic; candidate c is (i, j) = divmod(c, N)
    within the head when all N^2 are scored, else the c-th entry of ``pairs``."""

    end: np.ndarray
    max: np.ndarray
    lengths: np.ndarray  # bytes fed per sentence (prefix included)

    def get(self, statistic: str) -> np.ndarray:
        return self.end if statistic == "end" else self.max


def _batched(
    model: BDH, sentences: Sequence[LabelledSentence], layer: int, prefix: bool, batch_size: int
) -> Iterator[tuple[Recording, list[int]]]:
    """(recording, the sentences' lengths) per batch; sentences right-padded (a causal model never reads
    the padding)."""
    for b0 in range(0, len(sentences), batch_size):
        chunk = [sentence_bytes(s, prefix)[0] for s in sentences[b0 : b0 + batch_size]]
        T = max(len(c) for c in chunk)
        idx = torch.zeros(len(chunk), T, dtype=torch.long)
        for b, data in enumerate(chunk):
            idx[b, : len(data)] = torch.tensor(list(data), dtype=torch.long)
        yield record(model, idx, layers=[layer - 1, layer]), [len(c) for c in chunk]


def _largest_increment(Y: torch.Tensor, X: torch.Tensor, t_chunk: int) -> torch.Tensor:
    """max_t Y[t, i] X[t, j] for every (i, j), over chunks of ``t_chunk`` steps (never all T at once)."""
    best = torch.full((Y.shape[1], X.shape[1]), -math.inf)
    for t0 in range(0, Y.shape[0], t_chunk):
        inc = Y[t0 : t0 + t_chunk, :, None] * X[t0 : t0 + t_chunk, None, :]
        best = torch.maximum(best, inc.amax(dim=0))
    return best


@torch.no_grad()
def score_sentences(
    model: BDH,
    sentences: Sequence[LabelledSentence],
    layer: int,
    head: int,
    *,
    rotate: bool = False,
    prefix: bool = True,
    pairs: Pairs | None = None,
    batch_size: int = 32,
    t_chunk: int = 16,
) -> Scores:
    """Both sentence statistics of the synapses of ``head`` between layers ``layer - 1`` and ``layer``, each sentence
    read from a zero state: ``end`` = sigma_{T-1,layer}[i, j] of Eq. 16 (`recover_sigma`; ``rotate``: with RoPE), and
    ``max`` = max_tau y_{tau,layer-1}[i] x_{tau,layer}[j], the largest Hebbian increment. ``pairs`` restricts the
    candidates (else all N^2)."""
    if not sentences:
        raise UserError("score_sentences: no sentences")
    N = model.config.N
    hn = head_neurons(model.config, head)
    if pairs is not None:
        rows_u, r_inv = np.unique(np.asarray(pairs[0]), return_inverse=True)
        cols_u, c_inv = np.unique(np.asarray(pairs[1]), return_inverse=True)
        rsel, csel = torch.as_tensor(rows_u, dtype=torch.long), torch.as_tensor(cols_u, dtype=torch.long)
        r_inv_t, c_inv_t = torch.as_tensor(r_inv, dtype=torch.long), torch.as_tensor(c_inv, dtype=torch.long)
        C = len(r_inv)
    else:
        rsel = csel = torch.arange(N)
        C = N * N
    end = np.empty((len(sentences), C), dtype=np.float32)
    mx = np.empty((len(sentences), C), dtype=np.float32)
    lengths = np.empty(len(sentences), dtype=np.int64)
    row = 0
    for rec, lens in _batched(model, sentences, layer, prefix, batch_size):
        for b, T in enumerate(lens):
            sig = recover_sigma(rec, layer, rows=hn[rsel], cols=hn[csel], t=T, rotate=rotate, batch_index=b)
            Y = rec.y[layer - 1][b, head, :T][:, rsel]  # T, R
            X = rec.x[layer][b, head, :T][:, csel]  # T, K
            if pairs is not None:
                end[row] = sig[r_inv_t, c_inv_t].numpy()
                mx[row] = (Y[:, r_inv_t] * X[:, c_inv_t]).amax(dim=0).numpy()
            else:
                end[row] = sig.reshape(-1).numpy()
                mx[row] = _largest_increment(Y, X, t_chunk).reshape(-1).numpy()
            lengths[row] = T
            row += 1
    return Scores(end, mx, lengths)


@torch.no_grad()
def synapse_traces(
    model: BDH, data: bytes, layer: int, head: int, i: int, j: int, *, rotate: bool = False
) -> dict[str, np.ndarray]:
    """Along the bytes of ``data`` read from a zero state: ``y`` = y_{t,layer-1}[i], ``x`` = x_{t,layer}[j],
    their product ``increment``, and ``sigma`` = sigma_{t,layer}[i, j] after each byte t (Eq. 16)."""
    idx = torch.tensor(list(data), dtype=torch.long).view(1, -1)
    rec = record(model, idx, layers=[layer - 1, layer])
    hn = head_neurons(model.config, head)
    y = rec.y[layer - 1][0, head, :, i]
    x = rec.x[layer][0, head, :, j]
    if not rotate and rec.log_u is None:
        sigma = torch.cumsum(y * x, dim=0)
    else:
        sigma = torch.stack(
            [
                recover_sigma(rec, layer, rows=hn[i : i + 1], cols=hn[j : j + 1], t=t + 1, rotate=rotate)[0, 0]
                for t in range(idx.shape[1])
            ]
        )
    return {"y": y.numpy(), "x": x.numpy(), "increment": (y * x).numpy(), "sigma": sigma.numpy()}


@torch.no_grad()
def pair_increments(
    model: BDH, sentences: Sequence[LabelledSentence], layer: int, head: int, pair: tuple[int, int], prefix: bool = True
) -> list[np.ndarray]:
    """Per sentence, the Hebbian increments y_{t,layer-1}[i] x_{t,layer}[j] of one synapse on the sentence's
    own bytes (after the prefix), read from a zero state."""
    i, j = pair
    out = []
    offsets = [sentence_bytes(s, prefix)[1] for s in sentences]
    k = 0
    for rec, lens in _batched(model, sentences, layer, prefix, 32):
        inc = rec.y[layer - 1][:, head, :, i] * rec.x[layer][:, head, :, j]  # B, T
        for b, T in enumerate(lens):
            out.append(inc[b, offsets[k] : T].numpy())
            k += 1
    return out
