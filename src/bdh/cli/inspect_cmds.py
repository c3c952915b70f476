"""``bdh inspect``: the brain view of a trained BDH model (sparsity, neuron graphs, sigma graph)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bdh.analysis.probe import DEFAULT_TOKENS, DEFAULT_WINDOWS
from bdh.errors import UserError
from bdh.outputs import input_file

from .checks import add_overwrite, add_prompt, checked_model_dir, integer, load_model, prompt_bytes

#: the longest prompt (and window) recorded: the recording keeps x and y of every token, layer and neuron
MAX_PROMPT = 4096


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


def cmd_inspect(args: argparse.Namespace) -> int:
    """The brain view of a BDH model (`bdh.analysis.report_folder.write_report`) written into one folder."""
    from bdh.analysis import report
    from bdh.analysis.report_folder import write_report
    from bdh.model import BDH
    from bdh.outputs import check_output

    model_dir = checked_model_dir(args.run, args.checkpoint)
    tokens, source = _input_tokens(args)
    out = check_output(
        args.out if args.out else Path(args.run) / "reports" / time.strftime("inspect-%Y%m%d-%H%M%S"),
        overwrite=args.overwrite,
        folder=True,
        inputs=[args.run, model_dir] + [p for p in (args.data, args.prompt_file) if p is not None],
    )
    model = load_model(model_dir)
    if not isinstance(model, BDH):
        raise UserError(f"{model_dir}: bdh inspect reads BDH models, this is a {type(model).__name__}")
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
