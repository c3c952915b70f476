"""Sudoku: 9 x 9 puzzles with a unique solution, read as 81 tokens, solved as per-cell labelling.

Hyper-SET's encoding (Hu et al. section 5.1): 0 = blank, 1..9 = a given; only blank cells are scored,
bidirectionally. Puzzles come from our generator (dig a random grid while the solution stays unique, puzzle i
from ``SeedSequence(seed, split, i)`` on first use) or from ``puzzle,solution`` CSV files (`load_sudoku_csv`);
generated puzzles are easier than curated sets with the same givens (docs/tasks.md)."""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bdh.errors import UserError
from bdh.outputs import input_file

from ..typed_config import bounded
from .base import IGNORE_INDEX
from .common import TaskConfig, check_batch_args, check_seed, rng, shuffled_indices
from .sudoku_augment import augment

_ALL = 0x3FE  # bits 1..9
_POP = [bin(m).count("1") for m in range(1024)]
_ROW = [i // 9 for i in range(81)]
_COL = [i % 9 for i in range(81)]
_BOX = [(i // 27) * 3 + (i % 9) // 3 for i in range(81)]


# ---------------------------------------------------------------------- solver
class _Board:
    """A partial grid with row / column / box digit masks (bit d = digit d used)."""

    __slots__ = ("grid", "rows", "cols", "boxes", "empties")

    def __init__(self, grid: list[int]):
        self.grid = list(grid)
        self.rows, self.cols, self.boxes = [0] * 9, [0] * 9, [0] * 9
        self.empties = []
        for i, v in enumerate(self.grid):
            if v:
                bit = 1 << v
                if (self.rows[_ROW[i]] | self.cols[_COL[i]] | self.boxes[_BOX[i]]) & bit:
                    raise UserError(f"sudoku: digit {v} repeated in the row, column or box of cell {i}")
                self._set(i, v)
            else:
                self.empties.append(i)

    def _set(self, i: int, v: int) -> None:
        bit = 1 << v
        self.grid[i] = v
        self.rows[_ROW[i]] |= bit
        self.cols[_COL[i]] |= bit
        self.boxes[_BOX[i]] |= bit

    def _unset(self, i: int, v: int) -> None:
        bit = 1 << v
        self.grid[i] = 0
        self.rows[_ROW[i]] ^= bit
        self.cols[_COL[i]] ^= bit
        self.boxes[_BOX[i]] ^= bit

    def candidates(self, i: int) -> int:
        return _ALL & ~(self.rows[_ROW[i]] | self.cols[_COL[i]] | self.boxes[_BOX[i]])

    def count(self, limit: int, gen: np.random.Generator | None = None) -> int:
        """Number of completions, up to ``limit`` (depth-first, most constrained cell first). With
        ``gen`` the digits are tried in random order; the grid is left at the first completion."""
        if not self.empties:
            return 1
        best, best_n, best_m = -1, 10, 0
        for i in self.empties:
            m = self.candidates(i)
            n = _POP[m]
            if n < best_n:
                best, best_n, best_m = i, n, m
                if n <= 1:
                    break
        if best_n == 0:
            return 0
        self.empties.remove(best)
        digits = [d for d in range(1, 10) if best_m >> d & 1]
        if gen is not None and len(digits) > 1:
            digits = [digits[j] for j in gen.permutation(len(digits))]
        total = 0
        for d in digits:
            self._set(best, d)
            total += self.count(limit - total, gen)
            if total >= limit:
                if gen is not None:
                    return total  # keep the completed grid
                self._unset(best, d)
                break
            self._unset(best, d)
        self.empties.append(best)
        return total


def count_solutions(puzzle, limit: int = 2) -> int:
    """Number of solutions of an 81-cell puzzle (0 = blank), counted up to ``limit``."""
    p = [int(v) for v in np.asarray(puzzle).reshape(-1)]
    if len(p) != 81 or any(v < 0 or v > 9 for v in p):
        raise UserError("sudoku: a puzzle is 81 cells of 0..9")
    try:
        return _Board(p).count(limit)
    except ValueError:
        return 0


def solve(puzzle) -> np.ndarray | None:
    """One solution (81 digits) of a puzzle, or None."""
    b = _Board([int(v) for v in np.asarray(puzzle).reshape(-1)])
    if b.count(1, gen=np.random.default_rng(0)) == 0:
        return None
    return np.array(b.grid, dtype=np.int64)


def random_grid(gen: np.random.Generator) -> list[int]:
    """A random complete Sudoku grid."""
    b = _Board([0] * 81)
    b.count(1, gen=gen)
    return b.grid


def dig(solution: list[int], target_givens: int, gen: np.random.Generator) -> list[int]:
    """Empty cells of a complete grid in random order while the solution stays unique, down to
    ``target_givens`` givens (or as far as random digging gets)."""
    puzzle = list(solution)
    givens = 81
    for i in gen.permutation(81).tolist():
        if givens <= target_givens:
            break
        v = puzzle[i]
        puzzle[i] = 0
        b = _Board(puzzle)
        b.empties.remove(i)
        other = False
        for d in range(1, 10):  # is there a solution with cell i != v?
            if d != v and b.candidates(i) >> d & 1:
                b._set(i, d)
                if b.count(1) > 0:
                    other = True
                    break
                b._unset(i, d)
        if other:
            puzzle[i] = v
        else:
            givens -= 1
    return puzzle


def generate_puzzle(
    gen: np.random.Generator, min_givens: int, max_givens: int, attempts: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """(puzzle, solution), 81 int64 each: a unique-solution puzzle with a number of givens drawn
    uniformly from [min_givens, max_givens] (or the fewest reached in ``attempts`` diggings)."""
    target = int(gen.integers(min_givens, max_givens + 1))
    best = None
    for _ in range(attempts):
        sol = random_grid(gen)
        puz = dig(sol, target, gen)
        if best is None or sum(v > 0 for v in puz) < sum(v > 0 for v in best[0]):
            best = (puz, sol)
        if sum(v > 0 for v in puz) <= target:
            break
    assert best is not None
    return np.array(best[0], dtype=np.int64), np.array(best[1], dtype=np.int64)


# ---------------------------------------------------------------------- CSV
_PUZZLE = re.compile(r"^[0-9.]{81}$")
_SOLUTION = re.compile(r"^[1-9]{81}$")


def valid_solutions(solutions: np.ndarray) -> np.ndarray:
    """(n,) bool: each row of (n, 81) digits is a complete valid grid."""
    g = solutions.reshape(-1, 9, 9)
    boxes = g.reshape(-1, 3, 3, 3, 3).transpose(0, 1, 3, 2, 4).reshape(-1, 9, 9)
    want = np.arange(1, 10)
    return np.stack([(np.sort(a, axis=2) == want).all(axis=(1, 2)) for a in (g, g.transpose(0, 2, 1), boxes)]).all(
        axis=0
    )


def load_sudoku_csv(path: str | os.PathLike, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Read (puzzles, solutions), (n, 81) int64 each (0 = blank), from a CSV of ``puzzle,solution`` strings (header and
    extra columns skipped); every row checked, errors one line naming the file and row."""
    path = input_file(path, missing="file not found")
    puzzles, solutions = [], []
    with open(path, newline="", encoding="utf-8") as f:
        for lineno, row in enumerate(csv.reader(f), start=1):
            fields = [c.strip() for c in row]
            p = next((j for j, c in enumerate(fields) if _PUZZLE.match(c)), None)
            s = (
                next((j for j, c in enumerate(fields) if j != p and _SOLUTION.match(c)), None)
                if p is not None
                else None
            )
            if p is None or s is None:
                if lineno == 1 or not any(fields):
                    continue  # header or blank line
                raise UserError(
                    f"{path}:{lineno}: expected an 81-character puzzle ('.' or '0' blanks) and an 81-digit solution"
                )
            puzzles.append(fields[p].replace(".", "0"))
            solutions.append(fields[s])
            if limit is not None and len(puzzles) >= limit:
                break
    if not puzzles:
        raise UserError(f"{path}: no puzzle,solution rows found")
    P = np.frombuffer("".join(puzzles).encode(), dtype=np.uint8).reshape(-1, 81).astype(np.int64) - 48
    S = np.frombuffer("".join(solutions).encode(), dtype=np.uint8).reshape(-1, 81).astype(np.int64) - 48
    bad = ~valid_solutions(S) | ((P != 0) & (P != S)).any(axis=1)
    if bad.any():
        raise UserError(
            f"{path}: puzzle {int(np.flatnonzero(bad)[0]) + 1} has an invalid solution "
            "or one that contradicts its givens"
        )
    return P, S


# ---------------------------------------------------------------------- task
@dataclass
class SudokuConfig(TaskConfig):
    """Sudoku data."""

    INPUTS = ("train_csv", "val_csv")

    num_train: int = bounded(9000, ge=1)  # training puzzles; with ``train_csv``, at most this many rows.
    num_val: int = bounded(1000, ge=1)
    # min_givens, max_givens: the generator's range of given digits (17..81; random digging rarely goes below about 22).
    min_givens: int = bounded(24, ge=17)
    max_givens: int = bounded(34, ge=17, le=81)
    dig_attempts: int = bounded(3, ge=1)  # fresh grids tried per puzzle to reach a low target.
    train_csv: str | None = None  # optional CSV of puzzle,solution rows for training (replaces the generator).
    # optional CSV for validation; with only ``train_csv``, the ``num_val`` rows after the training rows.
    val_csv: str | None = None
    # draw the generated puzzles from this seed instead of the run's; null: the run's seed.
    data_seed: int | None = bounded(None, ge=0)
    # move every training board by a random symmetry (digits relabelled, rows and columns shuffled within bands and
    # stacks, bands and stacks shuffled, a transpose; `bdh.tasks.sudoku_augment`), drawn afresh for every batch, so that
    # a fixed set of boards (generated or read from ``train_csv``) never repeats.
    augment: bool = False
    # generate fresh training boards for every batch (``num_train`` only sizes an epoch); refused with ``train_csv``.
    endless: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        self._check_bool("augment")
        self._check_bool("endless")
        if self.endless and self.train_csv is not None:
            self._fail("endless", "generates the training boards; it cannot read train_csv (use augment instead)")
        if self.min_givens > self.max_givens:
            self._fail("min_givens", f"must not exceed max_givens = {self.max_givens}, got {self.min_givens}")
        for name in ("train_csv", "val_csv"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (str, os.PathLike)) or not str(value)):
                self._fail(name, f"must be a file path or null, got {value!r}")
        if self.val_csv is not None and self.train_csv is None:
            self._fail("val_csv", "needs train_csv too (the generator makes both splits)")


class Sudoku:
    """Sudoku as bidirectional per-cell labelling of the blank cells."""

    name = "sudoku"
    config_class = SudokuConfig
    causal = False
    vocab_size = 10
    seq_len = 81
    target_metric = ("board_accuracy", True)
    #: metrics that are means over scored cells (blanks), whose number differs from puzzle to puzzle:
    #: evaluation weights them by a batch's scored cells, the others (board_accuracy) by its puzzles
    per_token_metrics = frozenset({"cell_accuracy"})

    @classmethod
    def model_fields(cls, config: SudokuConfig) -> dict[str, Any]:
        """What the task decides of the model (`bdh.tasks.base.decided_fields`), without reading its CSV files."""
        return {"vocab_size": cls.vocab_size, "causal": cls.causal, "seq_len": cls.seq_len}

    def __init__(self, config: SudokuConfig | None = None):
        self.config = SudokuConfig() if config is None else config
        if not isinstance(self.config, SudokuConfig):
            raise TypeError(f"Sudoku: expected a SudokuConfig, got {type(self.config).__name__}")
        self._memo: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._csv: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
        if self.config.train_csv is not None:
            self._load_csv()

    def _load_csv(self) -> None:
        cfg = self.config
        if cfg.val_csv is not None:
            train = load_sudoku_csv(cfg.train_csv, cfg.num_train)  # type: ignore[arg-type]
            val = load_sudoku_csv(cfg.val_csv, cfg.num_val)
        else:
            P, S = load_sudoku_csv(cfg.train_csv, cfg.num_train + cfg.num_val)  # type: ignore[arg-type]
            if len(P) <= cfg.num_val:
                raise UserError(
                    f"{cfg.train_csv}: {len(P)} rows cannot give num_val = {cfg.num_val} validation puzzles "
                    "and training puzzles too"
                )
            n = len(P) - cfg.num_val
            train, val = (P[:n], S[:n]), (P[n:], S[n:])
        self._csv = {"train": train, "val": val}

    def size(self, split: str) -> int:
        if self._csv is not None:
            return len(self._csv[split][0])
        return self.config.num_train if split == "train" else self.config.num_val

    def puzzle(self, split: str, i: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(puzzle, solution) number ``i`` of ``split``, 81 digits each (0 = blank)."""
        sid = check_batch_args(split, 0, 1)
        if self._csv is not None:
            return self._csv[split][0][i], self._csv[split][1][i]
        seed = self.config.data_seed_for(seed)
        key = (seed, sid, i)
        if key not in self._memo:
            cfg = self.config
            self._memo[key] = generate_puzzle(rng(seed, sid, 11, i), cfg.min_givens, cfg.max_givens, cfg.dig_attempts)
        return self._memo[key]

    def batch(self, split: str, index: int, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Training: an endless stream, reshuffled every epoch; validation: the fixed set in order."""
        check_batch_args(split, index, batch_size)
        n = self.size(split)
        if split == "train" and self.config.endless:
            x, s = self._fresh(index, batch_size, check_seed(seed))
            return self._pairs(x, s, index, seed)
        if split == "train":
            ids = shuffled_indices(n, index * batch_size, batch_size, check_seed(seed), stream=12)
        else:
            if index >= self.num_batches("val", batch_size):
                raise UserError(
                    f"Sudoku: validation batch {index} out of range ({self.num_batches('val', batch_size)} batches)"
                )
            ids = np.arange(index * batch_size, min((index + 1) * batch_size, n))
        pairs = [self.puzzle(split, int(i), seed) for i in ids]
        x, s = np.stack([p for p, _ in pairs]), np.stack([s for _, s in pairs])
        return self._pairs(x, s, index, seed) if split == "train" else _scored(x, s)

    def _fresh(self, index: int, batch_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``endless``: the batch's boards generated for it (from the data seed, the batch and the row), not kept."""
        cfg, seed = self.config, self.config.data_seed_for(seed)
        pairs = [
            generate_puzzle(rng(seed, 0, 14, index, j), cfg.min_givens, cfg.max_givens, cfg.dig_attempts)
            for j in range(batch_size)
        ]
        return np.stack([p for p, _ in pairs]), np.stack([s for _, s in pairs])

    def _pairs(self, x: np.ndarray, s: np.ndarray, index: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A training batch: with ``augment``, each board moved by a symmetry drawn for this batch (run seed, index)."""
        if self.config.augment:
            x, s = augment(x, s, rng(check_seed(seed), 0, 13, index))
        return _scored(x, s)

    def num_batches(self, split: str, batch_size: int) -> int | None:
        check_batch_args(split, 0, batch_size)
        n = self.size(split)
        return max(n // batch_size, 1) if split == "train" else -(-n // batch_size)

    def metrics(self, logits: torch.Tensor, targets: torch.Tensor, inputs: torch.Tensor) -> dict[str, float]:
        """cell_accuracy over blank cells (pooled over the batch's blanks; a per-token metric, see
        ``per_token_metrics``) and board_accuracy (every blank cell right; a mean over puzzles)."""
        return sudoku_metrics(logits.argmax(dim=-1), targets)


def _scored(puzzles: np.ndarray, solutions: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets): the puzzles, and the solution's digits at their blanks (IGNORE_INDEX at the givens)."""
    return torch.from_numpy(puzzles), torch.from_numpy(np.where(puzzles == 0, solutions, IGNORE_INDEX))


def sudoku_metrics(pred: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    mask = targets != IGNORE_INDEX
    right = (pred == targets) & mask
    return {
        "cell_accuracy": float(right.sum() / mask.sum().clamp(min=1)),
        "board_accuracy": float((right | ~mask).all(dim=1).float().mean()),
    }
