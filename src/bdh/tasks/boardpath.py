"""Board pathfinding (the "boardpath" task of krychu/bdh): find a shortest path on a grid with walls.

An S x S board is S^2 tokens (FLOOR 0, WALL 1, START 2, END 3, PATH 4); the target marks one shortest START -> END path;
``path_validity`` accepts any equally short one (docs/tasks.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bdh.errors import UserError

from ..typed_config import bounded
from .common import TaskConfig, check_batch_args, check_seed, rng, shuffled_indices

FLOOR, WALL, START, END, PATH = 0, 1, 2, 3, 4
VOCAB_SIZE = 5
_UNREACHED = np.iinfo(np.int32).max // 2


def distances(walls: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Shortest 4-neighbour distances from ``source`` ((n, S, S) bool, as ``walls``) by a batched BFS;
    `_UNREACHED` else."""
    dist = np.where(source, 0, _UNREACHED).astype(np.int32)
    free = ~walls
    while True:
        nb = np.full_like(dist, _UNREACHED)
        nb[:, 1:, :] = np.minimum(nb[:, 1:, :], dist[:, :-1, :])
        nb[:, :-1, :] = np.minimum(nb[:, :-1, :], dist[:, 1:, :])
        nb[:, :, 1:] = np.minimum(nb[:, :, 1:], dist[:, :, :-1])
        nb[:, :, :-1] = np.minimum(nb[:, :, :-1], dist[:, :, 1:])
        new = np.where(free, np.minimum(dist, nb + 1), _UNREACHED)
        if np.array_equal(new, dist):
            return dist
        dist = new


def trace_paths(dist: np.ndarray, end: np.ndarray) -> np.ndarray:
    """An (n, S, S) mask of one shortest path per board (START and END excluded), traced back from END."""
    n, S, _ = dist.shape
    rows, cols = end[:, 0].copy(), end[:, 1].copy()
    path = np.zeros(dist.shape, dtype=bool)
    b = np.arange(n)
    d = dist[b, rows, cols]
    padded = np.pad(dist, ((0, 0), (1, 1), (1, 1)), constant_values=_UNREACHED)
    moves = ((-1, 0), (1, 0), (0, -1), (0, 1))
    while True:
        active = d > 1
        if not active.any():
            return path
        chosen = np.full(n, -1)
        for m, (dr, dc) in enumerate(moves):
            ok = (chosen < 0) & active & (padded[b, rows + 1 + dr, cols + 1 + dc] == d - 1)
            chosen[ok] = m
        step = np.array(moves)[np.maximum(chosen, 0)]
        rows = np.where(active, rows + step[:, 0], rows)
        cols = np.where(active, cols + step[:, 1], cols)
        path[b[active], rows[active], cols[active]] = True
        d = np.where(active, d - 1, d)


