"""A roofline model of one BDH training step on a GPU, today's kernels against a fused step, from the kernels' design.

    python benchmarks/roofline.py                       # paper size (L=6, D=256, h=4, n=32768), 16,384 tokens, T=2048
    python benchmarks/roofline.py --peak-tflops 769.7 --bandwidth 4.3   # limits measured instead of the data sheet's
    python benchmarks/roofline.py --state-stride 2      # and the fused step with chunk states every 2 chunks

Every pass of a layer over the N-wide activations (B, h, T, N) is listed with the bytes it reads and writes per
neuron and token (bf16 activations: 2 bytes, the bool dropout mask 1; fp32 where the code upcasts) and the FLOPs it
does; D-wide tensors (v, a, LN) are n / D = 128 times smaller and left out. A pass takes max(FLOPs / peak,
bytes / bandwidth) and the passes run one after another, so the step takes their sum, plus the weights' casts and
the optimiser's pass over the parameters. The FLOPs are those of `bdh.model.sizes.train_flops_per_token` (the count
the benchmarks' MFU divides by): 2 n D per matmul forward and twice that backward, the chunked attention's
A = 2 C (n + h D) + 4 n D forward and 2 A backward, the readout's 2 D V and 4 D V.

``today``: the CUDA bf16 step as `bdh.model.kernels.choose` picks it for the chunked form (``BDH_TRITON`` on):
ReLU, then RoPE as a complex multiply in fp32 (`pytorch.rope.rotate_complex`: bf16 has no complex kernels),
the Triton chunked attention (`triton.chunked`: the chunk states, D / C times the size of q, written in bf16 by
the scan and read by the output and gradient kernels; the forward's states recomputed in the backward), the gate
`pytorch.fused.GateDrop` (ReLU(z) kept for the backward), `F.dropout` (a bool mask), and autograd's backward of
each. ``fused``: what issue 58 asks for: ReLU and RoPE in the epilogue of Dx v (x and R x written once, in bf16),
y = ReLU(z) x formed with its dropout mask (a counter-based generator) in the prologue of E y and never written, the
gate's and dropout's backward in the epilogue of the matmul that produces dy, RoPE's and ReLU's backward and the sum
with the gate's dx in the epilogue of the attention's key-gradient kernel; the attention kernels as today.
``--state-stride R`` adds a row: the fused step whose attention kernels keep a chunk state at every R-th chunk
boundary only (`triton.chunked`'s ``state_stride``, not yet measured: each kernel that reads a state rebuilds the
one it needs from the last kept one with up to R - 1 chunk updates, K^T V over those chunks' tokens), so every
pass's state bytes are divided by R; the
rebuilds' FLOPs (on average (R - 1) n D per token and state read) are not counted, as the recomputed scan's are not:
at R = 2 the attention passes stay below the ridge point. Assumed: a Triton program's tile of q, k or a chunk state
read by the D / BD programs of one chunk comes from L2 (counted once), and each kernel reaches the bandwidth given.
docs/performance.md ("A roofline") quotes the output.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass

from _shared import Parser, run

#: the H200 SXM data sheet: dense bf16 matmul TFLOP/s and HBM3e TB/s
H200_TFLOPS, H200_TBS = 989.0, 4.8
#: bytes of a bf16 activation, an fp32 one, a bool mask
BF16, FP32, MASK = 2, 4, 1


@dataclass(frozen=True)
class Pass:
    """One pass of a layer: the bytes it reads and writes per neuron and token, and its FLOPs per token: ``matmuls``
    n x D matmuls (2 n D each), ``attention`` times the attention's A (the model count: A forward, 2 A backward;
    the recomputed scan's own FLOPs are not counted, as the MFU of the benchmarks does not)."""

    name: str
    phase: str
    read: float
    write: float
    matmuls: float = 0.0
    attention: float = 0.0


