"""``bdh viz`` (an interactive HTML viewer of a model at work) and ``bdh plot`` (the figures of a run)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bdh.devices import DEVICE_HELP
from bdh.errors import UserError, exit_status
from bdh.viz.inputs import MAX_TOKENS

from . import interrupts
from .checks import add_overwrite, add_prompt, announce_loaded, checked_model_dir, integer, load_model, prompt_bytes
from .checks import device as device_of

if TYPE_CHECKING:
    from bdh.viz.server import PageServer


def _add_model_and_input(
    p: argparse.ArgumentParser, run_help: str, prompt_help: str, board_help: str, sudoku_help: str
) -> None:
    """The arguments ``viz`` and ``plot`` share: RUN_DIR, --checkpoint and one input."""
    p.add_argument("run", metavar="RUN_DIR", help=run_help)
    p.add_argument("--checkpoint", help="a checkpoint of the run, e.g. step-1000")
    src = p.add_mutually_exclusive_group()
    add_prompt(src, prompt_help)
    src.add_argument("--tokens", help=f"token ids separated by spaces or commas (at most {MAX_TOKENS:,})")
    src.add_argument("--board", metavar="FILE", help=board_help)
    src.add_argument("--sudoku", metavar="CELLS", help=sudoku_help)


def register(sub: argparse._SubParsersAction) -> None:
    _register_viz(sub)
    _register_plot(sub)


def _register_viz(sub: argparse._SubParsersAction) -> None:
    """``bdh viz``: the interactive HTML viewer."""
    p = sub.add_parser(
        "viz",
        help="write a self-contained interactive HTML viewer of a BDH model reading an input",
        description=(
            "Run a BDH model on a prompt (or a board, a Sudoku, token ids) and write one HTML file that works "
            "offline: the hub neurons of G_x lit by x and y, x and y heatmaps, sparsity per layer, attention "
            "between tokens or cells, the logit lens after each layer, and the model's facts; a slider over "
            "layers and a selector over tokens. --serve also serves it on 127.0.0.1."
        ),
    )
    _add_model_and_input(
        p,
        "a run folder (best/ or the newest checkpoint) or a model folder",
        f"text, read as bytes (byte-level models; at most {MAX_TOKENS:,} bytes)",
        "a pathfinding board file (rows of . # S E; see docs/viz.md)",
        "a Sudoku: 81 cells row by row, 0 or . for blanks",
    )
    p.add_argument("--out", help="output HTML file (default RUN_DIR/reports/viz-<input>.html, named after the input)")
    add_overwrite(p, "the --out file")
    p.add_argument("--serve", action="store_true", help="also serve the page on http://127.0.0.1:PORT/ until Ctrl-C")
    p.add_argument("--port", type=integer(0, 65535), default=0, help="port for --serve (default 0: a free port)")
    p.add_argument("--hubs", type=integer(1, 4096), default=48, help="hub neurons in the graph (default 48)")
    p.add_argument("--edges-per-hub", type=integer(1, 64), default=3, help="strongest edges kept per hub (default 3)")
    p.add_argument(
        "--heat-neurons", type=integer(1, 4096), default=64, help="neurons per heatmap and layer (default 64)"
    )
    p.add_argument(
        "--attn-top", type=integer(1, 256), default=12, help="attention sources kept per token and layer (default 12)"
    )
    p.add_argument(
        "--seed", type=integer(), default=0, help="seed of the generated board / puzzle and of the graph layout"
    )
    p.add_argument(
        "--fact",
        type=integer(0),
        metavar="POS",
        help="add the memory panel: the token at position POS of the text or token ids, as the last token reads it "
        "back through the state (each head's share, the neurons that hold it; docs/viz.md)",
    )
    p.add_argument("--device", default="auto", help=f"{DEVICE_HELP} (default auto)")
    p.set_defaults(func=cmd_viz)


def _register_plot(sub: argparse._SubParsersAction) -> None:
    """``bdh plot``: the figures of a run."""
    q = sub.add_parser(
        "plot",
        help="figures of a run: training curves, sparsity, degree distribution, activation heatmap, bench suites",
        description=(
            "Write PNG and SVG figures into RUN_DIR/reports/plots-<input>/ (or --out), named after the input the "
            "model reads: training and validation curves "
            "(metrics.jsonl), per-layer sparsity of x and y and an activation heatmap for a prompt, the degree "
            "distribution of a head block of G_x with its fitted power law, and the suite plots of bdh bench "
            "results given with --bench. Says which figures it skipped and why."
        ),
    )
    _add_model_and_input(
        q,
        "a run folder or a model folder",
        "text for the sparsity and heatmap figures (default: a generated board or a short prompt; "
        f"at most {MAX_TOKENS:,} bytes)",
        "a pathfinding board file",
        "a Sudoku: 81 cells",
    )
    q.add_argument(
        "--bench",
        action="append",
        default=[],
        metavar="CSV",
        help="bdh bench results (CSV with a suite column); repeatable",
    )
    q.add_argument(
        "--head",
        type=integer(0),
        default=None,
        help="head whose block of G_x gives the degree distribution (default: the head bdh inspect analyses, "
        "the one with the heaviest positive tail of G_x)",
    )
    q.add_argument(
        "--avg-degree", type=integer(1), default=8, help="average degree of the thresholded graph (default 8)"
    )
    q.add_argument("--layer", type=integer(0), help="layer of the activation heatmap (default: the last)")
    q.add_argument(
        "--out",
        help="output folder (default RUN_DIR/reports/plots-<input>, named after the input; plots without a model)",
    )
    add_overwrite(q, "the --out folder")
    q.add_argument("--seed", type=integer(), default=0, help="seed of the generated board / puzzle")
    q.add_argument("--device", default="auto", help=f"{DEVICE_HELP} (default auto)")
    q.set_defaults(func=cmd_plot)


# ---------------------------------------------------------------------- shared


def _load(folder: Path, device):
    """The BDH model of a model folder (from `resolve_model_dir`), on ``device``; BDH models only."""
    from bdh.model import BDH

    model = load_model(folder, map_location=device, announce=False)  # named by `_done` once all went well
    if not isinstance(model, BDH):
        raise UserError(f"{folder}: a {type(model).__name__} model; viz and plot draw BDH models only")
    return model


def _inputs(args: argparse.Namespace, folder: Path) -> list[Path]:
    """The files and folders a viz or plot command reads: the model folder, the run, a board or prompt file."""
    return [Path(args.run), folder] + [Path(p) for p in (args.board, args.prompt_file) if p is not None]


def _done(folder: Path | None, summary: str) -> None:
    """The model folder on stderr (after every check), and what was written on stdout (the line a script reads)."""
    if folder is not None:
        announce_loaded(folder, sys.stderr)
    print(summary, flush=True)


def _output(args: argparse.Namespace, default: Path, inputs: list[Path], folder: bool = False) -> Path:
    """The output path (`bdh.outputs.check_output`): --out, else ``default`` in the run's reports folder."""
    from bdh.outputs import check_output

    return check_output(args.out or default, overwrite=args.overwrite, folder=folder, inputs=inputs)


