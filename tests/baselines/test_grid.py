"""The Sudoku board's structure for the attention baselines (`bdh.baselines.grid`): row, column and box positions,
and the peer mask of GPT and Hyper-SET against plain loops over the cells."""

from __future__ import annotations

import math

import pytest
import torch

from bdh.baselines.gpt import GPT, GPTConfig
from bdh.baselines.grid import SudokuPositions, peer_mask, units
from bdh.baselines.hyperset import HyperSET, HyperSETConfig
from bdh.errors import UserError

BOXES = """
000111222
000111222
000111222
333444555
333444555
333444555
666777888
666777888
666777888
"""


def test_sudoku_positions_are_the_cells_row_column_and_box():
    r, c, b = units(81)
    assert r.tolist() == [i // 9 for i in range(81)] and c.tolist() == [i % 9 for i in range(81)]
    assert b.tolist() == [int(ch) for ch in "".join(BOXES.split())]  # read off the board
    torch.manual_seed(0)
    pos = SudokuPositions(8, std=1.0)
    e = pos(81)
    for i, j in ((0, 8), (0, 72), (0, 20), (0, 10), (40, 80)):
        before = e[i] - e[j]
        with torch.no_grad():  # moving one row's, column's or box's vector changes e_i - e_j unless both share it
            for t, unit in enumerate((r, c, b)):
                pos.table[t, unit[i]] += 1.0
                after = pos(81)
                assert torch.allclose(after[i] - after[j], before) == bool(unit[i] == unit[j])
                pos.table[t, unit[i]] -= 1.0
    with pytest.raises(UserError, match="81 cells"):
        pos(82)
    for cfg in (
        GPTConfig(vocab_size=10, seq_len=81, n_embd=16, n_head=2, positional="sudoku", causal=False),
        HyperSETConfig(n_embd=16, n_head=2, time_freq=8, positional="sudoku"),
    ):
        model = GPT(cfg) if isinstance(cfg, GPTConfig) else HyperSET(cfg)
        assert model.num_params() == cfg.num_params()


def peers_of(i: int) -> list[int]:
    """The cells sharing a row, column or box with cell i (itself included), by the board's picture."""
    boxes = "".join(BOXES.split())
    return [j for j in range(81) if j // 9 == i // 9 or j % 9 == i % 9 or boxes[j] == boxes[i]]


def test_the_peer_mask_is_each_cells_row_column_and_box():
    m = peer_mask(81)
    for i in range(81):
        assert torch.nonzero(m[i]).flatten().tolist() == peers_of(i)
    assert int(m.sum(1).min()) == int(m.sum(1).max()) == 21 and torch.equal(m, m.T)
    with pytest.raises(UserError, match="81 cells"):
        peer_mask(90)


def test_gpt_attends_to_the_peers_only():
    """One pass of attend=sudoku against a loop: each cell's softmax over its peers' keys."""
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=10, seq_len=81, n_layer=1, n_embd=16, n_head=2, causal=False, attend="sudoku")
    block = GPT(cfg).eval().blocks[0]
    h = torch.randn(2, 81, 16)
    q, k, v = block.heads(h, None)
    a = torch.zeros_like(q)
    for i in range(81):
        p = peers_of(i)
        w = (q[:, :, i : i + 1] @ k[:, :, p].transpose(-1, -2) / math.sqrt(8)).softmax(-1)
        a[:, :, i] = (w @ v[:, :, p])[:, :, 0]
    torch.testing.assert_close(block(h, None), block.finish(h, a), atol=1e-5, rtol=0)  # fp32, 21-term sums


def test_hyperset_masks_both_softmaxes_to_the_peers():
    torch.manual_seed(0)
    layer = HyperSET(HyperSETConfig(n_embd=16, n_head=2, time_freq=8, attend="sudoku")).layer
    x = torch.randn(2, 81, 16)
    z = layer.norm_h((x @ layer.W).view(2, 81, 2, 8).transpose(1, 2))
    s = z @ z.transpose(-1, -2) / math.sqrt(8)
    a = torch.zeros_like(s)
    for i in range(81):
        p = peers_of(i)
        a[:, :, i, p] += s[:, :, i, p].softmax(-1)  # row i over its peers
        a[:, :, p, i] += s[:, :, p, i].softmax(-1)  # column i over its peers
    want = (a @ z).transpose(1, 2).reshape(2, 81, 16) @ layer.W.t()
    torch.testing.assert_close(layer.attention(x), want, atol=1e-5, rtol=0)  # fp32, 21-term sums


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: GPTConfig(positional="sudoku", seq_len=80), "GPTConfig.positional: .*seq_len must be 81, got 80"),
        (lambda: GPTConfig(attend="sudoku", seq_len=81), "GPTConfig.attend: .*needs causal=false"),
        (lambda: GPTConfig(attend="sudoku", seq_len=64, causal=False), "GPTConfig.attend: .*must be 81"),
        (lambda: GPTConfig(attend="rows"), "GPTConfig.attend: must be one of all, sudoku"),
        (lambda: HyperSETConfig(positional="sudoku", seq_len=64), "HyperSETConfig.positional: .*must be 81"),
        (lambda: HyperSETConfig(attend="sudoku", seq_len=16), "HyperSETConfig.attend: .*must be 81"),
    ],
)
def test_board_options_off_a_board_are_one_line_errors(build, match):
    with pytest.raises(UserError, match=match) as info:
        build()
    assert "\n" not in str(info.value)
