"""The Sudoku board's structure for the attention baselines (docs/bench.md "Sudoku"): a learned row + column + box
embedding per cell, and the peer mask (each cell attends to the 21 cells of its row, column and box)."""

from __future__ import annotations

import torch
from torch import nn

from bdh.errors import UserError

#: the board the embedding knows: 9 x 9 cells, read row by row
CELLS = 81


def units(T: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Row, column and box index (T,) of cells 0..T-1 of a 9 x 9 board read row by row."""
    i = torch.arange(T, device=device)
    return i // 9, i % 9, (i // 27) * 3 + (i % 9) // 3


class SudokuPositions(nn.Module):
    """``forward(T) -> (T, d)``: row[r(i)] + column[c(i)] + box[b(i)] for cells i < T (27 d parameters)."""

    def __init__(self, d: int, std: float = 0.02):
        super().__init__()
        self.table = nn.Parameter(torch.randn(3, 9, d) * std)  # rows, columns, boxes

    def forward(self, T: int) -> torch.Tensor:
        if T > CELLS:
            raise UserError(f"sudoku positions: a board has {CELLS} cells, got a sequence of {T} tokens")
        r, c, b = units(T, self.table.device)
        return self.table[0, r] + self.table[1, c] + self.table[2, b]


def peer_mask(T: int, device: torch.device | None = None) -> torch.Tensor:
    """(T, T) bool, True where cells i and j (i, j < T <= 81) share a row, column or box (the diagonal included)."""
    if T > CELLS:
        raise UserError(f"sudoku attention: a board has {CELLS} cells, got a sequence of {T} tokens")
    r, c, b = units(T, device)
    return (r[:, None] == r) | (c[:, None] == c) | (b[:, None] == b)


def check_board_length(option: str, seq_len: int) -> str | None:
    """The complaint of a config whose ``sudoku`` option meets a ``seq_len`` other than 81, or None."""
    if option == "sudoku" and seq_len != CELLS:
        return f"sudoku is for the {CELLS} cells of a board, so seq_len must be {CELLS}, got {seq_len}"
    return None
