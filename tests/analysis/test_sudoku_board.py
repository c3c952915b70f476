"""Looking at a Sudoku board pass by pass (`bdh.analysis.sudoku_board`, ``bdh inspect RUN --sudoku``): the boards and
settle passes against a plain loop, the digit neurons against plain means, BDH's y against its capture."""

import numpy as np
import pytest
import torch

from bdh.analysis import sudoku_board as sb
from bdh.cli import main
from bdh.errors import UserError
from bdh.model import BDH, BDHConfig
from bdh.tasks.sudoku import generate_puzzle


def _board(seed=0):
    return generate_puzzle(np.random.default_rng(seed), 45, 50)


class Scripted(torch.nn.Module):
    """A weight-shared stand-in whose answer after pass k is ``script[k - 1]`` (81 digits) at every board."""

    weight_shared = True

    def __init__(self, script):
        super().__init__()
        self.script = torch.as_tensor(np.asarray(script))
        self.w = torch.nn.Parameter(torch.zeros(1))

    def pass_logits(self, idx, n_layer):
        for k in range(n_layer):
            yield torch.nn.functional.one_hot(self.script[min(k, len(self.script) - 1)], 10).float()[None]


def test_boards_and_settle_passes_match_a_plain_loop():
    puzzle, solution = _board()
    gen = np.random.default_rng(1)
    script = [np.where(gen.random(81) < 0.5, solution, gen.integers(1, 10, 81)) for _ in range(5)] + [solution]
    bp = sb.board_passes(Scripted(script), puzzle, 8, solution)
    assert bp.boards.shape == (8, 81) and (bp.boards[:, puzzle > 0] == puzzle[puzzle > 0]).all()  # givens kept
    assert bp.right().tolist() == [False] * 5 + [True] * 3
    for i in range(81):  # the settle pass: the first k with the answer at every pass from k on equal to the last
        if puzzle[i]:
            assert bp.settle[i] == 0
            continue
        k = 8
        while k > 1 and bp.boards[k - 2, i] == bp.boards[7, i]:
            k -= 1
        assert bp.settle[i] == k, i
    text = sb.passes_text(bp)
    assert text.count("after pass") == 8 and "solved" in text.split("after pass 6")[1].split("\n")[0]
    first = sb.grid_text(bp.boards[0], puzzle, solution)
    wrong = int(((bp.boards[0] != solution) & (puzzle == 0)).sum())
    assert first.count("!") == wrong and first.count("(") == int((puzzle > 0).sum())


def test_digit_neurons_match_plain_means():
    _, s1 = _board(0)
    _, s2 = _board(1)
    solutions = np.stack([s1, s2])
    gen = torch.Generator().manual_seed(0)
    y = torch.rand(2, 81, 12, generator=gen) * (torch.rand(2, 81, 12, generator=gen) < 0.3)
    inside = (solutions == 5) & ((np.arange(81) // 9) == 2)[None]
    y[..., 7] = torch.from_numpy(inside).float()  # neuron 7 fires only where 5 stands in row 2
    rows = sb.digit_neurons(y, solutions, 5, "row", 2, per_head=4, top=3)
    assert (rows[0]["head"], rows[0]["neuron"]) == (1, 3) and rows[0]["selectivity"] == pytest.approx(1.0)
    for r in rows:
        i = 4 * r["head"] + r["neuron"]
        m_in = np.mean([float(y[b, t, i]) for b in range(2) for t in range(81) if inside[b, t]])
        m_out = np.mean([float(y[b, t, i]) for b in range(2) for t in range(81) if not inside[b, t]])
        # float32 means of at most 162 values in [0, 1]: 1e-5 is far above their rounding
        assert (r["inside"], r["outside"]) == (pytest.approx(m_in, abs=1e-5), pytest.approx(m_out, abs=1e-5))
    with pytest.raises(UserError, match="row, col or box 0..8"):
        sb.digit_neurons(y, solutions, 5, "band", 2, per_head=4)


def _tiny_bdh():
    torch.manual_seed(0)
    config = BDHConfig(vocab_size=10, n_layer=2, n_embd=16, n_head=2, n_neurons=64, causal=False)
    return BDH(config)


def test_bdh_y_is_its_capture_averaged_over_passes():
    model = _tiny_bdh().eval()
    puzzles = torch.from_numpy(np.stack([_board(0)[0], _board(1)[0]]))
    with torch.no_grad():
        _, cap = model(puzzles, capture=True)
    want = torch.stack([y.permute(0, 2, 1, 3).flatten(2) for y in cap.y]).mean(0)
    # the same pass, read through a hook and through the capture: equal up to float32 rounding of the mean
    torch.testing.assert_close(sb.mean_y(model, puzzles), want, rtol=1e-5, atol=1e-6)


def test_inspect_sudoku_end_to_end(tmp_path, capsys):
    _tiny_bdh().save_pretrained(tmp_path / "model")
    out = tmp_path / "view"
    argv = ["inspect", str(tmp_path / "model"), "--sudoku", "--boards", "8", "--digit", "3", "--unit", "col:4"]
    assert main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("after pass") == 4 and "digit 3 in col 4" in printed  # twice the trained 2 passes
    assert (out / "passes.txt").is_file()
    lines = (out / "neurons.csv").read_text().splitlines()
    assert lines[0].startswith("digit,unit,index,rank,head,neuron") and len(lines) == 1 + 9 * 27 * 5
    assert main(["inspect", str(tmp_path / "model"), "--digit", "3"]) == 2
    assert "go with --sudoku" in capsys.readouterr().err
    assert main([*argv[:2], "--sudoku", "--unit", "row:9", "--out", str(tmp_path / "x")]) == 2
    assert "--unit: expected row:I" in capsys.readouterr().err
