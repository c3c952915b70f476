"""Tiny run folders for the viewer and plot tests (written by hand: no training)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import bdh

BOARD = """\
S..#....
.#.#.##.
.#...#..
.####.#.
......#.
.#.##...
.#..#.#.
...#...E
"""

SUDOKU = "53..7....6..195....98....6.8...6...34..8.3..17...2...6.6....28....419..5....8..79"


def make_run(root: Path, config: bdh.BDHConfig, task: dict, seed: int = 0, steps: int = 20) -> Path:
    """RUN_DIR with config.yaml, metrics.jsonl and best/ holding a random model of ``config``."""
    torch.manual_seed(seed)
    root.mkdir(parents=True)
    bdh.BDH(config).save_pretrained(root / "best")
    lines = [f"task: {json.dumps(task)}", "model: {name: bdh}"]
    (root / "config.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with open(root / "metrics.jsonl", "w", encoding="utf-8") as f:
        for s in range(1, steps + 1):
            f.write(json.dumps({"kind": "train", "step": s, "loss": 5.0 * math.exp(-s / 10) + 0.5, "lr": 1e-3}) + "\n")
            if s % 5 == 0:
                f.write(
                    json.dumps(
                        {
                            "kind": "eval",
                            "step": s,
                            "val_loss": 5.2 * math.exp(-s / 10) + 0.6,
                            "val_bpb": 1.0,
                            "val_accuracy": s / steps,
                        }
                    )
                    + "\n"
                )
    return root


@pytest.fixture(scope="session")
def text_run(tmp_path_factory) -> Path:
    cfg = bdh.BDHConfig(n_layer=3, n_embd=32, n_head=2, n_neurons=256, dropout=0.0)
    return make_run(tmp_path_factory.mktemp("viz") / "text-run", cfg, {"name": "text", "seq_len": 64})


@pytest.fixture(scope="session")
def board_run(tmp_path_factory) -> Path:
    cfg = bdh.BDHConfig(n_layer=3, n_embd=32, n_head=2, n_neurons=256, vocab_size=5, causal=False, dropout=0.0)
    return make_run(tmp_path_factory.mktemp("viz") / "board-run", cfg, {"name": "boardpath", "board_size": 8})


@pytest.fixture(scope="session")
def sudoku_run(tmp_path_factory) -> Path:
    cfg = bdh.BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256, vocab_size=10, causal=False, dropout=0.0)
    return make_run(tmp_path_factory.mktemp("viz") / "sudoku-run", cfg, {"name": "sudoku"})
