"""The science plan of `benchmarks/gpu_all.py` (``--plan science``): the package's questions at the paper's size,
each one experiment command with a time limit, ranked, in one call of under 9 minutes on one H100 / H200.

    python benchmarks/gpu_all.py --plan science --out science-run --tar            # on a CUDA machine
    python benchmarks/gpu_all.py --plan science --device cpu --quick --out DIR     # every step at tiny sizes

Each step is an existing experiment (`bdh experiment ...`) or benchmark run with the fields below; its answer is
read back from what it wrote, by that experiment's own rules (the scaling verdict, the length experiment's Wilson
interval, the long-context gain by distance), into ``summary.md``. docs/performance.md ("The science plan") says
what each step answers and how its time was budgeted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LN2 = math.log(2)


@dataclass(frozen=True)
class Science:
    """One step: the question, the experiment (or None: the compile benchmark), its fields on the GPU and at tiny
    sizes on the CPU, its time limit on the GPU, and how its answer is read from its folder."""

    name: str
    question: str
    experiment: str | None
    fields: dict[str, Any]
    quick_fields: dict[str, Any]
    limit: float
    answer: Callable[[Path], list[str]]


def _fig7(folder: Path) -> list[str]:
    """Per size: BDH against GPT in bits per byte at the same tokens and at the same wall-clock, by the scaling
    experiment's verdict (`bdh.experiments.scaling.verdict.compare`: better only beyond the seed spread)."""
    res = json.loads((folder / "results.json").read_text())
    lines = [f"learning rates (swept at the smallest size): {res['chosen_lr']}"]
    for size, tokens, clock in zip(res["sizes"], res["comparisons"], res["equal_time_comparisons"], strict=True):
        speed = f"BDH {size['bdh']['tok_per_s']:,.0f}, GPT {size['gpt']['tok_per_s']:,.0f} tokens/s"
        lines.append(f"{size['label']} parameters, same tokens: {_bits(tokens)}; {speed}")
        lines.append(f"{size['label']} parameters, same wall-clock: {_bits(clock)}")
    lines += [
        f"{'held' if f['held'] else 'not held' if f['held'] is False else 'undecided'}: {f['claim']}"
        for f in res["findings"][:1]
    ]
    return lines


def _bits(c: dict[str, Any]) -> str:
    """A comparison of the scaling experiment (nats per byte) in bits per byte, with its seed spread."""
    spread = "n/a" if not math.isfinite(c["spread"]) else f"{c['spread'] / LN2:.3f}"
    text = f"BDH {c['bdh_mean'] / LN2:.3f} vs GPT {c['gpt_mean'] / LN2:.3f} bits/byte (seed spread {spread}, "
    return text + f"{c['seeds']} seeds): **{c['verdict']}**" + (f" ({c['note']})" if c["note"] else "")


def _fact(folder: Path) -> list[str]:
    """Induction accuracy read through the state at T and at the longest length, the seeds pooled, with the
    length experiment's Wilson interval (`bdh.experiments.length.report.pooled`)."""
    from bdh.experiments.length.report import pooled

    res = json.loads((folder / "results.json").read_text())
    params = {t["model"]: t["params"] for t in res["training"]}
    lines = []
    for (task, model, read, length), cell in sorted(pooled(res["rows"]).items(), key=lambda kv: kv[0][3]):
        if "accuracy" not in cell:
            lines.append(f"{model} ({params.get(model, 0):,} parameters), {task} at {length:,}: {cell['status']}")
            continue
        seeds = ", ".join(f"{a:.2f}" for a in cell["seeds"])
        lines.append(
            f"{model} ({params.get(model, 0):,} parameters), {task} read by {read} at {length:,}: "
            f"**{cell['accuracy']:.2f}** (95 % interval {cell['low']:.2f}-{cell['high']:.2f}; seeds {seeds})"
        )
    return lines


def _state(folder: Path) -> list[str]:
    """Per recipe: what the carried state adds over the context cut to T (cut minus carried bits per byte) by
    distance, the mean over seeds and its range (docs/long-context.md's measure)."""
    from bdh.seed_stats import mean, spread_cell

    res = json.loads((folder / "results.json").read_text())
    lines = []
    for recipe in dict.fromkeys(r["recipe"] for r in res["runs"]):
        runs = [r for r in res["runs"] if r["recipe"] == recipe and "carried" in r]
        if not runs:
            continue
        gains = [[c - k for c, k in zip(r["cut"]["bits"], r["carried"]["bits"])] for r in runs]
        cells = [spread_cell(mean(g), min(g), max(g), len(g)) for g in zip(*gains)]
        buckets = ", ".join(f"{b}: {c}" for b, c in zip(runs[0]["cut"]["buckets"], cells))
        lines.append(f"{recipe} ({len(runs)} seeds), cut minus carried bits/byte by position: {buckets}")
    return lines


def _compile(folder: Path) -> list[str]:
    """Per loop and window: tokens/s under ``torch.compile`` over the eager step's, measured in the same run."""
    rows = json.loads((folder / "compile.json").read_text())["training"]
    eager = {(r["T"], r["loop"], r["form"]): r["tok_s"] for r in rows if r["setting"] == "bf16"}
    lines = []
    for r in rows:
        if r["setting"] != "bf16+compile":
            continue
        base = eager.get((r["T"], r["loop"], r["form"]))
        if not isinstance(r["tok_s"], float) or not isinstance(base, float):
            lines.append(f"T={r['T']} {r['loop']} {r['form']}: compiled {r['tok_s']}, eager {base}")
            continue
        note = f" ({r['note']})" if r.get("note") else ""
        lines.append(f"T={r['T']} {r['loop']} {r['form']}: compiled **{r['tok_s'] / base:.2f}x** eager{note}")
    return lines