def generate_boards(
    gen: np.random.Generator, n: int, board_size: int, wall_prob: float
) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``n`` solvable boards (inputs, targets), (n, S*S) int64 each (unsolvable draws dropped)."""
    S = board_size
    cells = S * S
    start = gen.integers(0, cells, size=n)
    end = (start + gen.integers(1, cells, size=n)) % cells  # uniform over the other cells
    board = np.where(gen.random((n, cells)) < wall_prob, WALL, FLOOR).astype(np.int64)
    ar = np.arange(n)
    board[ar, start] = START
    board[ar, end] = END
    grid = board.reshape(n, S, S)
    src = np.zeros((n, cells), dtype=bool)
    src[ar, start] = True
    dist = distances(grid == WALL, src.reshape(n, S, S))
    d_end = dist.reshape(n, cells)[ar, end]
    ok = d_end < _UNREACHED
    board, dist, end = board[ok], dist[ok], end[ok]
    path = trace_paths(dist, np.stack([end // S, end % S], axis=1))
    target = np.where(path.reshape(len(board), cells), PATH, board)
    return board, target


@dataclass
class BoardPathConfig(TaskConfig):
    """Board pathfinding data (krychu/bdh's defaults)."""

    board_size: int = bounded(10, ge=2)  # S; a board is S^2 tokens.
    wall_prob: float = bounded(0.3, ge=0, lt=1)  # probability that a cell other than START and END is a wall.
    num_train: int = bounded(8000, ge=1)
    num_val: int = bounded(500, ge=1)  # boards in the validation set (disjoint from the training set).
    # draw the boards from this seed instead of the run's (runs of different seeds then share the data sets); null: the
    # run's seed.
    data_seed: int | None = bounded(None, ge=0)


class BoardPath:
    """Shortest paths on boards with walls (bidirectional per-cell labelling)."""

    name = "boardpath"
    config_class = BoardPathConfig
    causal = False
    vocab_size = VOCAB_SIZE
    target_metric = ("path_validity", True)

    @classmethod
    def model_fields(cls, config: BoardPathConfig) -> dict[str, Any]:
        """What the task decides of the model (`bdh.tasks.base.decided_fields`), from its config alone."""
        return {"vocab_size": cls.vocab_size, "causal": cls.causal, "seq_len": config.board_size**2}

    def __init__(self, config: BoardPathConfig | None = None):
        self.config = BoardPathConfig() if config is None else config
        if not isinstance(self.config, BoardPathConfig):
            raise TypeError(f"BoardPath: expected a BoardPathConfig, got {type(self.config).__name__}")
        self.seq_len = self.config.board_size**2
        self._data: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def dataset(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """All unique boards of a run seed (or ``data_seed``): (inputs, targets), (num_val + num_train, S^2),
        validation first."""
        seed = self.config.data_seed_for(seed)
        if seed not in self._data:
            cfg = self.config
            want = cfg.num_val + cfg.num_train
            gen = rng(seed, 7)
            boards = np.empty((0, self.seq_len), np.int64)
            targets = np.empty_like(boards)
            drawn = kept = 0
            for _ in range(50):
                rate = max(kept / drawn, 0.01) if drawn else 0.5  # solvable fraction so far
                n = min(max(int(1.2 * (want - len(boards)) / rate), 64), 1_000_000)
                b, t = generate_boards(gen, n, cfg.board_size, cfg.wall_prob)
                drawn, kept = drawn + n, kept + len(b)
                boards, targets = np.concatenate([boards, b]), np.concatenate([targets, t])
                _, first = np.unique(boards, axis=0, return_index=True)
                keep = np.sort(first)  # dedup, keeping draw order
                boards, targets = boards[keep], targets[keep]
                if len(boards) >= want:
                    break
            else:
                raise UserError(
                    f"BoardPathConfig: only {len(boards)} distinct solvable {cfg.board_size}x{cfg.board_size} "
                    f"boards found ({kept} solvable of {drawn} drawn at wall_prob {cfg.wall_prob}); "
                    f"ask for fewer than num_train + num_val = {want}"
                )
            self._data[seed] = (boards[:want], targets[:want])
        return self._data[seed]

    def batch(self, split: str, index: int, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Training: an endless stream reshuffled every epoch; validation: the fixed set in order (last batch short)."""
        check_batch_args(split, index, batch_size)
        x, y = self.dataset(seed)
        nv, nt = self.config.num_val, self.config.num_train
        if split == "train":
            ids = nv + shuffled_indices(nt, index * batch_size, batch_size, check_seed(seed), stream=8)
        else:
            if index >= self.num_batches("val", batch_size):
                raise UserError(
                    f"BoardPath: validation batch {index} out of range ({self.num_batches('val', batch_size)} batches)"
                )
            ids = np.arange(index * batch_size, min((index + 1) * batch_size, nv))
        return torch.from_numpy(x[ids]), torch.from_numpy(y[ids])

    def num_batches(self, split: str, batch_size: int) -> int | None:
        check_batch_args(split, 0, batch_size)
        if split == "train":
            return max(self.config.num_train // batch_size, 1)
        return -(-self.config.num_val // batch_size)

    def metrics(self, logits: torch.Tensor, targets: torch.Tensor, inputs: torch.Tensor) -> dict[str, float]:
        """cell_accuracy, board_accuracy and path_validity (every board has S^2 cells: weighting by boards is exact)."""
        return boardpath_metrics(logits.argmax(dim=-1), targets, inputs, self.config.board_size)


def path_valid(pred: torch.Tensor, targets: torch.Tensor, inputs: torch.Tensor, board_size: int) -> torch.Tensor:
    """(B,) bool: the predicted PATH cells are floor, as many as the target's, and connect START to END."""
    B = pred.shape[0]
    S = board_size
    on_path = pred == PATH
    floor_only = ~(on_path & (inputs != FLOOR)).any(dim=1)
    right_length = on_path.sum(dim=1) == (targets == PATH).sum(dim=1)
    allowed = (on_path | (inputs == END) | (inputs == START)).view(B, S, S)
    reach = (inputs == START).view(B, S, S)
    goal = (inputs == END).view(B, S, S)
    for _ in range(S * S):  # flood fill from START through predicted PATH cells
        grow = reach.clone()
        grow[:, 1:, :] |= reach[:, :-1, :]
        grow[:, :-1, :] |= reach[:, 1:, :]
        grow[:, :, 1:] |= reach[:, :, :-1]
        grow[:, :, :-1] |= reach[:, :, 1:]
        grow &= allowed
        if torch.equal(grow, reach):
            break
        reach = grow
    connected = (reach & goal).flatten(1).any(dim=1)
    return floor_only & right_length & connected


def boardpath_metrics(
    pred: torch.Tensor, targets: torch.Tensor, inputs: torch.Tensor, board_size: int
) -> dict[str, float]:
    """Metrics of predicted tokens ``pred`` (B, S^2) against ``targets`` (see the module docstring)."""
    mask = targets != -100
    right = (pred == targets) | ~mask
    return {
        "cell_accuracy": float(((pred == targets) & mask).sum() / mask.sum().clamp(min=1)),
        "board_accuracy": float(right.all(dim=1).float().mean()),
        "path_validity": float(path_valid(pred, targets, inputs, board_size).float().mean()),
    }
