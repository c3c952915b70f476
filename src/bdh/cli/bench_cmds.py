"""``bdh bench SUITE``: the registry's suites, each helped by its docstring's first paragraph, with its ``FLAGS``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from datetime import datetime
from pathlib import Path

from bdh.devices import DEVICE_HELP
from bdh.errors import UserError

from . import interrupts
from .checks import device, integer
from .costs import with_cost


def register(sub: argparse._SubParsersAction) -> None:
    from bdh.registry import help_of, names

    p = sub.add_parser(
        "bench",
        help=f"side-by-side benchmark suites: {', '.join(names('suite'))}",
        description="Train BDH and parameter-matched baselines on a sweep, keep the best learning rate per "
        "(model, setting, width), and write runs.csv, results.csv (one row per seed), summary.csv and results.md "
        "(mean and min-max over seeds; a winner only beyond that spread) and plots into --out. "
        "The default sizes are CPU-sized: each name below says what its default takes on 2 cores (measured in "
        'docs/bench.md, "Run time of the CPU defaults"); --full is for bigger machines; --quick is a smoke test '
        "of a minute or two.",
    )
    p.set_defaults(func=lambda args: _usage(p))
    suites = p.add_subparsers(dest="suite", metavar="SUITE", parser_class=type(p))
    for name in names("suite"):
        text = help_of("suite", name).summary
        s = suites.add_parser(name, help=with_cost("suite", name, text), description=with_cost("suite", name, text))
        size = s.add_mutually_exclusive_group()
        size.add_argument("--full", action="store_true", help="the large sweep (for a GPU)")
        size.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
        s.add_argument("--out", metavar="DIR", help=f"output folder (default runs/bench-{name}-<timestamp>)")
        s.add_argument(
            "--resume", action="store_true", help="continue --out DIR: skip the runs already in its runs.csv"
        )
        s.add_argument(
            "--overwrite", action="store_true", help="replace a non-empty --out folder (its contents are deleted first)"
        )
        s.add_argument(
            "--models",
            metavar="M1,M2",
            help="the models to compare, e.g. bdh,gpt (default: the suite's; any registered model the bench can "
            "size and the suite can run)",
        )
        s.add_argument("--steps", type=integer(1), metavar="N", help="optimiser steps per run (default: the suite's)")
        s.add_argument("--lrs", metavar="LR1,LR2", help="learning rates to sweep, e.g. 1e-3,3e-3")
        s.add_argument("--seeds", metavar="S1,S2", help="seeds, e.g. 0,1")
        s.add_argument("--widths", metavar="W1,W2", help="BDH widths (n_embd); the baselines are matched to them")
        for field, options in help_of("suite", name).flags.items():
            s.add_argument(f"--{field.replace('_', '-')}", **options)
        s.add_argument("--device", default="auto", help=f"{DEVICE_HELP} (default auto)")
        s.add_argument(
            "--threads", type=integer(1), default=None, help="PyTorch CPU threads of a run (default: PyTorch's)"
        )
        s.add_argument(
            "--jobs",
            type=integer(1),
            default=1,
            metavar="N",
            help="runs trained at once, each in a process of its own with its share of the threads (default 1)",
        )
        s.add_argument("--dry-run", action="store_true", help="list the runs (with parameter counts) and exit")
        s.set_defaults(func=cmd_bench)


def _usage(p: argparse.ArgumentParser) -> int:
    from bdh.registry import names

    from .checks import UsageError

    raise UsageError(f"bench: give a suite ({', '.join(names('suite'))})")


def build_sweep(args: argparse.Namespace):
    """The suite module and its sweep, from the size flag and the shrinking options."""
    from bdh.bench.spec import BenchError
    from bdh.registry import get_suite
    from bdh.typed_config import parse_list

    module = get_suite(args.suite)
    cls = module.SWEEP
    sweep = cls.preset("full" if args.full else "quick" if args.quick else None)
    changes = {}
    if args.models is not None:
        changes["models"] = parse_list(args.models, str, "--models", unique=True)
    if args.steps is not None:
        changes["steps"] = args.steps
    if args.lrs is not None:
        changes["lrs"] = parse_list(args.lrs, float, "--lrs", unique=True)
    if args.seeds is not None:
        changes["seeds"] = parse_list(args.seeds, int, "--seeds", unique=True)
    if args.widths is not None:
        widths = parse_list(args.widths, int, "--widths", unique=True)
        if any(w < 4 or w % 4 for w in widths):
            raise BenchError(f"--widths: widths must be positive multiples of 4, got {args.widths!r}")
        changes["widths"] = widths
    for field in getattr(module, "FLAGS", {}):  # the suite's own flags
        if getattr(args, field, None) is not None:
            changes[field] = getattr(args, field)
    device(args.device)
    if args.resume and args.overwrite:
        raise BenchError("--resume continues --out DIR, --overwrite replaces it: give one of them")
    try:
        sweep = dataclasses.replace(sweep, **changes)  # the sweep checks the declared ranges of its fields
        sweep.validate()  # and the rules between them (a model the suite cannot run)
    except UserError as exc:  # a flag's value refused: named by the flag (recall.models -> --models)
        head, sep, rest = str(exc).partition(": ")
        name = head.rpartition(".")[2]
        if sep and name in changes:
            raise BenchError(f"--{name.replace('_', '-')}: {rest}") from None
        raise
    return module, sweep


def cmd_bench(args: argparse.Namespace) -> int:
    from bdh.bench import runner
    from bdh.bench.plan_table import plan_table
    from bdh.outputs import DiskFull, folder_lock

    module, sweep = build_sweep(args)
    out = (
        Path(args.out) if args.out else Path("runs") / f"bench-{args.suite}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    )
    opts = runner.BenchOptions(
        out=out,
        resume=args.resume,
        device=args.device,
        threads=args.threads,
        jobs=args.jobs,
        overwrite=args.overwrite,
    )
    if args.dry_run:
        module.suite_def(sweep)  # the suite's own checks, as a real run makes them
        data = (module.data_paths(out / "data"),) if hasattr(module, "make_data") else ()
        print(plan_table(module.plan(sweep, *data)))
        return 0
    with folder_lock(out):  # one bench at a time in a folder
        runner.prepare_out(opts, module.suite_def(sweep))  # before anything is printed or generated
        try:
            return _run_bench(args, module, sweep, opts)
        except DiskFull as exc:  # the same command again would find its folder: --resume continues it
            raise exc.continued_by(interrupts.continue_command(args.argv, out)) from None
        except KeyboardInterrupt as exc:  # SIGINT or SIGTERM, during a run or after the last one
            ledger = out / "runs.csv"
            kept = f"the finished runs are kept in {ledger}" if ledger.is_file() else "no run had finished yet"
            return interrupts.report(f"bench {args.suite}", exc, kept, args.argv, out)


def _run_bench(args: argparse.Namespace, module, sweep, opts) -> int:
    """Generate the suite's data (Sudoku), train its runs into ``opts.out`` and print what it wrote."""
    from bdh.bench import runner

    out, finish = opts.out, None
    suite = module.suite_def(sweep)
    if hasattr(module, "make_data"):  # a suite that generates its data writes it into the output folder first
        print(f"bench {args.suite}: generating {module.data_note(sweep)} into {out / 'data'}", flush=True)
        specs = module.plan(sweep, module.make_data(sweep, out / "data"))
    else:
        specs = module.plan(sweep)
    if hasattr(module, "finisher"):  # its own files (the Sudoku depth table)
        finish = module.finisher(sweep)
    print(f"bench {args.suite}: {len(specs)} runs into {out}", flush=True)
    done = runner.run_suite(suite, specs, opts, finish=finish, prepared=True)
    for path in done["files"]:
        print(f"wrote {path}")
    print((out / "results.md").read_text(encoding="utf-8"))
    if args.quick:  # models at chance look alike: the table is no verdict
        print(
            f"bench {args.suite}: --quick is a smoke test (tiny sizes, few steps): these numbers show that the suite "
            "runs, not which model is better; drop --quick for the default sweep",
            file=sys.stderr,
        )
    return 0