#: the paper's model (L = 6, D = 256, h = 4, n = 32768: 25.3M parameters) as the long-context experiment sizes it
PAPER = {"n_layer": 6, "n_embd": 256, "n_head": 4, "n_neurons": 32768}
TINY_SCALING = {"data": "translation", "steps": 6, "seq_len": 32, "n_neurons": [64, 128], "n_embd": 16}
TINY_SCALING |= {"curve_points": 3, "eval_batches": 2, "eval_segments": 4, "corpus_bytes": 50_000, "lrs": [0.003]}
TINY_LENGTH = {"steps": 6, "seq_len": 16, "max_length": 256, "min_length": 256, "width": 16, "neuron_mult": 4}
TINY_STATE = {"recipes": "nopos-lg-delta-sp", "steps": 4, "seq_len": 32, "eval_length": 1024, "n_embd": 16}
TINY_STATE |= {"recall_distances": "16,64", "recall_trials": 2, "n_neurons": 128}

#: the steps, most valuable first; ``limit``: seconds on one H200 (540 in all; the budget in docs/performance.md)
PLAN = (
    Science(
        "fig7",
        "Fig. 7 at its own size: is a parameter-matched GPT better than BDH on the translation stream, at the same "
        "tokens and at the same wall-clock?",
        "scaling",
        {"n_neurons": [16384, 32768], "gpt_layers": [6, 9], "gpt_heads": [4, 5], "lrs": [0.001, 0.003]}
        | {"seeds": [0, 1], "steps": 80, "batch_size": 16, "micro_batch_size": 16, "seq_len": 1024}
        | {"corpus_bytes": 16_000_000, "curve_points": 16, "curve_eval_batches": 2, "eval_batches": 16}
        | {"eval_segments": 50},
        TINY_SCALING | {"seeds": [0, 1]},
        190,
        _fig7,
    ),
    Science(
        "fact",
        "One fact to 2^20 at paper width: does the delta-rule recipe still answer induction far past T at 250x the "
        "CPU run's parameters?",
        "length",
        {"models": ["bdh-nopos-lg-delta"], "tasks": ["induction"], "seeds": [0], "seq_len": 64, "width": 256}
        | {"neuron_mult": 128, "n_layer": 2, "steps": 700, "batch_size": 64, "max_length": 2**20}
        | {"min_length": 2**20},
        {"models": ["bdh-nopos-lg-delta"], "tasks": ["induction"], "batch_size": 4} | TINY_LENGTH,
        130,
        _fact,
    ),
    Science(
        "state",
        "Does the state pay on text at 25M parameters: the carried state's gain over the context cut to T, by "
        "distance, for ALiBi and the delta rule with state passing?",
        "long-context",
        {"recipes": "alibi,nopos-lg-delta-sp", "seeds": "0,1", **PAPER, "steps": 80, "batch_size": 16}
        | {"seq_len": 512, "eval_lanes": 2, "eval_length": 32768, "cut_stride": 128, "recall_trials": 16}
        | {"recall_distances": "256,1024,4096,16384", "generate_bytes": 2000, "device": "auto", "precision": "auto"},
        TINY_STATE,
        140,
        _state,
    ),
    Science(
        "compile",
        "torch.compile at paper size, T = 2048: tokens/s compiled over eager, per loop (benchmarks/gpu.py --compile)",
        None,
        {"blocks": 2048},
        {"blocks": 32},
        80,
        _compile,
    ),
)


def argv(step: Science, python: str, out: Path, quick: bool, device: str, official: Path | None) -> list[str]:
    """The command of ``step``, writing into ``out / step.name``."""
    fields = step.quick_fields if quick else step.fields
    if step.experiment is None:
        size = ["--device", device, "--quick"] if quick else []
        gpu = [python, str(ROOT / "benchmarks" / "gpu.py"), *([] if official is None else [str(official)])]
        blocks = ["--blocks", str(fields["blocks"])]
        return [*gpu, *size, "--part", "training", "--compile", *blocks, "--out", str(out / step.name / "compile.json")]
    sets = [f"{k}={json.dumps(v, separators=(',', ':')) if isinstance(v, list) else v}" for k, v in fields.items()]
    preset = "--quick" if quick else "--full"
    run = [python, "-m", "bdh", "experiment", step.experiment, preset, *(a for s in sets for a in ("--set", s))]
    return [*run, "--out", str(out / step.name)]


def answers(out: Path, results: list[dict]) -> list[str]:
    """summary.md's answers: per step its question, then its answer read from its folder, or why there is none
    (its status and the last lines of its log)."""
    status = {r["step"]: r for r in results}
    lines = ["## Answers", ""]
    for step in PLAN:
        r = status.get(step.name, {"status": "not run", "log": "-"})
        lines += [f"### {step.name}: {step.question}", ""]
        try:
            got = step.answer(out / step.name)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            got = [f"no answer ({r['status']}; {type(exc).__name__}: {exc}); the end of `{r['log']}`:"]
            log = out / r["log"] if r["log"] != "-" else None
            tail = log.read_text(errors="replace").splitlines()[-8:] if log and log.is_file() else []
            got += [f"    {line}" for line in tail]
        lines += [f"- {g}" if not g.startswith("    ") else g for g in got] + [""]
    return lines
