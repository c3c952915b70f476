"""How fast the matmuls of a training step run, by shape, against a square matmul's peak in the same run.

    python benchmarks/matmul_share.py                  # bf16, T = 256, batch 8, perf.py's model (docs/performance.md)
    python benchmarks/matmul_share.py --quick          # a tiny model, a few steps (a test)

`benchmarks/perf.py` reports a step's MFU: its model FLOPs per second against the peak of a square matmul. This
says where the gap lies: every matrix product PyTorch runs in the step (``mm``, ``addmm``, ``bmm``, ``baddbmm``,
forward and backward, seen below autocast by a `TorchDispatchMode`) is timed with a wall clock around the call,
grouped by operation, dtype and shape, and its GFLOP/s compared with the peak (`perf.child_peak`, measured before
and after the steps, the higher kept). Prints, per shape, the calls per step, milliseconds per step, GFLOP/s and
% of the peak; then the matmuls' share of the step, their rate overall, and the step's time were every matmul at
the peak (the bound the element-wise work and the shapes leave). The mode's Python call on every operation slows
the step, so the step and its non-matmul rest are read from the same steps run without it first.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator

import torch
from _shared import run
from loop_share import parser, step_shares
from perf import child_peak
from torch.utils._python_dispatch import TorchDispatchMode

MATMULS = {"mm", "addmm", "bmm", "baddbmm"}
DTYPES = {torch.bfloat16: "bf16", torch.float32: "fp32", torch.float16: "fp16", torch.float64: "fp64"}


def flops(key: str) -> float:
    """2 M K N (times the batch) of a key ``op dtype (b, m, k) x (k, n)``."""
    dims = [int(d) for d in key.split(" ", 2)[2].replace("(", "").replace(")", "").replace("x", ",").split(",") if d]
    *lhs, k2, n = dims
    return 2.0 * math.prod(lhs) * n


def _key(name: str, args: tuple) -> str:
    a, b = (args[1], args[2]) if name in ("addmm", "baddbmm") else (args[0], args[1])
    lhs = ", ".join(map(str, a.shape))
    return f"{name} {DTYPES.get(a.dtype, str(a.dtype))} ({lhs}) x ({', '.join(map(str, b.shape[-2:]))})"


class _Matmuls(TorchDispatchMode):
    """Times every matrix product dispatched while active, by `_key`."""

    def __init__(self) -> None:
        super().__init__()
        self.times: dict[str, list[float]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (PyTorch's signature)
        name = func.overloadpacket.__name__
        if name not in MATMULS:
            return func(*args, **(kwargs or {}))
        start = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        self.times.setdefault(_key(name, args), []).append(time.perf_counter() - start)
        return out


@contextlib.contextmanager
def untimed() -> Iterator[dict[str, list[float]]]:
    """Nothing timed: the step as it runs without the dispatch mode, whose Python call per operation slows it."""
    yield {}


@contextlib.contextmanager
def timed_matmuls() -> Iterator[dict[str, list[float]]]:
    """The step's matrix products timed while inside; yields key -> seconds of each call."""
    with _Matmuls() as mode:
        yield mode.times


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--peak-size", type=int, default=2048, help="the square matmul of the peak")
    args = p.parse_args(argv)
    if args.quick:
        args.block, args.batch, args.n_layer, args.n_embd, args.n_neurons = 32, 2, 2, 32, 256
        args.warmup, args.steps, args.peak_size = 1, 2, 256
    torch.set_num_threads(args.threads)
    dtype = "bf16" if args.setting == "bf16" else "fp32"
    peak = lambda: child_peak({"threads": args.threads, "size": args.peak_size, "dtype": dtype, "repeats": 3})  # noqa: E731
    before = peak()["gflops"]
    plain = sum(s for s, _ in step_shares(args, untimed)) / args.steps
    steps = step_shares(args, timed_matmuls)
    best = max(before, peak()["gflops"])
    words = [f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "quick"]
    print(f"command: `python benchmarks/matmul_share.py {' '.join(words)}`")
    print(f"{dtype} square matmul peak ({args.peak_size}): {best:,.0f} GFLOP/s\n")
    print(report(steps, best, plain))
    return 0


def report(steps: list[tuple[float, dict[str, tuple[int, float]]]], peak: float, plain: float) -> str:
    """The table by shape (means over the timed steps) and the summary lines; ``plain``: the step's seconds without
    the timing mode (the rest of the step is read against it)."""
    n = len(steps)
    timed_s = sum(s for s, _ in steps) / n
    step_s = min(plain, timed_s)
    keys = sorted(
        {k for _, shapes in steps for k in shapes}, key=lambda k: -sum(st[k][1] for _, st in steps if k in st)
    )
    lines = ["| matmul | calls / step | ms / step | GFLOP/s | % of peak |", "|---|---:|---:|---:|---:|"]
    total_s = total_flop = 0.0
    for k in keys:
        calls = sum(st[k][0] for _, st in steps if k in st) / n
        secs = sum(st[k][1] for _, st in steps if k in st) / n
        rate = flops(k) * calls / secs / 1e9
        total_s, total_flop = total_s + secs, total_flop + flops(k) * calls
        lines.append(f"| {k} | {calls:g} | {1e3 * secs:.2f} | {rate:,.0f} | {100 * rate / peak:.0f} |")
    rate = total_flop / total_s / 1e9
    at_peak = step_s - total_s + total_flop / peak / 1e9
    lines += [
        "",
        f"step {1e3 * step_s:.0f} ms without the timing mode ({1e3 * timed_s:.0f} ms with it); "
        f"matmuls {1e3 * total_s:.0f} ms ({total_s / step_s:.0%} of the step) at "
        f"{rate:,.0f} GFLOP/s ({100 * rate / peak:.0f}% of the peak); the rest {1e3 * (step_s - total_s):.0f} ms",
        f"every matmul at the peak: a step of {1e3 * at_peak:.0f} ms, MFU at most "
        f"{100 * total_flop / at_peak / 1e9 / peak:.0f}% (matmul FLOPs only)",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    run(main)
