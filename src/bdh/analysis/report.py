"""The brain-view report: sparsity (section 6.4), neuron graphs G_x, G_y (5.5) and sigma (6.2), beside an
untrained control."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from bdh.errors import UserError
from bdh.model import BDH, BDHConfig
from bdh.outputs import json_ready

from ..tasks.repeat import PERIOD, repeat_batch
from ..typed_config import TypedConfig, bounded
from . import neurograph as ng
from . import sparsity as sp
from . import verdicts
from .record import record

#: default seed of the untrained control model
CONTROL_SEED = 0
#: budget for recorded activations (bytes); sequences are cut to fit
RECORD_BUDGET = 1 << 30


@dataclass
class InspectOptions(TypedConfig):
    """What `inspect_model` computes."""

    # the sparsity trace's layer and sigma's (>= 1); None: every layer, sigma at `neurograph.default_sigma_layer`.
    layer: int | None = bounded(None, ge=0)
    # the head of the graph analyses; None: entries for every head, modularity and degrees for the head with the
    # heaviest positive tail of G_x.
    head: int | None = bounded(None, ge=0)
    max_nodes: int = bounded(1024, ge=1)  # nodes of the induced subgraph used for Louvain (random neurons of the head).
    seeds: int = bounded(3, ge=1)  # Louvain runs per graph (best modularity kept).
    # average degrees of the thresholded graphs of the modularity sweep.
    avg_degrees: tuple[float, ...] = (2.0, 8.0, 32.0)
    sigma_rows: int = 8192  # y-neurons (rows) of the sigma graph, a random subset when n is larger.
    control_seed: int = CONTROL_SEED  # seed of the untrained control.
    seed: int = 0  # seed of subsampling, baselines and the repeated-word sequences.
    repeat_sequences: int = 4  # sequences of the section 6.4 task.


def control_model(config: BDHConfig, seed: int = CONTROL_SEED) -> BDH:
    """The untrained control: ``BDH(config)`` built after ``torch.manual_seed(seed)``, in eval mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BDH(config)
    return model.eval()


