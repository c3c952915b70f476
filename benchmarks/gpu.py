"""BDH on one GPU: our training step against the official pathwaycom/bdh loop, a GPT of the same size as the MFU
yardstick, and generation on the recurrent state against the official ``generate``.

    python benchmarks/gpu.py [PATH/TO/pathwaycom-bdh] [--quick] [--compile] [--part training] [--out FILE]
    python benchmarks/gpu.py --device cpu --quick      # the same code at tiny sizes: a check of the script

Without CUDA (and without ``--device cpu --quick``) it exits at once with one line and status 2.

Sizes (the table `FULL`): the paper's model (L = 6, D = 256, h = 4, n = 32768; 25.3M parameters), windows
T = 512, 2048 and 8192 with batch 16384 / T sequences (32 at T = 512, as the official ``train.py``), the median
of 5 timed steps after 2 warm-up ones. ``--quick`` (`QUICK_GPU`): T = 512 and 2048, batch 8192 / T, 2 steps
after 1; generation at batch 1 and 8, contexts 1k, 2k and 8k. ``--device cpu --quick`` (`QUICK_CPU`): a model of
41k parameters. ``--part training`` or ``--part generation`` measures one of the two tables (`benchmarks/gpu_all.py`
runs them as two commands, each with its own time limit). ``--blocks T ...`` measures the training table at those
windows only (the science plan's ``torch.compile`` rows: ``--compile --blocks 2048``).

Training table, per window T, every cell measured in this run:

* **official**: the model class of a pathwaycom/bdh checkout (``bdh.py`` loaded from the path given, as
  ``benchmarks/perf.py`` does; nothing of it is copied) in its ``train.py`` loop on CUDA: bf16 autocast,
  ``logits, loss = model(x, y)``, backward, AdamW step, ``zero_grad``; with ``--compile`` also under
  ``torch.compile``, as its ``train.py`` runs it. A cell that runs out of GPU memory reads ``OOM``.
* **ours**: one optimiser step of `bdh.train.Trainer` (``train_step``: batch, forward, loss, backward,
  clipping, fused AdamW) in bf16 autocast, the attention form with fewer analytic FLOPs at that T
  (``--form``); with ``--compile`` also under ``torch.compile``. Where the chunked form runs the fused Triton
  kernels (`bdh.model.kernels.triton.chunked`, on CUDA), a second row runs it with ``BDH_TRITON=0`` (the lean
  autograd form, `bdh.model.kernels.pytorch.chunked_lean`): the A/B of the kernels in the same run.
* **gpt**: the GPT baseline (`bdh.baselines.gpt`, ``F.scaled_dot_product_attention``: flash attention on
  GPUs that have it) with about as many parameters as the BDH model (`gpt_config`), in the same
  trainer and precision (also compiled with ``--compile``): the yardstick of what this GPU gives a
  well-understood model at the same T.

Columns: tokens/s (batch x T / the median step time); model TFLOP/s = tokens/s x the
analytic training FLOPs per token of the work the loop does (BDH: `bdh.model.sizes.train_flops_per_token`
of its form; GPT: 6 P + 12 L T d, the PaLM / nanoGPT count); MFU = model TFLOP/s / the TFLOP/s of a square
bf16 matmul (8192 x 8192) measured in this run (the higher of before and after the training rows);
peak GiB = ``torch.cuda.max_memory_allocated`` during the cell (weights, optimiser state and activations;
on the CPU the growth of the resident set); x official = tokens/s over the official loop's at that T.

Generation table, per context length (1k to 64k tokens) and batch (1, 8 and 64): a random prompt of that
length is read into the state of one sequence (the chunked form; its time is the prefill column), the state is
copied to every sequence of a `bdh.model.decoder.StateDecoder` (greedy), and 32 steps are timed together with
one synchronisation at the end, after the warm-up steps and the capture of the step in a CUDA graph: ms per
token step (all B sequences) and tokens/s = B / that. The time of a step does not depend on the context (the
state has a fixed size); the rows at 1k..64k measure that. Against it, the official ``generate`` at 2k context
(one full forward of the whole prefix per new token, top-1, 2 tokens timed). Both in fp32 with TF32 matmuls
(as the official ``train.py`` sets), dropout off.

Results, with the command and the GPU that made them, belong in docs/performance.md ("GPU").
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from itertools import count, takewhile
from pathlib import Path
from types import SimpleNamespace

import torch
from _shared import load_official, reset_peak
from _shared import peak as peak_kib

from bdh import BDH, BDHConfig
from bdh.baselines.gpt import GPTConfig
from bdh.model.sizes import forward_flops_per_token, train_flops_per_token

OOM = "OOM"


@dataclass(frozen=True)
class Sizes:
    """Everything that differs between the full run, ``--quick`` on a GPU and ``--quick`` on the CPU."""

    n_layer: int
    n_embd: int
    n_head: int
    n_neurons: int
    blocks: tuple[int, ...]
    tokens_per_step: int
    batches: tuple[int, ...]  # generation batch sizes
    contexts: tuple[int, ...]  # generation context lengths (the prompt read into the state first)
    official_context: int  # the context of the official generate's rows
    new_tokens: int  # generated tokens timed on our state
    official_tokens: int  # generated tokens timed with the official generate (each re-runs the prefix)
    warmup: int
    steps: int
    peak_size: int
    gpt_layers: int
    gpt_heads: int


PAPER = dict(n_layer=6, n_embd=256, n_head=4, n_neurons=32768, peak_size=8192, gpt_layers=6, gpt_heads=8)
FULL = Sizes(
    **PAPER,
    blocks=(512, 2048, 8192),
    tokens_per_step=16384,
    batches=(1, 8, 64),
    contexts=(1024, 2048, 4096, 16384, 65536),
    official_context=2048,
    new_tokens=32,
    official_tokens=2,
    warmup=2,
    steps=5,
)
QUICK_GPU = Sizes(
    **PAPER,
    blocks=(512, 2048),
    tokens_per_step=8192,
    batches=(1, 8),
    contexts=(1024, 2048, 8192),
    official_context=2048,
    new_tokens=16,
    official_tokens=1,
    warmup=1,
    steps=2,
)
QUICK_CPU = Sizes(
    n_layer=2,
    n_embd=32,
    n_head=2,
    n_neurons=256,
    blocks=(32, 64),
    tokens_per_step=128,
    batches=(1, 2),
    contexts=(16, 32),
    official_context=32,
    new_tokens=4,
    official_tokens=2,
    warmup=1,
    steps=1,
    peak_size=128,
    gpt_layers=2,
    gpt_heads=2,
)


# --------------------------------------------------------------------------- the device
class Device:
    """Synchronisation and peak memory on CUDA (allocator statistics) or the CPU (resident set growth)."""

    def __init__(self, name: str):
        device = torch.device(name)
        if device.type == "cuda" and device.index is None:  # torch.cuda.set_device refuses a bare "cuda"
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.cuda = device.type == "cuda"
        self._base_kib = 0

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def reset_peak(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._base_kib = reset_peak()

    def peak_gib(self) -> float:
        if self.cuda:
            return torch.cuda.max_memory_allocated(self.device) / 2**30
        return max(0, peak_kib() - self._base_kib) / 2**20

    def free(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()

    def describe(self) -> str:
        if self.cuda:
            props = torch.cuda.get_device_properties(self.device)
            return f"{props.name}, {props.total_memory / 2**30:.0f} GiB, torch {torch.__version__}"
        return f"CPU, {torch.get_num_threads()} threads, torch {torch.__version__}"


def timed(dev: Device, step: Callable[[int], None], warmup: int, steps: int) -> dict:
    """Median seconds per call of ``step`` after ``warmup`` calls, and the peak memory of all calls."""
    dev.reset_peak()
    for i in range(warmup):
        step(i)
    dev.sync()
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        step(warmup + i)
        dev.sync()
        times.append(time.perf_counter() - t0)
    return {"seconds": statistics.median(times), "peak_gib": dev.peak_gib()}


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is the GPU running out of memory: the allocator's error, or one wrapping it (a compiled
    region re-raises it inside its own error types; cuBLAS reports a failed workspace allocation)."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc)
    return "out of memory" in text.lower() or "CUBLAS_STATUS_ALLOC_FAILED" in text


def guarded(dev: Device, measure: Callable[[], dict]) -> dict:
    """``measure()``, or ``{"oom": True}`` when the GPU runs out of memory. Every cell starts clean: the cached
    memory of the one before is released and compiled graphs are dropped (so that each compiled cell compiles
    its own model, not the graphs of an earlier one up to dynamo's recompilation limit)."""
    try:
        result = measure()
    except RuntimeError as exc:  # torch.cuda.OutOfMemoryError is one
        if not out_of_memory(exc):
            raise
        result = {"oom": True}
    # after the except block: the traceback (and the tensors its frames hold) is gone
    torch.compiler.reset()
    dev.free()
    return result


def matmul_tflops(dev: Device, size: int, repeats: int = 10) -> float:
    """TFLOP/s of a square bf16 matmul (best of ``repeats``): the peak MFU is measured against."""
    a = torch.randn(size, size, device=dev.device).bfloat16()
    b = torch.randn(size, size, device=dev.device).bfloat16()
    a @ b
    dev.sync()
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        dev.sync()
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best / 1e12


# --------------------------------------------------------------------------- training loops
def bdh_config(sizes: Sizes, args: argparse.Namespace) -> BDHConfig:
    return BDHConfig(
        n_layer=sizes.n_layer,
        n_embd=sizes.n_embd,
        n_head=sizes.n_head,
        n_neurons=sizes.n_neurons,
        dropout=args.dropout,
        chunk_size=args.chunk_size,
    )


def official_fields(cfg: BDHConfig) -> dict:
    """The official ``BDHConfig`` fields of ``cfg`` (`bdh.model.interop.official_config` reads only the config)."""
    from bdh.model.interop import official_config

    return official_config(SimpleNamespace(config=cfg))


def best_form(cfg: BDHConfig, T: int) -> str:
    """The attention form with fewer analytic forward FLOPs at window T."""
    return min(("parallel", "chunked"), key=lambda f: forward_flops_per_token(cfg, T, f))


def gpt_config(sizes: Sizes, params: int, T: int) -> GPTConfig:
    """The GPT whose parameter count is closest to ``params``, its width a multiple of 8 x heads (a head
    dimension that flash attention kernels take); RoPE, so no position table and the same size at every T."""
    base = GPTConfig(n_layer=sizes.gpt_layers, n_head=sizes.gpt_heads, positional="rope", seq_len=T, dropout=0.0)
    step = 8 * base.n_head
    candidates = (base.replace(n_embd=d) for d in count(step, step))  # parameters grow with the width
    return min(
        takewhile(lambda c: c.num_params() <= 2 * params, candidates), key=lambda c: abs(c.num_params() - params)
    )


def gpt_train_flops_per_token(cfg: GPTConfig, T: int) -> float:
    """6 P (forward and backward of every weight) + 12 L T d (the attention scores and their use), per token."""
    return 6.0 * cfg.num_params() + 12.0 * cfg.n_layer * T * cfg.n_embd


def trainer_step(dev: Device, model: list[str], T: int, batch: int, compile_: bool, run_dir: Path):
    """A `bdh.train.Trainer` of ``model`` overrides (bf16 autocast) and its one-step function."""
    from bdh.train import Trainer, load_config

    overrides = [
        *model,
        f"task.seq_len={T}",
        f"train.batch_size={batch}",
        f"train.device={dev.device}",
        "train.precision=bf16",
        f"train.compile={str(compile_).lower()}",
        "train.max_minutes=null",
        "train.check_memory=false",
        "optim.warmup_steps=0",
        "eval.batches=1",
        "log.progress=none",
        "log.tensorboard=false",
        "sample.max_new_tokens=0",
        f"run_dir={run_dir}",
    ]
    trainer = Trainer(load_config(None, overrides))
    trainer.model.train()
    return trainer, trainer.train_step


def measure_trainer(dev: Device, model: list[str], T: int, batch: int, compile_: bool, sizes: Sizes) -> dict:
    with tempfile.TemporaryDirectory(prefix="bdh-gpu-") as tmp:
        trainer, step = trainer_step(dev, model, T, batch, compile_, Path(tmp) / "run")
        try:
            out = timed(dev, step, sizes.warmup, sizes.steps)
            failed = getattr(trainer.objective.model, "failed", None)  # a compile that fell back to eager
            if failed:
                out["note"] = "compile fell back to eager"
            return out
        finally:
            trainer.close()


def measure_official(dev: Device, module, cfg: BDHConfig, T: int, batch: int, compile_: bool, sizes: Sizes) -> dict:
    """The official train.py loop: bf16 autocast where the device has it, AdamW lr 1e-3 wd 0.1."""
    from bdh.tasks.text import TextConfig, TextTask

    torch.manual_seed(1337)
    model = module.BDH(module.BDHConfig(**official_fields(cfg))).to(dev.device)
    if compile_:
        model = torch.compile(model)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    task = TextTask(TextConfig(data=None, seq_len=T))
    autocast = torch.autocast(device_type=dev.device.type, dtype=torch.bfloat16)

    def step(i: int) -> None:
        x, y = task.batch("train", i, batch, 1337)
        with autocast:
            _, loss = model(x.to(dev.device), y.to(dev.device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    return timed(dev, step, sizes.warmup, sizes.steps)


def ours_overrides(cfg: BDHConfig, form: str) -> list[str]:
    """The trainer's ``model.*`` settings of our model ``cfg`` with the attention form ``form``."""
    fields = dict(n_layer=cfg.n_layer, n_embd=cfg.n_embd, n_head=cfg.n_head, n_neurons=cfg.n, dropout=cfg.dropout)
    return [
        *(f"model.{k}={v}" for k, v in fields.items()),
        f"model.chunk_size={cfg.chunk_size}",
        f"model.attention={form}",
    ]


def without_triton(measure: Callable[[], dict]) -> Callable[[], dict]:
    """``measure`` with the fused Triton kernels turned off (``BDH_TRITON=0``): the lean autograd chunked form."""

    def run() -> dict:
        saved = os.environ.get("BDH_TRITON")
        os.environ["BDH_TRITON"] = "0"
        try:
            return measure()
        finally:
            if saved is None:
                del os.environ["BDH_TRITON"]
            else:
                os.environ["BDH_TRITON"] = saved

    return run


def training_cells(dev: Device, args: argparse.Namespace, sizes: Sizes, module, T: int, batch: int) -> list[tuple]:
    """(loop, setting, attention, FLOPs per token, measure) of every cell at window T. Where the chunked form runs
    the Triton kernels (CUDA), a second "ours" cell runs it without them (the lean autograd form): an A/B row."""
    from bdh.model.kernels import use_triton

    cfg = bdh_config(sizes, args)
    form = best_form(cfg, T) if args.form == "auto" else args.form
    ours = ours_overrides(cfg, form)
    g = gpt_config(sizes, cfg.num_params(), T)
    gpt = ["model.name=gpt", *(f"model.{k}={getattr(g, k)}" for k in ("n_layer", "n_embd", "n_head", "dropout"))]
    gpt.append(f"model.positional={g.positional}")
    fused = form == "chunked" and use_triton(dev.device)
    cells = []
    for c in (False, True) if args.compile else (False,):
        setting = "bf16+compile" if c else "bf16"
        if module is not None:
            measure = partial(measure_official, dev, module, cfg, T, batch, c, sizes)
            cells.append(("official", setting, "parallel", train_flops_per_token(cfg, T, "parallel"), measure))
        measure = partial(measure_trainer, dev, ours, T, batch, c, sizes)
        flops = train_flops_per_token(cfg, T, form)
        cells.append(("ours", setting, f"{form} (triton)" if fused and not c else form, flops, measure))
        if fused and not c:  # (torch.compile keeps the lean form)
            cells.append(("ours", setting, f"{form} (lean)", flops, without_triton(measure)))
        measure = partial(measure_trainer, dev, gpt, T, batch, c, sizes)
        cells.append(("gpt", setting, "sdpa", gpt_train_flops_per_token(g, T), measure))
    return cells


def training_rows(dev: Device, args: argparse.Namespace, sizes: Sizes, module) -> list[dict]:
    """One row per window T and loop (official, ours, gpt; each also compiled with ``--compile``)."""
    rows = []
    for T in sizes.blocks:
        batch = max(1, sizes.tokens_per_step // T)
        for loop, setting, f, flops, measure in training_cells(dev, args, sizes, module, T, batch):
            res = guarded(dev, measure)
            row = {"T": T, "batch": batch, "loop": loop, "setting": setting, "form": f, "flops_per_token": flops}
            if res.get("oom"):
                row["tok_s"] = OOM
            else:
                tok_s = batch * T / res["seconds"]
                row.update(tok_s=tok_s, tflops=tok_s * flops / 1e12, peak_gib=res["peak_gib"], note=res.get("note"))
            shown = row["tok_s"] if row["tok_s"] == OOM else f"{row['tok_s']:,.0f}"
            print(f"  measured T={T} {loop} {setting} {f}: {shown} tokens/s", file=sys.stderr, flush=True)
            rows.append(row)
        official = {r["setting"]: r["tok_s"] for r in rows if r["T"] == T and r["loop"] == "official"}
        for r in rows:
            base = official.get(r["setting"], official.get("bf16"))
            if r["T"] == T and isinstance(r["tok_s"], float) and isinstance(base, float):
                r["vs_official"] = r["tok_s"] / base
    return rows


# --------------------------------------------------------------------------- generation
def prefill(dev: Device, cfg: BDHConfig, context: int) -> tuple[BDH, object, dict]:
    """The model (seed 0) and a `StateDecoder` of one sequence that has read a random prompt of ``context``
    tokens into its state (the chunked form), with the seconds that took."""
    from bdh.model.decoder import StateDecoder

    torch.manual_seed(0)
    model = BDH(cfg).to(dev.device).eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, context), device=dev.device)
    one = StateDecoder(model, 1, temperature=0, cuda_graph=False)
    dev.sync()
    t0 = time.perf_counter()
    one.prefill(prompt)
    dev.sync()
    return model, one, {"prefill_s": time.perf_counter() - t0}


def generate_ours(dev: Device, model: BDH, one, B: int, sizes: Sizes) -> dict:
    """Seconds per step of a `StateDecoder` of B sequences continuing ``one``'s state (copied to every sequence):
    the steps are timed together with one synchronisation at the end, as generation runs (CUDA graph on CUDA)."""
    from bdh.model.decoder import WARMUP_STEPS, StateDecoder

    dev.reset_peak()
    dec = StateDecoder(model, B, temperature=0)
    dec.start(one.state, one.logits)
    for _ in range(WARMUP_STEPS + 2):  # the eager steps, the capture, one replay
        dec.step()
    dev.sync()
    t0 = time.perf_counter()
    for _ in range(sizes.new_tokens):
        dec.step()
    dev.sync()
    return {"seconds": (time.perf_counter() - t0) / sizes.new_tokens, "peak_gib": dev.peak_gib()}


def generate_official(dev: Device, module, cfg: BDHConfig, B: int, sizes: Sizes) -> dict:
    """Seconds per new token of the official ``generate`` (it re-runs the whole prefix for every token)."""
    torch.manual_seed(0)
    model = module.BDH(module.BDHConfig(**official_fields(cfg))).to(dev.device).eval()
    prompt = torch.randint(0, cfg.vocab_size, (B, sizes.official_context), device=dev.device)
    model.generate(prompt, max_new_tokens=1, top_k=1)  # warm-up
    dev.sync()
    t0 = time.perf_counter()
    model.generate(prompt, max_new_tokens=sizes.official_tokens, top_k=1)
    dev.sync()
    return {"seconds": (time.perf_counter() - t0) / sizes.official_tokens}


def generation_rows(dev: Device, args: argparse.Namespace, sizes: Sizes, module) -> list[dict]:
    """One row per context and batch size: our time per step on the state (the prompt read once per context, the
    state copied to the batch); the official generate's at its context (``sizes.official_context``)."""
    cfg = bdh_config(sizes, args).replace(dropout=0.0)
    rows = []
    for context in sizes.contexts:
        ready = guarded(dev, lambda c=context: dict(zip(("model", "one", "res"), prefill(dev, cfg, c))))
        for B in sizes.batches:
            row: dict = {"context": context, "batch": B}
            res = (
                {"oom": True}
                if ready.get("oom")
                else guarded(dev, partial(generate_ours, dev, ready["model"], ready["one"], B, sizes))
            )
            if res.get("oom"):
                row["ours_tok_s"] = OOM
            else:
                row.update(ours_tok_s=B / res["seconds"], ours_ms=1e3 * res["seconds"], peak_gib=res["peak_gib"])
                row["prefill_s"] = ready["res"]["prefill_s"]
            if module is not None and context == sizes.official_context:
                res = guarded(dev, partial(generate_official, dev, module, cfg, B, sizes))
                row["official_tok_s"] = OOM if res.get("oom") else B / res["seconds"]
                if isinstance(row["ours_tok_s"], float) and isinstance(row["official_tok_s"], float):
                    row["vs_official"] = row["ours_tok_s"] / row["official_tok_s"]
            shown = {k: row[k] for k in ("ours_tok_s", "official_tok_s") if k in row}
            print(f"  measured generation at context {context}, batch {B}: {shown}", file=sys.stderr, flush=True)
            rows.append(row)
        ready.clear()
        dev.free()
    return rows


# --------------------------------------------------------------------------- output
def table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """A Markdown table; a cell is blank where the row has no value, the text itself where it is not a number."""

    def cell(row: dict, key: str, fmt: str) -> str:
        value = row.get(key)
        if value is None:
            return ""
        return format(value, fmt) if fmt and isinstance(value, (int, float)) else str(value)

    head = "| " + " | ".join(c[1] for c in columns) + " |"
    sep = "|" + "|".join("---" if not c[2] else "---:" for c in columns) + "|"
    return "\n".join([head, sep, *("| " + " | ".join(cell(r, c[0], c[2]) for c in columns) + " |" for r in rows)])


TRAIN_COLUMNS = [
    ("T", "T", "d"),
    ("batch", "batch", "d"),
    ("loop", "loop", ""),
    ("setting", "setting", ""),
    ("form", "attention", ""),
    ("tok_s", "tokens/s", ",.0f"),
    ("tflops", "model TFLOP/s", ".1f"),
    ("mfu", "MFU %", ".0f"),
    ("peak_gib", "peak GiB", ".2f"),
    ("vs_official", "x official", ".2f"),
    ("note", "note", ""),
]
GEN_COLUMNS = [
    ("context", "context", "d"),
    ("batch", "batch", "d"),
    ("ours_ms", "ours ms/token", ".3f"),
    ("ours_tok_s", "ours tokens/s", ",.0f"),
    ("peak_gib", "ours peak GiB", ".2f"),
    ("prefill_s", "prefill s (batch 1)", ".2f"),
    ("official_tok_s", "official tokens/s", ",.1f"),
    ("vs_official", "x official", ".1f"),
]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("official", nargs="?", type=Path, help="path of a pathwaycom/bdh checkout (omit: no official rows)")
    p.add_argument("--device", default="cuda", help="cuda, cuda:K, or cpu (with --quick only: tiny sizes)")
    p.add_argument("--quick", action="store_true", help="fewer windows, batches and steps (on the CPU: tiny sizes)")
    p.add_argument("--part", choices=["all", "training", "generation"], default="all", help="which tables to measure")
    p.add_argument("--compile", action="store_true", help="also ours and the official loop under torch.compile")
    p.add_argument("--blocks", type=int, nargs="+", help="the windows T of the training table (default: the size's)")
    p.add_argument("--form", choices=["auto", "parallel", "chunked"], default="auto", help="our attention form")
    p.add_argument("--chunk-size", type=int, default=256, help="chunk of the chunked form")
    p.add_argument("--dropout", type=float, default=0.1, help="BDH dropout (the official default)")
    p.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    return p.parse_args(argv)


def refusal(args: argparse.Namespace) -> str | None:
    """Why the arguments cannot run here (one line), or None."""
    try:
        device = torch.device(args.device)
    except RuntimeError:
        return f"--device {args.device!r}: not a device name (cuda, cuda:K or cpu)"
    if device.type == "cuda" and not torch.cuda.is_available():
        return (
            "benchmarks/gpu.py needs a CUDA GPU and torch.cuda.is_available() is False here "
            "(python benchmarks/gpu.py --device cpu --quick checks the script on the CPU)"
        )
    if device.type not in ("cuda", "cpu"):
        return f"--device {args.device!r}: only cuda and cpu are supported"
    if device.type == "cpu" and not args.quick:
        return "--device cpu runs only with --quick (tiny sizes: a check of the script, not a benchmark)"
    if args.official is not None and not (args.official / "bdh.py").is_file():
        return f"{args.official}: no bdh.py (give the path of a pathwaycom/bdh checkout)"
    if args.chunk_size < 1 or not 0 <= args.dropout < 1:
        return "--chunk-size must be positive and --dropout in [0, 1)"
    blocks = getattr(args, "blocks", None)  # (benchmarks/gpu_profile.py hands its own arguments, without it)
    if blocks is not None and min(blocks) < 1:
        return f"--blocks must be positive windows, got {blocks}"
    if args.out is not None:
        from bdh.errors import UserError
        from bdh.outputs import check_output

        try:
            check_output(args.out, overwrite=args.overwrite)
        except UserError as exc:
            return str(exc)
    return None


def measure(args: argparse.Namespace, dev: Device, sizes: Sizes, module) -> dict:
    """The tables ``--part`` asks for, printed; the results as a dict."""
    cfg = bdh_config(sizes, args)
    g = gpt_config(sizes, cfg.num_params(), sizes.blocks[0])
    results: dict = {"device": dev.describe(), "sizes": asdict(sizes), "bdh": cfg.to_dict(), "gpt": g.to_dict()}
    if args.part in ("all", "training"):
        before = matmul_tflops(dev, sizes.peak_size)
        train = training_rows(dev, args, sizes, module)
        peak = max(before, matmul_tflops(dev, sizes.peak_size))
        for row in train:
            if isinstance(row.get("tflops"), float):
                row["mfu"] = 100 * row["tflops"] / peak
        print(
            f"bf16 matmul peak ({sizes.peak_size} x {sizes.peak_size}, the higher of before and after): "
            f"{peak:.1f} TFLOP/s"
        )
        print(f"GPT yardstick: L={g.n_layer} d={g.n_embd} heads={g.n_head}, {g.num_params():,} parameters\n")
        print("Training step (bf16 autocast)")
        print(table(train, TRAIN_COLUMNS) + "\n")
        results.update(peak_tflops=peak, training=train)
    if args.part in ("all", "generation"):
        gen = generation_rows(dev, args, sizes, module)
        print(
            f"Generation on the recurrent state (greedy, fp32 + TF32; {sizes.new_tokens} steps timed together) "
            f"against the official generate at context {sizes.official_context}"
        )
        print(table(gen, GEN_COLUMNS))
        results["generation"] = gen
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    message = refusal(args)
    if message is not None:
        print(f"error: {message}", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    sizes = QUICK_CPU if device.type == "cpu" else (QUICK_GPU if args.quick else FULL)
    if args.blocks is not None:
        sizes = replace(sizes, blocks=tuple(args.blocks))
    dev = Device(str(device))
    if dev.cuda:
        torch.cuda.set_device(dev.device)
        torch.backends.cuda.matmul.allow_tf32 = True  # as the official train.py sets, and our trainer on Ampere+
        torch.backends.cudnn.allow_tf32 = True
    module = load_official(args.official) if args.official is not None else None
    cfg = bdh_config(sizes, args)
    print(
        f"BDH L={cfg.n_layer} D={cfg.n_embd} h={cfg.n_head} n={cfg.n} ({cfg.num_params():,} parameters), dropout "
        f"{cfg.dropout}, chunk {cfg.chunk_size}; batch = {sizes.tokens_per_step} tokens / T; median of {sizes.steps} "
        f"steps after {sizes.warmup} warm-up; {dev.describe()}"
        + ("" if module is not None else "; no official checkout given: official rows left out")
        + "\n"
    )
    results = measure(args, dev, sizes, module)
    if args.out is not None:
        from bdh.outputs import write_text

        results["argv"] = sys.argv[1:] if argv is None else argv
        write_text(args.out, json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