def _attention(states: float, fused: bool) -> list[Pass]:
    """The Triton chunked attention (`triton.chunked`); ``states``: bytes of the chunk states per neuron and token
    (D / C bf16 numbers). Forward: the scan reads k and writes the states; the read reads q, k and the states.
    Backward: the scan again, the reverse scan (q in, dstates out), the key gradients (q, k, states, dstates in;
    dq + dk out, the keys being the queries), dv (k, q, dstates in)."""
    keys = [Pass("attention: key gradients dq + dk", "backward", 2 * BF16 + 2 * states, BF16, attention=0.5)]
    if fused:  # + RoPE's inverse, the gate's dx and ReLU's mask (x) in its epilogue: it writes dL/dh
        keys = [Pass("attention: key gradients -> dL/dh (RoPE, ReLU, + gate dx in epilogue)", "backward",
                     2 * BF16 + 2 * states + 2 * BF16, BF16, attention=0.5)]  # fmt: skip
    return [
        Pass("attention: state scan", "forward", BF16, states, attention=0.5),
        Pass("attention: read", "forward", 2 * BF16 + states, 0.0, attention=0.5),
        Pass("attention: state scan (recomputed)", "backward", BF16, states, attention=0.5),
        Pass("attention: reverse scan", "backward", BF16, states, attention=0.5),
        *keys,
        Pass("attention: dv", "backward", 2 * BF16 + states, 0.0, attention=0.5),
    ]


def today(states: float) -> list[Pass]:
    """Today's CUDA bf16 step, pass by pass (module docstring)."""
    fwd = [
        Pass("h = Dx v", "forward", 0.0, BF16, matmuls=1.0),
        Pass("x = ReLU(h)", "forward", BF16, BF16),
        Pass("RoPE: x to fp32", "forward", BF16, FP32),
        Pass("RoPE: complex multiply", "forward", FP32, FP32),
        Pass("RoPE: to bf16", "forward", FP32, BF16),
        Pass("z = Dy LN(a)", "forward", 0.0, BF16, matmuls=1.0),
        Pass("gate: ReLU(z) (kept)", "forward", BF16, BF16),
        Pass("gate: y = ReLU(z) x", "forward", 2 * BF16, BF16),
        Pass("dropout (mask written)", "forward", BF16, BF16 + MASK),
        Pass("E y", "forward", BF16, 0.0, matmuls=1.0),
    ]
    bwd = [
        Pass("dy = dE E^T", "backward", 0.0, BF16, matmuls=1.0),
        Pass("dE = y^T d(Ey)", "backward", BF16, 0.0, matmuls=1.0),
        Pass("dropout backward", "backward", BF16 + MASK, BF16),
        Pass("gate backward: g x", "backward", 2 * BF16, BF16),
        Pass("gate backward: dz (threshold)", "backward", 2 * BF16, BF16),
        Pass("gate backward: dx = g ReLU(z)", "backward", 2 * BF16, BF16),
        Pass("d LN(a) = dz Dy^T", "backward", BF16, 0.0, matmuls=1.0),
        Pass("dDy", "backward", BF16, 0.0, matmuls=1.0),
        Pass("RoPE backward: to fp32", "backward", BF16, FP32),
        Pass("RoPE backward: complex multiply", "backward", FP32, FP32),
        Pass("RoPE backward: to bf16", "backward", FP32, BF16),
        Pass("dx: gate + attention paths summed", "backward", 2 * BF16, BF16),
        Pass("ReLU backward", "backward", 2 * BF16, BF16),
        Pass("dv = dh Dx^T", "backward", BF16, 0.0, matmuls=1.0),
        Pass("dDx", "backward", BF16, 0.0, matmuls=1.0),
    ]
    return fwd + _attention(states, fused=False) + bwd


def fused(states: float) -> list[Pass]:
    """The fused step (module docstring), pass by pass."""
    fwd = [
        Pass("h = Dx v -> x, R x (ReLU, RoPE in epilogue)", "forward", 0.0, 2 * BF16, matmuls=1.0),
        Pass("z = Dy LN(a)", "forward", 0.0, BF16, matmuls=1.0),
        Pass("E (ReLU(z) x mask) (y formed in prologue)", "forward", 2 * BF16, 0.0, matmuls=1.0),
    ]
    bwd = [
        Pass("dy = dE E^T -> dz, gate dx (epilogue)", "backward", 2 * BF16, 2 * BF16, matmuls=1.0),
        Pass("dE = y^T d(Ey) (y formed in prologue)", "backward", 2 * BF16, 0.0, matmuls=1.0),
        Pass("d LN(a) = dz Dy^T", "backward", BF16, 0.0, matmuls=1.0),
        Pass("dDy", "backward", BF16, 0.0, matmuls=1.0),
        Pass("dv = dh Dx^T", "backward", BF16, 0.0, matmuls=1.0),
        Pass("dDx", "backward", BF16, 0.0, matmuls=1.0),
    ]
    return fwd + _attention(states, fused=True) + bwd


