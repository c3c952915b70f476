"""Why ``torch.compile`` lost on the CPU, and what it costs now: eager against compiled training steps, with the
compiled element-wise loops and without them, in one run.

    python benchmarks/compile_probe.py                   # bf16, T = 256, batch 8, perf.py's model, 2 threads
    python benchmarks/compile_probe.py --profile         # also inductor's slowest generated kernels per row
    python benchmarks/compile_probe.py --quick           # a tiny model, one step (a test)

Four ways to run the same training step (forward under autocast, cross-entropy, backward; no optimiser), each with
dropout ``--dropout`` and without:

* **eager, loops**: the eager model with the compiled loops of `bdh.model.kernels.cpu.native` (the default);
* **eager, PyTorch**: the eager model without them (``native.disabled``);
* **compiled, loops**: ``torch.compile`` of the model; the loops are PyTorch operators (`bdh.model.kernels.cpu.ops`),
  which inductor keeps as calls, with the host dropout masks drawn inside the gate's loop;
* **compiled, inductor**: ``torch.compile`` without the loops: inductor generates every element-wise kernel itself
  (the rotation's tables, ReLU, the gate, ``F.dropout``'s random draws), which is what ``train.compile`` ran before.

Columns: the median step in milliseconds over ``--steps`` after ``--warmup`` (compiling happens in the warm-up),
the ratio to *eager, loops* in the same run, and the number of graphs dynamo made of one forward pass (graph
breaks + 1). Freed memory is kept for reuse as the trainer keeps it (`bdh.train.runtime.hardware.keep_freed_memory`).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
import torch.nn.functional as F
from _shared import Parser, cpu_description, run

WAYS = ("eager, loops", "eager, PyTorch", "compiled, loops", "compiled, inductor")


def build(args: argparse.Namespace, dropout: float):
    from bdh.model import BDH, BDHConfig

    torch.manual_seed(0)
    cfg = BDHConfig(
        n_layer=args.n_layer, n_embd=args.n_embd, n_head=args.n_head, n_neurons=args.n_neurons, dropout=dropout
    )
    return BDH(cfg).train()


def batch(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    """The inputs and targets every step of every way reads (the same batch)."""
    g = torch.Generator().manual_seed(1)
    return tuple(torch.randint(0, 256, (args.batch, args.block), generator=g) for _ in range(2))


def autocast(args: argparse.Namespace):
    """bf16 autocast for ``--dtype bf16``; fp32 runs without it."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16")


def stepper(model, run, args: argparse.Namespace):
    """One training step of ``model`` run through ``run`` (the model or its compiled form)."""
    idx, target = batch(args)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        with autocast(args):
            logits = run(idx)
        F.cross_entropy(logits.float().flatten(0, 1), target.flatten()).backward()

    return step


def graphs(model, args: argparse.Namespace) -> int:
    """How many graphs dynamo makes of one forward pass (1 + its graph breaks)."""
    import torch._dynamo

    def forward(i):
        with autocast(args):
            return model(i)

    torch._dynamo.reset()
    return torch._dynamo.explain(forward)(batch(args)[0]).graph_count


def measure(way: str, dropout: float, args: argparse.Namespace) -> dict:
    from bdh.model.kernels.cpu import native

    model = build(args, dropout)
    with native.disabled() if "loops" not in way else contextlib.nullcontext():
        compiled = way.startswith("compiled")
        count = graphs(model, args) if compiled else 0
        import torch._dynamo

        torch._dynamo.reset()
        run = torch.compile(model) if compiled else model
        step = stepper(model, run, args)
        for _ in range(args.warmup):
            step()
        times = []
        for _ in range(args.steps):
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
        top = profile_top(step, args.profile) if args.profile else []
    return {"way": way, "dropout": dropout, "ms": 1000 * statistics.median(times), "graphs": count, "top": top}


def profile_top(step, rows: int) -> list[tuple[str, float]]:
    """The ``rows`` entries of one profiled step with the most self CPU time: (name, milliseconds)."""
    import torch._inductor.config as inductor_config
    from torch.profiler import ProfilerActivity, profile

    inductor_config.cpp.enable_kernel_profile = True  # generated kernels as named ranges
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:rows]
    return [(e.key, e.self_cpu_time_total / 1000) for e in events]


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-neurons", type=int, default=4096)
    p.add_argument("--block", type=int, default=256, help="T")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    p.add_argument(
        "--dropout", type=float, default=0.1, help="the official default; each way also runs without (once with 0)"
    )
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--profile", type=int, nargs="?", const=6, default=0, help="top entries of a profiled step")
    p.add_argument("--quick", action="store_true", help="a tiny model, one warm-up and one timed step")
    args = p.parse_args(argv)
    if args.quick:
        args.n_layer, args.n_embd, args.n_head, args.n_neurons = 2, 32, 2, 256
        args.block, args.batch, args.warmup, args.steps = 16, 2, 1, 1
    from bdh.model.kernels.cpu import native
    from bdh.train.runtime.hardware import keep_freed_memory

    torch.set_num_threads(args.threads)
    keep_freed_memory(True)
    ways = WAYS if native.available() else tuple(w for w in WAYS if "loops" not in w)
    print(
        f"model: L={args.n_layer} D={args.n_embd} h={args.n_head} n={args.n_neurons}, T={args.block}, batch "
        f"{args.batch}, {args.dtype}; torch {torch.__version__}, {args.threads} threads\nCPU: {cpu_description()}; "
        f"compiled loops: {'on' if native.available() else 'not built (their rows are left out)'}\n"
    )
    rows = [measure(way, d, args) for d in dict.fromkeys((args.dropout, 0.0)) for way in ways]
    print("| dropout | way | step ms | x eager | graphs per forward |\n|---:|---|---:|---:|---:|")
    for r in rows:
        base = next(b["ms"] for b in rows if b["dropout"] == r["dropout"] and b["way"] == ways[0])
        graphs_cell = str(r["graphs"]) if r["graphs"] else "-"
        print(f"| {r['dropout']} | {r['way']} | {r['ms']:,.0f} | {r['ms'] / base:.2f} | {graphs_cell} |")
    for r in rows if args.profile else []:
        print(f"\n{r['way']}, dropout {r['dropout']}: " + "; ".join(f"{n[:70]} {ms:,.0f} ms" for n, ms in r["top"]))
    return 0


if __name__ == "__main__":
    run(main)
