"""How close a run's printed bits per byte is to the whole validation split's (``bdh eval RUN --full``).

    python benchmarks/eval_sampling.py RUN_DIR          # a trained run (docs/training.md quotes the main job's)
    python benchmarks/eval_sampling.py --quick          # a tiny untrained BDH on a generated corpus (a test)

Scores every window of the run's validation split once, in the evaluation order (``task.batch("val", ...)``:
the golden-ratio permutation `bdh.tasks.text.spread`, so that any first windows are spread over the split),
then reads off the estimate an evaluation of the first n windows would print, against the mean of all of them:

* ``printed``: the first n windows (what a run with that many evaluation windows prints);
* ``spread``: every cyclic start of the evaluation order (n windows spread like the printed ones, placed
  elsewhere): the spread of such estimates over where the sample falls;
* ``random``: n windows drawn at random without replacement (the same for a sample not spread at all).

For each n it prints the standard deviation of the estimates, the share within 0.02 bits of the whole split,
and the largest distance. The windows' own standard deviation divided by sqrt(n) is the standard error
``val_bpb_se`` a run prints; the table shows whether spreading the windows over the split does better.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from _shared import Parser, cpu_description, run

SIZES = (128, 256, 512, 1024)
TOLERANCE = 0.02


def window_bits(model: torch.nn.Module, task, batch_size: int, seed: int) -> np.ndarray:
    """Bits per byte of every validation window, in the evaluation order."""
    out = []
    model.eval()
    with torch.no_grad():
        for i in range(task.num_batches("val", batch_size)):
            x, y = task.batch("val", i, batch_size, seed)
            nll = F.cross_entropy(model(x).float().transpose(1, 2), y, reduction="none")
            out.append((nll.mean(1) / math.log(2)).double().numpy())
    return np.concatenate(out)


def table(bits: np.ndarray, sizes: tuple[int, ...], draws: int, seed: int) -> str:
    """The markdown table of the module docstring for ``bits`` (per-window, evaluation order)."""
    full, nw = float(bits.mean()), len(bits)
    rng = np.random.default_rng(seed)
    rows = [
        f"whole split: {nw:,} windows, {full:.4f} bits per byte; per-window standard deviation {bits.std(ddof=1):.3f}",
        "",
        "| windows n | printed (first n) | sd/sqrt(n) | spread: sd | spread: within 0.02 | spread: largest "
        "| random: sd | random: within 0.02 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    twice = np.concatenate([bits, bits])
    sums = np.concatenate([[0.0], np.cumsum(twice)])
    for n in sizes:
        if n >= nw:
            continue
        spread = (sums[n : n + nw] - sums[:nw]) / n - full  # every cyclic start of the evaluation order
        rand = np.array([bits[rng.choice(nw, n, replace=False)].mean() for _ in range(draws)]) - full
        rows.append(
            f"| {n} | {bits[:n].mean() - full:+.4f} | {bits.std(ddof=1) / math.sqrt(n):.4f} | {spread.std():.4f} "
            f"| {np.mean(np.abs(spread) <= TOLERANCE):.0%} | {np.abs(spread).max():.4f} | {rand.std():.4f} "
            f"| {np.mean(np.abs(rand) <= TOLERANCE):.0%} |"
        )
    return "\n".join(rows)


def quick_run(folder: Path) -> Path:
    """A tiny BDH run on a generated corpus (two training steps), for the test."""
    from bdh.train import load_config, train

    corpus = folder / "corpus.txt"
    rng = np.random.default_rng(0)
    words = ["to", "be", "or", "not", "the", "king", "and", "queen", "of", "night"]
    corpus.write_text(" ".join(rng.choice(words, 20_000)))
    overrides = [
        f"task.data={corpus}", "task.seq_len=32", f"run_dir={folder / 'run'}", "model.n_layer=1", "model.n_embd=32",
        "model.n_head=2", "model.n_neurons=128", "train.max_steps=2", "train.batch_size=4", "eval.batches=1",
        "log.progress=none", "log.tensorboard=false", "sample.max_new_tokens=0", "train.max_minutes=null",
    ]  # fmt: skip
    return train(load_config(None, overrides)).run_dir


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("run", nargs="?", help="a run folder (its best model and validation split)")
    p.add_argument("--quick", action="store_true", help="a tiny untrained run instead (a test)")
    p.add_argument("--draws", type=int, default=2000, help="random samples per size")
    p.add_argument("--threads", type=int, default=None, help="PyTorch threads")
    args = p.parse_args(argv)
    if bool(args.run) == args.quick:
        p.error("give a run folder or --quick")
    if args.threads:
        torch.set_num_threads(args.threads)
    from bdh.analysis.evaluation.data import eval_data
    from bdh.cli.checks import load_model

    with tempfile.TemporaryDirectory() as tmp:
        run = quick_run(Path(tmp)) if args.quick else Path(args.run)
        model = load_model(run / "best", announce=False)
        ev = eval_data(run, model)
        bits = window_bits(model, ev.task, ev.batch_size, ev.seed)
    sizes = (8, 16, 32) if args.quick else SIZES
    command = "python benchmarks/eval_sampling.py " + ("--quick" if args.quick else "RUN_DIR")
    print(f"command: `{command}`\nCPU: {cpu_description()} (the numbers are losses, not times: no load to report)")
    print(f"run: {'a tiny BDH trained 2 steps (--quick)' if args.quick else args.run}")
    print(table(bits, sizes, args.draws if not args.quick else 50, seed=0))
    return 0


if __name__ == "__main__":
    run(main)
