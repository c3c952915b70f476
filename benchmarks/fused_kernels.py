"""Milliseconds of the fused matmuls of one BDH layer at BDH's shapes against today's step: the encoder x = ReLU(v Dx)
with the ReLU and the cast in the matmul's epilogue (``encode/triton``, `bdh.model.kernels.triton.encode`; today
``encode/heads-relu``: the matmul writes the pre-activation, then ``F.relu``), and the gate with the decoder product,
E y with y = ReLU(z) * x and its dropout formed in the matmul's prologue (``read-in/gated-triton``,
`bdh.model.kernels.triton.read_in`; today ``read-in/per-head``: the fused gate writes y, ``F.dropout``, the per-head
product summed over the heads), and the encoder with the official RoPE in its epilogue too (``encode-rope/triton``,
`bdh.model.kernels.triton.encode.encode_rope_triton`; today ``encode-rope/heads-relu``: the matmul, ``F.relu``, then
`rotate_complex`'s fp32 copy, complex multiply and cast back), forward alone and forward + backward.

    python benchmarks/fused_kernels.py                     # paper size on CUDA: B 8, h 4, T 2048, N 8192, D 256, bf16
    python benchmarks/fused_kernels.py --batch 2 --length 512
    python benchmarks/fused_kernels.py --quick             # tiny, on the CPU through Triton's interpreter (the test)

Inputs as a BDH layer hands them: v (B, 1, T, D) shared by the heads, Dx (h, D, N), z and x (B, h, T, N), E (h N, D),
under bf16 autocast on CUDA (fp32 with ``--quick``). One row per kernel: the medians of ``--repeats`` timed calls
after one warm-up, tokens/s of the forward + backward (B T / time), and the ratio to today's row of the same step.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from _shared import Parser, run

KERNELS = (
    "encode/heads-relu",
    "encode/triton",
    "read-in/per-head",
    "read-in/gated-triton",
    "encode-rope/heads-relu",
    "encode-rope/triton",
)


def call(kernel: str, x: dict, p: float, backward: bool) -> None:
    """One forward (and backward) of ``kernel`` on fresh leaves of ``x``."""
    from bdh.model.kernels.pytorch.fused import relu_mul
    from bdh.model.kernels.pytorch.rope import rotate_complex
    from bdh.model.kernels.triton.encode import encode_rope_triton, encode_triton
    from bdh.model.kernels.triton.read_in import gated_read_in_triton

    leaves = {n: t.detach().requires_grad_(backward) for n, t in x.items() if n not in ("cos", "sin")}
    v, W, z, a, E = (leaves[n] for n in ("v", "W", "z", "x", "E"))
    if kernel == "encode/triton":
        out = encode_triton(v, W)
    elif kernel == "encode/heads-relu":
        out = F.relu(v @ W)
    elif kernel == "encode-rope/triton":
        out = encode_rope_triton(v, W, x["cos"], x["sin"])  # (x, R x): the loss reads both
    elif kernel == "encode-rope/heads-relu":
        h = F.relu(v @ W)
        out = h, rotate_complex(h, x["cos"], x["sin"])
    elif kernel == "read-in/gated-triton":
        out = gated_read_in_triton(z, a, E, p=p)
    else:
        H, N = z.shape[1], z.shape[3]
        out = (F.dropout(relu_mul(z, a), p) @ E.view(H, N, -1)).sum(dim=1, keepdim=True)
    if backward:
        sum(o.float().square().mean() for o in (out if isinstance(out, tuple) else (out,))).backward()


def milliseconds(kernel: str, x: dict, p: float, backward: bool, repeats: int) -> float:
    device = x["v"].device
    cuda = device.type == "cuda"

    def once() -> float:
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast(device.type, torch.bfloat16, enabled=cuda), torch.set_grad_enabled(backward):
            call(kernel, x, p, backward)
        if cuda:
            torch.cuda.synchronize()
        return 1e3 * (time.perf_counter() - start)

    once()  # warm-up (and the kernel's compile)
    return statistics.median(once() for _ in range(repeats))


def inputs(B: int, H: int, T: int, N: int, D: int, device: torch.device) -> dict:
    from bdh.model.kernels.pytorch.rope import frequencies, rope_tables

    g = torch.Generator(device=device).manual_seed(0)
    low = torch.bfloat16 if device.type == "cuda" else torch.float32  # z and x as autocast's products hand them
    cos, sin = rope_tables("rope", frequencies("rope", N, 2.0**16).to(device), 0, T)
    return dict(
        cos=cos,
        sin=sin,
        v=torch.randn(B, 1, T, D, generator=g, device=device),
        W=torch.randn(H, D, N, generator=g, device=device) / D**0.5,
        z=torch.randn(B, H, T, N, generator=g, device=device).to(low),
        x=torch.randn(B, H, T, N, generator=g, device=device).relu().to(low),
        E=torch.randn(H * N, D, generator=g, device=device) / (H * N) ** 0.5,
    )


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--neurons", type=int, default=8192, help="N = n / h, the activations' width a head")
    parser.add_argument("--embd", type=int, default=256, help="D, the width of v")
    parser.add_argument("--dropout", type=float, default=0.1, help="the rate on y (both read-in rows)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny sizes on the CPU, Triton's interpreter")
    args = parser.parse_args(argv)
    if min(args.batch, args.heads, args.length, args.neurons, args.embd, args.repeats) < 1:
        parser.error("every size and --repeats must be positive")
    if not 0 <= args.dropout < 1:
        parser.error(f"--dropout must be in [0, 1), got {args.dropout}")
    if args.quick:
        if "triton" in sys.modules and not os.environ.get("TRITON_INTERPRET"):
            parser.error("--quick needs Triton's interpreter, set before Triton is imported (TRITON_INTERPRET=1)")
        os.environ.setdefault("TRITON_INTERPRET", "1")
        (B, H, T, N, D), device = (1, 2, 20, 24, 8), torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            parser.error("the Triton kernels need a CUDA GPU (or --quick: the interpreter at tiny sizes)")
        (B, H, T, N, D), device = (args.batch, args.heads, args.length, args.neurons, args.embd), torch.device("cuda")
    x = inputs(B, H, T, N, D, device)
    print(f"| kernel | ms forward (B {B}, h {H}, T {T}, N {N}, D {D}) | ms fwd + bwd | tokens/s | / today's |")
    print("|---|---|---|---|---|")
    today = {}
    for kernel in KERNELS:
        fwd = milliseconds(kernel, x, args.dropout, False, args.repeats)
        both = milliseconds(kernel, x, args.dropout, True, args.repeats)
        base = today.setdefault(kernel.split("/")[0], both)  # the first row of a step is today's
        print(f"| {kernel} | {fwd:.3f} | {both:.3f} | {1e3 * B * T / both:,.0f} | {base / both:.3g} |", flush=True)
    return 0


if __name__ == "__main__":
    run(main)
