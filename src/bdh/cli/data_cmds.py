"""``bdh corpus``: write generated corpora to files (the synthetic multilingual translation stream)."""

from __future__ import annotations

import argparse
import re
import shutil

from bdh.errors import UserError

from .checks import add_overwrite, integer, number


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "corpus",
        help="write a synthetic corpus: the multilingual translation stream of paper appendix B.1",
        description="Write a seeded, sentence-aligned translation stream in the paper's format "
        "(<F:xx>source<T:yy>target...) with concept slots (currencies, countries) to a file, in pieces "
        "(constant memory), atomically. Train on it with: bdh train --set task.data=FILE.",
    )
    p.add_argument("out", help="the file to write")
    p.add_argument("--pairs", default="en-es", help="language pairs, e.g. en-es,en-fr (languages: en es fr pt it de)")
    p.add_argument(
        "--size", default="1MB", help="bytes to write: a number with an optional KB, MB or GB suffix (default 1MB)"
    )
    p.add_argument(
        "--concept-rate", type=number(0, 1), default=0.5, help="fraction of sentences with concept slots (default 0.5)"
    )
    p.add_argument("--seed", type=integer(), default=0, help="seed of the sentence stream (default 0)")
    p.add_argument(
        "--lexicon-seed",
        type=integer(),
        default=0,
        help="seed of the word mappings that make the languages (default 0)",
    )
    add_overwrite(p, "OUT")
    p.set_defaults(func=cmd_corpus)


def parse_size(text: str) -> int:
    """'512', '64KB', '1.5MB', '2GB' -> bytes (powers of 1000), with a one-line error otherwise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMG]?B?)\s*", text, flags=re.IGNORECASE)
    if not m:
        raise UserError(f"--size: {text!r} is not a size like 4096, 64KB, 10MB or 1GB")
    unit = m.group(2).upper().rstrip("B")
    size = int(float(m.group(1)) * {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}[unit])
    if size < 1:
        raise UserError(f"--size: must be at least one byte, got {text!r}")
    return size


def cmd_corpus(args: argparse.Namespace) -> int:
    from bdh.outputs import check_output, existing_parent
    from bdh.tasks.multilingual import StreamConfig, parse_pairs, write_stream

    config = StreamConfig(parse_pairs(args.pairs), args.concept_rate, args.seed, args.lexicon_seed)
    size = parse_size(args.size)
    out = check_output(args.out, overwrite=args.overwrite, flag="OUT")
    parent = existing_parent(out)
    free = shutil.disk_usage(parent).free
    if size > free:
        raise UserError(
            f"--size {args.size}: {size:,} bytes asked for, but only {free:,} are free on the disk of {parent}"
        )
    path = write_stream(args.out, config, size)
    print(f"wrote {path} ({size:,} bytes; pairs {args.pairs}, seed {args.seed})")
    return 0
