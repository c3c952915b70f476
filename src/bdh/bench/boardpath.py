"""``bdh bench boardpath``: BDH, GPT and Hyper-SET on shortest paths through boards with walls.

Board size x width x learning rate x seed on one pool of boards per size; the best rate by path validity (ties: cell
accuracy); the reference row predicts no path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from bdh.typed_config import bounded

from .boards import BOARD_FULL, BoardSweep
from .spec import QUICK, RunSpec, SuiteDef, Trivial, redefault


@dataclass
class BoardPathSweep(BoardSweep):
    """`BoardSweep`'s fields plus ``board_sizes`` (sides S, S^2 tokens) and ``wall_prob`` (the share of walls)."""

    suite = "boardpath"

    # the CPU default (docs/bench.md): one width, long enough for BDH to leave the trivial answer
    widths: tuple[int, ...] = redefault(BoardSweep, "widths", (32,))
    steps: int = redefault(BoardSweep, "steps", 2000)
    num_train: int = redefault(BoardSweep, "num_train", 4000)
    num_val: int = redefault(BoardSweep, "num_val", 256)
    board_sizes: tuple[int, ...] = bounded((6,), ge=2)
    wall_prob: float = bounded(0.3, ge=0, lt=1)

    #: the presets (`bdh.typed_config.TypedConfig.PRESETS`, ``--quick`` / ``--full``):
    #: quick: Tiny sizes for smoke tests.
    #: full: krychu/bdh's 10 x 10 boards and larger models, for a GPU.
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "quick": {
            **QUICK,
            "board_sizes": (4,),
            "num_train": 256,
            "num_val": 64,
            "n_layer": 2,
            "n_head": 2,
            "time_freq": 16,
            "eval_batch_size": 64,
        },
        "full": {
            **BOARD_FULL,
            "board_sizes": (6, 8, 10),
            "num_train": 8000,
            "num_val": 500,
            "n_layer": 8,
            "eval_batch_size": 256,
        },
    }

    def shapes(self) -> list[dict[str, int]]:
        """The vocabulary and the tokens of a board (S^2) at each board side S of the sweep."""
        from bdh.tasks.boardpath import VOCAB_SIZE

        return [{"vocab_size": VOCAB_SIZE, "seq_len": S * S} for S in self.board_sizes]


#: the sweep class of the suite (what ``bdh bench boardpath`` builds, `bdh.bench.spec`)
SWEEP = BoardPathSweep


def plan(sweep: BoardPathSweep) -> list[RunSpec]:
    """Every run of the sweep."""
    sweep.validate()
    specs = []
    for S, shape in zip(sweep.board_sizes, sweep.shapes()):
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
                section = sweep.model_section(m, w, **shape)
                specs += sweep.runs(m, w, f"S{S}", {"board_size": S}, section, task)
    return specs


def train_size(task: Any) -> int:
    """The boards of a boardpath task's training set."""
    return int(task.config.num_train)


SUITE = SuiteDef(
    name="boardpath",
    setting_columns=["board_size"],
    metrics=["path_validity", "board_accuracy", "cell_accuracy"],
    score=["path_validity", "cell_accuracy"],
    # every cell's most frequent training target given its input token: the input board, no PATH cell
    trivial=Trivial("trivial (predict no path)", train_size),
)


def suite_def(sweep: BoardPathSweep) -> SuiteDef:
    """The boardpath suite (the same for every sweep)."""
    return SUITE
