"""report.md and results.json of the scaling experiment (paper section 4.2, Fig. 7; appendix B.2): the
protocol, the ladder, the sweep, the losses per size with their verdicts, the fits, the costs beside the
loss, what matched the paper, and what this scale can and cannot say."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bdh.experiments.common import Report
from bdh.seed_stats import finite_mean

from . import figures
from .config import Config
from .ladder import MODELS, Rung, train_flops_per_token
from .summary import Summary, kept, summarise

LN2 = math.log(2.0)
NAMES = {"bdh": "BDH", "gpt": "GPT"}


def _seeds(values: list[float]) -> str:
    return ", ".join("diverged" if not math.isfinite(v) else f"{v:.3f}" for v in values)


def _shape(rung: Rung, model: str) -> str:
    s = rung.section(model)
    if model == "bdh":
        return f"L {s['n_layer']}, D {s['n_embd']}, h {s['n_head']}, n {s['n_neurons']}"
    return f"L {s['n_layer']}, d {s['n_embd']}, {s['n_head']} heads"


def protocol(rep: Report, config: Config, rungs: list[Rung], chosen: dict) -> None:
    """The protocol in a paragraph, every number from the config (paper appendix B.2 for what it follows)."""
    data = {
        "shakespeare": "the embedded Shakespeare corpus (byte-level `text` task)",
        "translation": f"the synthetic translation stream ({config.pairs}, {config.corpus_bytes:,} bytes)",
    }.get(config.data, f"the text at `{config.data}`")
    lrs = ", ".join(f"{m} {lr:g}" for m, (lr, _) in chosen.items())
    rep.text(
        f"{len(rungs)} sizes from {rungs[0].params['bdh']:,} to {rungs[-1].params['bdh']:,} BDH parameters. BDH-GPU is "
        f"scaled in its neuron count n only (L = {config.n_layer}, D = {config.n_embd}, h = {config.n_head} fixed, "
        "as the paper's Table 5); the GPT-2-style Transformer (pre-LayerNorm, GELU MLP of 4d, tied readout, "
        f"{config.gpt_positional} positions) gets the depth and heads of each size and the width whose parameter "
        f"count is closest to BDH's (within {config.match_tolerance:.0%}). Data: {data}, split "
        f"{1 - config.val_fraction:.0%} / {config.val_fraction:.0%} into training and validation bytes. Every run: "
        f"{config.steps} steps of {config.batch_size} x {config.seq_len} bytes = {config.tokens_per_run:,} tokens; "
        "the two models of a seed read the same batches in the same order (a batch is a function of the seed "
        "and its index). AdamW with weight decay 0.1, warmup over a tenth of the run, linear decay to a tenth of the "
        f"peak (the paper's schedule, appendix B.2, compressed), dropout {config.dropout:g}, {config.precision} on "
        f"{config.device}. Seeds: {', '.join(map(str, config.seeds))}. Learning rates: swept over "
        f"{', '.join(f'{lr:g}' for lr in config.lrs)} at the smallest size (best mean final loss over seeds), then "
        f"fixed for every size: {lrs}. Final loss: {config.eval_batches} validation batches; the curves: "
        f"{config.curve_eval_batches} batches every {config.curve_every} steps."
    )


def ladder_table(rep: Report, config: Config, rungs: list[Rung]) -> None:
    """Both models' shapes and parameter counts per size, and their training FLOPs per token."""
    rows = []
    for r in rungs:
        flops = [train_flops_per_token(m, r.section(m), config.seq_len) / 1e6 for m in MODELS]
        rows.append(
            [r.index, _shape(r, "bdh"), f"{r.params['bdh']:,}", _shape(r, "gpt"), f"{r.params['gpt']:,}"]
            + [f"{r.mismatch:+.2%}", *flops]
        )
    headers = ["size", "BDH", "BDH params", "GPT", "GPT params", "GPT / BDH - 1", "BDH MFLOP/token", "GPT MFLOP/token"]
    rep.table(headers, rows, digits=2)


def sweep_table(rep: Report, config: Config, chosen: dict) -> None:
    """Mean final loss over seeds of every swept learning rate at the smallest size."""
    rows = [[f"{lr:g}", *[chosen[m][1][lr] for m in MODELS]] for lr in config.lrs]
    rep.table(["learning rate", "BDH mean final loss", "GPT mean final loss"], rows, digits=4)
    edge = [m for m in MODELS if len(config.lrs) > 1 and chosen[m][0] in (min(config.lrs), max(config.lrs))]
    if edge:
        rep.text(
            f"The chosen rate of {' and '.join(NAMES[m] for m in edge)} is at the edge of the sweep: a wider sweep "
            "might find a better one."
        )


