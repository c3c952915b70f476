"""Training speed and loss of ``bdh train`` against the official pathwaycom/bdh training loop, in one run.

Both train the same model size on the same batches (byte windows of the embedded corpus, batch ``index``
of `bdh.tasks.text.TextTask`), with the same thread count, seed and optimiser:

* **official**: the model class of a pathwaycom/bdh checkout (``bdh.py``, loaded from the path given), driven
  the way its ``train.py`` drives it: ``torch.manual_seed``, the model, AdamW (lr 1e-3, weight decay 0.1,
  PyTorch's default betas), then per step ``logits, loss = model(x, y)``, ``backward``, ``step``,
  ``zero_grad`` (no schedule, no clipping; ``train.py`` reads random windows of tiny Shakespeare, here the
  batches are shared so the losses can be compared);
* **ours**: `bdh.train.train` with the same settings (constant learning rate, no warmup, no clipping,
  betas 0.9/0.999, no evaluation or checkpoints until the end).

Our model initialises bit-identically to the official one under the same torch seed and, with
``--dropout-rng torch`` (the default here), draws the same dropout masks, so the two loss curves can be
compared step by step. Tokens/s counts training steps only (after ``--skip`` warm-up steps);
the two loops take turns ``--repeats`` times (the order alternates, since the load of a shared machine
drifts) and the best of each is reported.

    python benchmarks/train_vs_official.py PATH/TO/pathwaycom-bdh [--steps 30 --batch 8 --seq-len 256 --threads 2]
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from pathlib import Path

import torch
from _shared import Parser, load_official, run

from bdh.tasks.text import TextConfig, TextTask
from bdh.train import load_config, train


def official_run(module, args, task: TextTask) -> tuple[list[float], float]:
    """Per-step losses and training tokens/s of the official model in its train.py loop."""
    torch.manual_seed(args.seed)
    config = module.BDHConfig(
        n_layer=args.n_layer,
        n_embd=args.n_embd,
        dropout=args.dropout,
        n_head=args.n_head,
        mlp_internal_dim_multiplier=args.n_neurons // args.n_embd,
        vocab_size=256,
    )
    model = module.BDH(config)
    if args.compile:
        model = torch.compile(model)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    losses, times = [], []
    for step in range(args.steps):
        x, y = task.batch("train", step, args.batch, args.seed)
        logits, loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        times.append(time.perf_counter())
    tokens = (args.steps - args.skip) * args.batch * args.seq_len
    return losses, tokens / (times[-1] - times[args.skip - 1])


def our_run(args, data: Path) -> tuple[list[float], float]:
    """Per-step losses and training tokens/s of ``bdh train`` with the same settings."""
    run_dir = Path(tempfile.mkdtemp(prefix="bdh-bench-")) / "run"
    overrides = [
        f"model.n_layer={args.n_layer}",
        f"model.n_embd={args.n_embd}",
        f"model.n_head={args.n_head}",
        f"model.n_neurons={args.n_neurons}",
        f"model.dropout={args.dropout}",
        f"model.dropout_rng={args.dropout_rng}",
        f"task.data={data}",
        f"task.seq_len={args.seq_len}",
        f"train.batch_size={args.batch}",
        f"train.max_steps={args.steps}",
        "train.max_minutes=null",
        f"train.seed={args.seed}",
        f"train.threads={args.threads}",
        f"train.compile={str(args.compile).lower()}",
        "train.precision=fp32",
        f"optim.lr={args.lr}",
        f"optim.min_lr={args.lr}",
        "optim.warmup_steps=0",
        "optim.decay=constant",
        "optim.grad_clip=null",
        "optim.betas=[0.9, 0.999]",
        "optim.weight_decay=0.1",
        "eval.every=0",
        "eval.batches=1",
        "checkpoint.every=0",
        "log.progress=none",
        "log.tensorboard=false",
        "sample.max_new_tokens=0",
        f"run_dir={run_dir}",
    ]
    try:
        train(load_config(None, overrides))
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    finally:
        shutil.rmtree(run_dir.parent, ignore_errors=True)
    steps = [r for r in records if r["kind"] == "train"]
    losses = [r["loss"] for r in steps]
    t = {r["step"]: r["time"] for r in steps}
    tokens = (args.steps - args.skip) * args.batch * args.seq_len
    return losses, tokens / (t[args.steps] - t[args.skip])


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description="bdh train vs the official pathwaycom/bdh training loop")
    parser.add_argument("official", type=Path, help="path of a pathwaycom/bdh checkout")
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=128)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-neurons", type=int, default=2048, help="total neurons n (official: multiplier x n_embd)")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument(
        "--dropout-rng",
        choices=("torch", "auto"),
        default="torch",
        help="our model.dropout_rng: 'torch' draws nn.Dropout's masks, the official ones, so the losses "
        "match step for step; 'auto' draws them faster on CPU (other masks: losses differ by noise)",
    )
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--skip", type=int, default=3, help="warm-up steps left out of tokens/s")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--compile", action="store_true", help="torch.compile both models (as the official train.py does)"
    )
    args = parser.parse_args(argv)
    if args.n_neurons % args.n_embd or not 0 < args.skip < args.steps:
        raise SystemExit("error: --n-neurons must be a multiple of --n-embd, and 0 < --skip < --steps")
    torch.set_num_threads(args.threads)
    module = load_official(args.official)

    with tempfile.TemporaryDirectory() as tmp:
        from bdh.tasks.text import embedded_corpus

        data = Path(tmp) / "corpus.txt"
        data.write_bytes(embedded_corpus())
        task = TextTask(TextConfig(data=str(data), seq_len=args.seq_len))
        speeds = {"official": [], "ours": []}
        losses = {}
        for repeat in range(args.repeats):
            order = ("official", "ours") if repeat % 2 == 0 else ("ours", "official")  # alternate: load drifts
            for name in order:
                torch.set_num_threads(args.threads)
                losses[name], s = official_run(module, args, task) if name == "official" else our_run(args, data)
                speeds[name].append(s)

    off, ours = max(speeds["official"]), max(speeds["ours"])
    diffs = [abs(a - b) for a, b in zip(losses["official"], losses["ours"])]
    n = args.n_neurons
    params = 3 * n * args.n_embd + 2 * 256 * args.n_embd
    print(
        f"model L={args.n_layer} D={args.n_embd} h={args.n_head} n={n} ({params / 1e6:.2f}M parameters), "
        f"dropout {args.dropout}; "
        f"batch {args.batch} x {args.seq_len} bytes; {args.steps} steps; {args.threads} threads; "
        f"compile {'on' if args.compile else 'off'}; best of {args.repeats}"
    )
    print()
    print("| loop | train tokens/s | loss after step 1 | loss after last step | mean loss, last 5 steps |")
    print("|---|---|---|---|---|")
    for name, speed in (("official pathwaycom/bdh", off), ("bdh train", ours)):
        key = "official" if name.startswith("official") else "ours"
        ls = losses[key]
        print(f"| {name} | {speed:,.0f} | {ls[0]:.4f} | {ls[-1]:.4f} | {sum(ls[-5:]) / 5:.4f} |")
    print()
    print(f"speed ratio (ours / official): {ours / off:.2f}x")
    print(
        f"per-step loss difference: max {max(diffs):.2e}, at the last step {diffs[-1]:.2e}"
        f"{' (identical)' if max(diffs) == 0 else ''}"
    )
    return 0 if all(math.isfinite(x) for x in losses["ours"]) else 1


if __name__ == "__main__":
    run(main)