DESIGNS = {"today": today, "fused": fused}


@dataclass(frozen=True)
class Shape:
    """The model and the step: L, D, h, n, V, tokens per step, the window T and the kernel's chunk C."""

    n_layer: int = 6
    n_embd: int = 256
    n_head: int = 4
    n_neurons: int = 32768
    vocab_size: int = 256
    tokens: int = 16384
    block: int = 2048
    chunk: int = 64

    def attention_flops(self) -> float:
        """A: the chunked form's forward FLOPs per token and layer (`bdh.model.sizes.forward_flops_per_token`)."""
        n, D, c = self.n_neurons, self.n_embd, min(self.chunk, self.block)
        return 2 * c * (n + D * self.n_head) + 4 * n * D

    def fixed_bytes(self) -> float:
        """Bytes per step that do not scale with n x tokens: per layer the weights' bf16 casts (read fp32, write
        bf16) and their reads by the forward and backward matmuls, the fp32 weight gradients accumulated over the
        layers; once a step, fused AdamW over every parameter (read p, g, m, v; write p, m, v)."""
        weights = 3 * self.n_neurons * self.n_embd
        per_layer = weights * (FP32 + BF16 + BF16) + weights * (2 * BF16 + 2 * FP32)
        params = weights + 2 * self.vocab_size * self.n_embd
        return self.n_layer * per_layer + params * 7 * FP32


def step(design: str, shape: Shape, tflops: float, tbs: float, stride: int = 1) -> dict:
    """The step of ``design`` at ``shape`` under the limits: per pass and in total, FLOPs, bytes and seconds;
    ``stride``: a chunk state kept every ``stride`` chunks (module docstring)."""
    nD = shape.n_neurons * shape.n_embd
    units = shape.n_layer * shape.tokens  # passes run once per layer, over every token of the step
    states = BF16 * shape.n_embd / min(shape.chunk, shape.block) / stride
    rows = []
    for p in DESIGNS[design](states):
        flops = units * (2 * nD * p.matmuls + shape.attention_flops() * p.attention)
        moved = units * shape.n_neurons * (p.read + p.write)
        rows.append({"pass": p.name, "phase": p.phase, "flops": flops, "bytes": moved})
    readout = 6 * shape.n_embd * shape.vocab_size * shape.tokens
    rows.append({"pass": "readout and weights, optimiser", "phase": "step", "flops": readout,
                 "bytes": shape.fixed_bytes()})  # fmt: skip
    for r in rows:
        r["seconds"] = max(r["flops"] / (tflops * 1e12), r["bytes"] / (tbs * 1e12))
    seconds = sum(r["seconds"] for r in rows)
    flops = sum(r["flops"] for r in rows)
    return {
        "design": design if stride == 1 else f"{design}, states every {stride} chunks",
        "passes": rows,
        "flops": flops,
        "bytes": sum(r["bytes"] for r in rows),
        "seconds": seconds,
        "tokens_per_s": shape.tokens / seconds,
        "mfu": flops / seconds / (tflops * 1e12),
    }