def loss_table(rep: Report, summary: Summary) -> None:
    """Per size: both parameter counts, the per-seed and mean losses in nats and bits, and the verdict."""
    rows = []
    for s, c in zip(summary.sizes, summary.final, strict=True):
        row = [s["label"], f"{s['params']['bdh']:,}", f"{s['params']['gpt']:,}"]
        row += [_seeds(s["bdh"]["final"]), _seeds(s["gpt"]["final"]), c.bdh_mean, c.gpt_mean]
        row += [c.bdh_mean / LN2, c.gpt_mean / LN2, c.diff, c.spread, c.verdict + (f" ({c.note})" if c.note else "")]
        rows.append(row)
    headers = ["size", "BDH params", "GPT params", "BDH per seed", "GPT per seed", "BDH mean", "GPT mean"]
    headers += ["BDH bits/byte", "GPT bits/byte", "BDH - GPT", "seed spread", "verdict"]
    rep.table(headers, rows, digits=4)


def directions_table(rep: Report, summary: Summary, segments: dict[str, list]) -> None:
    """Target-side loss per translation direction (``data: translation`` only)."""
    if not segments:
        return
    rep.heading("Translation: target-side loss per direction (nats per byte)")
    keys = sorted(k for k, v in segments.items() if v)
    if not keys:
        rep.text("No held-out segment is short enough to be read in one window of seq_len bytes: raise seq_len.")
        return
    counts = ", ".join(f"{k.replace('>', ' → ')} {len(segments[k])}" for k in keys)
    rep.text(
        "Held-out segments `<F:xx>source<T:yy>target` of at most seq_len bytes, each read from a zero state; only "
        f"the target text is scored (paper Table 2's measure). Mean over seeds. Segments per direction: {counts}."
    )
    rows = [
        [s["label"], NAMES[m], *[s[m]["directions"].get(k, math.nan) for k in keys]]
        for s in summary.sizes
        for m in MODELS
    ]
    rep.table(["size", "model", *[k.replace(">", " → ") for k in keys]], rows)


def fits_section(rep: Report, summary: Summary) -> None:
    """The power-law fits (or why there are none), the crossover, and the verdicts in order of size."""
    rows = []
    for m, f in summary.fits.items():
        cells = [f"{getattr(f, k):.4g} [{f.ci[k][0]:.3g}, {f.ci[k][1]:.3g}]" if f.usable else "n/a" for k in "abc"]
        rows.append([NAMES[m], f.status, *cells, f.points, f.note])
    rep.table(["model", "status", "a", "b", "c", "points", "note"], rows)
    rep.text(
        "Fitted on every run at the chosen learning rate (each seed a point), N in millions of parameters; "
        "intervals from the covariance of `scipy.optimize.curve_fit`. A fit that the points do not determine "
        "(fewer than 4 sizes, or an exponent interval that reaches 0) is not shown; its numbers are in results.json."
    )
    if not all(f.usable for f in summary.fits.values()):
        rep.text("Crossover of the fitted curves: not computed (a fit is not determined).")
    else:
        inside, beyond = summary.crossing["measured_range"], summary.crossing["extrapolated"]
        say = ", ".join(f"{n:,.0f} parameters" for n in inside) or "none"
        far = ", ".join(f"{n:,.0f} parameters" for n in beyond) or "none"
        rep.text(
            f"Crossover of the fitted curves inside the measured range: {say}. Beyond it (up to 100x the largest "
            f"size; an extrapolation of fits over a small range, not a prediction): {far}."
        )
    order = [c.verdict for c in summary.final]
    rep.text("Measured, size by size (smallest first): " + "; ".join(order) + ".")


def costs_table(rep: Report, config: Config, summary: Summary) -> None:
    """Training FLOPs, measured throughput, inference state and FLOPs per token beside the loss (section 4.2)."""
    c = config.inference_context
    rows = []
    for s in summary.sizes:
        for m in MODELS:
            x = s[m]
            rows.append(
                [s["label"], NAMES[m], f"{s['params'][m]:,}", f"{x['train_flops']:.3g}", round(x["tok_per_s"])]
                + [f"{x['at_seq_len']['state']:,.0f}", f"{x['at_context']['state']:,.0f}"]
                + [f"{x['at_seq_len']['flops']:.3g}", f"{x['at_context']['flops']:.3g}", finite_mean(x["final"])]
            )
    t = config.seq_len
    headers = ["size", "model", "params", "train FLOPs/run", "measured tok/s", f"state @ {t}", f"state @ {c}"]
    headers += [f"inference FLOPs/token @ {t}", f"@ {c}", "final loss"]
    rep.table(headers, rows, digits=4)
    rep.text(
        "State: scalars kept between tokens at inference, all layers (BDH: its n x D state per layer, constant in "
        "the context; GPT: its KV cache, 2 x context x d per layer). Inference FLOPs per generated token: BDH in "
        "its recurrent form, GPT with a KV cache. "
        + (
            f"A GPT with learned positions cannot read past {t} tokens; its column at {c} is the cache it would need."
            if config.gpt_positional == "learned" and c > t
            else ""
        )
    )


