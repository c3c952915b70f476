import numpy as np
import pytest
import torch

from bdh.baselines import HyperSET, HyperSETConfig
from bdh.registry import get_task
from bdh.tasks.base import IGNORE_INDEX, Task
from bdh.tasks.common import rng
from bdh.tasks.depth import depth_sweep
from bdh.tasks.sudoku import (
    Sudoku,
    SudokuConfig,
    count_solutions,
    generate_puzzle,
    load_sudoku_csv,
    solve,
    sudoku_metrics,
    valid_solutions,
)

# a well-known puzzle with a unique solution
PUZZLE = "53..7....6..195....98....6.8...6...34..8.3..17...2...6.6....28....419..5....8..79"
SOLUTION = "534678912672195348198342567859761423426853791713924856961537284287419635345286179"


def digits(s: str) -> np.ndarray:
    return np.array([0 if c == "." else int(c) for c in s])


def test_solver_counts_and_solves():
    p = digits(PUZZLE)
    assert count_solutions(p) == 1
    assert (solve(p) == digits(SOLUTION)).all()
    q = p.copy()
    q[np.flatnonzero(q)[:12]] = 0  # fewer givens: several solutions
    assert count_solutions(q) == 2  # counted up to the limit of 2
    bad = p.copy()
    bad[2] = 5  # 5 twice in row 0
    assert count_solutions(bad) == 0 and solve(digits("." * 81)) is not None


@pytest.mark.parametrize("givens", [34, 28, 24])
def test_generated_puzzles_are_unique_with_the_asked_givens(givens):
    for i in range(3):
        p, s = generate_puzzle(rng(0, givens, i), givens, givens, attempts=10)
        assert (p > 0).sum() == givens
        assert valid_solutions(s[None]).all()
        assert ((p == 0) | (p == s)).all()
        assert count_solutions(p, limit=2) == 1


def test_low_targets_keep_the_fewest_givens_reached():
    p, s = generate_puzzle(rng(3), 17, 17)
    assert 17 <= (p > 0).sum() <= 30 and count_solutions(p) == 1


def test_batches_mask_the_givens_and_are_pure():
    task = Sudoku(SudokuConfig(num_train=8, num_val=4, min_givens=30, max_givens=34))
    x, y = task.batch("train", 1, 4, seed=3)
    assert x.shape == y.shape == (4, 81) and x.dtype == y.dtype == torch.int64
    assert ((y == IGNORE_INDEX) == (x > 0)).all()
    assert ((y[x == 0] >= 1) & (y[x == 0] <= 9)).all()
    assert ((x > 0).sum(1) >= 30).all() and ((x > 0).sum(1) <= 34).all()
    again = Sudoku(task.config).batch("train", 1, 4, seed=3)
    assert torch.equal(x, again[0]) and torch.equal(y, again[1])
    val = task.batch("val", 0, 4, seed=3)[0]
    train = torch.cat([task.batch("train", i, 4, 3)[0] for i in range(2)])
    assert not (val[:, None] == train[None]).all(-1).any()
    assert task.num_batches("val", 3) == 2 and task.num_batches("train", 4) == 2
    assert isinstance(task, Task) and get_task("sudoku") is Sudoku


def test_metrics_cells_and_boards():
    x = torch.tensor([[1, 0, 0], [0, 2, 0]])
    y = torch.where(x == 0, torch.tensor([[9, 4, 5], [6, 9, 7]]), IGNORE_INDEX)
    pred = torch.tensor([[1, 4, 5], [6, 2, 1]])
    m = sudoku_metrics(pred, y)
    assert m == {"cell_accuracy": pytest.approx(3 / 4), "board_accuracy": 0.5}
    task = Sudoku(SudokuConfig(num_train=2, num_val=2))
    assert task.metrics(torch.nn.functional.one_hot(pred, 10).float(), y, x) == m


