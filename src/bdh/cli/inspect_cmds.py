"""``bdh inspect``: the brain view of a trained BDH model (sparsity, neuron graphs, sigma graph)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

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
    p.add_argument("run", metavar="RUN_DIR", help="a run folder (best/ or the newest checkpoint is used) or a model folder")
    p.add_argument("--checkpoint", metavar="step-N", help="inspect this checkpoint of the run instead")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="text to record (UTF-8 bytes); default: the held-out end of the embedded corpus")
    src.add_argument("--data", help="a text file to record (windows of --tokens bytes spread over the file)")
    p.add_argument("--tokens", type=int, default=256, help="tokens per recorded window (default 256)")
    p.add_argument("--windows", type=int, default=4, help="windows of --data / the corpus (default 4)")
    p.add_argument("--layer", type=int, help="only this layer (0-based) for the sparsity trace and the sigma graph")
    p.add_argument("--head", type=int, help="only this head for the graph analyses")
    p.add_argument("--out", help="output folder (must not exist; default RUN_DIR/reports/inspect-<time>)")
    p.add_argument("--max-nodes", type=int, default=1024, help="nodes of the Louvain subgraph (default 1024)")
    p.add_argument("--seeds", type=int, default=3, help="Louvain runs per graph, best kept (default 3; the paper used 5)")
    p.add_argument("--control-seed", type=int, default=0, help="torch seed of the untrained control (default 0)")
    p.add_argument("--no-figures", action="store_true", help="write report.json only")
    p.set_defaults(func=cmd_inspect)


def _windows(data: bytes, length: int, count: int) -> torch.Tensor:
    if len(data) < 2:
        raise ValueError("inspect: the input has fewer than 2 bytes")
    length = min(length, len(data))
    count = max(1, min(count, len(data) // length))
    starts = np.linspace(0, len(data) - length, count).astype(np.int64)
    arr = np.frombuffer(data, dtype=np.uint8)
    return torch.from_numpy(np.stack([arr[s : s + length] for s in starts]).astype(np.int64))


def _input_tokens(args: argparse.Namespace) -> tuple[torch.Tensor, str]:
    if args.tokens < 2:
        raise ValueError(f"--tokens must be at least 2, got {args.tokens}")
    if args.windows < 1:
        raise ValueError(f"--windows must be positive, got {args.windows}")
    if args.prompt is not None:
        data = args.prompt.encode("utf-8")
        if len(data) < 2:
            raise ValueError("--prompt needs at least 2 bytes")
        return torch.tensor(list(data), dtype=torch.long).view(1, -1), "prompt"
    if args.data is not None:
        path = Path(args.data)
        if not path.is_file():
            raise FileNotFoundError(f"--data {path}: no such file")
        return _windows(path.read_bytes(), args.tokens, args.windows), f"file {path.name}"
    from bdh.tasks.text import embedded_corpus

    corpus = embedded_corpus()
    held_out = corpus[int(len(corpus) * 0.9) :]
    return _windows(held_out, args.tokens, args.windows), "embedded corpus, last 10%"


def _fresh_folder(out: Path) -> Path:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out}: exists and is not an empty folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))


def cmd_inspect(args: argparse.Namespace) -> int:
    from bdh.analysis import figures, report
    from bdh.model.io import atomic_write_bytes, load_pretrained
    from bdh.model import BDH

    for name in ("max_nodes", "seeds"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    from bdh.train.checkpoint import resolve_model_dir

    model_dir = resolve_model_dir(args.run, args.checkpoint)
    tokens, source = _input_tokens(args)
    model = load_pretrained(model_dir)
    if not isinstance(model, BDH):
        raise ValueError(f"{model_dir}: bdh inspect reads BDH models, this is a {type(model).__name__}")
    cfg = model.config
    if args.layer is not None and not 0 <= args.layer < cfg.n_layer:
        raise ValueError(f"--layer {args.layer} does not exist (the model has {cfg.n_layer} layers: 0..{cfg.n_layer - 1})")
    if args.head is not None and not 0 <= args.head < cfg.n_head:
        raise ValueError(f"--head {args.head} does not exist (the model has {cfg.n_head} heads: 0..{cfg.n_head - 1})")
    if int(tokens.max()) >= cfg.vocab_size:
        raise ValueError(f"the input has byte {int(tokens.max())} but the model's vocabulary is {cfg.vocab_size} (text input needs 256)")
    run_root = Path(args.run)
    out = Path(args.out) if args.out else run_root / "reports" / time.strftime("inspect-%Y%m%d-%H%M%S")
    opts = report.InspectOptions(layer=args.layer, head=args.head, max_nodes=args.max_nodes, seeds=args.seeds, control_seed=args.control_seed)

    def log(msg: str) -> None:
        print(f"[inspect] {msg}", file=sys.stderr, flush=True)

    log(f"model {model_dir} (n = {model.config.n}, {model.config.n_head} heads, {model.config.n_layer} layers); input: {source}")
    tmp = _fresh_folder(out)
    try:
        with torch.no_grad():
            rep, raw = report.inspect_model(model, tokens, opts, log=log)
        rep["source"] = {"model": str(model_dir), "input": source}
        atomic_write_bytes(tmp / "report.json", (json.dumps(rep, indent=1, allow_nan=False) + "\n").encode())
        if not args.no_figures:
            log("figures")
            figures.write_all(raw, tmp)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(report.format_table(rep["summary"]))
    print(f"\nreport: {out / 'report.json'} ({rep['seconds']:.0f} s)")
    return 0
