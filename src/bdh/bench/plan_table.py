"""What ``bdh bench SUITE --dry-run`` prints: one line per model x setting x width with its parameter count."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def plan_table(specs: Sequence[Any]) -> str:
    """The dry-run lines of ``specs``: each (model, setting, width) with its parameter count as built, then the
    run count."""
    from bdh.registry import get_task
    from bdh.train.config import build_section_config

    seen, lines = set(), []
    for s in specs:
        key = (s.model, s.setting, s.width)
        if key in seen:
            continue
        seen.add(key)
        section = dict(s.model_section)
        if s.task_section["name"] == "sudoku":
            vocab, causal = 10, False  # the puzzle files are written only when the suite runs
        else:
            task = get_task(s.task_section["name"])(build_section_config("task", s.task_section)[1])
            vocab, causal = task.vocab_size, task.causal
        section.setdefault("vocab_size", vocab)
        section.setdefault("causal", causal)
        _, cfg = build_section_config("model", section)
        lines.append(
            f"{s.model:9s} {s.setting:10s} width {s.width:4d}: {cfg.num_params():>10,} params; model {s.model_section}"
        )
    lines.append(
        f"{len(specs)} runs ({len(seen)} model x setting x width, "
        f"x {len(specs) // max(len(seen), 1)} learning rates and seeds)"
    )
    return "\n".join(lines)