def test_csv_loader_formats(tmp_path):
    rrn = tmp_path / "rrn.csv"
    rrn.write_text(f"{PUZZLE.replace('.', '0')},{SOLUTION}\n" * 3)
    hrm = tmp_path / "extreme.csv"
    hrm.write_text(f"source,q,a,rating\nx,{PUZZLE},{SOLUTION},12\ny,{PUZZLE},{SOLUTION},3\n")
    for path, n in ((rrn, 3), (hrm, 2)):
        P, S = load_sudoku_csv(path)
        assert P.shape == S.shape == (n, 81)
        assert (P[0] == digits(PUZZLE)).all() and (S[0] == digits(SOLUTION)).all()
    assert len(load_sudoku_csv(rrn, limit=2)[0]) == 2
    bad = tmp_path / "bad.csv"
    bad.write_text(f"{PUZZLE},{SOLUTION[:-2]}97\n")
    with pytest.raises(ValueError, match="puzzle 1 has an invalid solution"):
        load_sudoku_csv(bad)
    junk = tmp_path / "junk.csv"
    junk.write_text(f"{PUZZLE},{SOLUTION}\nhello,world\n")
    with pytest.raises(ValueError, match=r"junk.csv:2: expected"):
        load_sudoku_csv(junk)
    task = Sudoku(SudokuConfig(train_csv=str(rrn), num_train=2, num_val=1))
    assert task.size("train") == 2 and task.size("val") == 1
    x, y = task.batch("val", 0, 8, 0)
    assert (x[0] == torch.from_numpy(digits(PUZZLE))).all() and (
        y[0][x[0] == 0] == torch.from_numpy(digits(SOLUTION))[x[0] == 0]
    ).all()


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(min_givens=16), "min_givens"),
        (dict(min_givens=30, max_givens=25), "min_givens"),
        (dict(max_givens=82), "max_givens"),
        (dict(val_csv="a.csv"), "val_csv"),
        (dict(num_val=0), "num_val"),
        (dict(data_seed=-2), "data_seed"),
    ],
)
def test_bad_config_is_one_line(kw, msg):
    with pytest.raises(ValueError, match=f"SudokuConfig.{msg}") as err:
        SudokuConfig(**kw)
    assert "\n" not in str(err.value)


def test_depth_sweep_evaluates_each_pass_count():
    task = Sudoku(SudokuConfig(num_train=4, num_val=6, min_givens=34, max_givens=34))
    torch.manual_seed(0)
    model = HyperSET(HyperSETConfig(n_embd=16, n_head=2, n_recur=2, time_freq=8)).eval()
    torch.nn.init.normal_(model.steps.out.weight, std=0.5)
    calls = []

    def fn(idx, k):
        calls.append(k)
        return model(idx, n_layer=k)

    out = depth_sweep(fn, task, [1, 2, 4], batch_size=4)
    assert sorted(out) == [1, 2, 4] and calls == [1, 1, 2, 2, 4, 4]
    assert set(out[1]) == {"cell_accuracy", "board_accuracy"}

    def oracle(idx, k):  # right on every blank cell when k >= 2
        sol = torch.stack([torch.from_numpy(task.puzzle("val", i, 0)[1]) for i in range(6)])
        sol = sol[: len(idx)] if len(idx) == 6 else sol[4:] if len(idx) == 2 else sol[:4]
        return torch.nn.functional.one_hot(sol if k >= 2 else torch.zeros_like(sol), 10).float()

    res = depth_sweep(oracle, task, [1, 2], batch_size=4)
    assert res[1]["board_accuracy"] == 0.0 and res[2] == {"cell_accuracy": 1.0, "board_accuracy": 1.0}
    with pytest.raises(ValueError, match="positive integers"):
        depth_sweep(fn, task, [0])


def test_depth_sweep_takes_weight_shared_modules():
    from bdh import BDH, BDHConfig

    task = Sudoku(SudokuConfig(num_train=2, num_val=3, min_givens=34, max_givens=34))
    torch.manual_seed(0)
    bdh = BDH(BDHConfig(n_layer=2, n_embd=16, n_head=2, n_neurons=64, vocab_size=10, causal=False, dropout=0.0))
    hs = HyperSET(HyperSETConfig(n_embd=16, n_head=2, n_recur=2, time_freq=8))
    for model in (bdh, hs):
        out = depth_sweep(model, task, [1, 3], batch_size=2)
        assert sorted(out) == [1, 3] and 0.0 <= out[3]["cell_accuracy"] <= 1.0
    x = task.batch("val", 0, 3, 0)[0]
    assert not torch.allclose(bdh(x, n_layer=1), bdh(x, n_layer=3))


def test_data_seed_fixes_the_puzzles():
    task = Sudoku(SudokuConfig(num_train=3, num_val=2, min_givens=34, max_givens=34, data_seed=4))
    assert torch.equal(task.batch("val", 0, 2, 0)[0], task.batch("val", 0, 2, 1)[0])
