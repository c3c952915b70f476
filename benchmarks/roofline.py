"""A roofline model of one BDH training step on a GPU, pass by pass from the kernels' design: the first GPU run's
step, today's step and a fused one.

    python benchmarks/roofline.py                       # paper size (L=6, D=256, h=4, n=32768), 16,384 tokens a step
    python benchmarks/roofline.py --peak-tflops 769.7 --bandwidth 4.3   # limits measured instead of the data sheet's
    python benchmarks/roofline.py --block 512 --form parallel           # the pass tables at another window
    python benchmarks/roofline.py --state-stride 2      # and today's and the fused step with chunk states every 2

First a table per window of `benchmarks/gpu.py`'s training table (T = 512, 2048, 8192, the step's tokens split into
T-long sequences, the attention form `gpu.best_form` picks: parallel at 512, chunked above), then the totals and the
passes at ``--block`` and ``--form``. Every pass of a layer over the N-wide activations (B, h, T, N) is listed with
the bytes it reads and writes per entry (bf16 activations: 2 bytes, the bool dropout mask 1, fp32 4) and the bytes
of a layer that do not scale with the entries: the B copies of a weight a broadcast per-head product makes (and the
B partial weight gradients it sums), the RoPE pair tables (T, N / 2: one angle a pair) in fp32, the chunked scans'
fp32 final states, the
parallel form's (B, h, T, T) scores. D-wide tensors (v, a, LN) are n / D = 128 times smaller and left out. A pass
takes max(FLOPs / peak, bytes / bandwidth) and the passes run one after another, so the step takes their sum, plus
the weights' casts and the optimiser's pass over the parameters. FLOPs per pass are those it runs: 2 n D per matmul
forward and twice that backward, the chunked attention's A = 2 C (n + h D) + 4 n D forward and 2 A backward (the
recomputed scan's own FLOPs not counted), the parallel form's 2 T n (x x^T) and 2 T h D (scores times v) per product.
MFU divides `bdh.model.sizes.train_flops_per_token` (the count of the benchmarks) by the step's time: the parallel
form's shared-key backward runs 2 T n a token fewer than that count.

``first-run``: the CUDA bf16 step that the first GPU run measured (docs/performance.md "GPU"): x = ReLU(h) after a
cuBLAS product, RoPE as a complex multiply in fp32 (`pytorch.rope.rotate_complex`), the attention below, the gate
`pytorch.fused.GateDrop` (ReLU(z) kept for the backward), `F.dropout` (a bool mask), E y per head, autograd's backward
of each; every per-head product broadcast over the batch (`torch.matmul`: B copies of the weight, B partial weight
gradients summed). ``today``: `bdh.model.kernels.choose`'s picks on CUDA now (docs/performance.md "What exists"):
x and R x in the epilogue of Dx v (`triton.encode.encode_rope_triton`: the pair tables read once a head, the B
sequences' rows of a column block sharing them in L2), z = Dy LN(a) by cuBLAS one product a head (`pytorch.per_head`:
Dy not copied; its backward's dDy keeps the B partial gradients), E y with y formed and its dropout drawn in the
prologue (`triton.read_in`: y never written, no mask), whose backward writes dz and the gate's dx from one product and
forms y again for dE; the encoder's backward dh = [x > 0] (g_x + R^T g_Rx) in one element-wise kernel whose programs
run position-major (the B h rows of a position together: its row of the pair tables read once a layer, from L2 by
the rest), writing dh with the heads outermost, then dv and dDx one product a head with the batch in its rows (no
copies). ``fused``:
what issue 58 asks for: today's forward without the weight copies, the gated read-in's backward as today's, RoPE's
and ReLU's backward and the sum with the gate's dx in the epilogue of the attention's key-gradient kernel (dh written
once, the tables read once a head); no broadcast copies. Attention: chunked, the Triton kernels (`triton.chunked`:
the chunk states, D / C times the size of q, written in bf16 by the scans and read by the output and gradient
kernels; the forward's states recomputed in the backward); parallel, `pytorch.shared_keys` (x x^T, the mask, the
scores times v; backward dA = (g v^T) W and dx = (dA + dA^T) x), in every design. ``--state-stride R`` adds two
rows: today's and the fused step whose kernels keep a chunk state at every R-th chunk boundary only
(`triton.chunked`'s ``state_stride``, ``BDH_TRITON_STATE_STRIDE``): every pass's state bytes divided by R, the
rebuilds' FLOPs not counted. Assumed: a tile of q, k, a chunk state or a weight read by several programs that run
together comes from L2 (counted once), and each kernel reaches the bandwidth given. docs/performance.md ("A
roofline") quotes the output; `versus` puts a GPU run's training table beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass, replace

from _shared import Parser, run

from bdh import BDHConfig
from bdh.model.kernels.triton.chunked import MAX_CHUNK
from bdh.model.sizes import forward_flops_per_token, train_flops_per_token

#: the H200 SXM data sheet: dense bf16 matmul TFLOP/s and HBM3e TB/s
H200_TFLOPS, H200_TBS = 989.0, 4.8
#: bytes of a bf16 activation, an fp32 one, a bool mask
BF16, FP32, MASK = 2, 4, 1
FORMS = ("chunked", "parallel")
#: what ``today`` counts: the kernels `bdh.model.kernels.choose` picks for a bf16 training pass with dropout on CUDA
#: (Triton importable), by attention form (tests/test_roofline.py checks them against ``choose``)
KERNELS = {
    form: {"encode": "triton", "attention": attention, "read_in": "gated-triton", "masks": "torch"}
    for form, attention in (("chunked", "chunked-triton"), ("parallel", "shared-keys"))
}


@dataclass(frozen=True)
class Pass:
    """One pass of a layer: the bytes it reads and writes per entry of (B, h, T, N), ``other`` bytes a layer beside
    them (weight copies, tables, final states, T x T scores), and the FLOPs it runs per token."""

    name: str
    phase: str
    read: float
    write: float
    other: float = 0.0
    flops: float = 0.0


@dataclass(frozen=True)
class Shape:
    """The model and the step: L, D, h, n, V, tokens per step, the window T, the kernels' chunk C and the form."""

    n_layer: int = 6
    n_embd: int = 256
    n_head: int = 4
    n_neurons: int = 32768
    vocab_size: int = 256
    tokens: int = 16384
    block: int = 2048
    chunk: int = MAX_CHUNK
    form: str = "chunked"

    def config(self) -> BDHConfig:
        """The model's config (the kernels' chunk as its chunk size)."""
        fields = ("n_layer", "n_embd", "n_head", "n_neurons", "vocab_size")
        return BDHConfig(**{k: getattr(self, k) for k in fields}, chunk_size=self.chunk, attention=self.form)

    @property
    def batch(self) -> int:
        return self.tokens // self.block

    @property
    def matmul(self) -> float:
        """FLOPs per token of one n x D product."""
        return 2.0 * self.n_neurons * self.n_embd

    def attention_flops(self) -> float:
        """A: the attention's forward FLOPs per token and layer, `bdh.model.sizes.forward_flops_per_token` less the
        readout and the encoders."""
        cfg = self.config()
        whole = forward_flops_per_token(cfg, self.block, self.form) - 2 * self.n_embd * self.vocab_size
        return whole / self.n_layer - cfg.n_encoders * self.matmul

    def copies(self, passes: int) -> float:
        """Bytes a layer of ``passes`` bf16 passes over the B copies of an n x D weight (or B partial gradients)."""
        return passes * self.batch * self.n_neurons * self.n_embd * BF16

    def tables(self) -> float:
        """Bytes a layer of the RoPE pair tables (cos, sin: (T, N / 2) fp32 each) read once a head."""
        return self.n_head * 2 * self.block * (self.n_neurons // self.n_head // 2) * FP32

    def scores(self, passes: int) -> float:
        """Bytes a layer of ``passes`` bf16 passes over the parallel form's scores (B, h, T, T)."""
        return passes * self.batch * self.n_head * self.block**2 * BF16

    def fixed_bytes(self) -> float:
        """Bytes per step that do not scale with n x tokens: per layer the weights' bf16 casts (read fp32, write
        bf16) and their reads by the forward and backward matmuls, the fp32 weight gradients accumulated over the
        layers; once a step, fused AdamW over every parameter (read p, g, m, v; write p, m, v)."""
        weights = 3 * self.n_neurons * self.n_embd
        per_layer = weights * (FP32 + BF16 + BF16) + weights * (2 * BF16 + 2 * FP32)
        params = weights + 2 * self.vocab_size * self.n_embd
        return self.n_layer * per_layer + params * 7 * FP32


def _chunked(s: Shape, fused: bool, stride: int) -> list[Pass]:
    """The Triton chunked attention (`triton.chunked`); states: D / C bf16 numbers per entry (over ``stride``), each
    scan's final state (B, h, N, D) in fp32. Forward: the scan reads k and writes the states; the read reads q, k and
    the states. Backward: the scan again, the reverse scan (q in, dstates out), the key gradients (q, k, states,
    dstates in; dq + dk out, the keys being the queries), dv (k, q, dstates in)."""
    states, half = BF16 * s.n_embd / min(s.chunk, s.block) / stride, s.attention_flops() / 2
    final = s.batch * s.n_neurons * s.n_embd * FP32
    keys = Pass("attention: key gradients dq + dk", "backward", 2 * BF16 + 2 * states, BF16, flops=half)
    if fused:  # + RoPE's inverse, the gate's dx and ReLU's mask (x) in its epilogue: it writes dL/dh
        keys = Pass("attention: key gradients -> dL/dh (RoPE, ReLU, + gate dx in epilogue)", "backward",
                    2 * BF16 + 2 * states + 2 * BF16, BF16, s.tables(), half)  # fmt: skip
    return [
        Pass("attention: state scan", "forward", BF16, states, final, half),
        Pass("attention: read", "forward", 2 * BF16 + states, 0.0, flops=half),
        Pass("attention: state scan (recomputed)", "backward", BF16, states, final, half),
        Pass("attention: reverse scan", "backward", BF16, states, final, half),
        keys,
        Pass("attention: dv", "backward", 2 * BF16 + states, 0.0, flops=half),
    ]


def _parallel(s: Shape, fused: bool) -> list[Pass]:
    """The shared-keys parallel form (`pytorch.shared_keys`): scores = (x x^T) * W (written, then scaled in place),
    a = scores v; backward dA = (g v^T) * W, dA + dA^T, dx = (dA + dA^T) x (the one key product), dv = scores^T g."""
    keys, values = 2.0 * s.block * s.n_neurons, 2.0 * s.block * s.n_embd * s.n_head  # FLOPs a token
    dx = Pass("attention: dx = (dA + dA^T) x", "backward", BF16, BF16, s.scores(1), keys)
    if fused:
        dx = Pass("attention: dx = (dA + dA^T) x -> dL/dh (RoPE, ReLU, + gate dx in epilogue)", "backward",
                  3 * BF16, BF16, s.scores(1) + s.tables(), keys)  # fmt: skip
    return [
        Pass("attention: scores x x^T, * W in place", "forward", BF16, 0.0, s.scores(3), keys),
        Pass("attention: a = scores v", "forward", 0.0, 0.0, s.scores(1), values),
        Pass("attention: dA = (g v^T) * W", "backward", 0.0, 0.0, s.scores(3), values),
        Pass("attention: dA + dA^T", "backward", 0.0, 0.0, s.scores(3)),
        dx,
        Pass("attention: dv = scores^T g", "backward", 0.0, 0.0, s.scores(1), values),
    ]


def attention(s: Shape, fused: bool, stride: int = 1) -> list[Pass]:
    """The attention passes of the form ``s.form``."""
    return _chunked(s, fused, stride) if s.form == "chunked" else _parallel(s, fused)


def first_run(s: Shape, stride: int = 1) -> list[Pass]:
    """The step the first GPU run measured, pass by pass (module docstring)."""
    mm = s.matmul
    fwd = [
        Pass("h = Dx v (Dx copied B times)", "forward", 0.0, BF16, s.copies(2), mm),
        Pass("x = ReLU(h)", "forward", BF16, BF16),
        Pass("RoPE: x to fp32", "forward", BF16, FP32),
        Pass("RoPE: complex multiply", "forward", FP32, FP32),
        Pass("RoPE: to bf16", "forward", FP32, BF16),
        Pass("z = Dy LN(a) (Dy copied B times)", "forward", 0.0, BF16, s.copies(2), mm),
        Pass("gate: ReLU(z) (kept)", "forward", BF16, BF16),
        Pass("gate: y = ReLU(z) x", "forward", 2 * BF16, BF16),
        Pass("dropout (mask written)", "forward", BF16, BF16 + MASK),
        Pass("E y (E copied B times)", "forward", BF16, 0.0, s.copies(2), mm),
    ]
    bwd = [
        Pass("dy = dE E^T (the saved copies)", "backward", 0.0, BF16, s.copies(1), mm),
        Pass("dE = y^T d(Ey) (B partial gradients summed)", "backward", BF16, 0.0, s.copies(2), mm),
        Pass("dropout backward", "backward", BF16 + MASK, BF16),
        Pass("gate backward: g x", "backward", 2 * BF16, BF16),
        Pass("gate backward: dz (threshold)", "backward", 2 * BF16, BF16),
        Pass("gate backward: dx = g ReLU(z)", "backward", 2 * BF16, BF16),
        Pass("d LN(a) = dz Dy^T (the saved copies)", "backward", BF16, 0.0, s.copies(1), mm),
        Pass("dDy (B partial gradients summed)", "backward", BF16, 0.0, s.copies(2), mm),
        Pass("RoPE backward: to fp32", "backward", BF16, FP32),
        Pass("RoPE backward: complex multiply", "backward", FP32, FP32),
        Pass("RoPE backward: to bf16", "backward", FP32, BF16),
        Pass("dx: gate + attention paths summed", "backward", 2 * BF16, BF16),
        Pass("ReLU backward", "backward", 2 * BF16, BF16),
        Pass("dv = dh Dx^T (the saved copies)", "backward", BF16, 0.0, s.copies(1), mm),
        Pass("dDx (B partial gradients summed)", "backward", BF16, 0.0, s.copies(2), mm),
    ]
    return fwd + attention(s, False, stride) + bwd


def _gated_read_in(mm: float) -> list[Pass]:
    """`triton.read_in`'s backward: dy = g E^T with dz and the gate's dx in its epilogue, dE with y formed again."""
    return [
        Pass("dz, gate dx = (g E^T) x [z > 0], (g E^T) ReLU(z) (epilogue)", "backward", 2 * BF16, 2 * BF16, 0, mm),
        Pass("dE = y^T g (y formed in prologue)", "backward", 2 * BF16, 0.0, 0.0, mm),
    ]


def today(s: Shape, stride: int = 1) -> list[Pass]:
    """The step `choose` picks on CUDA now, pass by pass (module docstring)."""
    mm = s.matmul
    fwd = [
        Pass("x, R x = ReLU(v Dx), RoPE (epilogue; tables once a head)", "forward", 0.0, 2 * BF16, s.tables(), mm),
        Pass("z = Dy LN(a) (one product a head)", "forward", 0.0, BF16, 0.0, mm),
        Pass("E y (y formed, dropout drawn in prologue)", "forward", 2 * BF16, 0.0, 0.0, mm),
    ]
    bwd = [
        *_gated_read_in(mm),
        Pass("d LN(a) = dz Dy^T (one product a head)", "backward", BF16, 0.0, 0.0, mm),
        Pass("dDy (B partial gradients summed)", "backward", BF16, 0.0, s.copies(2), mm),
        Pass(
            "dh = [x > 0] (g_x + R^T g_Rx) (pair tables once a layer)",
            "backward",
            3 * BF16,
            BF16,
            s.tables() / s.n_head,
        ),
        Pass("dv = dh Dx^T (a head, the batch in the rows)", "backward", BF16, 0.0, 0.0, mm),
        Pass("dDx (a head, the batch in the rows)", "backward", BF16, 0.0, 0.0, mm),
    ]
    return fwd + attention(s, False, stride) + bwd


def fused(s: Shape, stride: int = 1) -> list[Pass]:
    """The fused step (module docstring), pass by pass."""
    mm = s.matmul
    fwd = [
        Pass("x, R x = ReLU(v Dx), RoPE (epilogue; tables once a head)", "forward", 0.0, 2 * BF16, s.tables(), mm),
        Pass("z = Dy LN(a)", "forward", 0.0, BF16, 0.0, mm),
        Pass("E y (y formed, dropout drawn in prologue)", "forward", 2 * BF16, 0.0, 0.0, mm),
    ]
    bwd = [
        *_gated_read_in(mm),
        Pass("d LN(a) = dz Dy^T", "backward", BF16, 0.0, 0.0, mm),
        Pass("dDy", "backward", BF16, 0.0, 0.0, mm),
        Pass("dv = dh Dx^T", "backward", BF16, 0.0, 0.0, mm),
        Pass("dDx", "backward", BF16, 0.0, 0.0, mm),
    ]
    return fwd + attention(s, True, stride) + bwd


DESIGNS = {"first-run": first_run, "today": today, "fused": fused}


def step(design: str, shape: Shape, tflops: float, tbs: float, stride: int = 1) -> dict:
    """The step of ``design`` at ``shape`` under the limits: per pass and in total, FLOPs, bytes and seconds;
    ``stride``: a chunk state kept every ``stride`` chunks (module docstring)."""
    entries = shape.tokens * shape.n_neurons  # (B, h, T, N) entries of a layer
    rows = []
    for p in DESIGNS[design](shape, stride):
        moved = shape.n_layer * (entries * (p.read + p.write) + p.other)
        rows.append({"pass": p.name, "phase": p.phase, "flops": shape.n_layer * shape.tokens * p.flops, "bytes": moved})
    readout = 6 * shape.n_embd * shape.vocab_size * shape.tokens
    rows.append({"pass": "readout and weights, optimiser", "phase": "step", "flops": readout,
                 "bytes": shape.fixed_bytes()})  # fmt: skip
    for r in rows:
        r["seconds"] = max(r["flops"] / (tflops * 1e12), r["bytes"] / (tbs * 1e12))
    seconds = sum(r["seconds"] for r in rows)
    model = train_flops_per_token(shape.config(), shape.block, shape.form) * shape.tokens
    return {
        "design": design if stride == 1 else f"{design}, states every {stride} chunks",
        "passes": rows,
        "flops": sum(r["flops"] for r in rows),
        "model_flops": model,
        "bytes": sum(r["bytes"] for r in rows),
        "seconds": seconds,
        "tokens_per_s": shape.tokens / seconds,
        "mfu": model / seconds / (tflops * 1e12),
    }


def _steps(shape: Shape, tflops: float, tbs: float, stride: int) -> list[dict]:
    """Each design's step at ``shape``; with ``stride`` > 1 (the chunked form) today's and the fused one's with it."""
    steps = [step(d, shape, tflops, tbs) for d in DESIGNS]
    strided = stride > 1 and shape.form == "chunked"
    return steps + ([step(d, shape, tflops, tbs, stride) for d in ("today", "fused")] if strided else [])


def windows(shape: Shape, tflops: float, tbs: float, stride: int = 1) -> list[str]:
    """Each design's prediction at the windows of `benchmarks/gpu.py`'s training table, the step's tokens in T-long
    sequences, the form `gpu.best_form` picks at T."""
    from gpu import FULL, best_form

    lines = [
        "| T | batch | form | step | HBM GB a step | predicted ms | tokens/s | MFU % |",
        "|---:|---:|---|---|---:|---:|---:|---:|",
    ]
    for T in FULL.blocks:
        if shape.tokens < T:
            continue
        at = replace(shape, block=T)
        at = replace(at, form=best_form(at.config(), T))
        for s in _steps(at, tflops, tbs, stride):
            lines.append(
                f"| {T} | {at.batch} | {at.form} | {s['design']} | {s['bytes'] / 1e9:.0f} | {s['seconds'] * 1e3:.1f} | "
                f"{s['tokens_per_s']:,.0f} | {100 * s['mfu']:.0f} |"
            )
    return lines


def report(shape: Shape, tflops: float, tbs: float, stride: int = 1) -> str:
    """The tables: each design per window, then at ``shape`` each design's totals and its passes (GB and ms per
    step); with ``stride`` > 1 the fused step with a chunk state every ``stride`` chunks too."""
    size = f"L={shape.n_layer} D={shape.n_embd} h={shape.n_head} n={shape.n_neurons}"
    limits = f"limits {tflops:g} TFLOP/s, {tbs:g} TB/s"
    steps = _steps(shape, tflops, tbs, stride)
    lines = [
        f"{size}, {shape.tokens:,} tokens a step; {limits}",
        "",
        *windows(shape, tflops, tbs, stride),
        "",
        f"At T={shape.block}, batch {shape.batch}, {shape.form} form"
        + (f" (chunk {min(shape.chunk, shape.block)})" if shape.form == "chunked" else "")
        + "; today: "
        + ", ".join(f"{k} {v}" for k, v in KERNELS[shape.form].items()),
        "",
        "| step | model TFLOP a step | TFLOP run | HBM GB a step | FLOP/byte | predicted ms | tokens/s | MFU % |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in steps:
        lines.append(
            f"| {s['design']} | {s['model_flops'] / 1e12:.1f} | {s['flops'] / 1e12:.1f} | {s['bytes'] / 1e9:.0f} | "
            f"{s['flops'] / s['bytes']:.0f} | {s['seconds'] * 1e3:.1f} | {s['tokens_per_s']:,.0f} | "
            f"{100 * s['mfu']:.0f} |"
        )
    for s in steps:
        lines += ["", f"{s['design']}, pass by pass:", "", "| pass | phase | GB | TFLOP | ms |"]
        lines.append("|---|---|---:|---:|---:|")
        for r in s["passes"]:
            cells = f"{r['bytes'] / 1e9:.1f} | {r['flops'] / 1e12:.2f} | {r['seconds'] * 1e3:.2f}"
            lines.append(f"| {r['pass']} | {r['phase']} | {cells} |")
    return "\n".join(lines)


def _ours(row: dict, cpu: bool = False) -> str | None:
    """The form of a training row of our step in eager bf16 on CUDA's kernels (the Triton chunked kernels, or the
    parallel form with the Triton encoder and read-in; not in a run on the CPU, ``cpu``), else None."""
    if row["loop"] != "ours" or row.get("setting", "bf16") != "bf16":
        return None
    return {"chunked (triton)": "chunked", **({} if cpu else {"parallel": "parallel"})}.get(row["form"])


def versus(results: dict, tbs: float = H200_TBS) -> list[str]:
    """The roofline beside a training table of `benchmarks/gpu.py` (its JSON ``results``): for each row of our
    eager bf16 step on CUDA's kernels, the tokens/s measured, each design's prediction at the run's measured matmul
    peak and ``tbs``, and measured / today's prediction (what `benchmarks/gpu_all.py` puts in its summary: every GPU
    run checks the prediction)."""
    cfg, peak = results["bdh"], results["peak_tflops"]
    cpu = results.get("device", "").startswith("CPU")  # `gpu.Device.describe`
    rows = [r for r in results.get("training", []) if _ours(r, cpu)]
    if not rows:
        return ["(no row of our step on CUDA's kernels in this table: nothing to compare)"]
    lines = [
        f"Limits: the matmul peak measured in the run ({peak:.1f} TFLOP/s) and {tbs:g} TB/s.",
        "",
        "| T | batch | measured tokens/s | roofline today | measured / roofline | roofline first-run "
        "| roofline fused |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        sizes = (cfg[k] for k in ("n_layer", "n_embd", "n_head", "n_neurons", "vocab_size"))
        chunk = min(cfg["chunk_size"], MAX_CHUNK)  # the kernels' chunk
        shape = Shape(*sizes, tokens=r["T"] * r["batch"], block=r["T"], chunk=chunk, form=_ours(r, cpu))
        now, first, fused_ = (step(d, shape, peak, tbs)["tokens_per_s"] for d in ("today", "first-run", "fused"))
        measured = r["tok_s"] if isinstance(r["tok_s"], float) else float("nan")
        lines.append(
            f"| {r['T']} | {r['batch']} | {measured:,.0f} | {now:,.0f} | {measured / now:.2f} | {first:,.0f} | "
            f"{fused_:,.0f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    fields = Shape()
    sizes = ("n_layer", "n_embd", "n_head", "n_neurons", "tokens", "block", "chunk")
    for name in sizes:
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(fields, name))
    p.add_argument("--form", choices=FORMS, default=fields.form, help="the attention form of the pass tables")
    p.add_argument("--peak-tflops", type=float, default=H200_TFLOPS, help="bf16 matmul TFLOP/s (H200 data sheet)")
    p.add_argument("--bandwidth", type=float, default=H200_TBS, help="HBM TB/s (H200 data sheet)")
    p.add_argument("--state-stride", type=int, default=1, help="also today's and the fused step, states every R chunks")
    args = p.parse_args(argv)
    values = {k: getattr(args, k) for k in sizes}
    bad = [k for k, v in values.items() if v < 1] + [k for k in ("peak_tflops", "bandwidth") if getattr(args, k) <= 0]
    bad += ["state_stride"] if args.state_stride < 1 else []
    what = f"--{bad[0].replace('_', '-')} must be positive" if bad else None
    if not bad and values["n_neurons"] % values["n_head"]:
        what = "--n-neurons must be a multiple of --n-head"
    if not bad and values["tokens"] % values["block"]:
        what = "--tokens must be a multiple of --block (the step's sequences are --block long)"
    if what:
        print(f"error: {what}", file=sys.stderr)
        return 2
    print(report(Shape(**values, form=args.form), args.peak_tflops, args.bandwidth, args.state_stride))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        run(main)
