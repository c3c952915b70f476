"""The price of a long context: BDH's state against its own windowed pass, and against a GPT's KV cache.

    python benchmarks/long_price.py        # the length recipe's BDH (bdh-nopos-lg, width 64, n = 512), 2^20 tokens
    python benchmarks/long_price.py --tokens 65536 --contexts 1024 8192
    python benchmarks/long_price.py --skip generation --models bdh-nopos-lg-delta bdh-nopos-lg-delta-hard  # rules

Both tables use the models of ``bdh experiment length`` (`bdh.experiments.length.config.Config`, its ``--set``
fields via ``--width`` / ``--n-layer`` / ``--models``) on the induction task's vocabulary, batch 1, no gradient.

* **Read**: tokens/s of reading ``--tokens`` random tokens through the carried state in chunks of T, against the
  same model's windowed pass (``forward`` over separate sequences of T, the form it was trained in), measured in
  the same process, the models' reads interleaved in ``--pieces`` turns; the resident memory at a quarter of the
  reads and at their end (flat: the two agree); and each model's state tok/s over the first row's (``--bdh``: with
  ``--models bdh-nopos-lg-delta``, the delta rule's price against Eq. 8's rule).
* **Generation**: milliseconds per new token after a context of C tokens (read first, untimed): BDH's recurrent
  step on its state, and a GPT of the same parameter count (`bdh.bench.models.sized_section`) with its KV cache.
  The last column is GPT's time over BDH's: above 1, the state is cheaper.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time

import torch
from _shared import Parser, rss_mb, run

from bdh.experiments.length.config import Config
from bdh.registry import get_model


def build(config: Config, name: str) -> torch.nn.Module:
    section = config.model_section(name, "induction")
    cls = get_model(section.pop("name"))
    return cls(cls.config_class(**section)).eval()


def windowed_tok_s(model: torch.nn.Module, vocab: int, T: int, windows: int) -> float:
    """Tokens/s of ``forward`` over ``windows`` separate sequences of T (batch 1)."""
    gen = torch.Generator().manual_seed(1)
    model(torch.randint(0, vocab, (1, T), generator=gen))  # warm-up
    start = time.perf_counter()
    for _ in range(windows):
        model(torch.randint(0, vocab, (1, T), generator=gen))
    return windows * T / (time.perf_counter() - start)


def state_reads(models: list[torch.nn.Module], vocab: int, T: int, tokens: int, pieces: int) -> list[dict]:
    """Tokens/s of each model reading ``tokens`` random tokens through its state in chunks of T, the reads
    interleaved: ``pieces`` turns, each model reading its next tokens / pieces tokens in a turn (the order
    alternating), so that a slow spell of a shared machine falls on every model alike; and the process's resident
    memory when the reads are a quarter done and at their end."""
    gens = [torch.Generator().manual_seed(0) for _ in models]
    states = [m.init_state(1) for m in models]
    for m, gen in zip(models, gens):
        m.step(torch.randint(0, vocab, (1, T), generator=gen), m.init_state(1))  # warm-up, not kept
    seconds, done, quarter = [0.0] * len(models), 0, None
    bounds = [round(tokens * (i + 1) / pieces) for i in range(pieces)]
    for turn, end in enumerate(bounds):
        order = range(len(models)) if turn % 2 == 0 else reversed(range(len(models)))
        for i in order:
            start = time.perf_counter()
            for at in range(done, end, T):
                tok = torch.randint(0, vocab, (1, min(T, end - at)), generator=gens[i])
                _, states[i] = models[i].step(tok, states[i])
            seconds[i] += time.perf_counter() - start
        done = end
        if quarter is None and done >= tokens // 4:
            quarter = rss_mb()
    return [{"tok_s": tokens / s, "rss_quarter": quarter or rss_mb(), "rss_end": rss_mb()} for s in seconds]


def ms_per_token(model: torch.nn.Module, vocab: int, context: int, chunk: int, new_tokens: int) -> float:
    """Median milliseconds of one new token's step after ``context`` tokens read through the model's state."""
    gen = torch.Generator().manual_seed(2)
    state = model.init_state(1)
    for done in range(0, context, chunk):
        _, state = model.step(torch.randint(0, vocab, (1, min(chunk, context - done)), generator=gen), state)
    times, token = [], torch.zeros(1, dtype=torch.long)
    for _ in range(new_tokens):
        start = time.perf_counter()
        logits, state = model.step(token, state)
        times.append(time.perf_counter() - start)
        token = logits.argmax(-1)
    return 1e3 * statistics.median(times)


def params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def read_table(config: Config, args: argparse.Namespace) -> None:
    T, vocab = config.seq_len, config.induction_vocab
    print(f"\nRead: {args.tokens:,} tokens through the state in chunks of T = {T}, against the windowed pass at T")
    print(f"(the reads interleaved in {args.pieces} turns; the last column: state tok/s over {args.bdh}'s)")
    print(
        "| model | params | windowed tok/s | state tok/s | state / windowed | RSS MB at 1/4 | RSS MB at end | "
        f"state / {args.bdh} |"
    )
    print("|---|---|---|---|---|---|---|---|")
    names = [args.bdh, *args.models]
    models = [build(config, name) for name in names]
    windowed = [windowed_tok_s(m, vocab, T, args.windows) for m in models]
    reads = state_reads(models, vocab, T, args.tokens, args.pieces)
    for i, (name, model, r) in enumerate(zip(names, models, reads)):
        w = max(windowed[i], windowed_tok_s(model, vocab, T, args.windows))  # best of two, around the read
        print(
            f"| {name} | {params(model):,} | {w:,.0f} | {r['tok_s']:,.0f} | {r['tok_s'] / w:.2f} | "
            f"{r['rss_quarter']:.0f} | {r['rss_end']:.0f} | {r['tok_s'] / reads[0]['tok_s']:.2f} |"
        )


def generation_table(config: Config, args: argparse.Namespace) -> None:
    vocab = config.induction_vocab
    bdh, gpt = build(config, args.bdh), build(config, "gpt")
    print(f"\nGeneration: ms per new token after C tokens of context (median of {args.new_tokens}), batch 1")
    print(f"{args.bdh} {params(bdh):,} parameters (its state), GPT {params(gpt):,} parameters (its KV cache)")
    print("| context C | BDH ms/token | GPT ms/token | GPT / BDH |")
    print("|---|---|---|---|")
    for context in args.contexts:
        b = ms_per_token(bdh, vocab, context, config.seq_len, args.new_tokens)
        g = ms_per_token(gpt, vocab, context, config.seq_len, args.new_tokens)
        print(f"| {context:,} | {b:.2f} | {g:.2f} | {g / b:.2f} |")


def main(argv: list[str] | None = None) -> int:
    from bdh.cli.checks import integer

    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=2**20, help="tokens of the long read")
    ap.add_argument("--windows", type=int, default=64, help="sequences of T timed for the windowed pass")
    ap.add_argument("--pieces", type=integer(1), default=16, help="turns the models' long reads are interleaved in")
    ap.add_argument("--contexts", type=int, nargs="+", default=[1024, 8192, 65536])
    ap.add_argument("--new-tokens", type=int, default=32, help="timed new tokens per context")
    ap.add_argument("--width", type=integer(1), default=64, help="the experiment's width (its --set width=)")
    ap.add_argument("--n-layer", type=integer(1), default=2)
    ap.add_argument("--neuron-mult", type=integer(1), default=8, help="BDH's n = neuron_mult x width")
    ap.add_argument("--bdh", default="bdh-nopos-lg", help="the BDH row of both tables (a name of BDH_STATES or bdh)")
    ap.add_argument("--models", nargs="*", default=[], help="other models of the read table (e.g. mamba gla)")
    ap.add_argument("--threads", type=integer(1), default=2)
    ap.add_argument("--skip", choices=("read", "generation"), help="leave one table out")
    args = ap.parse_args(argv)
    if args.tokens < 1 or args.windows < 1 or args.new_tokens < 1 or min(args.contexts) < 1:
        ap.error("--tokens, --windows, --new-tokens and --contexts must be positive")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = Config(width=args.width, n_layer=args.n_layer, neuron_mult=args.neuron_mult)
    command = shlex.join(["python", "benchmarks/long_price.py", *(sys.argv[1:] if argv is None else argv)])
    print(f"command: `{command}`")
    print(
        f"torch {torch.__version__}, {os.cpu_count()} cores, {args.threads} threads, 1-minute load average "
        f"{os.getloadavg()[0]:.2f} at the start; width {args.width}, {args.n_layer} layers, "
        f"n = {args.neuron_mult} x width"
    )
    with torch.no_grad():
        if args.skip != "read":
            read_table(config, args)
        if args.skip != "generation":
            generation_table(config, args)
    return 0


if __name__ == "__main__":
    run(main)
