"""The data of the interactive viewer: what a BDH model does on one input, reduced to a small JSON document.

`build_view` runs the model once and keeps the hub graph of G_x = D_x E (in row blocks), the hubs' x and y per
token, heatmaps, sparsity, attention sources, the logit lens and metadata, quantised to 0..255. `neuron_graph` holds
the hub rule."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from bdh.errors import UserError
from bdh.model import BDH
from bdh.model.graph import flat_decoders
from bdh.typed_config import TypedConfig, bounded

if TYPE_CHECKING:
    from .inputs import ViewInput

#: kinds of input the viewer knows how to draw
KINDS = ("text", "tokens", "boardpath", "sudoku")
#: the board labels of the pathfinding task (bdh.tasks.boardpath)
BOARD_LABELS = (".", "#", "S", "E", "*")

FORMAT_VERSION = 1
#: neurons of the memory panel: those that carry the largest part of the fact's read score
FACT_NEURONS = 16


@dataclass
class ViewOptions(TypedConfig):
    """How much of a run goes into the viewer."""

    hubs: int = bounded(48, ge=1)  # hub neurons of G_x shown in the graph.
    edges_per_hub: int = bounded(3, ge=1)  # strongest edges kept per hub on average (among hubs, positive weights).
    heat_neurons: int = bounded(64, ge=1)  # neurons (columns) of the x and y heatmaps, per layer.
    attn_top: int = bounded(12, ge=1)  # strongest attention sources kept per token and layer.
    lens_top: int = bounded(5, ge=1)  # logit-lens predictions kept per token and layer (text).
    block: int = bounded(2048, ge=1)  # rows of G_x computed at once when ranking hubs.
    layout_seed: int = 0


# ---------------------------------------------------------------------- the hub graph of G_x


@torch.no_grad()
def hub_strength(model: BDH, block: int = 2048) -> torch.Tensor:
    """In- plus out-strength of every neuron in the positive part of G_x, no self-loops, (n,), in blocks of
    ``block`` rows."""
    Dx, _, E = flat_decoders(model)
    Dx, E = Dx.float(), E.float()
    n = Dx.shape[0]
    row = torch.zeros(n)
    col = torch.zeros(n)
    for s in range(0, n, block):
        G = (Dx[s : s + block] @ E).clamp_min_(0)  # (b, n)
        idx = torch.arange(s, min(s + block, n), device=G.device)
        G[idx - s, idx] = 0.0
        row[s : s + G.shape[0]] = G.sum(dim=1).cpu()
        col += G.sum(dim=0).cpu()
        del G
    return row + col


#: isolated hubs per row of the graph panel's bottom band
ISOLATED_PER_ROW = 12


@torch.no_grad()
def neuron_graph(model: BDH, hubs: int, edges_per_hub: int, block: int = 2048, seed: int = 0) -> dict[str, Any]:
    """The ``hubs`` strongest neurons (`hub_strength`), their strongest positive edges and a layout: ``{"nodes",
    "edges", "pos"}``."""
    cfg = model.config
    strength = hub_strength(model, block)
    k = min(hubs, cfg.n)
    top = torch.topk(strength, k).indices.sort().values
    Dx, _, E = flat_decoders(model)
    on = top.to(Dx.device)
    sub = (Dx[on].float() @ E[:, on].float()).cpu()  # (k, k): row = target, column = source
    sub.fill_diagonal_(float("-inf"))
    m = min(k * edges_per_hub, k * (k - 1))
    edges: list[list[float]] = []
    if m > 0:
        vals, flat = torch.topk(sub.reshape(-1), m)
        wmax = float(vals[0]) if float(vals[0]) > 0 else 1.0
        for v, f in zip(vals.tolist(), flat.tolist()):
            if v <= 0:
                break
            target, source = divmod(int(f), k)
            edges.append([source, target, round(v / wmax, 3)])
    pos = _layout(k, edges, seed)
    smax = float(strength[top].max()) or 1.0
    nodes = [
        {"id": int(i), "head": int(i) // cfg.N, "strength": round(float(strength[i]) / smax, 3)} for i in top.tolist()
    ]
    return {"nodes": nodes, "edges": edges, "pos": pos, "rule": "positive weighted degree (in + out) of G_x = D_x E"}


def _layout(k: int, edges: list[list[float]], seed: int) -> list[list[float]]:
    """Hub positions in [0.04, 0.96]^2: a spring layout of the connected hubs, the isolated ones in rows at
    the bottom."""
    import networkx as nx

    g = nx.Graph()
    g.add_edges_from((int(s), int(t), {"weight": float(w)}) for s, t, w in edges if int(s) != int(t))
    linked = sorted(g.nodes)
    alone = [i for i in range(k) if i not in g]
    rows = -(-len(alone) // ISOLATED_PER_ROW) if alone else 0
    top = 0.96 - 0.07 * rows  # the bottom band holds the isolated hubs
    xy = np.zeros((k, 2), dtype=np.float64)
    if linked:
        pos = nx.spring_layout(g, k=2.0 / math.sqrt(len(linked)), iterations=120, seed=seed)
        part = np.array([pos[i] for i in linked], dtype=np.float64).reshape(-1, 2)
        lo, hi = part.min(axis=0), part.max(axis=0)
        unit = np.where(hi - lo > 1e-9, (part - lo) / np.where(hi - lo > 1e-9, hi - lo, 1.0), 0.5)
        xy[linked] = np.array([0.04, 0.04]) + unit * np.array([0.92, max(top - 0.04, 0.0)])
    for n, i in enumerate(alone):
        row, col = divmod(n, ISOLATED_PER_ROW)
        count = min(ISOLATED_PER_ROW, len(alone) - row * ISOLATED_PER_ROW)
        xy[i] = (
            0.04 + 0.92 * (col + 0.5) / count,
            0.96 - 0.07 * (rows - 1 - row) if linked else 0.04 + 0.92 * (row + 0.5) / rows,
        )
    return [[round(float(a), 3), round(float(b), 3)] for a, b in xy]


# ---------------------------------------------------------------------- helpers


def _q8(a: torch.Tensor, scale: float) -> list:
    """Non-negative values scaled by ``scale`` to integers 0..255 (nested lists)."""
    if scale <= 0:
        return torch.zeros_like(a, dtype=torch.int64).tolist()
    return (a.float() / scale * 255.0).round().clamp(0, 255).to(torch.int64).tolist()


def _r(x: float, digits: int = 4) -> float:
    return float(f"{float(x):.{digits}g}") if math.isfinite(float(x)) else 0.0


def token_labels(tokens: Sequence[int], kind: str) -> list[str]:
    """Printable token labels: bytes as characters (control bytes escaped), board cells as symbols, else numbers."""
    out = []
    for t in tokens:
        t = int(t)
        if kind == "text":
            if t == 32:
                out.append("\u2423")
            elif t == 10:
                out.append("\u21b5")
            elif 33 <= t < 127:
                out.append(chr(t))
            else:
                out.append(f"\\x{t:02x}")
        elif kind == "boardpath":
            out.append(BOARD_LABELS[t] if 0 <= t < len(BOARD_LABELS) else str(t))
        elif kind == "sudoku":
            out.append("." if t == 0 else str(t))
        else:
            out.append(str(t))
    return out


def _label_vocab(v: int, kind: str) -> str:
    return token_labels([v], kind)[0]


# ---------------------------------------------------------------------- the view


@torch.no_grad()
def build_view(
    model: BDH,
    tokens: Sequence[int] | torch.Tensor,
    *,
    kind: str = "text",
    board_size: int | None = None,
    options: ViewOptions | None = None,
    title: str = "",
    source: str = "",
    fact: int | None = None,
) -> dict[str, Any]:
    """Everything the viewer shows for one input, JSON-ready; ``kind``: ``text``, ``tokens``, ``boardpath`` or
    ``sudoku``; ``fact``: a position the memory panel traces (`fact_view`)."""
    idx = _input(tokens, kind, board_size)
    check_fact(fact, kind, idx.shape[1])  # before the model runs
    opts = options or ViewOptions()
    t0 = time.time()
    cap = _capture(model, idx)
    graph = neuron_graph(model, opts.hubs, opts.edges_per_hub, opts.block, opts.layout_seed)
    hub_ids = torch.tensor([nd["id"] for nd in graph["nodes"]], dtype=torch.long)
    sparsity: dict[str, Any] = {"x": [], "y": [], "x_token": [], "y_token": []}
    lit: dict[str, list] = {"x": [], "y": [], "scale_x": [], "scale_y": []}
    heat: dict[str, list] = {"x": [], "y": [], "neurons_x": [], "neurons_y": [], "scale_x": [], "scale_y": []}
    attention: list[list[list[list[float]]]] = []
    lens: list[Any] = []
    for layer in range(cap.n_layer):
        for which in ("x", "y"):
            _add_activations(getattr(cap, which)[layer][0], which, hub_ids, opts, sparsity, lit, heat)
        attention.append(_attention_rows(cap.attention[layer][0], opts.attn_top))
        lens.append(_lens(cap.logits[layer][0], kind, opts.lens_top))
    seconds = time.time() - t0
    ids = idx[0].tolist()
    vocab = None
    if kind in ("text", "tokens"):
        vocab = {str(i): _label_vocab(i, kind) for step in lens for row in step for i, _ in row}
    return {
        "version": FORMAT_VERSION,
        "title": title or "BDH viewer",
        "source": source,
        "kind": kind,
        "board_size": board_size,
        "tokens": ids,
        "labels": token_labels(ids, kind),
        "vocab": vocab,
        "meta": _meta(model, cap.n_layer, seconds),
        "graph": graph,
        "lit": lit,
        "heat": heat,
        "sparsity": sparsity,
        "attention": attention,
        "lens": lens,
        "fact": fact_view(model, idx, fact, kind, graph),
    }


def check_fact(fact: int | None, kind: str, length: int) -> None:
    """A one-line error unless ``fact`` is None or a position before the last of ``length`` text or token ids."""
    if fact is None:
        return
    if kind not in ("text", "tokens"):
        raise UserError(f"viz: a fact is traced in text or token ids, not in a {kind} input")
    from bdh.analysis.memory import check_write

    check_write(fact, length, "viz")


def fact_view(model: BDH, idx: torch.Tensor, fact: int | None, kind: str, graph: dict) -> dict | None:
    """The memory panel: the fact at ``fact`` as the last token reads it (`trace_fact`, neurons with their ``hub``),
    or None."""
    from bdh.analysis.memory import trace_fact

    if fact is None:
        return None
    trace = trace_fact(model, idx[0], fact, top=FACT_NEURONS).to_dict()
    trace["predicted_label"] = _label_vocab(trace["predicted"], kind)
    hubs = {nd["id"]: i for i, nd in enumerate(graph["nodes"])}
    for n in trace["neurons"]:
        n["hub"] = hubs.get(n["head"] * model.config.N + n["neuron"])
    return trace


@dataclass(frozen=True)
class WrittenView:
    """A page written by `write_view`: ``path``, ``size`` in bytes, ``tokens``, ``seconds`` and the ``page``."""

    path: Path
    size: int
    tokens: int
    seconds: float
    page: str

    def summary(self) -> str:
        """``wrote PATH (0.05 MB, 11 tokens, 0.3 s)``: the line ``bdh viz`` prints."""
        return f"wrote {self.path} ({self.size / 1e6:.2f} MB, {self.tokens} tokens, {self.seconds:.1f} s)"


def write_view(
    model: BDH,
    inp: ViewInput,
    out: Path,
    *,
    options: ViewOptions | None = None,
    title: str = "",
    origin: str = "",
    fact: int | None = None,
) -> WrittenView:
    """The viewer page of ``model`` reading ``inp`` written atomically to ``out``; ``origin`` shown in the header."""
    from bdh.outputs import write_text

    from .page import render

    t0 = time.time()
    source = f"{origin} - {inp.description}" if origin else inp.description
    view = build_view(
        model,
        inp.tokens,
        kind=inp.kind,
        board_size=inp.board_size,
        options=options,
        title=title,
        source=source + (" (window 1 shown)" if inp.windows else ""),
        fact=fact,
    )
    page = render(view)
    write_text(out, page)
    return WrittenView(Path(out), Path(out).stat().st_size, len(inp.tokens), time.time() - t0, page)


def _input(tokens: Sequence[int] | torch.Tensor, kind: str, board_size: int | None) -> torch.Tensor:
    """The input as a (1, T) tensor of token ids, checked against ``kind`` (a board of ``board_size`` squared cells)."""
    if kind not in KINDS:
        raise UserError(f"viz: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    idx = torch.as_tensor(tokens, dtype=torch.long).reshape(1, -1)
    T = idx.shape[1]
    if T == 0:
        raise UserError("viz: the input is empty; give at least one token")
    if kind in ("boardpath", "sudoku"):
        if board_size is None or board_size * board_size != T:
            raise UserError(f"viz: a board of {T} cells is not {board_size} x {board_size}")
    return idx


def _capture(model: BDH, idx: torch.Tensor) -> Any:
    """What the model computes on ``idx`` in eval mode, layer by layer (its mode restored)."""
    was_training = model.training
    model.eval()
    try:
        _, cap = model(idx.to(model.E.device), capture=True)
    finally:
        model.train(was_training)
    return cap


def _add_activations(
    captured: torch.Tensor,
    which: str,
    hub_ids: torch.Tensor,
    opts: ViewOptions,
    sparsity: dict[str, Any],
    lit: dict[str, list],
    heat: dict[str, list],
) -> None:
    """Add one layer's ``which`` activations (H, T, N) to the views: sparsity, hub activity (``lit``), ``heat``."""
    act = captured.float().cpu()  # H, T, N
    T, n = act.shape[1], act.shape[0] * act.shape[2]
    flat = act.transpose(0, 1).reshape(T, n)  # T, n; neuron h * N + j
    nz = flat > 0
    sparsity[which].append(_r(nz.float().mean(), 4))
    sparsity[f"{which}_token"].append([_r(v, 3) for v in nz.float().mean(dim=1).tolist()])
    hub_act = flat[:, hub_ids]
    scale = float(hub_act.max()) if hub_act.numel() else 0.0
    lit[which].append(_q8(hub_act, scale))
    lit[f"scale_{which}"].append(_r(scale))
    k = min(opts.heat_neurons, n)
    cols = torch.topk(flat.sum(dim=0), k).indices.sort().values
    block = flat[:, cols]
    hscale = float(block.max()) if block.numel() else 0.0
    heat[which].append(_q8(block, hscale))
    heat[f"neurons_{which}"].append(cols.tolist())
    heat[f"scale_{which}"].append(_r(hscale))


