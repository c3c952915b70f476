"""``bdh inspect``: the brain view of a trained BDH model (sparsity, neuron graphs, sigma graph)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from bdh.analysis.probe import DEFAULT_TOKENS, DEFAULT_WINDOWS
from bdh.errors import UserError
from bdh.outputs import input_file

from .checks import add_overwrite, add_prompt, announce_loaded, checked_model_dir, integer, load_model, prompt_bytes

#: the longest prompt (and window) recorded: the recording keeps x and y of every token, layer and neuron
MAX_PROMPT = 4096
#: the longest sequence a fact is traced through (read through the state in flat memory)
MAX_FACT = 2**24


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "inspect",
        help="analyse a trained BDH: sparsity, G = D E graphs, sigma graph, against an untrained control",
        description=(
            "Write report.json and figures for a BDH model: fraction of non-zero x and y per layer, token and RoPE "
            "bucket (paper sec. 6.4), entry statistics, modularity and degree distributions of G_x = D_x E and "
            "G_y = D_y E (sec. 5.5), and the sigma graph recovered by Eq. 16 (sec. 6.2). Every statistic is also "
            "computed on an untrained model of the same configuration (the control)."
        ),
    )
    p.add_argument(
        "run", metavar="RUN_DIR", help="a run folder (best/ or the newest checkpoint is used) or a model folder"
    )
    p.add_argument("--checkpoint", metavar="step-N", help="inspect this checkpoint of the run instead")
    src = p.add_mutually_exclusive_group()
    add_prompt(src, f"text to record (at most {MAX_PROMPT:,} bytes); default: the probe text (bdh.analysis.probe)")
    src.add_argument("--data", help="a text file to record (windows of --tokens bytes spread over the file)")
    src.add_argument(
        "--induction",
        metavar="LENGTH",
        type=integer(3, MAX_FACT),
        help="trace the fact of an induction test sequence of LENGTH tokens (of the first 8 of the fixed test set, "
        "bdh.tasks.lengths, the one with the longest gap; the model's vocabulary): which neurons hold it",
    )
    p.add_argument(
        "--fact",
        metavar="POS",
        type=integer(0),
        help="with --prompt or --prompt-file: trace the fact written at byte POS, read back at the last byte "
        "(fact.json and fact.png instead of the brain view)",
    )
    p.add_argument(
        "--tokens",
        type=integer(2, MAX_PROMPT),
        default=DEFAULT_TOKENS,
        help=f"tokens per recorded window (default {DEFAULT_TOKENS})",
    )
    p.add_argument(
        "--windows",
        type=integer(1, 64),
        default=DEFAULT_WINDOWS,
        help=f"windows of --data / the probe text (default {DEFAULT_WINDOWS})",
    )
    p.add_argument(
        "--layer", type=integer(0), help="only this layer (0-based) for the sparsity trace and the sigma graph"
    )
    p.add_argument("--head", type=integer(0), help="only this head for the graph analyses")
    p.add_argument("--out", help="output folder (default RUN_DIR/reports/inspect-<time>)")
    add_overwrite(p, "the --out folder")
    p.add_argument("--max-nodes", type=integer(1), default=1024, help="nodes of the Louvain subgraph (default 1024)")
    p.add_argument(
        "--seeds", type=integer(1), default=3, help="Louvain runs per graph, best kept (default 3; the paper used 5)"
    )
    p.add_argument("--control-seed", type=integer(), default=0, help="torch seed of the untrained control (default 0)")
    p.add_argument("--no-figures", action="store_true", help="write report.json only")
    p.set_defaults(func=cmd_inspect)


def _input_tokens(args: argparse.Namespace):
    import torch

    from bdh.analysis import probe

    data = prompt_bytes(args, max_bytes=MAX_PROMPT)
    if data is not None:
        if len(data) < 2:
            raise UserError("--prompt needs at least 2 bytes")
        return torch.tensor(list(data), dtype=torch.long).view(1, -1), "prompt"
    if args.data is not None:
        path = input_file(args.data, "--data")
        return probe.windows(path.read_bytes(), args.tokens, args.windows, f"--data {path}"), f"file {path.name}"
    return probe.probe(args.tokens, args.windows)


def _fact_prompt(args: argparse.Namespace) -> bytes | None:
    """The prompt ``--fact`` traces in (checked before anything is written), or None for ``--induction``."""
    if args.fact is not None and args.induction is not None:
        raise UserError("--fact POS is for a prompt; --induction finds its own fact: give one of them")
    if args.induction is not None:
        return None
    data = prompt_bytes(args, max_bytes=MAX_FACT)
    if data is None:
        raise UserError("--fact needs the text it is in: --prompt or --prompt-file")
    from bdh.analysis.memory import check_write

    check_write(args.fact, len(data), "--fact")
    return data


def _fact_input(args: argparse.Namespace, model, data: bytes | None) -> tuple[Any, int, int | None, str]:
    """(tokens (L,), the fact's position, the expected answer or None, a description) of the fact to trace."""
    import torch

    from bdh.analysis.memory import induction_write

    if data is not None:
        return torch.tensor(list(data), dtype=torch.long), args.fact, None, f"prompt of {len(data):,} bytes"
    from bdh.analysis.memory import longest_gap
    from bdh.registry import get_task

    cls = get_task("induction")
    task = cls(cls.config_class(seq_len=args.induction, vocab_size=model.config.vocab_size))
    x, y, row = longest_gap(task, args.induction)
    return x[0], induction_write(x[0]), int(y[0, -1]), f"induction test sequence {row} of {args.induction:,} tokens"


def _trace_fact(args: argparse.Namespace, data: bytes | None, model, model_dir: Path, out: Path) -> int:
    """``--fact`` / ``--induction``: fact.json and fact.png (`bdh.analysis.memory.trace_fact`)."""
    import json

    from bdh.analysis import figures
    from bdh.analysis.memory import trace_fact
    from bdh.outputs import atomic_folder, write_text

    tokens, write, answer, source = _fact_input(args, model, data)
    trace = trace_fact(model, tokens.to(model.E.device), write, top=16).to_dict()
    record = {"model": str(model_dir), "source": source, "length": int(tokens.numel()), "answer": answer, **trace}
    names = ["fact.json"] + ([] if args.no_figures else ["fact.png"])
    with atomic_folder(out) as tmp:
        write_text(tmp / "fact.json", json.dumps(record, indent=1) + "\n")
        if not args.no_figures:
            figures.fact(trace, tmp / "fact.png", source)
    written = [out / name for name in names]
    best = max(trace["heads"], key=lambda h: h["share"])
    said = "" if answer is None else f" (answer {answer}: {'right' if answer == trace['predicted'] else 'wrong'})"
    print(f"fact at {write:,}, read at {trace['read']:,}; predicted {trace['predicted']}{said}")
    print(f"largest share: layer {best['layer']} head {best['head']}, {best['share']:.3f}")
    for n in trace["neurons"][:5]:
        print(f"  L{n['layer']}H{n['head']}#{n['neuron']}: fact {n['fact']:.4g}, others {n['other']:.4g}")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """The brain view of a BDH model (`bdh.analysis.report_folder.write_report`) written into one folder; with
    ``--fact`` or ``--induction``, the trace of one fact through the state instead."""
    from bdh.analysis import report
    from bdh.analysis.report_folder import write_report
    from bdh.model import BDH
    from bdh.outputs import check_output

    model_dir = checked_model_dir(args.run, args.checkpoint)
    tracing = args.fact is not None or args.induction is not None
    fact_prompt = _fact_prompt(args) if tracing else None
    tokens, source = (None, "") if tracing else _input_tokens(args)
    out = check_output(
        args.out if args.out else Path(args.run) / "reports" / time.strftime("inspect-%Y%m%d-%H%M%S"),
        overwrite=args.overwrite,
        folder=True,
        inputs=[args.run, model_dir] + [p for p in (args.data, args.prompt_file) if p is not None],
    )
    model = load_model(model_dir, announce=not tracing)
    if not isinstance(model, BDH):
        raise UserError(f"{model_dir}: bdh inspect reads BDH models, this is a {type(model).__name__}")
    if tracing:
        announce_loaded(model_dir, sys.stderr)
        return _trace_fact(args, fact_prompt, model, model_dir, out)
    opts = report.InspectOptions(
        layer=args.layer, head=args.head, max_nodes=args.max_nodes, seeds=args.seeds, control_seed=args.control_seed
    )

    def log(msg: str) -> None:
        print(f"[inspect] {msg}", file=sys.stderr, flush=True)

    written = write_report(
        model, tokens, out, source=source, model_dir=model_dir, opts=opts, figures=not args.no_figures, log=log
    )
    print(written.summary())
    return 0