def scope(rep: Report, config: Config, rungs: list[Rung]) -> None:
    """What this scale can and cannot say, from the config's numbers."""
    big = rungs[-1].params["bdh"]
    ratio = rungs[-1].params["bdh"] / rungs[0].params["bdh"]
    rep.text(
        f"**What this scale can say.** Whether, at {rungs[0].params['bdh'] / 1e6:.2g}M-{big / 1e6:.2g}M parameters "
        f"({ratio:.1f}x) and {config.tokens_per_run:,} tokens per run, one architecture reaches a lower validation "
        "loss than the other at equal parameters and equal data, beyond what changing the seed changes; and how "
        "the losses move with size at this budget.\n\n"
        f"**What it cannot say.** The paper's claim spans 10M-1B parameters trained on 1.2B tokens; here the largest "
        f"model sees {config.tokens_per_run / big:.2g} tokens per parameter (compute-optimal training would use "
        "about 20), so these are losses of short runs, not of trained models, and larger models are the most "
        "under-trained. The fits describe this budget only; an exponent from a range this small, with "
        f"{len(config.seeds)} seed(s), is loose, and a crossover outside the measured sizes is an extrapolation. The "
        "learning rates were chosen at the smallest size and kept (larger models often want lower ones; the "
        "same rule for both models, but it may not favour them equally). A tie means not distinguishable with "
        "these seeds, not equal. One corpus; the paper's GPTXL also carried a KV cache across minibatches and "
        "tuned dropout per size, and its BDH was trained with truncated backprop on 2048-byte windows."
    )


def runs_table(rep: Report, records: list[dict[str, Any]]) -> None:
    """Every run, the sweep's included, with how far its last curve point lies above its lowest (late rises)."""
    rows = []
    for r in sorted(records, key=lambda r: (r["model"], r["size"], r["lr"], r["seed"])):
        val = [p[2] for p in r.get("curve", {}).get("val", [])]
        low = min(val) if val else math.nan
        late = val[-1] - low if val else math.nan
        rows.append(
            [
                NAMES[r["model"]],
                r["size"],
                f"{r['lr']:g}",
                r["seed"],
                f"{r.get('params', 0):,}",
                f"{r.get('tokens', 0):,}",
            ]
            + [
                r["val_loss"],
                r["val_loss"] / LN2,
                low,
                late,
                f"{r.get('wall_s', math.nan):.1f}",
                r.get("reused", False),
            ]
        )
    headers = ["model", "size", "lr", "seed", "params", "tokens", "final loss", "bits/byte", "lowest curve loss"]
    headers += ["last - lowest curve", "wall s", "reused"]
    rep.table(headers, rows, digits=4)


def equal_time_text(rep: Report, summary: Summary) -> None:
    """The comparison at the same wall-clock (`bdh.experiments.scaling.summary.equal_time`), one line per size."""
    rep.text(
        "The same wall-clock (each seed's two runs read at the training time of the faster one, the slower one's "
        "loss curve read there, between its points): "
        + "; ".join(f"{s['label']}: {c.describe()}" for s, c in zip(summary.sizes, summary.equal_time, strict=True))
    )


def figures_section(
    rep: Report, fig_dir: Path, summary: Summary, records: list[dict[str, Any]], chosen: dict, sizes: int
) -> None:
    """The figures: loss against parameters and FLOPs, the curve of every run kept at the ``sizes`` sizes, the
    learning-rate sweep."""
    labels = [s["label"] for s in summary.sizes]
    rep.figure(
        figures.loss_vs_params(summary.sizes, summary.fits, fig_dir / "scaling-params"), "Loss against parameters"
    )
    rep.figure(figures.loss_vs_flops(summary.sizes, fig_dir / "scaling-flops"), "Loss against training FLOPs per run")
    kept_runs = {m: [r for s in range(sizes) for r in kept(records, chosen, m, s)] for m in MODELS}
    rep.figure(figures.curves(kept_runs, labels, fig_dir / "scaling-curves"), "Validation loss against step, every run")
    sweep = {m: chosen[m][1] for m in MODELS}
    rep.figure(
        figures.lr_sweep(sweep, {m: chosen[m][0] for m in MODELS}, fig_dir / "scaling-lr"), "Learning-rate sweep"
    )


