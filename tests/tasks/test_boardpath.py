from collections import deque

import numpy as np
import pytest
import torch

from bdh.registry import get_task
from bdh.tasks.base import Task
from bdh.tasks.boardpath import END, FLOOR, PATH, START, WALL, BoardPath, BoardPathConfig, boardpath_metrics, path_valid


def bfs_length(board: np.ndarray) -> int | None:
    """Reference: shortest START -> END step count by a plain BFS."""
    S = board.shape[0]
    start = tuple(np.argwhere(board == START)[0])
    seen, q = {start: 0}, deque([start])
    while q:
        r, c = q.popleft()
        if board[r, c] == END:
            return seen[(r, c)]
        for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            nr, nc = r + dr, c + dc
            if 0 <= nr < S and 0 <= nc < S and board[nr, nc] != WALL and (nr, nc) not in seen:
                seen[(nr, nc)] = seen[(r, c)] + 1
                q.append((nr, nc))
    return None


@pytest.fixture(scope="module")
def task():
    return BoardPath(BoardPathConfig(board_size=8, num_train=600, num_val=100))


def test_targets_are_shortest_paths(task):
    x, y = task.dataset(0)
    assert x.shape == (700, 64) and set(np.unique(x)) <= {FLOOR, WALL, START, END}
    for b, t in zip(x[:300], y[:300]):
        board, target = b.reshape(8, 8), t.reshape(8, 8)
        assert (board == START).sum() == 1 and (board == END).sum() == 1
        assert ((target == PATH) <= (board == FLOOR)).all()
        assert ((target != PATH) <= (target == board)).all()
        assert (target == PATH).sum() + 1 == bfs_length(board)
    one = torch.from_numpy(y[:300])
    assert path_valid(one, one, torch.from_numpy(x[:300]), 8).all()


def test_boards_are_unique_and_splits_disjoint(task):
    x, _ = task.dataset(0)
    assert len({r.tobytes() for r in x}) == len(x)
    val = {r.tobytes() for i in range(task.num_batches("val", 32)) for r in task.batch("val", i, 32, 0)[0].numpy()}
    epoch = [
        r.tobytes() for i in range(task.num_batches("train", 60)) for r in task.batch("train", i, 60, 0)[0].numpy()
    ]
    assert len(val) == 100 and len(set(epoch)) == 600 == len(epoch)  # one epoch visits every training board once
    assert not val & set(epoch)


def test_batches_are_pure_and_reshuffled_per_epoch(task):
    a = task.batch("train", 3, 16, 5)
    b = BoardPath(task.config).batch("train", 3, 16, 5)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert a[0].shape == (16, 64) and a[0].dtype == torch.int64
    n = task.num_batches("train", 16)
    assert not torch.equal(task.batch("train", 0, 16, 5)[0], task.batch("train", n, 16, 5)[0])
    assert not torch.equal(task.batch("val", 0, 16, 5)[0], task.batch("val", 0, 16, 6)[0])
    with pytest.raises(ValueError, match="out of range"):
        task.batch("val", 7, 16, 5)


def board(rows: list[str]) -> torch.Tensor:
    code = {".": FLOOR, "#": WALL, "S": START, "E": END, "*": PATH}
    return torch.tensor([[code[c] for c in "".join(rows)]])


def test_path_validity_accepts_any_shortest_path():
    inp = board(["S..", "...", "..E"])
    target = board(["S**", "..*", "..E"])
    other = board(["S..", "*..", "**E"])  # a different shortest path: exact match fails, validity holds
    longer = board(["S**", "#.*", "**E"])
    broken = board(["S*.", "...", "*.E"])
    walls = board(["S#.", "...", "..E"])
    through_wall = board(["S*.", "...", "..E"])
    assert path_valid(other, target, inp, 3).item()
    m = boardpath_metrics(other, target, inp, 3)
    assert m["path_validity"] == 1.0 and m["board_accuracy"] == 0.0 and m["cell_accuracy"] == pytest.approx(3 / 9)
    assert not path_valid(longer, target, inp, 3).item()
    assert not path_valid(broken, target, inp, 3).item()
    assert not path_valid(through_wall, board(["S#.", "*..", "**E"]), walls, 3).item()
    adjacent = board(["SE.", "...", "..."])
    assert path_valid(adjacent, adjacent, adjacent, 3).item()
    assert not path_valid(board(["SE.", "*..", "..."]), adjacent, adjacent, 3).item()


def test_metrics_on_logits_and_registry(task):
    x, y = task.batch("val", 0, 8, 0)
    logits = torch.nn.functional.one_hot(y, 5).float()
    assert task.metrics(logits, y, x) == {"cell_accuracy": 1.0, "board_accuracy": 1.0, "path_validity": 1.0}
    assert get_task("boardpath") is BoardPath and isinstance(task, Task)
    assert task.causal is False and task.seq_len == 64


@pytest.mark.parametrize(
    "kw, msg", [(dict(board_size=1), "board_size"), (dict(wall_prob=1.0), "wall_prob"), (dict(num_val=0), "num_val")]
)
def test_bad_config_is_one_line(kw, msg):
    with pytest.raises(ValueError, match=f"BoardPathConfig.{msg}") as err:
        BoardPathConfig(**kw)
    assert "\n" not in str(err.value)


def test_too_many_boards_for_a_tiny_grid():
    with pytest.raises(ValueError, match="distinct solvable"):
        BoardPath(BoardPathConfig(board_size=2, num_train=100, num_val=10)).dataset(0)


def test_data_seed_fixes_the_boards_across_run_seeds():
    cfg = BoardPathConfig(board_size=6, num_train=50, num_val=20, data_seed=11)
    task = BoardPath(cfg)
    assert torch.equal(task.batch("val", 0, 20, 1)[0], task.batch("val", 0, 20, 2)[0])
    a, b = task.batch("train", 0, 50, 1)[0], task.batch("train", 0, 50, 2)[0]
    assert not torch.equal(a, b)  # the order follows the run seed
    assert sorted(map(tuple, a.tolist())) == sorted(map(tuple, b.tolist()))  # the set does not
    with pytest.raises(ValueError, match="BoardPathConfig.data_seed"):
        BoardPathConfig(data_seed=-1)
