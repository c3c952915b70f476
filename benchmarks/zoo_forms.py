"""Seconds per training step of the Mamba, RWKV and Hyena baselines in each of their forms (the fast path and its
reference), on this machine's CPU (or ``--device cuda``).

    python benchmarks/zoo_forms.py                         # T = 64 and 256, n_embd 64, batch 16, one thread
    python benchmarks/zoo_forms.py --lengths 512 --batch 8 --threads 2
    python benchmarks/zoo_forms.py --models mamba           # one model's forms only

One step is forward + backward of the summed logits (no optimiser), the median of ``--repeats`` after one warm-up
step; all forms of a model share its weights, so the rows of one model compare like with like.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bdh.baselines import RWKV, Hyena, HyenaConfig, Mamba, MambaConfig, RWKVConfig

VOCAB = 128


MODELS = ("mamba", "rwkv", "hyena")


def forms(width: int, T: int) -> list[tuple[str, str, torch.nn.Module]]:
    """(model, form, module) for every form measured."""
    out: list[tuple[str, str, torch.nn.Module]] = []
    for scan in ("sequential", "recurrent", "parallel"):
        out.append(("mamba", f"scan={scan}", Mamba(MambaConfig(vocab_size=VOCAB, n_embd=width, scan=scan))))
    for wkv, chunk in (("sequential", 8), ("chunked", 8), ("chunked", 16), ("chunked", 32)):
        cfg = RWKVConfig(vocab_size=VOCAB, n_embd=width, wkv=wkv, chunk_size=chunk)
        out.append(("rwkv", f"wkv={wkv}" + (f", chunk_size={chunk}" if wkv == "chunked" else ""), RWKV(cfg)))
    for conv in ("fft", "direct"):
        out.append(("hyena", f"conv={conv}", Hyena(HyenaConfig(vocab_size=VOCAB, seq_len=T, n_embd=width, conv=conv))))
    return out


def step_seconds(model: torch.nn.Module, idx: torch.Tensor, repeats: int) -> float:
    def step() -> float:
        if idx.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        model(idx).sum().backward()
        if idx.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    step()  # warm-up
    return statistics.median(step() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="the models whose forms run")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"| model | form | T | s/step (batch {args.batch}, n_embd {args.width}, {args.threads} thread(s)) |")
    print("|---|---|---|---|")
    for T in args.lengths:
        torch.manual_seed(0)
        idx = torch.randint(0, VOCAB, (args.batch, T), device=device)
        for name, form, model in forms(args.width, T):
            if name not in args.models:
                continue
            seconds = step_seconds(model.to(device).eval(), idx, args.repeats)
            print(f"| {name} | {form} | {T} | {seconds:.3f} |", flush=True)


if __name__ == "__main__":
    main()
