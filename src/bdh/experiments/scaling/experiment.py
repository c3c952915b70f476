"""``bdh experiment scaling``: the runs in order (the learning-rate sweep at the smallest size, then every
size at each model's chosen rate), the data they share, and the summary the report is written from
(paper section 4.2, Fig. 7; appendix B.2)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from bdh.errors import UserError

from ..scaffold import ExperimentFolder, Log
from .config import Config
from .ladder import MODELS, Rung, build_ladder, plan, plan_text
from .runs import RunSpec, train_run

#: the output folder; its marker file ``scaling.json`` is what ``--resume`` continues (each run's own
#: ``result.json`` holds its spec, so the marker's config is not compared)
FOLDER = ExperimentFolder("scaling")
MARKER = FOLDER.marker
prepare_resume = FOLDER.prepare_resume


def describe_plan(config: Config) -> str:
    """The ladder and its estimated cost, as text (``--show-config`` prints it beside the config)."""
    return plan_text(config, build_ladder(config))


# ---------------------------------------------------------------------- data
def prepare_data(config: Config, out: Path, resume: bool) -> tuple[dict[str, Any], str, dict[str, list]]:
    """The task section, the data's identity, and the held-out segments per direction (translation only)."""
    task: dict[str, Any] = {"name": "text", "seq_len": config.seq_len, "val_fraction": config.val_fraction}
    if config.data == "shakespeare":
        return {**task, "data": None}, "shakespeare", {}
    if config.data != "translation":
        return {**task, "data": str(Path(config.data).expanduser().resolve())}, config.data, {}
    from bdh.experiments.common import write_corpus
    from bdh.tasks.multilingual import parse_pairs

    path = out / "data" / "stream.txt"
    pairs = parse_pairs(config.pairs)
    if not (resume and path.is_file() and path.stat().st_size == config.corpus_bytes):
        write_corpus(path, pairs, config.corpus_bytes, seed=0)
    data_id = f"translation:{config.pairs}:{config.corpus_bytes}"
    return {**task, "data": str(path)}, data_id, held_out(config)


def held_out(config: Config) -> dict[str, list]:
    """Per direction ``src>tgt``, ``eval_segments`` held-out segments short enough to be read in one window
    (a learned-position Transformer reads at most ``seq_len`` tokens)."""
    from bdh.experiments.common import direction_segments, encode_segment
    from bdh.tasks.multilingual import parse_pairs

    out = {}
    for a, b in parse_pairs(config.pairs):
        for s, t in ((a, b), (b, a)):
            pool = direction_segments(s, t, 8 * config.eval_segments, seed=0)
            fits = [seg for seg in pool if len(encode_segment(*seg)[0]) - 1 <= config.seq_len]
            out[f"{s}>{t}"] = fits[: config.eval_segments]
    return out


# ---------------------------------------------------------------------- runs
def _spec(config: Config, rung: Rung, model: str, lr: float, seed: int, task: dict, data_id: str) -> RunSpec:
    return RunSpec(
        model=model,
        size=rung.index,
        lr=lr,
        seed=seed,
        section=rung.section(model),
        task=task,
        data_id=data_id,
        steps=config.steps,
        batch_size=config.batch_size,
        micro_batch_size=config.micro_batch_size,
        curve_every=config.curve_every,
        curve_eval_batches=config.curve_eval_batches,
        eval_batches=config.eval_batches,
        device=config.device,
        precision=config.precision,
    )


def choose_lr(records: list[dict[str, Any]], model: str, lrs: tuple[float, ...]) -> tuple[float, dict[float, float]]:
    """The learning rate of ``model`` with the lowest mean final loss over seeds at the smallest size, and the mean of
    every rate (`bdh.bench.results.best_lr`: a diverged run counts as infinite, ties go to the smaller rate)."""
    from bdh.bench.results import best_lr

    at_lr = {lr: [r for r in records if r["model"] == model and r["size"] == 0 and r["lr"] == lr] for lr in lrs}
    best, goodness = best_lr(at_lr, ["val_loss"], higher_is_better=False)
    means = {lr: -g[0] for lr, g in goodness.items()}  # the goodness of a loss is its negative
    if not math.isfinite(means[best]):
        raise UserError(f"scaling: {model} diverged at every learning rate of the sweep {list(lrs)}; give lower lrs")
    return best, means


def _train(config: Config, out: Path, spec: RunSpec, segments: dict, resume: bool, log: Log) -> dict[str, Any]:
    rec = train_run(spec, out, resume=resume, segments=segments, log=log)
    how = "reused" if rec["reused"] else f"{rec['wall_s']:.0f} s"
    log(
        f"[scaling] {spec.model} size {spec.size + 1}/{len(config.n_neurons)} lr {spec.lr:g} seed {spec.seed}: "
        f"val {rec['val_loss']:.4f} nats/byte ({how})"
    )
    return rec


def run(config: Config, out: Path, *, log: Log = print, resume: bool = False) -> Path:
    """Train every run (reusing finished ones with ``resume``), then write report.md, results.json and the
    figures into ``out``; returns the report's path."""
    from .report import write_report

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    start, cpu = time.time(), time.process_time()
    rungs = build_ladder(config)
    log(plan_text(config, rungs))
    FOLDER.mark(config.to_dict(), out, resume)
    task, data_id, segments = prepare_data(config, out, resume)
    records = []
    for model in MODELS:
        for lr in config.lrs:
            for seed in config.seeds:
                spec = _spec(config, rungs[0], model, lr, seed, task, data_id)
                records.append(_train(config, out, spec, segments, resume, log))
    chosen = {m: choose_lr(records, m, config.lrs) for m in MODELS}
    log("[scaling] learning rates: " + ", ".join(f"{m} {lr:g}" for m, (lr, _) in chosen.items()))
    for rung in rungs[1:]:
        for model in MODELS:
            for seed in config.seeds:
                spec = _spec(config, rung, model, chosen[model][0], seed, task, data_id)
                records.append(_train(config, out, spec, segments, resume, log))
    seconds, cpu_s = time.time() - start, time.process_time() - cpu
    report = write_report(config, out, rungs, records, chosen, plan(config, rungs), segments, seconds, cpu_s)
    log(f"[scaling] done in {seconds / 60:.1f} min")
    return report