def _attention_rows(captured: torch.Tensor, top: int) -> list[list[list[float]]]:
    """One layer's head-averaged attention (H, T, T): each token's ``top`` sources as [source, relative weight]."""
    att = captured.float().mean(dim=0).cpu()  # T, T (row = reader)
    T = att.shape[0]
    k = min(top, T)
    mag = att.abs()
    vals, src = torch.topk(mag, k, dim=1)
    amax = float(mag.max()) or 1.0
    rows = []
    for t in range(T):
        row = []
        for v, s in zip(vals[t].tolist(), src[t].tolist()):
            if v <= 0:
                break
            row.append([int(s), _r(float(att[t, s]) / amax, 3)])
        rows.append(row)
    return rows


def _lens(captured: torch.Tensor, kind: str, top: int) -> list[Any]:
    """One layer's logit lens from (T, V) logits: the argmax per board cell, else the ``top`` [token, probability]."""
    logits = captured.float().cpu()  # T, V
    if kind in ("boardpath", "sudoku"):
        return logits.argmax(dim=-1).tolist()
    p = torch.softmax(logits, dim=-1)
    kk = min(top, p.shape[-1])
    pv, pi = torch.topk(p, kk, dim=-1)
    return [[[int(i), _r(v, 3)] for i, v in zip(pi[t].tolist(), pv[t].tolist())] for t in range(logits.shape[0])]


def _meta(model: BDH, layers: int, seconds: float) -> dict[str, Any]:
    """The model's configuration and sizes, as the page header shows them."""
    cfg = model.config
    return {
        "config": {k: v for k, v in cfg.to_dict().items() if not k.startswith("_")},
        "n": cfg.n,
        "N": cfg.N,
        "heads": cfg.n_head,
        "layers": layers,
        "D": cfg.n_embd,
        "vocab_size": cfg.vocab_size,
        "num_params": int(model.num_params()),
        "state_size": int(model.state_size()),
        "causal": bool(cfg.causal),
        "export_seconds": round(seconds, 2),
    }
