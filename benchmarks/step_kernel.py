"""Microseconds of one layer's recurrent step in generation at BDH's shapes: the state read and write of one token as
one Triton kernel (``triton``, `bdh.model.kernels.triton.step`) against the PyTorch in-place step (``pytorch``,
`bdh.model.kernels.pytorch.attention.recurrent`: the read, ``baddbmm_``, the damping's ``mul_``); issue 58, point 5.

    python benchmarks/step_kernel.py                     # paper size on CUDA: h 4, N 8192, D 256, batches 1, 8, 64
    python benchmarks/step_kernel.py --batches 1 --calls 200
    python benchmarks/step_kernel.py --quick             # tiny, on the CPU through Triton's interpreter (the test)

Inputs as the generation step hands them: one token's ReLU queries (the keys), one value vector shared by the heads,
U's damping, the fp32 state (B, h, N, D). On CUDA ``--calls`` steps are captured in one CUDA graph and replayed, as
`bdh.model.decoder.StateDecoder` replays its step; a row is the median over ``--repeats`` replays of the time a step,
and the state's bytes read and written once a step (2 x 4 B h N D) over that time.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch
from _shared import Parser, run

KERNELS = ("pytorch", "triton")


def inputs(B: int, H: int, N: int, D: int, device: torch.device) -> dict:
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(B, H, 1, N, generator=g, device=device).relu()
    return dict(
        q=q,
        v=torch.randn(B, 1, 1, D, generator=g, device=device),
        state=torch.randn(B, H, N, D, generator=g, device=device) / N,
        log_u=torch.linspace(0.9, 0.999, H, device=device).log(),
    )


def step(kernel: str, x: dict) -> torch.Tensor:
    from bdh.model.kernels.pytorch.attention import recurrent
    from bdh.model.kernels.triton.step import recurrent_step_triton

    q, v, state, log_u = x["q"], x["v"], x["state"], x["log_u"]
    if kernel == "triton":
        return recurrent_step_triton(q, q, v, state=state, log_u=log_u)
    return recurrent(q, q, v, log_u=log_u, state=state, inplace=True)[0]


def microseconds(kernel: str, x: dict, calls: int, repeats: int) -> float:
    """The median time of one step over ``repeats`` runs of ``calls`` steps (one CUDA graph on CUDA)."""
    cuda = x["q"].is_cuda

    def steps() -> None:
        for _ in range(calls):
            step(kernel, x)

    if cuda:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            steps()  # warm-up (and the kernel's compile) outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            steps()
        steps = graph.replay
    steps()  # warm-up
    times = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        steps()
        if cuda:
            torch.cuda.synchronize()
        times.append(1e6 * (time.perf_counter() - start) / calls)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--keys", type=int, default=8192, help="N = n / h, the state's rows a head")
    parser.add_argument("--values", type=int, default=256, help="D, the state's columns")
    parser.add_argument("--calls", type=int, default=100, help="steps a timed run (one CUDA graph)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny sizes on the CPU, Triton's interpreter")
    args = parser.parse_args(argv)
    if min(*args.batches, args.heads, args.keys, args.values, args.calls, args.repeats) < 1:
        parser.error("every size, --calls and --repeats must be positive")
    if args.quick:
        if "triton" in sys.modules and not os.environ.get("TRITON_INTERPRET"):
            parser.error("--quick needs Triton's interpreter, set before Triton is imported (TRITON_INTERPRET=1)")
        os.environ.setdefault("TRITON_INTERPRET", "1")
        batches, (H, N, D), device = [1, 2], (2, 96, 24), torch.device("cpu")
        calls, repeats = 2, min(args.repeats, 2)
    else:
        if not torch.cuda.is_available():
            parser.error("the Triton kernel needs a CUDA GPU (or --quick: the interpreter at tiny sizes)")
        batches, (H, N, D), device = args.batches, (args.heads, args.keys, args.values), torch.device("cuda")
        calls, repeats = args.calls, args.repeats
    print(f"| batch | kernel | us a step (h {H}, N {N}, D {D}, fp32 state) | state TB/s | pytorch / triton |")
    print("|---:|---|---:|---:|---:|")
    with torch.no_grad():
        for B in batches:
            x, times = inputs(B, H, N, D, device), {}
            for kernel in KERNELS:
                times[kernel] = microseconds(kernel, x, calls, repeats)
                rate = 2 * 4 * B * H * N * D / (1e6 * times[kernel])  # bytes / us -> TB/s
                ratio = times["pytorch"] / times[kernel]
                print(f"| {B} | {kernel} | {times[kernel]:.1f} | {rate:.3g} | {ratio:.3g} |", flush=True)
    return 0


if __name__ == "__main__":
    run(main)