def report(shape: Shape, tflops: float, tbs: float, stride: int = 1) -> str:
    """The tables: each design's totals, then its passes (GB and ms per step); with ``stride`` > 1 the fused step
    with a chunk state every ``stride`` chunks too."""
    steps = [step(d, shape, tflops, tbs) for d in DESIGNS]
    steps += [step("fused", shape, tflops, tbs, stride)] if stride > 1 else []
    lines = [
        f"L={shape.n_layer} D={shape.n_embd} h={shape.n_head} n={shape.n_neurons}, {shape.tokens:,} tokens a step at "
        f"T={shape.block} (chunk {min(shape.chunk, shape.block)}); limits {tflops:g} TFLOP/s, {tbs:g} TB/s",
        "",
        "| step | TFLOP a step | HBM GB a step | FLOP/byte | predicted ms | tokens/s | MFU % |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in steps:
        lines.append(
            f"| {s['design']} | {s['flops'] / 1e12:.1f} | {s['bytes'] / 1e9:.0f} | {s['flops'] / s['bytes']:.0f} | "
            f"{s['seconds'] * 1e3:.1f} | {s['tokens_per_s']:,.0f} | {100 * s['mfu']:.0f} |"
        )
    for s in steps:
        lines += ["", f"{s['design']}, pass by pass:", "", "| pass | phase | GB | TFLOP | ms |"]
        lines.append("|---|---|---:|---:|---:|")
        for r in s["passes"]:
            cells = f"{r['bytes'] / 1e9:.1f} | {r['flops'] / 1e12:.2f} | {r['seconds'] * 1e3:.2f}"
            lines.append(f"| {r['pass']} | {r['phase']} | {cells} |")
    return "\n".join(lines)


def versus(results: dict, tbs: float = H200_TBS) -> list[str]:
    """The roofline beside a training table of `benchmarks/gpu.py` (its JSON ``results``): for each row of our
    step on the Triton chunked kernels, the tokens/s measured, today's and the fused step's prediction at the
    run's measured matmul peak and ``tbs``, and measured / predicted (what `benchmarks/gpu_all.py` puts in its
    summary: every GPU run checks the prediction)."""
    cfg, peak = results["bdh"], results["peak_tflops"]
    rows = [r for r in results.get("training", []) if r["loop"] == "ours" and "triton" in r["form"]]
    if not rows:
        return ["(no row of our step on the Triton chunked kernels in this table: nothing to compare)"]
    lines = [
        f"Limits: the matmul peak measured in the run ({peak:.1f} TFLOP/s) and {tbs:g} TB/s.",
        "",
        "| T | batch | measured tokens/s | roofline today | measured / roofline | roofline fused |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        shape = Shape(cfg["n_layer"], cfg["n_embd"], cfg["n_head"], cfg["n_neurons"], cfg["vocab_size"],
                      tokens=r["T"] * r["batch"], block=r["T"], chunk=min(cfg["chunk_size"], 64))  # fmt: skip
        now, fused_ = (step(d, shape, peak, tbs)["tokens_per_s"] for d in ("today", "fused"))
        measured = r["tok_s"] if isinstance(r["tok_s"], float) else float("nan")
        lines.append(
            f"| {r['T']} | {r['batch']} | {measured:,.0f} | {now:,.0f} | {measured / now:.2f} | {fused_:,.0f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    fields = Shape()
    for name in ("n_layer", "n_embd", "n_head", "n_neurons", "tokens", "block", "chunk"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(fields, name))
    p.add_argument("--peak-tflops", type=float, default=H200_TFLOPS, help="bf16 matmul TFLOP/s (H200 data sheet)")
    p.add_argument("--bandwidth", type=float, default=H200_TBS, help="HBM TB/s (H200 data sheet)")
    p.add_argument("--state-stride", type=int, default=1, help="also the fused step with states every R chunks")
    args = p.parse_args(argv)
    values = {k: getattr(args, k) for k in ("n_layer", "n_embd", "n_head", "n_neurons", "tokens", "block", "chunk")}
    bad = [k for k, v in values.items() if v < 1] + [k for k in ("peak_tflops", "bandwidth") if getattr(args, k) <= 0]
    bad += ["state_stride"] if args.state_stride < 1 else []
    if bad or values["n_neurons"] % values["n_head"]:
        what = f"--{bad[0].replace('_', '-')} must be positive" if bad else "--n-neurons must be a multiple of --n-head"
        print(f"error: {what}", file=sys.stderr)
        return 2
    print(report(Shape(**values), args.peak_tflops, args.bandwidth, args.state_stride))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        run(main)
