"""Which writes erase the pairs of recall through a gap: one trained BDH with the delta rule (``state_write: delta``)
read through its state on the length experiment's fixed test sequences, as trained and with its write strengths
b_t changed while it reads.

    python benchmarks/recall_writes.py RUN/models/bdh-nopos-lg-delta-recall_gap-s0 --lengths 1024 4096 16384

Columns: ``as trained``; ``fillers silent in head h`` (b_t = 0 on every filler of the gap in head h of every layer:
an oracle that knows which tokens are fillers, the ceiling of a perfect write gate); ``hard gate`` (the same weights
read with ``write_gate: hard``, the gate's logits z through clamp(z / 6 + 1/2, 0, 1) instead of the sigmoid, no
retraining: `bdh.model.BDH.hard_gated`; ``as trained`` again for a model trained with it); ``hard gate, keys
top-1 in head h`` (the hard gate, and every write of head h, ``--top1-head``, default the last, addressed to one
neuron: its unit key replaced by the one-hot of its largest neuron, ``hard_gated(top1_heads=(h,))``, the model
option ``write_topk: 1``, ``write_topk_heads: [h]``; the queries as trained);
``--columns`` reads some of them (``--columns hard top1`` for long lengths). Then
the write strengths by token kind, read on the first length: the pairs' keys and values, the fillers that look
like a pair's value (a value-range token after a key-range one) and the other fillers, with the share of those
written with b_t = 0.
docs/long-context.md ("Recall through a gap") reads the tables.
"""

from __future__ import annotations

import sys

import torch
from _shared import recall_gap_parser, run

KINDS = ("pair keys", "pair values", "pair-like fillers", "other fillers")
#: the columns, in table order (``--columns``)
COLUMNS = ("trained", "silent", "hard", "top1")


class Writes:
    """Stands in for ``model.state_rule_gates`` while the benchmark reads: counts the tokens each layer has seen to know
    where a chunk lies, silences one head's fillers (or not) and collects b_t by position (``reset`` before each
    read)."""

    def __init__(self, model, pairs: int) -> None:
        self.model, self.rule, self.pairs = model, model.state_rule_gates, pairs
        self.change, self.length, self.seen, self.betas = "as trained", 0, [], []

    def reset(self, change: str, length: int, collect: bool = False) -> None:
        self.change, self.length = change, length
        self.seen = [0] * self.model.config.n_layer
        self.betas = [[] for _ in self.seen] if collect else []

    def __call__(self, v: torch.Tensor) -> dict:
        gates = self.rule(v)
        log_g, beta = gates["log_g"], gates["beta"]
        layer = min(range(len(self.seen)), key=lambda i: self.seen[i])  # layers run in order, one chunk each
        start = self.seen[layer]
        self.seen[layer] += v.shape[2]
        if self.change.startswith("silent "):
            pos = torch.arange(start, start + v.shape[2], device=beta.device)
            filler = (pos >= 2 * self.pairs) & (pos < self.length - 2 * self.pairs)
            beta = beta.clone()
            beta[:, int(self.change.split()[1])] *= ~filler
        if self.betas:
            self.betas[layer].append(beta)
        return {"log_g": log_g, "beta": beta}


def top1_twin(model, head: int):
    """A model trained with the hard gate, read with ``write_topk: 1`` in ``head`` (`hard_gated`'s for the rest)."""
    return model.reconfigured(write_topk=1, write_topk_heads=(head,)).eval()


