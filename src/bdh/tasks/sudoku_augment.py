"""The symmetries of Sudoku as training augmentations (HRM's and TRM's: digit permutation, band and stack swaps,
transpose): each maps a valid (puzzle, solution) pair to another with the same difficulty, so a fixed set of
boards serves as an endless stream of different ones."""

from __future__ import annotations

import numpy as np


def board_permutation(gen: np.random.Generator) -> np.ndarray:
    """A random symmetry of the board's cells, (81,) source index per target cell: rows shuffled within their band and
    bands shuffled, columns likewise within stacks, then a transpose with probability 1/2."""
    rows = np.concatenate([3 * b + gen.permutation(3) for b in gen.permutation(3)])
    cols = np.concatenate([3 * s + gen.permutation(3) for s in gen.permutation(3)])
    cells = rows[:, None] * 9 + cols[None, :]  # target (r, c) reads source (rows[r], cols[c])
    if gen.random() < 0.5:
        cells = cells.T
    return cells.reshape(-1)


def augment(puzzles: np.ndarray, solutions: np.ndarray, gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(puzzles, solutions) (n, 81), each pair moved by its own random symmetry and its digits relabelled by a
    random permutation of 1..9 (0, the blank, stays)."""
    p, s = np.empty_like(puzzles), np.empty_like(solutions)
    for i in range(len(puzzles)):
        cells = board_permutation(gen)
        digits = np.concatenate([[0], 1 + gen.permutation(9)])
        p[i], s[i] = digits[puzzles[i][cells]], digits[solutions[i][cells]]
    return p, s
