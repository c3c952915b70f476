"""Benchmarks of the core model: generation on the recurrent state, and training with each attention form.

    python benchmarks/core.py                  # both tables, default sizes (a few minutes on 2 cores)
    python benchmarks/core.py generation --contexts 256 1024 4096
    python benchmarks/core.py training --blocks 256 1024 4096

Every number in a table is measured in the same run, so the ratios compare like with like:

* generation: seconds per new token of ``BDH.stream`` (one recurrent step per token, the prompt read
  once with the chunked form) against re-running the parallel form on the whole prefix for every token
  (what the official ``generate`` does), at several context lengths.
* training: tokens/s of one forward + backward step and the peak memory it adds, for the parallel and
  the chunked form, at several window lengths. Each measurement runs in a fresh subprocess and reads
  the peak resident memory of that process (VmHWM, reset before the step) above its level before the step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from _shared import Parser, reset_peak, run
from _shared import peak as peak_kib

from bdh import BDH, BDHConfig
from bdh.model.sizes import train_memory_bytes


def model_config(args: argparse.Namespace, **extra) -> BDHConfig:
    return BDHConfig(
        n_layer=args.n_layer,
        n_embd=args.n_embd,
        n_head=args.n_head,
        n_neurons=args.n_neurons,
        dropout=0.0,
        chunk_size=args.chunk_size,
        **extra,
    )


# --------------------------------------------------------------------------- generation
def bench_generation(args: argparse.Namespace) -> list[dict]:
    torch.manual_seed(0)
    model = BDH(model_config(args)).eval()
    rows = []
    for ctx in args.contexts:
        prompt = torch.randint(0, 256, (1, ctx))
        # on the state (what generate does): the gaps between consecutive tokens of the stream
        stamps = []
        for _ in model.stream(prompt, args.new_tokens + 2, temperature=0):
            stamps.append(time.perf_counter())
        times = [b - a for a, b in zip(stamps[2:], stamps[3:])]  # skip the prefill and one warm-up token
        state_s = statistics.median(times)
        # re-running the prefix: one full parallel forward per new token
        rerun = []
        with torch.no_grad():
            idx = prompt
            for _ in range(args.rerun_tokens):
                t0 = time.perf_counter()
                nxt = model(idx)[:, -1].argmax(-1, keepdim=True)
                rerun.append(time.perf_counter() - t0)
                idx = torch.cat([idx, nxt], dim=1)
        rerun_s = statistics.median(rerun)
        rows.append(
            {
                "context": ctx,
                "state_ms_per_token": 1e3 * state_s,
                "rerun_ms_per_token": 1e3 * rerun_s,
                "state_tokens_per_s": 1 / state_s,
                "rerun_tokens_per_s": 1 / rerun_s,
                "speedup": rerun_s / state_s,
            }
        )
    return rows


# --------------------------------------------------------------------------- training
def _training_child(spec: dict) -> dict:
    """Runs in a fresh process: one (form, T) training measurement."""
    torch.set_num_threads(spec["threads"])
    cfg = BDHConfig(**spec["config"])
    torch.manual_seed(0)
    model = BDH(cfg).train()
    B, T = spec["batch"], spec["block"]
    idx = torch.randint(0, 256, (B, T))
    tgt = torch.randint(0, 256, (B, T))
    base = reset_peak()

    def step() -> None:
        model.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(idx).view(-1, cfg.vocab_size), tgt.view(-1))
        loss.backward()

    t0 = time.perf_counter()
    step()  # first step: also the memory measurement
    first = time.perf_counter() - t0
    peak = peak_kib()
    times = [first]
    for _ in range(spec["repeats"] - 1):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    sec = statistics.median(times)
    return {"tokens_per_s": B * T / sec, "seconds_per_step": sec, "peak_mib": (peak - base) / 1024}


def bench_training(args: argparse.Namespace) -> list[dict]:
    rows = []
    for T in args.blocks:
        row: dict = {"block": T}
        for form in ("parallel", "chunked"):
            spec = {
                "config": model_config(args, attention=form).to_dict(),
                "batch": args.batch,
                "block": T,
                "repeats": args.repeats,
                "threads": torch.get_num_threads(),
            }
            out = subprocess.run(
                [sys.executable, __file__, "_child", json.dumps(spec)], capture_output=True, text=True, check=True
            )
            res = json.loads(out.stdout.strip().splitlines()[-1])
            row[f"{form}_tokens_per_s"] = res["tokens_per_s"]
            row[f"{form}_peak_mib"] = res["peak_mib"]
            # the estimate of `bdh info` less the weights (in the baseline) and AdamW moments (no optimiser here)
            cfg = BDHConfig(**spec["config"])
            row[f"{form}_estimate_mib"] = (train_memory_bytes(cfg, args.batch, T) - 3 * 4 * cfg.num_params()) / 2**20
        row["speed_ratio"] = row["chunked_tokens_per_s"] / row["parallel_tokens_per_s"]
        row["memory_ratio"] = row["chunked_peak_mib"] / max(row["parallel_peak_mib"], 1e-9)
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- output
def table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    head = "| " + " | ".join(c[1] for c in columns) + " |"
    sep = "|" + "|".join("---:" for _ in columns) + "|"
    body = ["| " + " | ".join(format(r[c[0]], c[2]) for c in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "_child":
        print(json.dumps(_training_child(json.loads(sys.argv[2]))))
        return
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("which", nargs="?", choices=["all", "generation", "training"], default="all")
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-neurons", type=int, default=8192)
    p.add_argument("--chunk-size", type=int, default=128)
    p.add_argument("--contexts", type=int, nargs="+", default=[256, 1024, 4096])
    p.add_argument("--new-tokens", type=int, default=32, help="new tokens timed on the state per context")
    p.add_argument("--rerun-tokens", type=int, default=3, help="new tokens timed by re-running the prefix")
    p.add_argument("--blocks", type=int, nargs="+", default=[256, 1024, 4096])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, help="torch threads (default: torch's default)")
    p.add_argument("--json", help="also write the results to this JSON file")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    cfg = model_config(args)
    print(
        f"model: L={cfg.n_layer} D={cfg.n_embd} h={cfg.n_head} n={cfg.n} ({cfg.num_params():,} parameters), "
        f"chunk {cfg.chunk_size}; torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{os.cpu_count()} cores\n"
    )
    results = {}
    if args.which in ("all", "generation"):
        rows = bench_generation(args)
        results["generation"] = rows
        print("Generation: per new token, on the recurrent state vs re-running the parallel form on the prefix")
        print(
            table(
                rows,
                [
                    ("context", "context", "d"),
                    ("state_ms_per_token", "state ms/token", ".2f"),
                    ("rerun_ms_per_token", "re-run ms/token", ".1f"),
                    ("state_tokens_per_s", "state tokens/s", ".1f"),
                    ("speedup", "speed-up", ".0f"),
                ],
            )
        )
        print()
    if args.which in ("all", "training"):
        rows = bench_training(args)
        results["training"] = rows
        print(f"Training step (forward + backward), batch {args.batch}: parallel vs chunked form")
        print(
            table(
                rows,
                [
                    ("block", "T", "d"),
                    ("parallel_tokens_per_s", "parallel tok/s", ".0f"),
                    ("chunked_tokens_per_s", "chunked tok/s", ".0f"),
                    ("speed_ratio", "chunked/parallel speed", ".2f"),
                    ("parallel_peak_mib", "parallel peak MiB", ".0f"),
                    ("chunked_peak_mib", "chunked peak MiB", ".0f"),
                    ("memory_ratio", "chunked/parallel memory", ".2f"),
                    ("parallel_estimate_mib", "parallel estimate MiB", ".0f"),
                    ("chunked_estimate_mib", "chunked estimate MiB", ".0f"),
                ],
            )
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    run(main)
