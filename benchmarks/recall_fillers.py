"""Which fillers erase the pairs of recall through a gap: one trained model read through its state on the length
experiment's fixed test sequences, with the gap's fillers as the task draws them and redrawn from smaller pools.

    python benchmarks/recall_fillers.py RUN/models/bdh-nopos-lg-delta-recall_gap-s0 --lengths 64 256 1024

The task's fillers (``task``) are uniform over the vocabulary less the example's keys and values, so half of them
lie in the key range [1, V/2) and look like keys. Each other column redraws every filler of the gap (the prefix
before the pairs is kept) from one pool, per sequence: ``key-range`` (the key range less the example's keys),
``value-range`` (the value range less its values), ``4 values`` and ``1 value`` (the first 4 or 1 of that). The
pairs, the questions and the answers stay. Accuracy over the 8 D questions of ``--sequences`` sequences each.
docs/long-context.md ("Recall through a gap") reads the table.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from _shared import recall_gap_parser, run

POOLS = ("task", "key-range", "value-range", "4 values", "1 value")


def pool_of(name: str, vocab: int, taken: set[int]) -> list[int]:
    """The filler tokens of pool ``name`` for a sequence whose keys and values are ``taken``."""
    keys = [t for t in range(1, vocab // 2) if t not in taken]
    values = [t for t in range(vocab // 2, vocab) if t not in taken]
    return {"key-range": keys, "value-range": values, "4 values": values[:4], "1 value": values[:1]}[name]


def redraw(x: torch.Tensor, pairs: int, gap: int, vocab: int, name: str, seed: int) -> torch.Tensor:
    """``x`` (B, L) with its ``gap`` fillers between the pairs and the questions redrawn from pool ``name``."""
    if name == "task":
        return x
    out, gen = x.clone(), np.random.default_rng(seed)
    start = x.shape[1] - 4 * pairs - gap  # where the pairs begin
    for row in range(x.shape[0]):
        taken = set(x[row, start : start + 2 * pairs].tolist())
        out[row, start + 2 * pairs : start + 2 * pairs + gap] = torch.from_numpy(
            gen.choice(pool_of(name, vocab, taken), gap)
        )
    return out


def main(argv: list[str] | None = None) -> int:
    args = recall_gap_parser(__doc__.splitlines()[0], [64, 256, 1024]).parse_args(argv)
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
    torch.set_num_threads(args.threads)
    runtime = BDH_READ if issubclass(read_model_config(args.model)[0], BDH) else {}
    model, _ = load_run_model(args.model, device="cpu", **runtime)  # checksums verified
    vocab = model.config.vocab_size
    task = RecallGap(RecallGapConfig(seq_len=min(args.lengths), vocab_size=vocab, num_kv_pairs=args.pairs))
    pairs = args.pairs
    print(f"`python benchmarks/recall_fillers.py {' '.join(argv or sys.argv[1:])}`; V = {vocab}, D = {pairs}\n")
    print("| length (gap) | " + " | ".join(POOLS) + " |")
    print("|---" * (len(POOLS) + 1) + "|")
    for length in args.lengths:
        x, y = fixed_test_set(task, length, n=64, seed=TEST_SEED, rows=range(args.sequences))
        cells = []
        for i, name in enumerate(POOLS):
            refilled = redraw(x, pairs, task.test_gap(length), vocab, name, seed=i)
            right, scored, _, _ = reading.read_state(model, refilled, y, 64)
            cells.append(f"{right / scored:.2f}")
        print(f"| {length:,} ({task.test_gap(length):,}) | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    run(main)
