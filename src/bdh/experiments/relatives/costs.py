"""The plan of ``bdh experiment relatives`` and its estimated cost, timed on the machine at hand: the models differ
too much in what a step costs for one throughput figure, so every model shape is timed for ``probe_steps`` steps."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from bdh.bench.spec import RunSpec

from ..common import duration

#: the evaluation of a window costs about a third of a training step on it (forward only), as `bdh.train.budget`
EVAL_SHARE = 1 / 3


def step_seconds(section: dict[str, Any], vocab_size: int, batch: int, seq_len: int, steps: int, device: str) -> float:
    """Seconds of one training step of the model ``section`` on random (``batch``, ``seq_len``) tokens, the mean of
    ``steps`` after an untimed one: process CPU seconds on a CPU (what ``cpu_s_per_step`` counts), wall on a GPU."""
    from bdh.devices import resolve_device
    from bdh.registry import get_model
    from bdh.train.config import build_section_config

    dev = resolve_device(device)
    _, cfg = build_section_config("model", {**section, "vocab_size": vocab_size})
    model = get_model(section["name"])(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, vocab_size, (batch, seq_len), device=dev)
    clock = time.perf_counter if dev.type == "cuda" else time.process_time  # CPU: CPU seconds, as cpu_s_per_step
    spent = 0.0
    for i in range(steps + 1):
        start = clock()
        loss = F.cross_entropy(model(x).reshape(-1, vocab_size).float(), x.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        spent += (clock() - start) if i else 0.0
    return spent / max(steps, 1)


def run_seconds(spec: RunSpec, per_step: float, eval_rows: int) -> float:
    """The estimated seconds of a run: its steps (or its time budget), and its validation of ``eval_rows``
    windows at `EVAL_SHARE` of a step per batch of training rows."""
    train = spec.max_minutes * 60.0 if spec.max_minutes is not None else spec.steps * per_step
    return train + EVAL_SHARE * per_step * eval_rows / spec.batch_size


def estimate(parts: dict[str, tuple[Sequence[RunSpec], int, int]], probe_steps: int, device: str) -> list[dict]:
    """Per part and model: runs, the seconds per step timed at each of its shapes, and the estimated seconds of
    its runs. ``parts``: name -> (runs, vocabulary, validation windows per run). ``probe_steps`` 0: no timing."""
    cache: dict[str, float] = {}
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for part, (specs, vocab, eval_rows) in parts.items():
        for spec in specs:
            seq_len = int(spec.task_section.get("input_seq_len", spec.task_section.get("seq_len", 0)))
            row = rows.setdefault((part, spec.model), {"part": part, "model": spec.model, "runs": 0, "step_s": []})
            row["runs"] += 1
            if not probe_steps:
                continue
            key = json.dumps([spec.model_section, vocab, spec.batch_size, seq_len], sort_keys=True)
            if key not in cache:
                cache[key] = step_seconds(spec.model_section, vocab, spec.batch_size, seq_len, probe_steps, device)
            row["step_s"].append(cache[key])
            row["seconds"] = row.get("seconds", 0.0) + run_seconds(spec, cache[key], eval_rows)
    return list(rows.values())


def plan_text(rows: Sequence[dict[str, Any]], header: Sequence[str], probe_steps: int, jobs: int = 1) -> str:
    """The plan as lines of text: per part and model its runs, its timed seconds per step and estimated time, then the
    total (shared among ``jobs`` runs at once)."""
    lines = list(header)
    if probe_steps:
        lines.append(
            f"times: {probe_steps} training step(s) of every model shape timed now on {torch.get_num_threads()} "
            "PyTorch thread(s), times the steps of its runs (measured times: cpu_s_per_step in the report)"
        )
    for r in rows:
        timed = r["step_s"]
        speed = f", {min(timed) * 1e3:,.0f}-{max(timed) * 1e3:,.0f} ms/step, ~{duration(r['seconds'])}" if timed else ""
        lines.append(f"  {r['part']:8s} {r['model']:12s} {r['runs']:4d} runs{speed}")
    total = sum(r.get("seconds", 0.0) for r in rows)
    runs = sum(r["runs"] for r in rows)
    shared = f", ~{duration(total / jobs)} with {jobs} runs at once" if jobs > 1 else ""
    lines.append(
        f"  total {runs} runs" + (f", ~{duration(total)} of training and evaluation{shared}" if probe_steps else "")
    )
    return "\n".join(lines)
