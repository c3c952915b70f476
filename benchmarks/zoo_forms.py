"""Seconds per training step of the Mamba, RWKV, Hyena, DeltaNet and GLA baselines in each of their forms (the fast path
and its reference), on this machine's CPU (or ``--device cuda``).

    python benchmarks/zoo_forms.py                         # T = 64 and 256, n_embd 64, batch 16, one thread
    python benchmarks/zoo_forms.py --lengths 512 --batch 8 --threads 2
    python benchmarks/zoo_forms.py --models mamba           # one model's forms only
    python benchmarks/zoo_forms.py --models rwkv --read-batch 64   # also a read through the state, tokens/s
    python benchmarks/zoo_forms.py --models gla --gla-expand-k 16  # GLA at the capacity map's key width
    python benchmarks/zoo_forms.py --models mamba --mamba-d-state 256  # Mamba at the map's state (scan=native: built)

One step is forward + backward of the summed logits (no optimiser), the median of ``--repeats`` after one warm-up
step; all forms of a model share its weights, so the rows of one model compare like with like. ``--read-batch B``
adds a column: tokens/s of one T-token chunk read through the state of B sequences (``step``, no gradient), as
``bdh experiment length`` reads.
"""

from __future__ import annotations

import statistics
import time

import torch
from _shared import Parser, run

from bdh.baselines import (
    GLA,
    RWKV,
    DeltaNet,
    DeltaNetConfig,
    GLAConfig,
    Hyena,
    HyenaConfig,
    Mamba,
    MambaConfig,
    RWKVConfig,
)
from bdh.model.kernels.cpu import native

VOCAB = 128


MODELS = ("mamba", "rwkv", "hyena", "deltanet", "gla")


def forms(
    width: int, T: int, gla_expand_k: float = 0.5, mamba_d_state: int = 16
) -> list[tuple[str, str, torch.nn.Module]]:
    """(model, form, module) for every form measured."""
    out: list[tuple[str, str, torch.nn.Module]] = []
    for scan in ("sequential", "recurrent", "parallel") + (("native",) if native.available() else ()):
        cfg = MambaConfig(vocab_size=VOCAB, n_embd=width, d_state=mamba_d_state, scan=scan)
        out.append(("mamba", f"scan={scan}", Mamba(cfg)))
    for wkv, chunk in (("sequential", 8), ("chunked", 8), ("chunked", 16), ("chunked", 32)):
        cfg = RWKVConfig(vocab_size=VOCAB, n_embd=width, wkv=wkv, chunk_size=chunk)
        out.append(("rwkv", f"wkv={wkv}" + (f", chunk_size={chunk}" if wkv == "chunked" else ""), RWKV(cfg)))
    for conv in ("fft", "direct"):
        out.append(("hyena", f"conv={conv}", Hyena(HyenaConfig(vocab_size=VOCAB, seq_len=T, n_embd=width, conv=conv))))
    for form, chunk in (("reference", 16), ("chunked", 16), ("chunked", 32), ("chunked", 64)):
        cfg = DeltaNetConfig(vocab_size=VOCAB, seq_len=T, n_embd=width, form=form, chunk_size=chunk)
        out.append(("deltanet", f"form={form}" + (f", chunk_size={chunk}" if form == "chunked" else ""), DeltaNet(cfg)))
    for form, chunk in (("reference", 16), ("pairs", 8), ("pairs", 16), ("fast", 8), ("fast", 16), ("fast", 64)):
        heads = dict(n_head=2, expand_k=gla_expand_k)
        cfg = GLAConfig(vocab_size=VOCAB, seq_len=T, n_embd=width, form=form, chunk_size=chunk, **heads)
        out.append(("gla", f"form={form}" + (f", chunk_size={chunk}" if form != "reference" else ""), GLA(cfg)))
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


def read_tokens_per_s(model: torch.nn.Module, T: int, batch: int, repeats: int, device: torch.device) -> float:
    """Tokens/s of ``model.step`` over one chunk of T tokens of ``batch`` sequences from a fresh state, no gradient."""
    idx = torch.randint(0, VOCAB, (batch, T), device=device)

    def read() -> float:
        state = model.init_state(batch, device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        model.step(idx, state)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    with torch.no_grad():
        read()  # warm-up
        return idx.numel() / statistics.median(read() for _ in range(repeats))


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="the models whose forms run")
    parser.add_argument("--read-batch", type=int, default=0, help="also time a read through the state of B sequences")
    parser.add_argument("--gla-expand-k", type=float, default=0.5, help="GLA's key width over n_embd (2 heads)")
    parser.add_argument("--mamba-d-state", type=int, default=16, help="Mamba's N, states per inner channel")
    args = parser.parse_args(argv)
    if args.read_batch < 0 or args.batch < 1 or args.repeats < 1 or min(args.lengths) < 1:
        parser.error("--batch, --repeats and --lengths must be positive, --read-batch not negative")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    read = f" read tok/s (batch {args.read_batch}) |" if args.read_batch else ""
    print(f"| model | form | T | s/step (batch {args.batch}, n_embd {args.width}, {args.threads} thread(s)) |{read}")
    print("|---|---|---|---|" + ("---|" if read else ""))
    for T in args.lengths:
        torch.manual_seed(0)
        idx = torch.randint(0, VOCAB, (args.batch, T), device=device)
        for name, form, model in forms(args.width, T, args.gla_expand_k, args.mamba_d_state):
            if name not in args.models:
                continue
            model = model.to(device).eval()
            seconds = step_seconds(model, idx, args.repeats)
            rate = f" {read_tokens_per_s(model, T, args.read_batch, args.repeats, device):,.0f} |" if read else ""
            print(f"| {name} | {form} | {T} | {seconds:.3f} |{rate}", flush=True)
    return 0


if __name__ == "__main__":
    run(main)
