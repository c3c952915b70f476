"""Milliseconds per forward + backward of one layer's attention at BDH's shapes: the delta rule in Triton
(``delta-chunked-triton``) against its PyTorch chunked form (``delta-chunked``) and the plain rule's Triton kernels
(``chunked-triton``): issue 58's ratio (the delta rule at >= 0.7x the plain rule's tokens/s) at the kernel level;
and the plain rule's kernels with a chunk state kept every 2 and 4 chunks only (``chunked-triton-r2``, ``-r4``:
``state_stride``, the backward's chunk-state scan reworked) against every chunk's (``chunked-triton``, R = 1).

    python benchmarks/delta_kernels.py                     # paper size on CUDA: B 8, h 4, T 2048, N 8192, D 256, bf16
    python benchmarks/delta_kernels.py --batch 2 --length 512 --keys 1024
    python benchmarks/delta_kernels.py --quick             # tiny, on the CPU through Triton's interpreter (the test)

Inputs as a BDH layer hands them: ReLU queries, unit keys (the delta rule) or the queries (the plain rule), one value
vector shared by the heads, U's damping, a sigmoid write gate, under bf16 autocast on CUDA (fp32 with ``--quick``).
One row per kernel: the median of ``--repeats`` timed calls after one warm-up, and its tokens/s (B T / time).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch
from _shared import Parser, run

#: the plain rule's kernels by their chunk-state stride R (`bdh.model.kernels.triton.chunked`)
PLAIN = {"chunked-triton": 1, "chunked-triton-r2": 2, "chunked-triton-r4": 4}
KERNELS = ("chunked-triton", "delta-chunked-triton", "delta-chunked", "chunked-triton-r2", "chunked-triton-r4")


def inputs(B: int, H: int, T: int, N: int, D: int, device: torch.device) -> dict:
    from bdh.model.kernels.pytorch.state_rules import unit_keys

    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(B, H, T, N, generator=g, device=device).relu()
    log_u = torch.linspace(0.9, 0.999, H, device=device).log()
    return dict(
        q=q,
        k=unit_keys(torch.randn(B, H, T, N, generator=g, device=device).relu()),
        v=torch.randn(B, 1, T, D, generator=g, device=device),
        log_u=log_u,
        log_g=log_u.view(1, H, 1).expand(B, H, T).contiguous(),
        beta=torch.sigmoid(torch.randn(B, H, T, generator=g, device=device)),
    )


def call(kernel: str, x: dict, chunk: int):
    """One forward and backward of ``kernel`` on fresh leaves of ``x``."""
    from bdh.model.kernels.pytorch.state_rules import chunked
    from bdh.model.kernels.triton.chunked import chunked_triton
    from bdh.model.kernels.triton.delta import delta_chunked_triton

    q, k, v = (x[n].detach().requires_grad_() for n in ("q", "k", "v"))
    if kernel in PLAIN:
        out, _ = chunked_triton(q, q, v, chunk_size=chunk, log_u=x["log_u"], state_stride=PLAIN[kernel])
    else:
        form = delta_chunked_triton if kernel == "delta-chunked-triton" else chunked
        out, _ = form(q, k, v, chunk_size=chunk, log_g=x["log_g"], beta=x["beta"])
    out.float().square().mean().backward()


def milliseconds(kernel: str, x: dict, chunk: int, repeats: int, device: torch.device) -> float:
    def once() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            call(kernel, x, chunk)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return 1e3 * (time.perf_counter() - start)

    once()  # warm-up (and the kernels' compile)
    return statistics.median(once() for _ in range(repeats))


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--keys", type=int, default=8192, help="N = n / h, the keys' width a head")
    parser.add_argument("--values", type=int, default=256, help="D, the values' width")
    parser.add_argument("--chunk", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kernels", nargs="+", choices=KERNELS, default=list(KERNELS))
    parser.add_argument("--quick", action="store_true", help="tiny sizes on the CPU, Triton's interpreter")
    args = parser.parse_args(argv)
    sizes = (args.batch, args.heads, args.length, args.keys, args.values, args.chunk, args.repeats)
    if min(sizes) < 1:
        parser.error("every size, --chunk and --repeats must be positive")
    if args.quick:
        if "triton" in sys.modules and not os.environ.get("TRITON_INTERPRET"):
            parser.error("--quick needs Triton's interpreter, set before Triton is imported (TRITON_INTERPRET=1)")
        os.environ.setdefault("TRITON_INTERPRET", "1")
        B, H, T, N, D = 1, 2, 20, 24, 8
        device = torch.device("cpu")
    else:
        B, H, T, N, D = args.batch, args.heads, args.length, args.keys, args.values
        if not torch.cuda.is_available():
            parser.error("the Triton kernels need a CUDA GPU (or --quick: the interpreter at tiny sizes)")
        device = torch.device("cuda")
    x = inputs(B, H, T, N, D, device)
    shape = f"B {B}, h {H}, T {T}, N {N}, D {D}, chunk {args.chunk}"
    print(f"| kernel | ms (fwd + bwd; {shape}) | tokens/s | / chunked-triton |")
    print("|---|---|---|---|")
    times = {}
    for kernel in args.kernels:
        times[kernel] = milliseconds(kernel, x, args.chunk, args.repeats, device)
        base = times.get("chunked-triton")
        ratio = f"{base / times[kernel]:.2f}" if base else "-"
        print(f"| {kernel} | {times[kernel]:.2f} | {1e3 * B * T / times[kernel]:,.0f} | {ratio} |", flush=True)
    return 0


if __name__ == "__main__":
    run(main)
