"""The figures of ``bdh plot``: `write_figures` draws what a run has (training curves, a model's figures for an input,
bench suite plots) and says why it skipped the others."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bdh.errors import UserError

from .inputs import ViewInput

#: tokens of the activation heatmap (rows that stay readable)
HEATMAP_TOKENS = 64


def holds_any_model(run: Path) -> bool:
    """Whether a folder has a model folder in it (itself, best/ or a checkpoint), readable or not."""
    from bdh.train.run.checkpoint import list_checkpoints

    return any(
        os.path.lexists(p / "config.json") or os.path.lexists(p / "model.safetensors")
        for p in (run, run / "best", *list_checkpoints(run))
    )


def check_indices(model: Any, head: int | None, layer: int | None) -> None:
    """A one-line `UserError` for a ``head`` or ``layer`` the model does not have, before anything is drawn."""
    cfg = model.config
    if head is not None and not 0 <= head < cfg.n_head:
        raise UserError(f"--head {head}: the model has {cfg.n_head} heads (0..{cfg.n_head - 1})")
    if layer is not None and not 0 <= layer < cfg.n_layer:
        raise UserError(f"--layer {layer}: the model has {cfg.n_layer} layers (0..{cfg.n_layer - 1})")


def degree_figure(model: Any, head: int, avg_degree: int, stem: Path) -> list[Path]:
    """Degrees of ``head``'s G_x block at ``avg_degree`` edges per neuron, with fit and low-rank reference."""
    from bdh.analysis import neurograph as ng

    from .plots import degree_distribution

    cfg = model.config
    G = ng.head_block(model, "x", head)
    res = ng.degree_analysis(G, avg_degree * cfg.N, cfg.n_embd, offset=head * cfg.N)
    del G
    raw = res["_degrees"]
    return degree_distribution(
        {"in": raw["in"], "out": raw["out"]},
        {"in": res["in"]["fit"], "out": res["out"]["fit"]},
        stem,
        title=f"G_x head {head} ({cfg.N} neurons), entries >= {res['beta']:.3g} (average degree {avg_degree})",
        reference={"in": raw["lowrank_in"], "out": raw["lowrank_out"]},
    )


def model_figures(
    model: Any, inp: ViewInput, out: Path, head: int | None = None, layer: int | None = None, avg_degree: int = 8
) -> list[Path]:
    """Sparsity per layer, the heatmap of ``layer`` and G_x's degrees of ``head`` for ``model`` reading ``inp``."""
    import torch

    from bdh.analysis import neurograph as ng
    from bdh.analysis.record import record
    from bdh.analysis.sparsity import sparsity

    from . import plots
    from .export import token_labels

    rows = inp.windows or [inp.tokens]
    means = sparsity(record(model, torch.tensor(rows, dtype=torch.long))).layer_means()
    made = plots.sparsity_by_layer(means["x"], means["y"], out / "sparsity", subtitle=inp.description)
    shown = inp.tokens[:HEATMAP_TOKENS]
    rec = record(model, torch.tensor([shown], dtype=torch.long))
    layer = rec.n_layer - 1 if layer is None else layer
    first = f"first {len(shown)} tokens" + (" of window 1" if inp.windows else f" of {len(inp.tokens)}")
    made += plots.activation_heatmap(
        rec.flat("x", layer).numpy(),
        rec.flat("y", layer).numpy(),
        token_labels(shown, inp.kind),
        out / "heatmap",
        title=f"layer {layer}: tokens x the most active neurons",
        subtitle=f"{inp.description} ({first})",
    )
    head = ng.default_head(model) if head is None else head
    return made + degree_figure(model, head, avg_degree, out / "degrees")


def write_figures(
    run_dir: Path,
    out: Path,
    model: Any = None,
    inp: ViewInput | None = None,
    bench_rows: list[dict[str, Any]] | None = None,
    **model_options: Any,
) -> tuple[list[Path], list[str]]:
    """A run's figures into ``out``; returns the files written and one line per figure skipped."""
    from bdh.train.run.log import read_metrics

    from . import plots

    made: list[Path] = []
    skipped: list[str] = []
    records = read_metrics(run_dir / "metrics.jsonl")
    if records:
        try:
            made += plots.training_curves(records, out / "curves", title=f"{run_dir.name}: training and validation")
        except UserError as exc:
            skipped.append(f"curves: {exc}")
    else:
        skipped.append(f"curves: no records in {run_dir / 'metrics.jsonl'}")
    if model is not None:
        made += model_figures(model, inp, out, **model_options)
    if bench_rows:
        files, why = plots.bench_plots(bench_rows, out)
        made += files
        skipped += why
    return made, skipped


@dataclass(frozen=True)
class RunFigures:
    """The figures `plot_run` wrote (``files``, in the folder ``out``) and, one line each, what it ``skipped``."""

    out: Path
    files: list[Path]
    skipped: list[str]

    def summary(self) -> str:
        """``wrote PATH`` per file, then ``skipped WHAT: WHY`` per figure left out."""
        lines = [f"wrote {path}" for path in self.files] + [f"skipped {reason}" for reason in self.skipped]
        return "\n".join(lines)


def plot_run(
    run_dir: Path,
    out: Path,
    model: Any = None,
    inp: ViewInput | None = None,
    bench: Sequence[str | Path] = (),
    **model_options: Any,
) -> RunFigures:
    """The figures of ``run_dir`` into ``out`` atomically, with the plots of the ``bench`` CSVs (all read first)."""
    from bdh.outputs import atomic_folder

    from . import plots

    bench_rows: list[dict[str, Any]] = []
    for csv_path in bench:
        bench_rows += plots.read_rows(csv_path)
    why = f"{run_dir} holds no model yet" if not holds_any_model(run_dir) else "no model was given"
    skipped = [] if model is not None else [f"model figures (sparsity, heatmap, degrees): {why}"]
    with atomic_folder(out) as tmp:
        made, reasons = write_figures(run_dir, tmp, model, inp, bench_rows, **model_options)
    return RunFigures(out, [out / path.relative_to(tmp) for path in made], skipped + reasons)


__all__ = [
    "HEATMAP_TOKENS",
    "RunFigures",
    "check_indices",
    "holds_any_model",
    "model_figures",
    "plot_run",
    "write_figures",
]
