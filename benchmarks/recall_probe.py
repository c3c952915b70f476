"""Why BDH learns MQAR slowly: one model per variant on one MQAR slice, accuracy read along the run.

    python benchmarks/recall_probe.py                       # every variant (about 40 CPU-minutes)
    python benchmarks/recall_probe.py --only bdh,bdh-lr3e-3 --steps 1000
    python benchmarks/recall_probe.py --list

Each variant changes one thing of the recall suite's model at width 32 (`bdh.bench.recall.model_section`:
BDH with 2 layer passes, 4 heads, n = 16 D, RoPE; GPT and BaseConv sized to BDH's parameter count) or of
its training (learning rate, steps, weight decay). Every run trains on the same fixed MQAR slice (N = 32,
D = 4, V = 64, 20,000 examples, batch 64, warmup a tenth of the run, linear decay to a tenth of the peak)
through the public trainer and is evaluated on 512 held-out examples every ``--every`` steps. The table
(markdown, also written to ``--out``) gives the parameters and the accuracy at each evaluation; the GPT
rows in the same run are the baseline to compare against. docs/bench.md ("Why BDH learned MQAR slowly")
has the latest table and what it shows.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _shared import Parser, run


@dataclass(frozen=True)
class Variant:
    """One probe run: the model, what changes in its model section, and in its optimiser and length."""

    name: str
    model: str
    what: str
    section: dict[str, Any] = field(default_factory=dict)
    optim: dict[str, Any] = field(default_factory=dict)
    steps_factor: int = 1
    neuron_mult: int = 16
    n_layer: int = 2
    n_head: int = 4


VARIANTS = [
    Variant("gpt", "gpt", "lr 1e-3"),
    Variant("gpt-lr3e-3", "gpt", "lr 3e-3", optim={"lr": 3e-3}),
    Variant("gpt-lr3e-4", "gpt", "lr 3e-4", optim={"lr": 3e-4}),
    Variant("baseconv", "baseconv", "lr 1e-3"),
    Variant("baseconv-lr3e-3", "baseconv", "lr 3e-3", optim={"lr": 3e-3}),
    Variant("bdh", "bdh", "none (lr 1e-3)"),
    Variant("bdh-2x-steps", "bdh", "twice the steps", steps_factor=2),
    Variant("bdh-lr3e-4", "bdh", "lr 3e-4", optim={"lr": 3e-4}),
    Variant("bdh-lr2e-3", "bdh", "lr 2e-3", optim={"lr": 2e-3}),
    Variant("bdh-lr3e-3", "bdh", "lr 3e-3", optim={"lr": 3e-3}),
    Variant("bdh-wd0", "bdh", "weight decay 0", optim={"weight_decay": 0.0}),
    Variant("bdh-1-head", "bdh", "1 head", n_head=1),
    Variant("bdh-n4", "bdh", "n = 4 D", neuron_mult=4),
    Variant("bdh-n32", "bdh", "n = 32 D", neuron_mult=32),
    Variant("bdh-n64", "bdh", "n = 64 D", neuron_mult=64),
    Variant("bdh-no-rope", "bdh", "no positional encoding", section={"positional": "none"}),
    Variant("bdh-alibi", "bdh", "ALiBi damping", section={"damping": "alibi"}),
    Variant("bdh-1-layer", "bdh", "1 layer pass", n_layer=1),
    Variant("bdh-4-layers", "bdh", "4 layer passes", n_layer=4),
]


def run_variant(v: Variant, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Train one variant; its parameters and the validation accuracy at every evaluation."""
    from bdh.bench.recall import RecallSweep, model_section
    from bdh.train import RunConfig, Trainer

    sweep = RecallSweep(
        vocab_size=args.vocab, n_layer=v.n_layer, n_head=v.n_head, neuron_mult=v.neuron_mult, eval_length_factor=0
    )
    steps = args.steps * v.steps_factor
    optim = {"lr": 1e-3, **v.optim}
    optim.update(min_lr=optim["lr"] / 10, warmup_steps=max(1, steps // 10))
    config = RunConfig.from_dict(
        {
            "model": {**model_section(v.model, 32, sweep, args.seq_len), **v.section},
            "task": {
                "name": "mqar",
                "vocab_size": args.vocab,
                "input_seq_len": args.seq_len,
                "num_kv_pairs": args.pairs,
                "num_train_examples": 20_000,
                "num_val_examples": 512,
                "data_seed": 0,
            },
            "optim": optim,
            "train": {"batch_size": 64, "max_steps": steps, "max_minutes": None, "seed": args.seed},
            "eval": {"every": args.every, "batches": 4, "batch_size": 128},
            "log": {"every": args.every, "progress": "none", "tensorboard": False},
            "checkpoint": {"every": 0, "keep": 1},
            "sample": {"max_new_tokens": 0},
            "run_dir": str(root / v.name),
        }
    )
    trainer = Trainer(config)
    try:
        result = trainer.fit()
    finally:
        trainer.close()
    curve = {}
    for line in (root / v.name / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "val_accuracy" in row:
            curve[int(row["step"])] = float(row["val_accuracy"])
    return {"params": sum(p.numel() for p in result.model.parameters()), "curve": curve}


def table(rows: list[tuple[Variant, dict[str, Any]]]) -> str:
    steps = sorted({s for _, r in rows for s in r["curve"]})
    head = "| variant | model | change | params | " + " | ".join(f"step {s:,}" for s in steps) + " |\n"
    head += "|---|---|---|---:|" + "---:|" * len(steps) + "\n"
    body = ""
    for v, r in rows:
        cells = [f"{r['curve'][s]:.3f}" if s in r["curve"] else "" for s in steps]
        body += f"| {v.name} | {v.model} | {v.what} | {r['params']:,} | " + " | ".join(cells) + " |\n"
    return head + body


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", help="comma-separated variant names (default: all; see --list)")
    p.add_argument("--list", action="store_true", help="list the variants and exit")
    p.add_argument("--steps", type=int, default=2000, help="optimiser steps of a run (default 2000)")
    p.add_argument("--every", type=int, default=250, help="steps between evaluations (default 250)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="PyTorch CPU threads (default 1)")
    p.add_argument("--out", type=Path, help="also write the table to this file")
    args = p.parse_args(argv)
    if args.list:
        for v in VARIANTS:
            print(f"{v.name:18s} {v.model:9s} {v.what}")
        return 0
    known = {v.name: v for v in VARIANTS}
    names = [n.strip() for n in args.only.split(",")] if args.only else list(known)
    bad = [n for n in names if n not in known]
    if bad:
        p.error(f"--only: unknown variant(s) {', '.join(bad)} (see --list)")
    if args.steps < 1 or args.every < 1:
        p.error("--steps and --every must be positive")
    import torch

    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            print(f"recall probe: {name}", file=sys.stderr, flush=True)
            rows.append((known[name], run_variant(known[name], args, Path(tmp))))
    text = table(rows)
    print(text)
    if args.out:
        args.out.write_text(text)  # the same as printed (print adds a newline)
    return 0


if __name__ == "__main__":
    run(main)
