"""Long reads through a carried state: tokens/s and memory of every model with `init_state` / `step`, batch 1.

    python benchmarks/state_reads.py                                   # 2^16 tokens, chunks of 256, 2 threads
    python benchmarks/state_reads.py --tokens 1048576 --models mamba,bdh

Each model (its config's defaults at ``--n-embd`` and ``--n-layer``, vocabulary 16) reads ``--tokens`` random
tokens in chunks of ``--chunk`` under no_grad, from an empty state. Reported: tokens/s over the whole read, the
state's bytes at the end, and the process's resident memory after a quarter of the read and at the end (a state of
fixed size reads on in flat memory: the two agree). GPT (RoPE) reads through its KV cache, which grows: it stops
at ``--gpt-tokens`` (its cache's bytes, `GPT.cache_nbytes`, say what a longer read would need).
"""

from __future__ import annotations

import argparse
import time

import torch
from _shared import Parser, rss_mb, run

from bdh.baselines import GLA, GPT, RWKV, Based, BasedConfig, GLAConfig, GPTConfig, Mamba, MambaConfig, RWKVConfig
from bdh.model import BDH, BDHConfig

VOCAB = 16


def build(name: str, d: int, L: int) -> torch.nn.Module:
    """The model ``name`` at width d and L layers (its other fields the defaults)."""
    makers = {
        "bdh": lambda: BDH(BDHConfig(vocab_size=VOCAB, n_layer=L, n_embd=d, n_head=4)),
        "mamba": lambda: Mamba(MambaConfig(vocab_size=VOCAB, n_layer=L, n_embd=d)),
        "gla": lambda: GLA(GLAConfig(vocab_size=VOCAB, n_layer=L, n_embd=d)),
        "rwkv": lambda: RWKV(RWKVConfig(vocab_size=VOCAB, n_layer=L, n_embd=d)),
        "based": lambda: Based(BasedConfig(vocab_size=VOCAB, n_layer=max(L, 3), n_embd=d)),
        "gpt": lambda: GPT(GPTConfig(vocab_size=VOCAB, n_layer=L, n_embd=d, positional="rope")),
    }
    return makers[name]().eval()


@torch.no_grad()
def read(model: torch.nn.Module, tokens: int, chunk: int) -> dict[str, float]:
    """Read ``tokens`` random tokens through ``model``'s state in chunks; throughput and memory."""
    gen = torch.Generator().manual_seed(0)
    state = model.init_state(1)
    model.step(torch.zeros(1, chunk, dtype=torch.long), state)  # warm-up, not kept
    start, quarter = time.perf_counter(), None
    for done in range(0, tokens, chunk):
        idx = torch.randint(0, VOCAB, (1, min(chunk, tokens - done)), generator=gen)
        _, state = model.step(idx, state)
        if quarter is None and done + chunk >= tokens // 4:
            quarter = rss_mb()
    seconds = time.perf_counter() - start
    return {"tok_s": tokens / seconds, "state_mb": state.nbytes() / 2**20, "rss_quarter": quarter, "rss_end": rss_mb()}


def main() -> None:
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=2**16)
    ap.add_argument("--gpt-tokens", type=int, default=2**13)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--n-embd", type=int, default=64)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default="bdh,mamba,gla,rwkv,based,gpt")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.tokens} tokens (GPT: {args.gpt_tokens}), chunks of {args.chunk}, batch 1, {args.threads} threads")
    print("| model | params | tokens | tokens/s | state MB | RSS MB at 1/4 | RSS MB at end |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        model = build(name, args.n_embd, args.n_layer)
        n = args.gpt_tokens if name == "gpt" else args.tokens
        r = read(model, n, args.chunk)
        params = sum(p.numel() for p in model.parameters())
        print(
            f"| {name} | {params} | {n} | {r['tok_s']:.0f} | {r['state_mb']:.3f} | "
            f"{r['rss_quarter']:.0f} | {r['rss_end']:.0f} |"
        )


if __name__ == "__main__":
    run(main)