def _fit_sequences(config: BDHConfig, tokens: torch.Tensor, layers: int) -> torch.Tensor:
    """Drop sequences (and then tokens) until the recorded x and y fit in RECORD_BUDGET."""
    per_token = config.n * 4 * 2 * max(layers, 1) * 2  # x and y, float32, plus the rotated copies of sigma
    B, T = tokens.shape
    max_tokens = max(16, RECORD_BUDGET // per_token)
    if B * T <= max_tokens:
        return tokens
    if T <= max_tokens:
        return tokens[: max_tokens // T]
    return tokens[:1, :max_tokens]


# ---------------------------------------------------------------------- pieces


def _sparsity_part(
    model: BDH, tokens: torch.Tensor, opts: InspectOptions
) -> tuple[dict[str, Any], sp.SparsityTrace, Any]:
    layers = None if opts.layer is None else sorted({opts.layer} | ({opts.layer - 1} if opts.layer >= 1 else set()))
    rec = record(model, tokens, layers=layers)
    trace = sp.sparsity(rec)
    keep = [opts.layer] if opts.layer is not None else list(range(model.config.n_layer))
    idx = [i for i, t in enumerate(rec.x) if t is not None]
    pos = [idx.index(k) for k in keep]
    means = trace.layer_means()
    corr = sp.activity_surprisal_correlation(trace)
    s = trace.surprisal
    part = {
        "tokens": list(tokens.shape),
        "layers": keep,
        "x_nonzero": [means["x"][p] for p in pos],
        "y_nonzero": [means["y"][p] for p in pos],
        "y_surprisal_spearman": [corr[p] for p in pos],
        "mean_surprisal_bits": float(np.nanmean(s)) if np.isfinite(s).any() else None,
    }
    return part, trace, rec


def _repeat_part(
    model: BDH, opts: InspectOptions
) -> tuple[dict[str, Any] | None, sp.SparsityTrace | None, torch.Tensor | None]:
    if model.config.vocab_size <= ord("z"):
        return None, None, None
    rb = repeat_batch(opts.repeat_sequences, 3 * PERIOD, seed=opts.seed)
    toks = _fit_sequences(model.config, rb.tokens, model.config.n_layer)
    layers = None if opts.layer is None else [opts.layer]
    rec = record(model, toks, layers=layers)
    trace = sp.sparsity(rec)
    phase = rb.phase[: toks.shape[1]]
    summary = sp.phase_summary(trace, phase)
    summary["layers"] = [i for i, t in enumerate(rec.x) if t is not None]
    summary["sequences"] = int(toks.shape[0])
    return summary, trace, phase


def _entries(model: BDH, which: str, heads: list[int], seed: int) -> tuple[dict[int, ng.EntryStats], dict[int, Any]]:
    out, raw = {}, {}
    for h in heads:
        G = ng.head_block(model, which, h)
        st = ng.entry_stats(G, seed=seed)
        out[h] = st
        raw[h] = st.split
        del G
    return out, raw


def _degree_edges(st: ng.EntryStats, G: torch.Tensor, N: int) -> int:
    """Edges for Fig. 10: entries >= beta_1 of the trained block, average degree clipped to [2, 32]; 8 N
    without beta_1."""
    if st.beta1 is None:
        return 8 * N
    A = G >= st.beta1
    m = int(A.sum()) - int(torch.diagonal(A).sum())
    return int(min(max(m, 2 * N), 32 * N))


def _graphs(
    trained: BDH,
    control: BDH,
    opts: InspectOptions,
    log,
    chosen: int,
    entries_x: tuple[dict[int, ng.EntryStats], dict[int, Any]],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """G_x and G_y of the model and control: every head's entry statistics, head ``chosen``'s modularity and degrees."""
    cfg = trained.config
    heads = list(range(cfg.n_head)) if opts.head is None else [opts.head]
    report: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    for which in ng.WHICH:
        if which == "x":
            st_t, raw_t = entries_x
        else:
            log(f"G_{which} = D_{which} E: entry statistics of {len(heads)} head block(s) of {cfg.N} x {cfg.N}")
            st_t, raw_t = _entries(trained, which, heads, opts.seed)
        st_c, raw_c = _entries(control, which, heads, opts.seed)
        part: dict[str, Any] = {
            "entries": {
                "trained": {str(h): s.to_dict() for h, s in st_t.items()},
                "control": {str(h): s.to_dict() for h, s in st_c.items()},
            },
            "polarity": {"trained": ng.head_polarity(st_t), "control": ng.head_polarity(st_c)},
            "head": chosen,
        }
        raw[which] = {
            "head": chosen,
            "entries": {"trained": raw_t[chosen], "control": raw_c[chosen]},
            "sigma_q": {"trained": st_t[chosen].sigma_q, "control": st_c[chosen].sigma_q},
        }
        nodes, sweeps = _modularity(trained, control, which, chosen, (st_t, st_c), opts, log)
        part["modularity"] = {
            "nodes": int(len(nodes)),
            "seeds": opts.seeds,
            "graph": "unweighted, undirected (edge if either direction passes)",
            **sweeps,
        }
        part["degrees"], raw[which]["degrees"] = _degrees(trained, control, which, chosen, st_t[chosen], opts, log)
        raw[which]["modularity"] = sweeps
        report[which] = part
    return report, raw


def _modularity(
    trained: BDH, control: BDH, which: str, chosen: int, stats: tuple[dict, dict], opts: InspectOptions, log
) -> tuple[Any, dict[str, Any]]:
    """Fig. 9b on a subgraph of head ``chosen``: trained, its inhibitory side and the control."""
    cfg = trained.config
    nodes = ng.subsample_nodes(cfg.N, opts.max_nodes, opts.seed)
    sweeps = {}
    for name, model, st in (("trained", trained, stats[0]), ("control", control, stats[1])):
        log(f"G_{which}: modularity sweep ({name}, {len(nodes)} nodes, {opts.seeds} Louvain seeds)")
        G = ng.head_block(model, which, chosen)
        sub = G[nodes][:, nodes].contiguous()
        sweeps[name] = ng.modularity_sweep(sub, cfg.n_embd, opts.avg_degrees, opts.seeds, opts.seed, st[chosen].sigma_q)
        if name == "trained":
            # the inhibitory side |G_{<=-beta}| at the middle density
            mid = (opts.avg_degrees[len(opts.avg_degrees) // 2],)
            sweeps["trained_negative"] = ng.modularity_sweep(
                -sub, cfg.n_embd, mid, opts.seeds, opts.seed, st[chosen].sigma_q
            )
        del G, sub
    return nodes, sweeps


def _degrees(
    trained: BDH, control: BDH, which: str, chosen: int, stats: ng.EntryStats, opts: InspectOptions, log
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fig. 10 on block ``chosen``, trained and control at the same edge count: (report part, raw degrees)."""
    cfg = trained.config
    log(f"G_{which}: degree distributions (head {chosen})")
    G = ng.head_block(trained, which, chosen)
    m = _degree_edges(stats, G, cfg.N)
    deg_t = ng.degree_analysis(G, m, cfg.n_embd, offset=chosen * cfg.N, seed=opts.seed)
    del G
    G = ng.head_block(control, which, chosen)
    deg_c = ng.degree_analysis(G, m, cfg.n_embd, offset=chosen * cfg.N, seed=opts.seed)
    del G
    part = {
        "edges_rule": (
            "entries >= beta_1 of the trained block (avg degree clipped to [2, 32]); control at the same edge count"
        ),
        "trained": ng.strip_private(deg_t),
        "control": ng.strip_private(deg_c),
    }
    return part, {"trained": deg_t["_degrees"], "control": deg_c["_degrees"]}


def _sigma(rec_t, rec_c, opts: InspectOptions, head: int, layer: int) -> tuple[dict[str, Any], dict[str, Any]]:
    out: dict[str, Any] = {"layer": layer, "head": head}
    raw: dict[str, Any] = {"layer": layer, "head": head}
    for name, rec, rotate in (("trained", rec_t, True), ("trained_unrotated", rec_t, False), ("control", rec_c, True)):
        g = ng.sigma_graph(rec, layer, head, max_rows=opts.sigma_rows, rotate=rotate, seed=opts.seed)
        raw[name] = {"thresholds": [t["_degrees"] for t in g["thresholds"]], "firing": g.get("_firing")}
        out[name] = ng.strip_private(g)
    return out, raw


# ---------------------------------------------------------------------- entry point


def inspect_model(
    model: BDH,
    tokens: torch.Tensor,
    opts: InspectOptions | None = None,
    log=lambda msg: None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The brain view of ``model`` and its control; ``tokens`` (B, T) feed sparsity and sigma. (report, raw arrays)."""
    opts = opts or InspectOptions()
    cfg = model.config
    check_request(cfg, tokens, opts)
    model = model.eval()
    control = control_model(cfg, opts.control_seed)
    t0 = time.time()
    tokens = _fit_sequences(cfg, tokens, cfg.n_layer)
    report: dict[str, Any] = {
        "format": "bdh-inspect",
        "format_version": 1,
        "model": {"config": cfg.to_dict(), "n": cfg.n, "N": cfg.N, "parameters": model.num_params()},
        "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(opts).items()},
        "control": {"seed": opts.control_seed, "what": "an untrained BDH(config) built after torch.manual_seed(seed)"},
    }
    raw: dict[str, Any] = {}
    sigma_layer = opts.layer if opts.layer is not None else ng.default_sigma_layer(cfg.n_layer)

    # sparsity on the given data (section 6.4 / 4.1) and the sigma graph (section 6.2) from the same run
    log(f"recording {tokens.shape[0]} x {tokens.shape[1]} tokens (trained and control)")
    rec_t, rec_c = _sparsity(model, control, tokens, opts, report, raw)

    # the sigma graph first, so that the recordings can be freed before the G = D E blocks are formed
    heads = list(range(cfg.n_head)) if opts.head is None else [opts.head]
    log(f"G_x = D_x E: entry statistics of {len(heads)} head block(s) of {cfg.N} x {cfg.N}")
    entries_x = _entries(model, "x", heads, opts.seed)
    head = opts.head if opts.head is not None else ng.pick_head(entries_x[0])
    if cfg.n_layer >= 2 and sigma_layer >= 1:
        log(f"sigma graph: layer {sigma_layer}, head {head}")
        report["sigma"], raw["sigma"] = _sigma(rec_t, rec_c, opts, head, sigma_layer)
    else:
        report["sigma"] = {"skipped": "sigma needs a layer >= 1 (layer 0 reads token embeddings)"}
    del rec_t, rec_c

    graphs, graw = _graphs(model, control, opts, log, head, entries_x)
    report["graphs"] = graphs
    raw["graphs"] = graw
    report["seconds"] = time.time() - t0
    report["summary"] = summary_rows(report)
    return json_ready(report), raw


def check_request(cfg: Any, tokens: torch.Tensor, opts: InspectOptions) -> None:
    """A one-line `UserError` for a layer or head the model does not have, or an input it cannot read."""
    if opts.layer is not None and not 0 <= opts.layer < cfg.n_layer:
        raise UserError(
            f"--layer {opts.layer} does not exist (the model has {cfg.n_layer} layers: 0..{cfg.n_layer - 1})"
        )
    if opts.head is not None and not 0 <= opts.head < cfg.n_head:
        raise UserError(f"--head {opts.head} does not exist (the model has {cfg.n_head} heads: 0..{cfg.n_head - 1})")
    if tokens.dim() != 2 or tokens.shape[1] < 2:
        raise UserError("inspect: the input needs at least 2 tokens")
    if int(tokens.max()) >= cfg.vocab_size:
        raise UserError(
            f"inspect: the input has token {int(tokens.max())} but the model's vocabulary is {cfg.vocab_size} "
            "(byte-level text needs 256)"
        )


def _sparsity(
    model: BDH, control: BDH, tokens: torch.Tensor, opts: InspectOptions, report: dict[str, Any], raw: dict[str, Any]
) -> tuple[Any, Any]:
    """The sparsity sections on the data and the repeat task, trained and control; returns the data's recordings."""
    sp_t, tr_t, rec_t = _sparsity_part(model, tokens, opts)
    sp_c, tr_c, rec_c = _sparsity_part(control, tokens, opts)
    report["sparsity"] = {"data": {"trained": sp_t, "control": sp_c}}
    raw["sparsity_data"] = {"trained": tr_t, "control": tr_c}
    rp_t, rtr_t, phase = _repeat_part(model, opts)
    if rp_t is not None:
        rp_c, rtr_c, _ = _repeat_part(control, opts)
        report["sparsity"]["repeat"] = {"trained": rp_t, "control": rp_c, "period": PERIOD}
        raw["sparsity_repeat"] = {"trained": rtr_t, "control": rtr_c, "phase": phase}
    return rec_t, rec_c


# ---------------------------------------------------------------------- summary table


def _get(d: Any, *path: Any) -> Any:
    for p in path:
        if d is None:
            return None
        if isinstance(d, list):
            d = d[p] if isinstance(p, int) and -len(d) <= p < len(d) else None
        else:
            d = d.get(p) if isinstance(d, dict) else None
    return d


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def summary_rows(report: dict[str, Any]) -> list[list[str]]:
    """Rows (statistic, model, control, paper) of the short table."""
    rows = _sparsity_rows(report)
    for which in ("x", "y"):
        g = _get(report, "graphs", which)
        if g:
            rows += _graph_rows(g, which)
    sg = _get(report, "sigma")
    if sg and "trained" in sg:
        rows += _sigma_rows(sg)
    return rows


def _row(name: str, t: Any, c: Any, paper: str, judge: Callable[[Any, Any], str] | None = None) -> list[str]:
    """A short-table row: statistic, model, control, the paper's value and the verdict ``judge(t, c)`` (``-``: none)."""
    return [name, _fmt(t), _fmt(c), paper, judge(t, c) if judge is not None else verdicts.NONE]


#: the sparsity-on-data rows of the short table: statistic, key in the report, what the paper reports, its verdict
DATA_ROWS = (
    ("x non-zero, per layer", "x_nonzero", "~5% (sec. 4.1)", lambda t, c: verdicts.about(t, 0.05)),
    ("y non-zero, per layer", "y_nonzero", "~5% (sec. 1.3)", lambda t, c: verdicts.about(t, 0.05)),
    ("corr(y activity, surprisal)", "y_surprisal_spearman", "positive (sec. 6.4)", verdicts.positive),
)


def _sparsity_rows(report: dict[str, Any]) -> list[list[str]]:
    """The short table's rows of the sparsity section (on data, and on the repeat task)."""
    rows = []
    spd = _get(report, "sparsity", "data")
    if spd:
        rows += [
            _row(name, _get(spd, "trained", key), _get(spd, "control", key), paper, judge)
            for name, key, paper, judge in DATA_ROWS
        ]
    rep = _get(report, "sparsity", "repeat")
    if rep:
        rows.append(
            _row(
                "repeat task: y non-zero fact / repeat, per layer",
                _get(rep, "trained", "y", "fact_over_repeat"),
                _get(rep, "control", "y", "fact_over_repeat"),
                "1.6-3 in layer 2",
                lambda t, c: verdicts.ratio_at(t, 2, 1.6),
            )
        )
        rows.append(
            _row(
                "repeat task: surprisal fact/repeat (bits)",
                [_get(rep, "trained", "surprisal", "fact"), _get(rep, "trained", "surprisal", "repeat")],
                [_get(rep, "control", "surprisal", "fact"), _get(rep, "control", "surprisal", "repeat")],
                "repeat predictable",
                verdicts.greater,
            )
        )
    return rows


def _graph_rows(g: dict[str, Any], which: str) -> list[list[str]]:
    """The short table's rows of the G_x or G_y graph section ``g`` (``which``: ``x`` or ``y``)."""
    rows = []
    h = str(g["head"])
    rows.append(
        _row(
            f"G_{which} head {h}: beta_1 / sigma_Q",
            _get(g, "entries", "trained", h, "beta1_over_sigma_q"),
            _get(g, "entries", "control", h, "beta1_over_sigma_q"),
            "tail beyond noise (Fig. 9a)",
            verdicts.above_control,
        )
    )
    rows.append(
        _row(
            f"G_{which} head {h}: >6 sigma_Q above / below",
            [
                _get(g, "entries", "trained", h, "tails", "6", "above"),
                _get(g, "entries", "trained", h, "tails", "6", "below"),
            ],
            [
                _get(g, "entries", "control", h, "tails", "6", "above"),
                _get(g, "entries", "control", h, "tails", "6", "below"),
            ],
            "right tail (Fig. 9a)",
            verdicts.greater,
        )
    )
    rows.append(
        _row(
            f"G_{which}: inhibitory-looking heads",
            _get(g, "polarity", "trained", "inhibitory_looking"),
            _get(g, "polarity", "control", "inhibitory_looking"),
            "1 of 4 (G_x)",
            verdicts.any_head if which == "x" else None,
        )
    )
    return rows + _graph_structure_rows(g, which)


def _graph_structure_rows(g: dict[str, Any], which: str) -> list[list[str]]:
    """The short table's rows of the modularity and degrees of the G_x or G_y graph section ``g``."""
    rows = []
    sw_t, sw_c = _get(g, "modularity", "trained") or [], _get(g, "modularity", "control") or []
    for i, s in enumerate(sw_t):
        c = sw_c[i] if i < len(sw_c) else {}
        rows.append(
            _row(
                f"G_{which}: Q - Q_ER / Q - Q_lowrank, deg {s['avg_degree_target']:g}",
                [s["gap_er"], s["gap_lowrank"]],
                [c.get("gap_er"), c.get("gap_lowrank")],
                "gap > 0 (Fig. 9b)",
                verdicts.gaps,
            )
        )
    for d in ("in", "out"):
        rows.append(
            _row(
                f"G_{which}: {d}-degree CV (lowrank CV) / fit",
                [
                    _get(g, "degrees", "trained", d, "summary", "cv"),
                    _get(g, "degrees", "trained", f"lowrank_{d}", "cv"),
                    _get(g, "degrees", "trained", d, "fit", "preferred"),
                ],
                [
                    _get(g, "degrees", "control", d, "summary", "cv"),
                    _get(g, "degrees", "control", f"lowrank_{d}", "cv"),
                    _get(g, "degrees", "control", d, "fit", "preferred"),
                ],
                "heavy-tailed (Fig. 10)",
                lambda t, c: verdicts.heavy(t[0], t[1], t[2]),  # CV against the low-rank graph's
            )
        )
    return rows


def _sigma_rows(sg: dict[str, Any]) -> list[list[str]]:
    """The short table's rows of the sigma graph section ``sg``."""
    rows = []
    for d in ("out", "in"):
        rows.append(
            _row(
                f"sigma L{sg['layer']} h{sg['head']}: {d}-degree CV / fit / rho(firing)",
                [
                    _get(sg, "trained", "thresholds", -1, d, "summary", "cv"),
                    _get(sg, "trained", "thresholds", -1, d, "fit", "preferred"),
                    _get(sg, "trained", "thresholds", -1, d, "spearman_with_firing_rate"),
                ],
                [
                    _get(sg, "control", "thresholds", -1, d, "summary", "cv"),
                    _get(sg, "control", "thresholds", -1, d, "fit", "preferred"),
                    _get(sg, "control", "thresholds", -1, d, "spearman_with_firing_rate"),
                ],
                "heavy-tailed (Fig. 11)",
                lambda t, c: verdicts.heavy(t[0], c[0], t[1]),  # CV against the control's
            )
        )
    return rows


def format_table(rows: list[list[str]]) -> str:
    """The rows as an aligned plain-text table with a header (``-`` for a missing verdict)."""
    head = ["statistic", "model", "control (untrained)", "paper", "verdict"]
    allr = [head] + [list(r) + [verdicts.NONE] * (len(head) - len(r)) for r in rows]
    widths = [max(len(r[i]) for r in allr) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in allr]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
