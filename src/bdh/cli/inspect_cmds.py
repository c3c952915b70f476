"""``bdh inspect``: the brain view of a trained BDH model (sparsity, neuron graphs, sigma graph)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from bdh.analysis.probe import DEFAULT_TOKENS, DEFAULT_WINDOWS
from bdh.errors import UserError
from bdh.outputs import input_file

from . import inspect_sudoku
from .checks import add_overwrite, add_prompt, announce_loaded, checked_model_dir, integer, load_model, prompt_bytes

#: the longest prompt (and window) recorded: the recording keeps x and y of every token, layer and neuron
MAX_PROMPT = 4096
#: the longest sequence a fact is traced through (read through the state in flat memory)
MAX_FACT = 2**24
#: the key-value pairs of a ``--recall`` sequence (the recall_gap task's and the length experiment's default)
RECALL_PAIRS = 8


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
    _add_fact_args(p, src)
    inspect_sudoku.add_args(p, src)
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


def _add_fact_args(p: argparse.ArgumentParser, src: argparse._MutuallyExclusiveGroup) -> None:
    """``--induction``, ``--recall`` (in the input group ``src``), ``--hard-gate`` and ``--fact``: a fact
    traced instead."""
    src.add_argument(
        "--induction",
        metavar="LENGTH",
        type=integer(3, MAX_FACT),
        help="trace the fact of an induction test sequence of LENGTH tokens (of the first 8 of the fixed test set, "
        "bdh.tasks.lengths, the one with the longest gap; the model's vocabulary): which neurons hold it",
    )
    src.add_argument(
        "--recall",
        metavar="LENGTH",
        type=integer(4 * RECALL_PAIRS + 1, MAX_FACT),
        help="trace a fact of the first recall-through-a-gap test sequence of LENGTH tokens (--pairs pairs, "
        "bdh.tasks.recall_gap; the model's vocabulary): the pair stated first, read back at its question; every "
        "pair in brief; under the delta rule, what erased each pair (bdh.analysis.erasure); CPU cost, one "
        "thread: 2.8 min at 4,096 with --pairs 32, 10.6 min at 1,048,576 with 8 (it grows with LENGTH, --pairs and "
        "--sequences)",
    )
    p.add_argument(
        "--pairs",
        metavar="D",
        type=integer(1, 2**31),
        default=RECALL_PAIRS,
        help=f"with --recall: the key-value pairs of its sequences (default {RECALL_PAIRS}; LENGTH > 4 D; a pass of "
        "LENGTH tokens per pair, so the cost grows with D: see --recall)",
    )
    p.add_argument(
        "--sequences",
        metavar="N",
        type=integer(1, 64),
        default=1,
        help="with --recall: trace every pair of the first N test sequences (of 64) and map each key to the neuron "
        "that holds its pairs (fact.json's keys; default 1)",
    )
    p.add_argument(
        "--hard-gate",
        action="store_true",
        help="read through the delta rule's hard write gate (the same weights; a BDH with the sigmoid gate)",
    )
    p.add_argument(
        "--fact",
        metavar="POS",
        type=integer(0),
        help="with --prompt or --prompt-file: trace the fact written at byte POS, read back at the last byte "
        "(fact.json and fact.png instead of the brain view)",
    )


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


def _task_fact(args: argparse.Namespace) -> str | None:
    """``--induction`` or ``--recall`` as given (a task's test sequence finds its own fact), or None."""
    return "--induction" if args.induction is not None else "--recall" if args.recall is not None else None


def _fact_prompt(args: argparse.Namespace) -> bytes | None:
    """The prompt ``--fact`` traces in (checked before anything is written), or None for a task's sequence."""
    flag = _task_fact(args)
    if args.fact is not None and flag is not None:
        raise UserError(f"--fact POS is for a prompt; {flag} finds its own fact: give one of them")
    if flag is not None:
        return None
    data = prompt_bytes(args, max_bytes=MAX_FACT)
    if data is None:
        raise UserError("--fact needs the text it is in: --prompt or --prompt-file")
    from bdh.analysis.memory import check_write

    check_write(args.fact, len(data), "--fact")
    return data


class _Fact(NamedTuple):
    """A fact to trace: ``tokens`` (L,) up to the question, its position ``write``, the ``answer`` (None: a prompt), a
    description; ``pairs``: every ``--recall`` pair, the traced one first."""

    tokens: Any
    write: int
    answer: int | None
    source: str
    pairs: list[tuple[int, Any, int, int]]


def _fact_input(args: argparse.Namespace, model, data: bytes | None) -> _Fact:
    """The fact ``--fact``, ``--induction`` or ``--recall`` traces."""
    import torch

    from bdh.analysis.memory import induction_write, longest_gap
    from bdh.registry import get_task

    if data is not None:
        return _Fact(torch.tensor(list(data), dtype=torch.long), args.fact, None, f"prompt of {len(data):,} bytes", [])
    if args.recall is not None:
        return _recall_input(args.recall, model.config.vocab_size, args.sequences, args.pairs)
    cls = get_task("induction")
    task = cls(cls.config_class(seq_len=args.induction, vocab_size=model.config.vocab_size))
    x, y, row = longest_gap(task, args.induction)
    source = f"induction test sequence {row} of {args.induction:,} tokens"
    return _Fact(x[0], induction_write(x[0]), int(y[0, -1]), source, [])


def _recall_input(length: int, vocab_size: int, sequences: int = 1, pairs: int = RECALL_PAIRS) -> _Fact:
    """``--recall LENGTH``: test row 0 cut after its first pair's question; the pairs of the first
    ``sequences`` rows."""
    from bdh.analysis.memory import recall_facts
    from bdh.registry import get_task
    from bdh.tasks.lengths import fixed_test_set

    cls = get_task("recall_gap")
    try:
        task = cls(cls.config_class(seq_len=length, vocab_size=vocab_size, num_kv_pairs=pairs))
    except UserError as exc:
        raise UserError(f"--pairs {pairs} with --recall {length}: {exc}") from None
    x, y = fixed_test_set(task, length, rows=range(sequences))
    found = [
        (i, x[i, : read + 1], write, int(y[i, read]))
        for i in range(sequences)
        for write, read in recall_facts(x[i], y[i])
    ]
    _, tokens, write, answer = found[0]
    source = f"recall_gap test sequence 0 of {length:,} tokens, cut after its question at {tokens.numel() - 1:,}"
    return _Fact(tokens, write, answer, source, found)


def _pair_rows(model, pairs: list[tuple[int, Any, int, int]], first: Any) -> list[dict[str, Any]]:
    """Every ``--recall`` pair traced (``first`` already): sequence, key, positions, answer, prediction,
    head, neuron."""
    from bdh.analysis.memory import trace_fact

    rows = []
    for i, (row, tokens, write, answer) in enumerate(pairs):
        trace = first if i == 0 else trace_fact(model, tokens.to(model.E.device), write, top=1)
        best = max(trace.heads, key=lambda h: h.share)
        top = trace.rows()[0] if trace.neurons else {"neuron": None, "purity": None}
        rows.append(
            {"sequence": row, "key": int(tokens[write - 1]), "write": write, "read": trace.read, "answer": answer}
            | {"predicted": trace.predicted, "layer": best.layer, "head": best.head, "share": best.share}
            | {"neuron": top["neuron"], "purity": top["purity"]}
        )
    return rows


def _print_trace(trace: dict[str, Any], answer: int | None, pairs: list[dict[str, Any]]) -> None:
    """What `_trace_fact` found, in a few lines: the fact, the largest share, the top neurons, every pair."""
    best = max(trace["heads"], key=lambda h: h["share"])
    said = "" if answer is None else f" (answer {answer}: {'right' if answer == trace['predicted'] else 'wrong'})"
    print(f"fact at {trace['write']:,}, read at {trace['read']:,}; predicted {trace['predicted']}{said}")
    print(f"largest share: layer {best['layer']} head {best['head']}, {best['share']:.3f}")
    for n in trace["neurons"][:5]:
        print(f"  L{n['layer']}H{n['head']}#{n['neuron']}: fact {n['fact']:.4g}, others {n['other']:.4g}")
    if pairs:
        print(
            "every pair of sequence 0 (value at -> question at: answer, predicted; largest share; its neuron, purity):"
        )
    for r in (r for r in pairs if r["sequence"] == 0):
        held = "" if r["neuron"] is None else f"#{r['neuron']} {r['purity']:.2f}"
        print(
            f"  {r['write']:,} -> {r['read']:,}: {r['answer']}, {r['predicted']}; "
            f"L{r['layer']}H{r['head']} {r['share']:.3f}; {held}"
        )


def _print_key_map(keys: dict[str, Any], sequences: int) -> None:
    """`bdh.analysis.memory.key_map`'s summary in two lines."""
    shared = ", ".join(f"{n} ({len(ks)} keys)" for n, ks in keys["shared"].items()) or "none"
    print(
        f"keys: {len(keys['keys'])} in {keys['pairs']} pairs of {sequences} sequence(s); "
        f"{keys['consistent']} of the {keys['repeated']} asked more than once held by one neuron every time"
    )
    print(f"  their usual neurons: {keys['neurons']} distinct; a neuron for two keys or more: {shared}")


def _erasure(model, pairs: list[tuple[int, Any, int, int]], vocab_size: int) -> dict[str, Any] | None:
    """Under the delta rule, what erased each pair of sequence 0 (`bdh.analysis.erasure`); None for another rule."""
    from bdh.analysis.erasure import erasure, erasure_summary, fact_rows

    if model.config.state_write != "delta":
        return None
    mine = [(tokens, write) for row, tokens, write, _ in pairs if row == 0]
    idx = max((tokens for tokens, _ in mine), key=lambda t: t.numel())
    writes, reads = [w for _, w in mine], [t.numel() - 1 for t, _ in mine]
    rows = fact_rows(erasure(model, idx.to(model.E.device), writes, reads), idx, writes, reads, vocab_size)
    return {"facts": rows, **erasure_summary(rows)}


def _print_erasure(erased: dict[str, Any]) -> None:
    """`_erasure`'s summary in three lines."""
    from bdh.analysis.erasure import HELD

    kinds = ", ".join(f"{k} {v:.0%}" for k, v in erased["by_kind"].items())
    print(
        f"erasure of the {len(erased['facts'])} pairs of sequence 0: neurons holding {HELD:.0%} of a pair's read "
        f"score: median {erased['neurons_median']} (range {erased['neurons_min']}-{erased['neurons_max']})"
    )
    shared = ", ".join(f"{n} ({len(ks)} keys)" for n, ks in erased["shared"].items()) or "none"
    print(f"  a neuron holding two pairs' keys or more: {shared}")
    untouched = erased["untouched"]
    print(f"  the erase by kind of writer (share of all the pairs' erase): {kinds}; {untouched} pairs untouched")


def _trace_fact(args: argparse.Namespace, data: bytes | None, model, model_dir: Path, out: Path) -> int:
    """``--fact`` / ``--induction`` / ``--recall``: fact.json and fact.png (`bdh.analysis.memory.trace_fact`)."""
    import json

    from bdh.analysis import figures
    from bdh.analysis.memory import key_map, trace_fact
    from bdh.outputs import atomic_folder, write_text

    fact = _fact_input(args, model, data)
    source = fact.source + (" (read with the hard write gate)" if args.hard_gate else "")
    traced = trace_fact(model, fact.tokens.to(model.E.device), fact.write, top=16)
    trace, pairs = traced.to_dict(), _pair_rows(model, fact.pairs, traced)
    record = {"model": str(model_dir), "source": source, "length": int(fact.tokens.numel()), "answer": fact.answer}
    record |= trace | ({"pairs": pairs, "key_map": key_map(pairs)} if pairs else {})
    erased = _erasure(model, fact.pairs, model.config.vocab_size) if args.recall is not None else None
    record |= {"erasure": erased} if erased is not None else {}
    names = ["fact.json"] + ([] if args.no_figures else ["fact.png"])
    with atomic_folder(out) as tmp:
        write_text(tmp / "fact.json", json.dumps(record, indent=1) + "\n")
        if not args.no_figures:
            figures.fact(trace, tmp / "fact.png", source)
    _print_trace(trace, fact.answer, pairs)
    if pairs:
        _print_key_map(record["key_map"], args.sequences)
    if erased is not None:
        _print_erasure(erased)
    print("wrote " + ", ".join(str(out / name) for name in names))
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """The brain view of a BDH model into one folder; with ``--fact``, ``--induction`` or ``--recall``, a
    fact's trace."""
    from bdh.analysis import report
    from bdh.analysis.report_folder import write_report
    from bdh.model import BDH
    from bdh.outputs import check_output

    model_dir = checked_model_dir(args.run, args.checkpoint)
    if inspect_sudoku.given(args):  # the board view of a Sudoku model (any weight-shared one)
        return inspect_sudoku.cmd_sudoku(args, model_dir)
    tracing = args.fact is not None or _task_fact(args) is not None
    if args.hard_gate and not tracing:
        raise UserError("--hard-gate goes with --fact, --induction or --recall (the trace of a fact through the state)")
    if args.sequences != 1 and args.recall is None:
        raise UserError("--sequences goes with --recall (the recall test sequences whose pairs are traced)")
    if args.pairs != RECALL_PAIRS and args.recall is None:
        raise UserError("--pairs goes with --recall (the key-value pairs of its test sequences)")
    if args.recall is not None and args.recall <= 4 * args.pairs:
        raise UserError(f"--recall {args.recall}: a sequence of --pairs {args.pairs} needs more than {4 * args.pairs}")
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
    if args.hard_gate:
        from bdh.model import hard_read

        try:
            model = hard_read(model)
        except UserError as exc:
            raise UserError(f"--hard-gate: {exc}") from None
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