def _input(args: argparse.Namespace, model, folder: Path, prompt: bytes | None):
    """The tokens to show (`bdh.viz.inputs.choose_input`): ``prompt``, --tokens, --board, --sudoku or the default."""
    from bdh.viz.inputs import choose_input

    return choose_input(model, folder, prompt, args.tokens, args.board, args.sudoku, args.seed)


# ---------------------------------------------------------------------- bdh viz


def cmd_viz(args: argparse.Namespace) -> int:
    """The viewer page of a model reading one input (`bdh.viz.export.write_view`); --serve also serves it."""
    from bdh.viz import inputs
    from bdh.viz.export import ViewOptions, write_view

    opts = ViewOptions(
        hubs=args.hubs,
        edges_per_hub=args.edges_per_hub,
        heat_neurons=args.heat_neurons,
        attn_top=args.attn_top,
        layout_seed=args.seed,
    )
    device = device_of(args.device)
    if args.fact is not None and (args.board is not None or args.sudoku is not None):
        raise UserError("--fact traces a fact in text or token ids (--prompt, --tokens), not in a board")
    prompt = prompt_bytes(args, max_bytes=inputs.MAX_TOKENS)  # a bad prompt fails before the model is read
    folder = checked_model_dir(args.run, args.checkpoint)
    out = _output(args, Path(args.out), _inputs(args, folder)) if args.out else None  # before the model is read
    server = None
    if args.serve:  # claim the port first: a port in use fails before the model runs
        from bdh.viz.server import make_server

        server = make_server(b"", args.port)
    try:
        model = _load(folder, device)
        inp = _input(args, model, folder, prompt)
        if out is None:
            default = inputs.report_path(inputs.run_dir_of(folder), "viz", inp, ".html")
            out = _output(args, default, _inputs(args, folder))
        title = f"BDH viewer: {Path(args.run).resolve().name}"
        written = write_view(model, inp, out, options=opts, title=title, origin=str(folder), fact=args.fact)
        _done(folder, written.summary())
        return 0 if server is None else _serve(server, written.page)
    finally:
        if server is not None:
            server.server_close()


def _serve(server: PageServer, page: str) -> int:
    """``--serve``: hand out ``page`` on the loopback address until Ctrl-C (or SIGTERM); the exit status says which."""
    from bdh.viz.server import address

    server.page = page.encode("utf-8")
    print(f"serving {address(server)} (127.0.0.1 only; Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the exit status says which, as for every command
        print(f"bdh: viz server stopped ({interrupts.signal_name(exc)})", file=sys.stderr)
        return exit_status(exc)
    return 0


# ---------------------------------------------------------------------- bdh plot


def cmd_plot(args: argparse.Namespace) -> int:
    """The figures of a run (`bdh.viz.run_figures.plot_run`), written atomically into one folder."""
    from bdh.viz import inputs
    from bdh.viz.run_figures import check_indices, holds_any_model, plot_run

    run = Path(args.run)
    if not run.is_dir():
        raise UserError(f"{run}: no such run or model folder")
    device = device_of(args.device)
    prompt = prompt_bytes(args, max_bytes=inputs.MAX_TOKENS)
    model = folder = inp = None
    if args.checkpoint is not None or holds_any_model(run):  # a model that is there (or asked for) must load
        folder = checked_model_dir(args.run, args.checkpoint)
        model = _load(folder, device)
        check_indices(model, args.head, args.layer)
        inp = _input(args, model, folder, prompt)
    root = inputs.run_dir_of(folder) if folder is not None else run
    read = _inputs(args, folder if folder is not None else run) + [Path(p) for p in args.bench]
    out = _output(args, inputs.report_path(root, "plots", inp), read, folder=True)
    options = {"head": args.head, "layer": args.layer, "avg_degree": args.avg_degree}
    _done(folder, plot_run(root, out, model, inp, args.bench, **options).summary())
    return 0
