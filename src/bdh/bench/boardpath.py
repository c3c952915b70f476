"""``bdh bench boardpath``: BDH, GPT and Hyper-SET on shortest paths through boards with walls.

The sweep is board size x model width x learning rate x seed. Each board size has one fixed pool of
unique boards (from ``data_seed``) shared by every run. Reported per (model, board size, width): the
learning rate with the best path validity (ties: cell accuracy), with cell and board accuracy; the plots
show path validity against the width and against the state size. Widths: see `bdh.bench.boards`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .boards import MODELS, board_model_section
from .runner import BenchError, RunSpec, SuiteDef


@dataclass
class BoardPathSweep:
    """The board-pathfinding sweep.

    Attributes:
        board_sizes: board sides S (S^2 tokens).
        widths: BDH's ``n_embd``; GPT and Hyper-SET are matched to BDH's parameter count.
        models: any of ``bdh``, ``gpt``, ``hyperset``.
        lrs, seeds: the learning rates (best reported) and seeds.
        steps, batch_size: optimiser steps and boards per step.
        wall_prob, num_train, num_val: the board pool.
        n_layer: BDH layer passes, GPT blocks, Hyper-SET iterations.
        n_head, neuron_mult: heads; BDH's n = neuron_mult * n_embd.
        time_freq: Hyper-SET's F (sinusoid features of the iteration index; the paper: 512).
        data_seed: the seed of the board pool.
    """

    board_sizes: tuple[int, ...] = (6,)
    widths: tuple[int, ...] = (32, 64)
    models: tuple[str, ...] = MODELS
    lrs: tuple[float, ...] = (1e-3, 3e-3)
    seeds: tuple[int, ...] = (0,)
    steps: int = 600
    batch_size: int = 32
    wall_prob: float = 0.3
    num_train: int = 4000
    num_val: int = 256
    n_layer: int = 4
    n_head: int = 4
    neuron_mult: int = 16
    time_freq: int = 64
    data_seed: int = 0
    eval_batch_size: int = 128

    @classmethod
    def quick(cls) -> BoardPathSweep:
        """Tiny sizes for smoke tests."""
        return cls(
            board_sizes=(4,),
            widths=(16,),
            lrs=(1e-3, 3e-3),
            steps=20,
            batch_size=16,
            num_train=256,
            num_val=64,
            n_layer=2,
            n_head=2,
            neuron_mult=8,
            time_freq=16,
            eval_batch_size=64,
        )

    @classmethod
    def full(cls) -> BoardPathSweep:
        """krychu/bdh's 10 x 10 boards and larger models, for a GPU."""
        return cls(
            board_sizes=(6, 8, 10),
            widths=(64, 128, 256),
            lrs=(3e-4, 1e-3, 3e-3),
            seeds=(0, 1),
            steps=20000,
            batch_size=64,
            num_train=8000,
            num_val=500,
            n_layer=8,
            neuron_mult=32,
            time_freq=512,
            eval_batch_size=256,
        )

    def validate(self) -> None:
        bad = [m for m in self.models if m not in MODELS]
        if bad:
            raise BenchError(f"--models: {', '.join(bad)} not in the boardpath suite (known: {', '.join(MODELS)})")
        if any(s < 2 for s in self.board_sizes):
            raise BenchError("boardpath: board sizes must be at least 2")


def plan(sweep: BoardPathSweep) -> list[RunSpec]:
    """Every run of the sweep."""
    sweep.validate()
    specs = []
    for S in sweep.board_sizes:
        task = {
            "name": "boardpath",
            "board_size": S,
            "wall_prob": sweep.wall_prob,
            "num_train": sweep.num_train,
            "num_val": sweep.num_val,
            "data_seed": sweep.data_seed,
        }
        for w in sweep.widths:
            for m in sweep.models:
                section = board_model_section(
                    m,
                    w,
                    vocab_size=5,
                    seq_len=S * S,
                    n_layer=sweep.n_layer,
                    n_head=sweep.n_head,
                    neuron_mult=sweep.neuron_mult,
                    time_freq=sweep.time_freq,
                )
                for lr in sweep.lrs:
                    for s in sweep.seeds:
                        specs.append(
                            RunSpec(
                                "boardpath",
                                m,
                                f"S{S}",
                                {"board_size": S},
                                w,
                                lr,
                                s,
                                section,
                                task,
                                sweep.steps,
                                sweep.batch_size,
                                sweep.eval_batch_size,
                            )
                        )
    return specs


SUITE = SuiteDef(
    name="boardpath",
    setting_columns=["board_size"],
    metrics=["path_validity", "board_accuracy", "cell_accuracy"],
    score=["path_validity", "cell_accuracy"],
)
