"""Sudoku's training augmentations and endless boards (`bdh.tasks.sudoku_augment`, ``augment``/``endless`` of
`bdh.tasks.sudoku.SudokuConfig`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bdh.errors import UserError
from bdh.tasks.base import IGNORE_INDEX
from bdh.tasks.sudoku import Sudoku, SudokuConfig, count_solutions, valid_solutions
from bdh.tasks.sudoku_augment import augment, board_permutation


def boards(n: int = 6) -> tuple[np.ndarray, np.ndarray]:
    task = Sudoku(SudokuConfig(num_train=n, num_val=2, min_givens=30, max_givens=40, data_seed=0))
    pairs = [task.puzzle("train", i, 0) for i in range(n)]
    return np.stack([p for p, _ in pairs]), np.stack([s for _, s in pairs])


def test_augmented_boards_are_valid_puzzles_of_the_same_difficulty():
    P, S = boards()
    gen = np.random.default_rng(0)
    for _ in range(3):
        p, s = augment(P, S, gen)
        assert valid_solutions(s).all()
        assert ((p == 0) | (p == s)).all()  # the givens are the solution's digits
        assert ((p > 0).sum(1) == (P > 0).sum(1)).all()  # as many givens
        assert all(count_solutions(b) == 1 for b in p[:3])  # still a unique solution
        assert not (p == P).all()


def test_the_symmetries_are_the_board_groups_moves():
    gen = np.random.default_rng(1)
    transposed = 0
    for _ in range(40):
        cells = board_permutation(gen).reshape(9, 9)
        assert sorted(cells.reshape(-1).tolist()) == list(range(81))
        rows, cols = cells // 9, cells % 9
        if (rows == rows[:, :1]).all():  # not transposed: every target row reads one source row
            src_rows, src_cols = rows[:, 0], cols[0]
        else:
            transposed += 1
            assert (cols == cols[:, :1]).all()
            src_rows, src_cols = cols[:, 0], rows[0]
        for src in (src_rows, src_cols):  # bands (stacks) move whole: three consecutive targets share a source band
            assert all(len(set(src[3 * b : 3 * b + 3] // 3)) == 1 for b in range(3))
    assert 5 < transposed < 35


def test_augment_and_endless_batches_are_pure_and_valid():
    base = dict(num_train=8, num_val=4, min_givens=50, max_givens=60, data_seed=0)
    plain, aug = Sudoku(SudokuConfig(**base)), Sudoku(SudokuConfig(**base, augment=True))
    x0, _ = plain.batch("train", 0, 4, 7)
    x1, y1 = aug.batch("train", 0, 4, 7)
    assert not torch.equal(x0, x1)
    assert torch.equal(x1, Sudoku(SudokuConfig(**base, augment=True)).batch("train", 0, 4, 7)[0])  # pure
    assert ((x1 == 0) == (y1 != IGNORE_INDEX)).all()
    assert torch.equal(plain.batch("val", 0, 4, 7)[0], aug.batch("val", 0, 4, 7)[0])  # validation untouched
    endless = Sudoku(SudokuConfig(**base, endless=True))
    a, b = endless.batch("train", 0, 3, 7)[0], endless.batch("train", 1, 3, 7)[0]
    assert not torch.equal(a, b) and torch.equal(a, endless.batch("train", 0, 3, 7)[0])
    assert (((a > 0).sum(1) >= 50) & ((a > 0).sum(1) <= 60)).all()


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"endless": True, "train_csv": "x.csv"}, "SudokuConfig.endless: .*cannot read train_csv"),
        ({"augment": "yes"}, "SudokuConfig.augment: must be true or false"),
    ],
)
def test_bad_augmentation_options_are_one_line_errors(fields, match):
    with pytest.raises(UserError, match=match):
        SudokuConfig(**fields)
