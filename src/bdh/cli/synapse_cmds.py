"""``bdh synapses RUN_DIR``: search a trained BDH for monosemantic synapses (paper section 6.3, Figs. 12-13), as ``bdh
experiment synapses`` does, on a model trained on ``bdh corpus``'s stream (same ``--lexicon-seed``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bdh.errors import UserError

from .checks import add_overwrite, checked_model_dir, integer, load_model


def register(sub: argparse._SubParsersAction) -> None:
    from bdh.tasks.multilingual import CONCEPTS, LANGUAGES

    p = sub.add_parser(
        "synapses",
        help="search a trained BDH for synapses that separate concept sentences (paper sec. 6.3), "
        "with held-out tests and nulls",
        description=(
            "Rank every synapse sigma[i, j] (y-neuron i of layer l-1 to x-neuron j of layer l, one head; Eq. 16) "
            "by how well its value separates sentences naming a concept from contrast sentences, test the best on "
            "held-out sentences (one-sided Mann-Whitney U) in two languages, repeat on an untrained model and with "
            "shuffled labels, and plot the Fig. 12 / Fig. 13 analogues. Writes report.md, results.json and figures/ "
            "into --out."
        ),
    )
    p.add_argument(
        "run", metavar="RUN_DIR", help="a run folder (best/ or the newest checkpoint is used) or a model folder"
    )
    p.add_argument("--checkpoint", metavar="step-N", help="use this checkpoint of the run")
    p.add_argument("--concept", default="currency", help=f"the concept ({', '.join(CONCEPTS)}; default currency)")
    p.add_argument(
        "--layer", type=integer(), help="l >= 1: synapses from layer l-1 to layer l (default max(1, floor(5 L / 8)))"
    )
    p.add_argument("--head", type=integer(), default=0, help="the head (default 0)")
    p.add_argument("--language", default="en", help=f"search and test language ({', '.join(LANGUAGES)}; default en)")
    p.add_argument("--second-language", default="fr", help="the cross-language check (default fr)")
    p.add_argument(
        "--search",
        type=integer(),
        default=200,
        help="concept (and as many contrast) sentences to search on (default 200)",
    )
    p.add_argument(
        "--heldout", type=integer(), default=50, help="concept and contrast sentences per held-out test (default 50)"
    )
    p.add_argument("--top", type=integer(), default=5, help="synapses validated and reported per search (default 5)")
    p.add_argument(
        "--statistic",
        default="end",
        help="the headline statistic: end (sigma at the sentence end) or max (largest increment)",
    )
    p.add_argument("--rotate", action="store_true", help="include the RoPE rotation of Eq. 16 in sigma")
    p.add_argument("--no-length-match", action="store_true", help="do not length-match the contrast sentences")
    p.add_argument("--no-prefix", action="store_true", help="feed bare sentences instead of <F:xx>sentence")
    p.add_argument(
        "--seed",
        type=integer(),
        default=0,
        help="seeds the sentence sets, the label shuffle and the untrained model (default 0)",
    )
    p.add_argument(
        "--lexicon-seed", type=integer(), default=0, help="the lexicon seed of the model's corpus (default 0)"
    )
    p.add_argument("--out", metavar="DIR", help="output folder (default RUN_DIR/reports/synapses-<time>)")
    add_overwrite(p, "the --out folder")
    p.set_defaults(func=cmd_synapses)


#: option field -> command-line flag, for error messages
FLAGS = {
    "concept": "--concept",
    "layer": "--layer",
    "head": "--head",
    "language": "--language",
    "second_language": "--second-language",
    "search": "--search",
    "heldout": "--heldout",
    "top_k": "--top",
    "statistic": "--statistic",
    "seed": "--seed",
    "lexicon_seed": "--lexicon-seed",
}


def _flag(message: str) -> str:
    """An option error with the field name replaced by its flag (``head: ...`` -> ``--head: ...``)."""
    field, sep, rest = message.partition(": ")
    return f"{FLAGS[field]}: {rest}" if sep and field in FLAGS else message


def _options(args: argparse.Namespace):
    """The `SynapseOptions` of the flags; a value refused is named by its flag."""
    from bdh.experiments.synapses import SynapseOptions

    for name in ("search", "heldout", "top"):
        if getattr(args, name) < (1 if name == "top" else 2):
            raise UserError(f"--{name}: must be at least {1 if name == 'top' else 2}, got {getattr(args, name)}")
    try:
        opts = SynapseOptions(
            concept=args.concept,
            layer=args.layer,
            head=args.head,
            language=args.language,
            second_language=args.second_language,
            search=args.search,
            heldout=args.heldout,
            top_k=args.top,
            statistic=args.statistic,
            rotate=args.rotate,
            match_length=not args.no_length_match,
            prefix=not args.no_prefix,
            seed=args.seed,
            lexicon_seed=args.lexicon_seed,
        )
    except ValueError as exc:
        raise UserError(_flag(str(exc))) from None
    return opts


def cmd_synapses(args: argparse.Namespace) -> int:
    """The synapse analysis of a saved BDH (`bdh.experiments.synapses.folder.write_analysis`)."""
    from bdh.experiments.synapses.folder import write_analysis
    from bdh.outputs import check_output

    opts = _options(args)
    model_dir = checked_model_dir(args.run, args.checkpoint)
    out = Path(args.out) if args.out else Path(args.run) / "reports" / time.strftime("synapses-%Y%m%d-%H%M%S")
    check_output(out, overwrite=args.overwrite, folder=True, inputs=[args.run, model_dir])
    model = load_model(model_dir)
    try:
        opts.check_model(model)
    except ValueError as exc:
        raise UserError(_flag(str(exc).replace("synapses: ", f"{model_dir}: "))) from None

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    written = write_analysis(
        model, opts, out, model_dir=model_dir, run_dir=Path(args.run), overwrite=args.overwrite, log=log
    )
    print(written.summary())
    return 0
