"""Milliseconds of one layer's encoder x = ReLU(v Dx) at BDH's shapes: the Triton matmul with the ReLU and the cast in
its epilogue (``triton``, `bdh.model.kernels.triton.encode`) against today's step (``heads-relu``: the per-head matmul
writing the pre-activation, then ``F.relu``), forward alone and forward + backward.

    python benchmarks/encode_kernels.py                    # paper size on CUDA: B 8, h 4, T 2048, N 8192, D 256, bf16
    python benchmarks/encode_kernels.py --batch 2 --length 512
    python benchmarks/encode_kernels.py --quick            # tiny, on the CPU through Triton's interpreter (the test)

Inputs as a BDH layer hands them: v (B, 1, T, D) shared by the heads, Dx (h, D, N), under bf16 autocast on CUDA (fp32
with ``--quick``). One row per kernel: the medians of ``--repeats`` timed calls after one warm-up, tokens/s of the
forward + backward (B T / time), and the ratio to ``heads-relu``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from _shared import Parser, run

KERNELS = ("heads-relu", "triton")


def call(kernel: str, v: torch.Tensor, W: torch.Tensor, backward: bool) -> None:
    """One forward (and backward) of ``kernel`` on fresh leaves."""
    from bdh.model.kernels.triton.encode import encode_triton

    v, W = v.detach().requires_grad_(backward), W.detach().requires_grad_(backward)
    x = encode_triton(v, W) if kernel == "triton" else F.relu(v @ W)
    if backward:
        x.float().square().mean().backward()


def milliseconds(kernel: str, v, W, backward: bool, repeats: int) -> float:
    cuda = v.device.type == "cuda"

    def once() -> float:
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast(v.device.type, dtype=torch.bfloat16, enabled=cuda), torch.set_grad_enabled(backward):
            call(kernel, v, W, backward)
        if cuda:
            torch.cuda.synchronize()
        return 1e3 * (time.perf_counter() - start)

    once()  # warm-up (and the kernel's compile)
    return statistics.median(once() for _ in range(repeats))


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--neurons", type=int, default=8192, help="N = n / h, the activations' width a head")
    parser.add_argument("--embd", type=int, default=256, help="D, the width of v")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny sizes on the CPU, Triton's interpreter")
    args = parser.parse_args(argv)
    if min(args.batch, args.heads, args.length, args.neurons, args.embd, args.repeats) < 1:
        parser.error("every size and --repeats must be positive")
    if args.quick:
        if "triton" in sys.modules and not os.environ.get("TRITON_INTERPRET"):
            parser.error("--quick needs Triton's interpreter, set before Triton is imported (TRITON_INTERPRET=1)")
        os.environ.setdefault("TRITON_INTERPRET", "1")
        (B, H, T, N, D), device = (1, 2, 20, 24, 8), torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            parser.error("the Triton kernel needs a CUDA GPU (or --quick: the interpreter at tiny sizes)")
        (B, H, T, N, D), device = (args.batch, args.heads, args.length, args.neurons, args.embd), torch.device("cuda")
    g = torch.Generator(device=device).manual_seed(0)
    v = torch.randn(B, 1, T, D, generator=g, device=device)
    W = torch.randn(H, D, N, generator=g, device=device) / D**0.5
    print(f"| kernel | ms forward (B {B}, h {H}, T {T}, N {N}, D {D}) | ms fwd + bwd | tokens/s | / heads-relu |")
    print("|---|---|---|---|---|")
    base = None
    for kernel in KERNELS:
        fwd = milliseconds(kernel, v, W, False, args.repeats)
        both = milliseconds(kernel, v, W, True, args.repeats)
        base = base or both
        print(f"| {kernel} | {fwd:.3f} | {both:.3f} | {1e3 * B * T / both:,.0f} | {base / both:.3g} |", flush=True)
    return 0


if __name__ == "__main__":
    run(main)