def kinds(x: torch.Tensor, pairs: int, vocab: int) -> dict[str, torch.Tensor]:
    """(B, L) masks of each of `KINDS` in test sequences ``x`` (pairs first, then the gap, then the questions)."""
    pos = torch.arange(x.shape[1])
    filler = ((pos >= 2 * pairs) & (pos < x.shape[1] - 2 * pairs)).expand_as(x)
    after_key = torch.zeros_like(filler)
    after_key[:, 1:] = (x[:, 1:] >= vocab // 2) & (x[:, :-1] < vocab // 2) & (x[:, :-1] > 0)
    key = (pos < 2 * pairs) & (pos % 2 == 0)
    value = (pos < 2 * pairs) & (pos % 2 == 1)
    return dict(zip(KINDS, (key.expand_as(x), value.expand_as(x), filler & after_key, filler & ~after_key)))


def main(argv: list[str] | None = None) -> int:
    parser = recall_gap_parser(__doc__.splitlines()[0], [1024, 4096])
    parser.epilog = (
        "CPU cost (docs/long-context.md, one thread on a shared 2-core machine): one pass of --sequences x LENGTH "
        "tokens per column and length, 2.5-4.5 min a column at 16,384 x 64; it grows with LENGTH x --sequences x "
        "the columns (8.8 min for 262,144 and 1,048,576 at 16 sequences, --columns top1, two threads)"
    )
    parser.add_argument("--top1-head", type=int, default=-1, help="the head of the top-1 column (default: the last)")
    parser.add_argument(
        "--columns",
        nargs="+",
        choices=COLUMNS,
        default=list(COLUMNS),
        help="the columns to read (default all; the table of b_t comes with trained)",
    )
    args = parser.parse_args(argv)
    from bdh.experiments.length import reading
    from bdh.experiments.length.experiment import BDH_READ, TEST_SEED
    from bdh.model import BDH
    from bdh.model.io import read_model_config
    from bdh.tasks.lengths import fixed_test_set
    from bdh.tasks.recall_gap import RecallGap, RecallGapConfig
    from bdh.train.run.model import load_run_model

    if not (args.model / "config.json").is_file():
        print(f"error: {args.model}: not a model folder", file=sys.stderr)
        return 2
    if not issubclass(read_model_config(args.model)[0], BDH):
        print(f"error: {args.model}: not a BDH model", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    model, _ = load_run_model(args.model, device="cpu", **BDH_READ)  # checksums verified
    cfg, pairs = model.config, args.pairs
    if cfg.state_write != "delta":
        why = f"its state has no write strengths (state_write: {cfg.state_write})"
        print(f"error: {args.model}: {why}", file=sys.stderr)
        return 2
    task = RecallGap(RecallGapConfig(seq_len=4 * pairs, vocab_size=cfg.vocab_size, num_kv_pairs=pairs))
    bad = [n for n in args.lengths if n <= 4 * pairs]
    if bad or not 1 <= args.sequences <= 64:
        print(f"error: lengths must exceed 4 D = {4 * pairs} and sequences lie in 1..64", file=sys.stderr)
        return 2
    if not -cfg.n_head <= args.top1_head < cfg.n_head:
        print(f"error: --top1-head must name one of the {cfg.n_head} heads, got {args.top1_head}", file=sys.stderr)
        return 2
    top1 = args.top1_head % cfg.n_head
    hard = model.hard_gated() if model.soft_gated else model  # before the wrapper goes in
    addressed = None
    if "top1" in args.columns:
        addressed = model.hard_gated((top1,)) if model.soft_gated else top1_twin(model, top1)
    writes = Writes(model, pairs)
    model.state_rule_gates = writes
    column = {"trained": {"as trained": "as trained"}, "hard": {"hard gate": "hard gate"}}
    column["silent"] = {f"silent {h}": f"fillers silent in head {h}" for h in range(cfg.n_head)}
    column["top1"] = {"top1": f"hard gate, keys top-1 in head {top1}"}
    chosen = {change: name for c in COLUMNS if c in args.columns for change, name in column[c].items()}
    changes, names = list(chosen), list(chosen.values())
    print(f"`python benchmarks/recall_writes.py {' '.join(argv or sys.argv[1:])}`; {cfg.write_gate} gate\n")
    print("| length (gap) | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    first = None
    for length in args.lengths:
        x, y = fixed_test_set(task, length, n=64, seed=TEST_SEED, rows=range(args.sequences))
        cells = []
        for change in changes:
            writes.reset(change, length, collect=first is None and change == "as trained")
            reader = {"hard gate": hard, "top1": addressed}.get(change, model)
            with torch.no_grad():
                right, scored, _, _ = reading.read_state(reader, x, y, BDH_READ["chunk_size"])
            cells.append(f"{right / scored:.3f}")
            if writes.betas:
                first = (x, [torch.cat(b, dim=2) for b in writes.betas])
        print(f"| {length:,} ({task.test_gap(length):,}) | " + " | ".join(cells) + " |", flush=True)
    if first is None:  # not read as trained
        return 0
    x, betas = first
    print(f"\nb_t by token kind at length {x.shape[1]:,} (mean; other fillers: the share written with b_t = 0)\n")
    print("| layer, head | " + " | ".join(KINDS) + " | other fillers at 0 |")
    print("|---" * (len(KINDS) + 2) + "|")
    masks = kinds(x, pairs, cfg.vocab_size)
    for layer, beta in enumerate(betas):
        for h in range(cfg.n_head):
            b = beta[:, h]
            cells = [f"{b[m].mean():.4f}" for m in masks.values()]
            zero = (b[masks["other fillers"]] == 0).float().mean()
            print(f"| L{layer}H{h} | " + " | ".join(cells) + f" | {zero:.3f} |")
    return 0


if __name__ == "__main__":
    run(main)
