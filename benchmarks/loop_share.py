"""The wall-clock share of a training step spent in the compiled element-wise loops, timed without a profiler.

    python benchmarks/loop_share.py                    # bf16, T = 256, batch 8, perf.py's model (docs/performance.md)
    python benchmarks/loop_share.py --quick            # a tiny model, a few steps (a test)

`benchmarks/perf.py --profile` reads the shares from ``torch.profiler``, which adds its own cost to every
recorded operation; this times each call of the four loops of `bdh.model.kernels.cpu.native` (``relu_rope``,
``gate``, ``gate_back``, ``relu_rope_back``) with a wall clock around it, and the whole training step
(forward under autocast, cross-entropy, backward, AdamW) with the same clock, nothing else recorded. Prints,
per timed step after ``--warmup`` steps, the step's milliseconds, each loop's calls and mean milliseconds, and
the loops' share of the step; then the median share.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from _shared import Parser, cpu_description, run

LOOPS = ("relu_rope", "gate", "gate_back", "relu_rope_back")


@contextlib.contextmanager
def timed_loops() -> Iterator[dict[str, list[float]]]:
    """The four compiled loops wrapped by a wall clock while inside; yields name -> seconds of each call."""
    from bdh.model.kernels.cpu import native

    times: dict[str, list[float]] = {name: [] for name in LOOPS}
    originals = {name: getattr(native, name) for name in LOOPS}

    def wrap(name: str):
        fn = originals[name]

        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                times[name].append(time.perf_counter() - t)

        return timed

    try:
        for name in LOOPS:
            setattr(native, name, wrap(name))
        yield times
    finally:
        for name, fn in originals.items():
            setattr(native, name, fn)


def step_shares(
    args: argparse.Namespace, timer: Callable[[], contextlib.AbstractContextManager] = timed_loops
) -> list[tuple[float, dict[str, tuple[int, float]]]]:
    """(step seconds, name -> (calls, seconds)) of each timed step; ``timer`` yields name -> seconds of each call
    (default `timed_loops`; `benchmarks/matmul_share.py` times the matmuls)."""
    from bdh.model import BDH, BDHConfig
    from bdh.train.runtime.hardware import keep_freed_memory

    keep_freed_memory(True)  # as the trainer does: no page faults from returning memory to the system
    cfg = BDHConfig(
        n_layer=args.n_layer, n_embd=args.n_embd, n_head=args.n_head, n_neurons=args.n_neurons, vocab_size=256,
        dropout=args.dropout, damping="alibi",
    )  # fmt: skip
    torch.manual_seed(0)
    model = BDH(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, 256, (args.batch, args.block + 1))
    x, y = idx[:, :-1], idx[:, 1:]
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if args.setting == "bf16" else contextlib.nullcontext()
    out = []
    with timer() as times:
        for step in range(args.warmup + args.steps):
            for v in times.values():
                v.clear()
            t = time.perf_counter()
            with autocast:
                logits = model(x)
            F.cross_entropy(logits.float().reshape(-1, 256), y.reshape(-1)).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            seconds = time.perf_counter() - t
            if step >= args.warmup:
                out.append((seconds, {k: (len(v), sum(v)) for k, v in times.items()}))
    return out


def parser(doc: str) -> argparse.ArgumentParser:
    """The model and step options of this script (and of `benchmarks/matmul_share.py`)."""
    p = Parser(description=doc.split("\n")[0])
    p.add_argument("--setting", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--block", type=int, default=256, help="T")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-neurons", type=int, default=4096)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="a tiny model and two steps (a test)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__).parse_args(argv)
    if args.quick:
        args.block, args.batch, args.n_layer, args.n_embd, args.n_neurons = 32, 2, 2, 32, 256
        args.warmup, args.steps = 1, 2
    from bdh.model.kernels.cpu import native

    if not native.available():
        print("the compiled loops are not built here (bdh.model.kernels.cpu.native): nothing to time", file=sys.stderr)
        return 1
    torch.set_num_threads(args.threads)
    words = [f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "quick"]
    print(f"command: `python benchmarks/loop_share.py {' '.join(words)}`\nCPU: {cpu_description()}")
    print("| step ms | " + " | ".join(f"{n} calls x ms" for n in LOOPS) + " | loops' share of the step |")
    print("|---:|" + "---:|" * (len(LOOPS) + 1))
    shares = []
    for seconds, loops in step_shares(args):
        total = sum(s for _, s in loops.values())
        shares.append(total / seconds)
        cells = [f"{c} x {1e3 * s / c:.2f}" if c else "0" for c, s in (loops[n] for n in LOOPS)]
        print(f"| {1e3 * seconds:.0f} | " + " | ".join(cells) + f" | {total / seconds:.1%} |")
    print(f"median share of the four compiled loops: {statistics.median(shares):.1%}")
    return 0


if __name__ == "__main__":
    run(main)
