"""How long a trained Mamba keeps the answer of the induction task: its channels' retention across the gap.

    python benchmarks/mamba_retention.py RUN/models/mamba-induction-s0 --lengths 64 1024 16384 65536

Mamba's selective scan (Gu & Dao 2023, Eq. 2a with the zero-order hold) carries channel (e, n) of a layer's state
across token t by the factor exp(A[e, n] Delta_t[e]), A = -exp(A_log) and Delta_t = softplus(dt_proj(...)), the
token's step. The answer of an induction sequence (the token after the first trigger) is written at position w and
read by the question at the last position L - 1, so a channel holds it by exp(A[e, n] sum_{w < t <= L - 1}
Delta_t[e]). Only the state crosses the gap (the convolution sees 4 tokens), so the channel that keeps the most is
an upper bound on what any layer can still read. For each length the table gives, over the first ``--sequences``
sequences of the length experiment's fixed test set (read whole), the model's accuracy, the gap, and per layer
the median of that best channel's half-life on the gap's tokens (ln 2 / (-A Delta) averaged over the gap) and of
its retention over the whole gap (log10). docs/experiments.md ("Calibrating on Mamba") reads the table.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from _shared import Parser, run


def best_channel(delta: torch.Tensor, A_log: torch.Tensor, write: int) -> tuple[float, float]:
    """(half-life in tokens, log10 retention) of the channel that keeps most across the tokens after ``write``:
    ``delta`` (T, e) one layer's steps on one sequence, ``A_log`` (e, N) its A = -exp(A_log)."""
    steps = delta[write + 1 :].double().sum(0)  # (e,): sum of Delta over w < t <= T - 1
    decay = A_log.double().exp() * steps[:, None]  # -log retention of every channel (e, N)
    best = float(decay.min())
    gap = delta.shape[0] - 1 - write
    half_life = math.inf if best == 0 else math.log(2) * gap / best
    return half_life, -best / math.log(10)


def mixers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The selective-scan layers of ``model`` (a Mamba), in order: each has ``A_log`` and ``dt_proj``."""
    from bdh.baselines.mamba import MambaMixer

    return [m for m in model.modules() if isinstance(m, MambaMixer)]


def layer_steps(model: torch.nn.Module, idx: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(logits (1, T, V), each layer's Delta (T, e)) of ``model`` (a Mamba) on one sequence ``idx`` (T,)."""
    steps: list[torch.Tensor] = []
    hooks = [
        m.dt_proj.register_forward_hook(lambda _m, _i, out: steps.append(F.softplus(out[0]))) for m in mixers(model)
    ]
    try:
        with torch.no_grad():
            logits = model(idx.view(1, -1))[0]
    finally:
        for h in hooks:
            h.remove()
    return logits, steps


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("model", type=Path, help="a model folder of a Mamba induction run of bdh experiment length")
    p.add_argument("--lengths", type=int, nargs="+", default=[64, 1024, 16384])
    p.add_argument("--sequences", type=int, default=8, help="test sequences per length (the experiment's first)")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    from bdh.analysis.memory import induction_write
    from bdh.baselines.mamba import Mamba
    from bdh.errors import UserError
    from bdh.experiments.length import reading
    from bdh.experiments.length.experiment import TEST_SEED
    from bdh.model.io import read_model_config
    from bdh.tasks.induction import Induction, InductionConfig, check_induction_args
    from bdh.tasks.lengths import fixed_test_set
    from bdh.train.run.model import load_run_model

    if not (args.model / "config.json").is_file() or not issubclass(read_model_config(args.model)[0], Mamba):
        print(f"error: {args.model}: not a Mamba model folder", file=sys.stderr)
        return 2
    try:
        for length in args.lengths:
            check_induction_args(read_model_config(args.model)[1].vocab_size, length, 1)
        if not 1 <= args.sequences <= 64:
            raise UserError(f"--sequences must lie in 1..64 (the fixed test set), got {args.sequences}")
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    # a model whose seq_len only caps its input reads any length with the same weights
    model = reading.at_length(load_run_model(args.model, device="cpu")[0], max(args.lengths))  # checksums verified
    task = Induction(InductionConfig(seq_len=min(args.lengths), vocab_size=model.config.vocab_size))
    layers = model.config.n_layer
    A_logs = [m.A_log.detach() for m in mixers(model)]
    print(f"`python benchmarks/mamba_retention.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n")
    heads = [f"layer {i}: half-life (tokens) / log10 retention" for i in range(layers)]
    print("| length | median gap | accuracy | " + " | ".join(heads) + " |")
    print("|---" * (layers + 3) + "|")
    for length in args.lengths:
        x, y = fixed_test_set(task, length, n=64, seed=TEST_SEED, rows=range(args.sequences))
        right, gaps, cells = 0, [], [[] for _ in range(layers)]
        for row in range(x.shape[0]):
            logits, steps = layer_steps(model, x[row])
            right += int(logits[-1].argmax() == y[row, -1])
            write = induction_write(x[row])
            gaps.append(length - 1 - write)
            for i in range(layers):
                cells[i].append(best_channel(steps[i], A_logs[i], write))
        layer_cells = [
            f"{statistics.median(h for h, _ in c):,.0f} / {statistics.median(r for _, r in c):.1f}" for c in cells
        ]
        head = f"| {length:,} | {statistics.median(gaps):,.0f} | {right / x.shape[0]:.2f} | "
        print(head + " | ".join(layer_cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    run(main)
