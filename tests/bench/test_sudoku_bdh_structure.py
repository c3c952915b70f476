"""The Sudoku suite's ``structure`` reaches BDH's row (`bdh.bench.sudoku.SudokuSweep.model_section`): ``positions``
gives it the row, column and box embedding, ``peers`` also the peer mask of its linear attention, ``none`` neither;
each section builds a model."""

from __future__ import annotations

import pytest

from bdh.bench.sudoku import SudokuSweep
from bdh.model.config import BDHConfig

WANT = {
    "none": {},
    "positions": {"input_positions": "sudoku"},
    "peers": {"input_positions": "sudoku", "attend": "sudoku"},
}


@pytest.mark.parametrize("structure", WANT)
def test_the_structure_reaches_bdh(structure):
    sweep = SudokuSweep(structure=structure)
    section = sweep.model_section("bdh", 32, **sweep.shapes()[0])
    got = {k: section[k] for k in ("input_positions", "attend") if k in section}
    assert got == WANT[structure]
    fields = {k: v for k, v in section.items() if k != "name"}
    cfg = BDHConfig(**fields, vocab_size=sweep.shapes()[0]["vocab_size"])
    assert cfg.board_options() == tuple(k for k in ("attend", "input_positions") if k in got)
