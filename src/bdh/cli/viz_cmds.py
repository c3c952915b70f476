"""``bdh viz`` (an interactive HTML viewer of a model at work) and ``bdh plot`` (the figures of a run)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument("run", metavar="RUN_DIR", help="a run folder (best/ or the newest checkpoint) or a model folder")
    p.add_argument("--checkpoint", help="a checkpoint of the run, e.g. step-1000")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="text read as UTF-8 bytes (byte-level models)")
    src.add_argument("--tokens", help="token ids separated by spaces or commas")
    src.add_argument("--board", metavar="FILE", help="a pathfinding board file (rows of . # S E; see docs/viz.md)")
    src.add_argument("--sudoku", metavar="CELLS", help="a Sudoku: 81 cells row by row, 0 or . for blanks")
    p.add_argument("--out", help="output HTML file (default RUN_DIR/reports/viz.html)")
    p.add_argument("--serve", action="store_true", help="also serve the page on http://127.0.0.1:PORT/ until Ctrl-C")
    p.add_argument("--port", type=int, default=0, help="port for --serve (default 0: a free port)")
    p.add_argument("--hubs", type=int, default=48, help="hub neurons in the graph (default 48)")
    p.add_argument("--edges-per-hub", type=int, default=3, help="strongest edges kept per hub (default 3)")
    p.add_argument("--heat-neurons", type=int, default=64, help="neurons per heatmap and layer (default 64)")
    p.add_argument("--attn-top", type=int, default=12, help="attention sources kept per token and layer (default 12)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated board / puzzle and of the graph layout")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or auto")
    p.set_defaults(func=cmd_viz)

    q = sub.add_parser(
        "plot",
        help="figures of a run: training curves, sparsity, degree distribution, activation heatmap, bench suites",
        description=(
            "Write PNG and SVG figures into RUN_DIR/reports/plots/ (or --out): training and validation curves "
            "(metrics.jsonl), per-layer sparsity of x and y and an activation heatmap for a prompt, the degree "
            "distribution of a head block of G_x with its fitted power law, and the suite plots of bdh bench "
            "results given with --bench. Says which figures it skipped and why."
        ),
    )
    q.add_argument("run", metavar="RUN_DIR", help="a run folder or a model folder")
    q.add_argument("--checkpoint", help="a checkpoint of the run, e.g. step-1000")
    qsrc = q.add_mutually_exclusive_group()
    qsrc.add_argument("--prompt", help="text for the sparsity and heatmap figures (default: a generated board or a short prompt)")
    qsrc.add_argument("--tokens", help="token ids separated by spaces or commas")
    qsrc.add_argument("--board", metavar="FILE", help="a pathfinding board file")
    qsrc.add_argument("--sudoku", metavar="CELLS", help="a Sudoku: 81 cells")
    q.add_argument("--bench", action="append", default=[], metavar="CSV", help="bdh bench results (CSV with a suite column); repeatable")
    q.add_argument("--head", type=int, default=0, help="head whose block of G_x gives the degree distribution (default 0)")
    q.add_argument("--avg-degree", type=int, default=8, help="average degree of the thresholded graph (default 8)")
    q.add_argument("--layer", type=int, help="layer of the activation heatmap (default: the last)")
    q.add_argument("--out", help="output folder (default RUN_DIR/reports/plots)")
    q.add_argument("--seed", type=int, default=0, help="seed of the generated board / puzzle")
    q.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or auto")
    q.set_defaults(func=cmd_plot)


# ---------------------------------------------------------------------- shared


def _device(name: str):
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        return torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}") from None


def _load(run: str, checkpoint: str | None, device: str):
    """(model, model folder) of a run or model folder; BDH models only."""
    from bdh.train.checkpoint import resolve_model_dir
    from bdh.model import BDH
    from bdh.model.io import load_pretrained

    folder = resolve_model_dir(run, checkpoint)
    model = load_pretrained(folder, map_location=_device(device))
    if not isinstance(model, BDH):
        raise ValueError(f"{folder}: a {type(model).__name__} model; viz and plot draw BDH models only")
    return model, folder


def _input(args: argparse.Namespace, model, folder: Path):
    from bdh.viz import inputs

    cfg = model.config
    task = inputs.run_task(folder)
    if args.prompt is not None:
        return inputs.prompt_tokens(args.prompt, cfg.vocab_size)
    if args.tokens is not None:
        return inputs.id_tokens(args.tokens, cfg.vocab_size)
    if args.board is not None:
        size = (task or {}).get("board_size") if (task or {}).get("name") == "boardpath" else None
        return inputs.board_input(args.board, cfg.vocab_size, None if size is None else int(size))
    if args.sudoku is not None:
        return inputs.sudoku_input(args.sudoku, cfg.vocab_size)
    return inputs.default_input(task, cfg.vocab_size, cfg.causal, args.seed)


# ---------------------------------------------------------------------- bdh viz


def cmd_viz(args: argparse.Namespace) -> int:
    from bdh.viz import inputs
    from bdh.viz.export import ViewOptions, build_view
    from bdh.viz.page import render, write_atomic

    opts = ViewOptions(hubs=args.hubs, edges_per_hub=args.edges_per_hub, heat_neurons=args.heat_neurons, attn_top=args.attn_top,
                       layout_seed=args.seed)
    server = None
    if args.serve:  # claim the port first: a port in use fails before the model runs
        from bdh.viz.server import make_server

        server = make_server(b"", args.port)
    try:
        model, folder = _load(args.run, args.checkpoint, args.device)
        inp = _input(args, model, folder)
        t0 = time.time()
        view = build_view(model, inp.tokens, kind=inp.kind, board_size=inp.board_size, options=opts,
                          title=f"BDH viewer: {Path(args.run).resolve().name}", source=f"{folder} - {inp.description}")
        page = render(view)
        out = Path(args.out) if args.out else inputs.run_dir_of(folder) / "reports" / "viz.html"
        write_atomic(out, page)
        size = out.stat().st_size
        print(f"wrote {out} ({size / 1e6:.2f} MB, {len(inp.tokens)} tokens, {time.time() - t0:.1f} s)")
        if server is None:
            return 0
        from bdh.viz.server import address

        server.page = page.encode("utf-8")
        print(f"serving {address(server)} (127.0.0.1 only; Ctrl-C to stop)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("stopped", file=sys.stderr)
        return 0
    finally:
        if server is not None:
            server.server_close()


# ---------------------------------------------------------------------- bdh plot


def _degree_figure(model, head: int, avg_degree: int, stem: Path) -> list[Path]:
    from bdh.analysis import neurograph as ng
    from bdh.viz.plots import degree_distribution

    cfg = model.config
    if not 0 <= head < cfg.n_head:
        raise ValueError(f"--head {head}: the model has {cfg.n_head} heads (0..{cfg.n_head - 1})")
    if avg_degree < 1:
        raise ValueError(f"--avg-degree must be positive, got {avg_degree}")
    G = ng.head_block(model, "x", head)
    res = ng.degree_analysis(G, avg_degree * cfg.N, cfg.n_embd, offset=head * cfg.N)
    del G
    raw = res["_degrees"]
    return degree_distribution(
        {"in": raw["in"], "out": raw["out"]}, {"in": res["in"]["fit"], "out": res["out"]["fit"]}, stem,
        title=f"G_x head {head} ({cfg.N} neurons), entries >= {res['beta']:.3g} (average degree {avg_degree})",
        reference={"in": raw["lowrank_in"], "out": raw["lowrank_out"]},
    )


def cmd_plot(args: argparse.Namespace) -> int:
    from bdh.train.log import read_metrics
    from bdh.viz import inputs, plots

    run = Path(args.run)
    if not run.is_dir():
        raise FileNotFoundError(f"{run}: no such run or model folder")
    made: list[Path] = []
    skipped: list[str] = []
    model = folder = None
    try:
        model, folder = _load(args.run, args.checkpoint, args.device)
    except (FileNotFoundError, ValueError) as exc:  # no model in the folder (or none readable): plot the rest
        skipped.append(f"model figures (sparsity, heatmap, degrees): {exc}")
    root = inputs.run_dir_of(folder) if folder is not None else run
    out = Path(args.out) if args.out else root / "reports" / "plots"
    bench_rows: list[dict[str, Any]] = []
    for csv_path in args.bench:
        bench_rows += plots.read_rows(csv_path)  # a missing file is an error, before anything is drawn

    metrics = root / "metrics.jsonl"
    records = read_metrics(metrics)
    if records:
        try:
            made += plots.training_curves(records, out / "curves", title=f"{root.name}: training and validation")
        except ValueError as exc:
            skipped.append(f"curves: {exc}")
    else:
        skipped.append(f"curves: no records in {metrics}")

    if model is not None:
        from bdh.analysis.record import record
        from bdh.analysis.sparsity import sparsity

        import torch

        inp = _input(args, model, folder)
        rec = record(model, torch.tensor([inp.tokens], dtype=torch.long))
        trace = sparsity(rec)
        means = trace.layer_means()
        made += plots.sparsity_by_layer(means["x"], means["y"], out / "sparsity", title=f"non-zero x and y per layer ({inp.description})")
        layer = rec.n_layer - 1 if args.layer is None else args.layer
        if not 0 <= layer < rec.n_layer:
            raise ValueError(f"--layer {layer}: the model has {rec.n_layer} layers (0..{rec.n_layer - 1})")
        from bdh.viz.export import token_labels

        made += plots.activation_heatmap(
            rec.flat("x", layer).numpy(), rec.flat("y", layer).numpy(), token_labels(inp.tokens, inp.kind), out / "heatmap",
            title=f"layer {layer}: tokens x most active neurons ({inp.description})",
        )
        made += _degree_figure(model, args.head, args.avg_degree, out / "degrees")

    if bench_rows:
        files, why = plots.bench_plots(bench_rows, out)
        made += files
        skipped += why
    else:
        skipped.append("bench suites: no results given (--bench CSV from bdh bench)")

    for path in made:
        print(f"wrote {path}")
    for reason in skipped:
        print(f"skipped {reason}")
    return 0