def time_text(
    rep: Report,
    config: Config,
    records: list[dict[str, Any]],
    plan_rows: list[dict[str, Any]],
    seconds: float,
    cpu_seconds: float,
) -> None:
    """The training time the runs measured, the plan's estimate, and this invocation's wall and CPU time."""
    estimate = sum(r["est_s_per_run"] * r["runs"] for r in plan_rows)
    trained = sum(r.get("wall_s", 0.0) for r in records)
    reused = sum(1 for r in records if r.get("reused"))
    rep.text(
        f"Training wall time, summed over the {len(records)} runs as each measured it when it ran: "
        f"{trained / 60:.1f} min (the plan estimated {estimate / 60:.1f} min at {config.plan_tflops:g} TFLOP/s). "
        f"This invocation: wall time {seconds / 60:.1f} min, process CPU time {cpu_seconds / 60:.1f} min"
        + (f", {reused} runs reused from an earlier invocation (--resume)." if reused else ".")
    )


def write_report(
    config: Config,
    out: Path,
    rungs: list[Rung],
    records: list[dict[str, Any]],
    chosen: dict[str, tuple[float, dict[float, float]]],
    plan_rows: list[dict[str, Any]],
    segments: dict[str, list],
    seconds: float,
    cpu_seconds: float,
) -> Path:
    """Write report.md, results.json and the figures; returns the report's path."""
    summary = summarise(config, rungs, records, chosen)
    rep = Report("BDH-GPU against a GPT-2-style Transformer at equal parameters (paper section 4.2, Fig. 7)")
    protocol(rep, config, rungs, chosen)
    rep.heading("The ladder")
    ladder_table(rep, config, rungs)
    rep.heading("Learning rates: swept at the smallest size, then fixed")
    sweep_table(rep, config, chosen)
    rep.heading("Validation loss per size (nats per byte; bits per byte = nats / ln 2)")
    rep.text(
        "Each model at its chosen learning rate. A model is better only beyond the seed spread (its worst seed "
        "better than the other's best: the ranges do not overlap); otherwise the size is a tie; with one seed, "
        "undecided. The seed spread column is the larger of the two models' max - min over seeds."
    )
    loss_table(rep, summary)
    equal_time_text(rep, summary)
    directions_table(rep, summary, segments)
    rep.heading("Power-law fits L(N) = a (N / 1M)^-b + c")
    fits_section(rep, summary)
    figures_section(rep, out / "figures", summary, records, chosen, len(rungs))
    rep.heading("Cost beside the loss")
    costs_table(rep, config, summary)
    rep.heading("What matched the paper")
    rep.findings(summary.found)
    scope(rep, config, rungs)
    rep.heading("Every run")
    runs_table(rep, records)
    time_text(rep, config, records, plan_rows, seconds, cpu_seconds)
    rep.results = _results(config, rungs, records, chosen, plan_rows, segments, summary, seconds, cpu_seconds)
    return rep.write(out)


def _results(
    config: Config,
    rungs: list[Rung],
    records: list[dict[str, Any]],
    chosen: dict[str, tuple[float, dict[float, float]]],
    plan_rows: list[dict[str, Any]],
    segments: dict[str, list],
    summary: Summary,
    seconds: float,
    cpu_seconds: float,
) -> dict[str, Any]:
    """results.json: the config, the ladder, the plan, the sweep, every run with its curves, the summary."""
    return {
        "config": config.to_dict(),
        "tokens_per_run": config.tokens_per_run,
        "ladder": [
            {"size": r.index, "params": r.params, "mismatch": r.mismatch, "bdh": r.bdh, "gpt": r.gpt} for r in rungs
        ],
        "plan": plan_rows,
        "lr_sweep": {m: {f"{lr:g}": v for lr, v in chosen[m][1].items()} for m in MODELS},
        "chosen_lr": {m: chosen[m][0] for m in MODELS},
        "sizes": summary.sizes,
        "comparisons": [c.to_dict() for c in summary.final],
        "half_budget_comparisons": [c.to_dict() for c in summary.half],
        "equal_time_comparisons": [c.to_dict() for c in summary.equal_time],
        "fits": {m: f.to_dict() for m, f in summary.fits.items()},
        "crossovers": summary.crossing,
        "eval_segments": {k: len(v) for k, v in segments.items()},
        "runs": records,
        "findings": Report.findings_json(summary.found),
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
    }
