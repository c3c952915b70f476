"""How many facts one head of the delta rule keeps under filler writes, by its write keys: a synthetic probe of the
state alone (no trained model), for BDH's write-key options (``write_keys``, ``write_topk``; docs/long-context.md,
"Write keys that keep more").

    python benchmarks/write_capacity.py --facts 8 64 --fillers 0 1024 16384 --threads 1

One head of N neurons and width D, reading a vocabulary of tokens: ``--key-tokens`` that facts are keyed by and
``--filler-tokens``, each token with one fixed key, a BDH-like sparse positive activation ReLU(z - tau), z ~ N(0, 1)
per neuron, tau leaving ``--active`` of the neurons on (0.5: plain rectified Gaussians, mean cosine about 1/pi). P
facts (distinct key tokens, each with one of 256 random unit codes) are written, then F fillers (random filler
tokens with random codes), every write at full strength (b_t = 1: the pair-like fillers a trained gate writes as it
writes the pairs), by the kernel the model runs (`state_rules.chunked`, the keys shaped by `shape_write_keys` then
made unit). Each fact is then read as BDH reads, q = its key token's positive key, a = q^T S, and answered by the
nearest code: recall over facts and ``--trials`` independent vocabularies (chance 1/256), with its 95 % Wilson
interval (``top1-read``, ``top4-read``: the read through the same top-k neurons too, a rule the model does not
have). Also the mean cosine between the write keys of two unrelated tokens of each kind.
"""

from __future__ import annotations

import math

import torch
from _shared import Parser, run

CODES = 256
KINDS = {"unit": {}, "centred": {"centred": True}, "top1": {"topk": 1}, "top4": {"topk": 4}, "top16": {"topk": 16}}
#: kinds whose reads go through the same top-k neurons as their writes (a read rule the model does not have)
KINDS.update({"top1-read": {"topk": 1}, "top4-read": {"topk": 4}})


def draw_keys(g: torch.Generator, shape: tuple[int, ...], active: float) -> torch.Tensor:
    """Sparse positive keys: ReLU(z - tau), P(z > tau) = ``active``."""
    tau = math.sqrt(2.0) * torch.erfinv(torch.tensor(1.0 - 2.0 * active)).item()
    return (torch.randn(shape, generator=g, dtype=torch.float64) - tau).relu()


def recall(kind: str, facts: int, fillers: list[int], args) -> list[tuple[float, float, float]]:
    """Recall (with its Wilson interval) of ``facts`` facts after each count of ``fillers``, one sequence of writes."""
    from bdh.model.kernels.pytorch.state_rules import chunked, unit_keys
    from bdh.model.kernels.pytorch.write_keys import shape_write_keys
    from bdh.tasks.lengths import wilson_interval

    g = torch.Generator().manual_seed(args.seed)  # the same facts and fillers for every kind
    B, N, D = args.trials, args.neurons, args.width
    codes = torch.nn.functional.normalize(torch.randn(CODES, D, generator=g, dtype=torch.float64), dim=-1)
    total = max(fillers)
    vocab = draw_keys(g, (B, args.key_tokens + args.filler_tokens, N), args.active)  # each token's key
    fact_tok = torch.rand(B, args.key_tokens, generator=g).argsort(-1)[:, :facts]  # distinct key tokens
    filler_tok = args.key_tokens + torch.randint(0, args.filler_tokens, (B, total), generator=g)
    tokens = torch.cat([fact_tok, filler_tok], dim=1)
    keys = torch.gather(vocab, 1, tokens.unsqueeze(-1).expand(-1, -1, N)).unsqueeze(1)  # (B, 1, T, N)
    answers = torch.randint(0, CODES, (B, facts + total), generator=g)
    values = codes[answers].unsqueeze(1)  # (B, 1, T, D)
    wkeys = unit_keys(shape_write_keys(keys, **KINDS[kind]))
    beta = torch.ones(B, 1, facts + total, dtype=torch.float64)
    rows, state, done = [], None, 0
    for f in sorted(fillers):
        end = facts + f
        part = slice(done, end)
        if end > done:
            _, state = chunked(
                wkeys[:, :, part],
                wkeys[:, :, part],
                values[:, :, part],
                chunk_size=args.chunk,
                beta=beta[:, :, part],
                state=state,
                need_state=True,
            )
        done = end
        q = keys[:, 0, :facts]  # the fact's positive key, as BDH reads; or cut to its write's neurons (-read)
        q = shape_write_keys(q, **KINDS[kind]) if kind.endswith("-read") else q
        read = q @ state[:, 0]  # (B, P, D): q^T S
        got = (read @ codes.T).argmax(-1)
        right = int((got == answers[:, :facts]).sum())
        lo, hi = wilson_interval(right, B * facts)
        rows.append((right / (B * facts), lo, hi))
    return rows


def mean_cosine(kind: str, args) -> float:
    """The mean cosine between the write keys of two unrelated tokens."""
    from bdh.model.kernels.pytorch.state_rules import unit_keys
    from bdh.model.kernels.pytorch.write_keys import shape_write_keys

    g = torch.Generator().manual_seed(args.seed + 1)
    k = unit_keys(shape_write_keys(draw_keys(g, (2, 4096, args.neurons), args.active), **KINDS[kind]))
    return float((k[0] * k[1]).sum(-1).mean())


def main(argv: list[str] | None = None) -> int:
    parser = Parser(
        description=__doc__.splitlines()[0],
        epilog="CPU cost (docs/long-context.md, one thread on a shared 2-core machine): 3.2-8.7 min for --facts 8 64 "
        "--fillers 0 1024 16384 --trials 16 with 2-4 --kinds; it grows with the facts + fillers written x --trials x "
        "the kinds",
    )
    parser.add_argument("--facts", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--fillers", type=int, nargs="+", default=[0, 1024, 16384])
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    parser.add_argument("--neurons", type=int, default=256, help="N, neurons per head (the recall recipe's 256)")
    parser.add_argument("--width", type=int, default=64, help="D, the value width (the recipe's 64)")
    parser.add_argument("--active", type=float, default=0.05, help="share of neurons a key turns on")
    parser.add_argument("--key-tokens", type=int, default=64, help="tokens facts are keyed by (>= the most facts)")
    parser.add_argument("--filler-tokens", type=int, default=128, help="tokens of the gap")
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if not 0 < args.active < 1 or min(args.facts) < 1 or min(args.fillers) < 0 or min(args.neurons, args.width) < 1:
        parser.error("--active lies in (0, 1); --facts, --neurons, --width >= 1; --fillers >= 0")
    if max(args.facts) > args.key_tokens or args.filler_tokens < 1:
        parser.error(f"--key-tokens {args.key_tokens} must cover the most --facts, and --filler-tokens be >= 1")
    if any(int(KINDS[k].get("topk", 0)) > args.neurons for k in args.kinds):
        parser.error(f"a top-k kind keeps more neurons than --neurons {args.neurons}")
    torch.set_num_threads(args.threads)
    print("| write keys | mean cosine | facts | " + " | ".join(f"{f} fillers" for f in sorted(args.fillers)) + " |")
    print("|---|---|---|" + "---|" * len(args.fillers))
    for kind in args.kinds:
        cos = mean_cosine(kind, args)
        for facts in args.facts:
            cells = [f"{r:.2f} ({lo:.2f}–{hi:.2f})" for r, lo, hi in recall(kind, facts, args.fillers, args)]
            print(f"| {kind} | {cos:.3f} | {facts} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    run(main)
