"""Which heads' carried state costs or earns bits far out on text: one trained BDH run read through its state on
held-out streams, as carried and with the state of some heads emptied after every window.

    python benchmarks/carried_heads.py RUN_DIR --length 65536 --lanes 2 --threads 1

Rows, bits per byte by position on the same streams (the validation split's lanes that ``bdh eval --carry-state``
reads; `bdh.analysis.loss_by_position.carried_curve` with `empty_heads`): ``windowed`` (every head emptied after
every window of T: nothing carried), ``carried`` (everything carried from the stream's start), ``undamped heads
emptied`` (the heads whose retention u_h is 1 read one window at a time while the damped heads carry) and ``damped
heads emptied`` (the converse); with ``--hard-gate``, the carried read through the hard write gate too
(`bdh.model.hard_read`). A row is left out where its heads do not exist (no damping: every head undamped).
docs/long-context.md ("What the delta recipe's state does on text") reads the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from _shared import Parser, run


def parser() -> argparse.ArgumentParser:
    def positive(text: str) -> int:
        if not text.isdigit() or int(text) < 1:
            raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
        return int(text)

    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, metavar="RUN_DIR", help="a run folder of a BDH trained on text")
    p.add_argument("--length", type=positive, default=65536, help="bytes read per lane (default 65536)")
    p.add_argument("--lanes", type=positive, default=2, help="lanes of the validation split read side by side")
    p.add_argument("--threads", type=positive, default=1, help="PyTorch CPU threads (default 1)")
    p.add_argument("--hard-gate", action="store_true", help="also read the carried state through the hard gate")
    return p


def head_groups(model) -> dict[str, list[int]]:
    """``undamped`` and ``damped`` heads of a BDH (retention u_h = 1 or below it), the empty groups left out."""
    log_u = model.retention_log()
    heads = range(model.config.n_head)
    undamped = [h for h in heads if log_u is None or float(log_u[h]) == 0.0]
    groups = {"undamped": undamped, "damped": [h for h in heads if h not in undamped]}
    return {name: hs for name, hs in groups.items() if hs}


def rows(model, tokens: torch.Tensor, window: int, hard=None) -> list[tuple[str, object]]:
    """``(name, ContextCurve)`` of every row (module docstring), read on ``tokens`` (lanes, length + 1); ``hard``:
    the model's hard-gate twin (`bdh.model.hard_read`), whose carried read is the last row."""
    from bdh.analysis.loss_by_position import carried_curve, empty_heads

    every = list(range(model.config.n_head))
    out = [
        ("windowed (every head emptied each window)", carried_curve(model, tokens, window, forget=empty_heads(every)))
    ]
    out.append(("carried", carried_curve(model, tokens, window)))
    for name, heads in head_groups(model).items():
        if len(heads) < len(every):
            label = f"{name} heads {', '.join(map(str, heads))} emptied each window"
            out.append((label, carried_curve(model, tokens, window, forget=empty_heads(heads))))
    if hard is not None:
        out.append(("carried, hard write gate", carried_curve(hard, tokens, window)))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from bdh.analysis.evaluation.data import eval_data
    from bdh.analysis.loss_by_position import curve_table, task_streams
    from bdh.errors import UserError
    from bdh.model import BDH, hard_read
    from bdh.train.run.model import load_run_model

    torch.set_num_threads(args.threads)
    try:
        model, folder = load_run_model(args.run, None, "cpu")
        if not isinstance(model, BDH):
            raise UserError(f"{args.run}: the run's model is a {type(model).__name__}, not a BDH")
        hard = hard_read(model) if args.hard_gate else None
        ev = eval_data(args.run, model)
        tokens = task_streams(ev.task, ev.split, args.lanes, args.length, ev.seed)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    model.eval()
    print(f"`python benchmarks/carried_heads.py {' '.join(argv if argv is not None else sys.argv[1:])}`")
    print(f"model: {folder}; {args.lanes} lanes of {args.length:,} bytes of {ev.description}\n")
    print(curve_table(rows(model, tokens, ev.task.seq_len, hard), ev.unit))
    return 0


if __name__ == "__main__":
    run(main)
