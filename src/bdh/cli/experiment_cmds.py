"""``bdh experiment NAME``: the paper's section 4.2, 6.3 and 7 experiments and the comparisons around them, each writing
``report.md``, ``results.json``, figures and ``runs/`` into ``--out``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from bdh.errors import did_you_mean
from bdh.experiments.launch import resumable

from . import interrupts
from .checks import integer
from .costs import with_cost


def experiment_module(name: str):
    """The module of experiment ``name`` (`bdh.registry.get_experiment`)."""
    from bdh.registry import get_experiment

    return get_experiment(name)


def register(sub: argparse._SubParsersAction) -> None:
    from bdh.registry import names as registered
    from bdh.registry import summary

    p = sub.add_parser(
        "experiment",
        help=f"the paper's experiments and comparisons, at laptop scale: {', '.join(registered('experiment'))}",
        description="Train the models an experiment needs, measure, and write report.md, results.json and figures "
        "into --out. The defaults are sized for a CPU, but their run times differ by experiment, from minutes to "
        'hours: each name below says what its default takes on 2 cores (measured in docs/experiments.md, "What '
        "each experiment costs\"); --show-config prints an experiment's config, --quick is a smoke test.",
    )
    p.set_defaults(func=lambda args: _usage())
    names = p.add_subparsers(dest="experiment", metavar="NAME", parser_class=type(p))
    for name in registered("experiment"):
        text = summary("experiment", name)
        s = names.add_parser(name, help=with_cost("experiment", name, text), description=text)
        s.add_argument("--out", metavar="DIR", help=f"output folder (default runs/experiment-{name}-<timestamp>)")
        s.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of a minute or two")
        if resumable(name):
            s.add_argument("--full", action="store_true", help="the GPU-sized preset (see --show-config for its plan)")
            s.add_argument(
                "--resume",
                action="store_true",
                help="continue --out DIR: runs already finished there are not trained again",
            )
        s.add_argument(
            "--set",
            dest="overrides",
            action="append",
            default=[],
            metavar="FIELD=VALUE",
            help="change a field of the experiment's config (repeatable); see --show-config",
        )
        s.add_argument("--show-config", action="store_true", help="print the resolved config as JSON and exit")
        s.add_argument("--threads", type=integer(1), default=None, help="PyTorch CPU threads (default: PyTorch's)")
        s.add_argument(
            "--overwrite",
            "--force",
            dest="overwrite",
            action="store_true",
            help="replace a non-empty --out folder (its contents are deleted first)",
        )
        s.set_defaults(func=cmd_experiment)


def _usage() -> int:
    from bdh.registry import names

    from .checks import UsageError

    raise UsageError(f"experiment: give a name ({', '.join(names('experiment'))})")


def resolve_config(module: Any, quick: bool, overrides: list[str], full: bool = False) -> Any:
    """The experiment's config (default, ``quick`` or ``full``) with the ``--set field=value`` overrides, checked."""
    from bdh.typed_config import apply_overrides

    from .checks import UsageError

    if quick and full:
        raise UsageError("--quick and --full: give one of them")
    config = module.Config.preset("quick" if quick else "full" if full else None)
    fields = [f.name for f in dataclasses.fields(config)]
    changes = apply_overrides({}, overrides)
    for key in changes:
        if key not in fields:
            raise UsageError(f"--set: unknown field {key!r}{did_you_mean(key, fields)}; known: {', '.join(fields)}")
    return dataclasses.replace(config, **changes) if changes else config


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_experiment(args: argparse.Namespace) -> int:
    """Run the experiment and print its summary, or after an interruption the line that says how to continue."""
    from bdh.experiments.launch import default_out, run_experiment
    from bdh.outputs import DiskFull

    from .checks import UsageError

    module = experiment_module(args.experiment)
    resume = getattr(args, "resume", False)
    config = resolve_config(module, args.quick, args.overrides, getattr(args, "full", False))
    if args.threads is not None:  # before the plan, which may time steps (relatives)
        import torch

        torch.set_num_threads(args.threads)
    if args.show_config:
        import json

        print(json.dumps(dataclasses.asdict(config), indent=2))
        if hasattr(module, "describe_plan"):
            print(module.describe_plan(config), file=sys.stderr)
        return 0
    if resume and (args.overwrite or not args.out):
        raise UsageError("--resume continues the folder given by --out (and cannot be combined with --overwrite)")
    out = Path(args.out) if args.out else default_out(args.experiment)
    try:
        run = run_experiment(args.experiment, config, out, resume=resume, overwrite=args.overwrite, log=_log)
    except DiskFull as exc:  # the same command again would find its folder: --resume continues it
        if not resumable(args.experiment) or not out.is_dir():
            raise
        raise exc.continued_by(interrupts.continue_command(args.argv, out)) from None
    if run.interrupted is not None:
        return interrupts.report(f"experiment {args.experiment}", run.interrupted, run.kept, args.argv, run.out)
    print(run.summary())
    return 0
