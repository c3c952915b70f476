"""A torch.profiler trace of one bf16 training step of BDH at the paper's size, per window T.

    python benchmarks/gpu_profile.py --out DIR [--blocks 512 2048] [--rows 30]
    python benchmarks/gpu_profile.py --device cpu --quick --out DIR     # tiny sizes: a check of the script

The step is `benchmarks/gpu.py`'s "ours" row: one optimiser step of `bdh.train.Trainer` in bf16 autocast at
the paper's size (`gpu.FULL`: L = 6, D = 256, h = 4, n = 32768), batch 16384 / T sequences, the attention form
with fewer analytic FLOPs at that T, after ``--warmup`` unprofiled steps. For each T it writes into DIR:

* ``profile_T{T}.json.gz``: the Chrome trace (chrome://tracing or ui.perfetto.dev open it), CPU and CUDA
  activity;
* ``profile_T{T}.txt``: the top ``--rows`` operators by their own GPU time (CPU time on the CPU), torch's
  ``key_averages`` table, under a line naming the step.

Without CUDA (and without ``--device cpu --quick``) it exits at once with one line and status 2.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
from pathlib import Path

import gpu
import torch


def profile_step(dev: gpu.Device, args: argparse.Namespace, sizes: gpu.Sizes, T: int) -> str:
    """Profile one training step at window T; write its trace and table into ``args.out``; return the table."""
    from torch.profiler import ProfilerActivity, profile

    cfg = gpu.bdh_config(sizes, args)
    batch = max(1, sizes.tokens_per_step // T)
    form = gpu.best_form(cfg, T) if args.form == "auto" else args.form
    with tempfile.TemporaryDirectory(prefix="bdh-profile-") as tmp:
        trainer, step = gpu.trainer_step(dev, gpu.ours_overrides(cfg, form), T, batch, False, Path(tmp) / "run")
        try:
            for i in range(args.warmup):
                step(i)
            dev.sync()
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.cuda else [])
            with profile(activities=activities) as prof:
                step(args.warmup)
                dev.sync()
            trace = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(trace))
            with open(trace, "rb") as src, gzip.open(args.out / f"profile_T{T}.json.gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
        finally:
            trainer.close()
    sort = "self_cuda_time_total" if dev.cuda else "self_cpu_time_total"
    head = (
        f"One bf16 training step, T={T}, batch {batch}, {form} form, BDH L={cfg.n_layer} D={cfg.n_embd} "
        f"h={cfg.n_head} n={cfg.n}; {dev.describe()}; sorted by {sort}\n"
    )
    text = head + prof.key_averages().table(sort_by=sort, row_limit=args.rows)
    (args.out / f"profile_T{T}.txt").write_text(text + "\n")
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for the traces and tables (made if missing)")
    p.add_argument("--blocks", type=int, nargs="+", help="windows T (default 512 2048; the tiny sizes' with --quick)")
    p.add_argument("--device", default="cuda", help="cuda, cuda:K, or cpu (with --quick only: tiny sizes)")
    p.add_argument("--quick", action="store_true", help="on the CPU: the tiny sizes of gpu.py --device cpu --quick")
    p.add_argument("--form", choices=["auto", "parallel", "chunked"], default="auto", help="our attention form")
    p.add_argument("--chunk-size", type=int, default=256, help="chunk of the chunked form")
    p.add_argument("--dropout", type=float, default=0.1, help="BDH dropout (the official default)")
    p.add_argument("--warmup", type=int, default=1, help="unprofiled steps first")
    p.add_argument("--rows", type=int, default=30, help="operators in each table")
    args = p.parse_args(argv)
    message = gpu.refusal(_as_gpu(args))
    if message is not None:
        print(f"error: {message}", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    sizes = gpu.QUICK_CPU if device.type == "cpu" else gpu.FULL
    blocks = args.blocks or (sizes.blocks if device.type == "cpu" else (512, 2048))
    dev = gpu.Device(str(device))
    if dev.cuda:
        torch.cuda.set_device(dev.device)
    args.out.mkdir(parents=True, exist_ok=True)
    for T in blocks:
        print(gpu.guarded(dev, lambda T=T: {"text": profile_step(dev, args, sizes, T)}).get("text", f"T={T}: OOM"))
    return 0


def _as_gpu(args: argparse.Namespace) -> argparse.Namespace:
    """The arguments `gpu.refusal` checks, from this script's."""
    return argparse.Namespace(
        device=args.device,
        quick=args.quick,
        official=None,
        chunk_size=args.chunk_size,
        dropout=args.dropout,
        out=None,
        overwrite=False,
    )


if __name__ == "__main__":
    sys.exit(main())
