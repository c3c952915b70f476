"""Looking at a Sudoku model's board pass by pass: the board after every pass of a weight-shared model
(``pass_logits``, `bdh.model.recurrence`), the pass at which each cell settles, and, for BDH, the neurons that fire
for a digit in a row, column or box (the paper's monosemantic synapses, section 6, on a reasoning task)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bdh.errors import UserError

#: the three kinds of unit of a Sudoku, and the unit of each cell (0..8) in each
UNITS = ("row", "col", "box")
_UNIT_OF = {
    "row": np.arange(81) // 9,
    "col": np.arange(81) % 9,
    "box": (np.arange(81) // 27) * 3 + (np.arange(81) % 9) // 3,
}


@dataclass
class BoardPasses:
    """A board through the passes: ``puzzle`` (81,) 0 = blank, ``boards`` (K, 81) the answer after pass 1..K (givens
    kept), ``settle`` (81,) the first pass from which a blank's answer no longer changes up to K (0 at a given),
    ``solution`` (81,) or None."""

    puzzle: np.ndarray
    boards: np.ndarray
    settle: np.ndarray
    solution: np.ndarray | None = None

    def right(self) -> np.ndarray:
        """(K,) board solved after each pass (every blank equal to the solution); needs ``solution``."""
        assert self.solution is not None
        return (self.boards == self.solution).all(axis=1)


@torch.no_grad()
def board_passes(model: torch.nn.Module, puzzle, passes: int, solution=None) -> BoardPasses:
    """`BoardPasses` of ``puzzle`` (81 digits) through ``passes`` passes of ``model`` (weight-shared, with
    ``pass_logits``)."""
    if not hasattr(model, "pass_logits") or not getattr(model, "weight_shared", False):
        raise UserError(f"sudoku passes: {type(model).__name__} is not a weight-shared model with pass_logits")
    p = np.asarray(puzzle, dtype=np.int64).reshape(-1)
    if p.shape != (81,) or p.min() < 0 or p.max() > 9:
        raise UserError("sudoku passes: a puzzle is 81 cells of 0..9")
    model.eval()
    device = next(model.parameters()).device
    idx = torch.from_numpy(p).to(device)[None]
    preds = [logits[0].argmax(-1).cpu().numpy() for logits in model.pass_logits(idx, passes)]
    boards = np.where(p > 0, p, np.stack(preds))
    changed = np.vstack([np.ones((1, 81), bool), boards[1:] != boards[:-1]])  # pass k differs from pass k - 1
    last = len(boards) - 1 - np.argmax(changed[::-1], axis=0)  # index of the last change
    settle = np.where(p > 0, 0, last + 1)
    return BoardPasses(p, boards, settle, None if solution is None else np.asarray(solution).reshape(-1))


def grid_text(board: np.ndarray, puzzle: np.ndarray, solution: np.ndarray | None = None) -> str:
    """A 9 x 9 text grid: a given as ``(5)``, an answer as `` 5 `` (`` 5!`` where it is not the solution's)."""
    rows = []
    for r in range(9):
        cells = []
        for c in range(9):
            i, v = 9 * r + c, int(board[9 * r + c])
            wrong = solution is not None and puzzle[i] == 0 and v != int(solution[i])
            cells.append(f"({v})" if puzzle[i] else f" {v}{'!' if wrong else ' '}")
        rows.append(" | ".join("".join(cells[k : k + 3]) for k in (0, 3, 6)))
        if r in (2, 5):
            rows.append("-" * len(rows[-1]))
    return "\n".join(rows)


def settle_text(settle: np.ndarray) -> str:
    """The pass at which each blank settles, as a 9 x 9 grid (``.`` at a given)."""
    cells = [f"{int(s):>4}" if s else "   ." for s in settle]
    return "\n".join("".join(cells[9 * r : 9 * r + 9]) for r in range(9))


def passes_text(bp: BoardPasses, shown: list[int] | None = None) -> str:
    """The board after each pass of ``shown`` (default every pass), then the settle grid."""
    blocks = []
    for k in shown or range(1, len(bp.boards) + 1):
        board = bp.boards[k - 1]
        head = f"after pass {k}"
        if bp.solution is not None:
            blanks = bp.puzzle == 0
            right = int((board[blanks] == bp.solution[blanks]).sum())
            head += f": {right} of {int(blanks.sum())} blanks right" + (", solved" if bp.right()[k - 1] else "")
        blocks.append(head + "\n" + grid_text(board, bp.puzzle, bp.solution))
    blocks.append("the pass from which each blank no longer changes:\n" + settle_text(bp.settle))
    return "\n\n".join(blocks) + "\n"


@torch.no_grad()
def mean_y(model: torch.nn.Module, puzzles: torch.Tensor) -> torch.Tensor:
    """(B, 81, H * N) BDH's gated activations y = ReLU(D_y LN(a)) * x (Eq. 8), averaged over the model's passes."""
    from bdh.model import BDH

    if not isinstance(model, BDH):
        raise UserError(f"sudoku neurons: the neurons of a digit are BDH's y; this is a {type(model).__name__}")
    kept: list[torch.Tensor] = []

    def hook(_model, _layer, act) -> None:
        kept.append(act.y.detach().float().permute(0, 2, 1, 3).flatten(2))  # (B, T, H * N)

    model.eval()
    model(puzzles.to(next(model.parameters()).device), hook=hook)
    return torch.stack(kept).mean(0).cpu()


def digit_neurons(
    y: torch.Tensor, solutions: np.ndarray, digit: int, unit: str, index: int, per_head: int, top: int = 5
) -> list[dict[str, float]]:
    """The ``top`` neurons most selective for ``digit`` standing in ``unit`` ``index`` (row, col or box 0..8): rows
    ``{neuron, head, selectivity, inside, outside}`` with ``inside`` the mean y at the cells of that unit holding the
    digit (one per board), ``outside`` the mean over every other cell, selectivity (inside - outside) / (inside +
    outside), in [-1, 1]; ``per_head``: BDH's N, the neurons of a head."""
    if unit not in UNITS or not 0 <= index <= 8 or not 1 <= digit <= 9:
        raise UserError(
            f"sudoku neurons: expected a digit 1..9 and a unit row, col or box 0..8, got {digit}, {unit} {index}"
        )
    inside = torch.from_numpy((np.asarray(solutions) == digit) & (_UNIT_OF[unit] == index)[None])
    m_in, m_out = y[inside].mean(0), y[~inside].mean(0)
    sel = (m_in - m_out) / (m_in + m_out).clamp(min=1e-12)
    order = torch.argsort(torch.where(m_in > 0, sel, torch.full_like(sel, -2.0)), descending=True)[:top]
    return [
        {"head": int(i) // per_head, "neuron": int(i) % per_head, "selectivity": float(sel[i])}
        | {"inside": float(m_in[i]), "outside": float(m_out[i])}
        for i in order
    ]


def neuron_rows(model: torch.nn.Module, puzzles: np.ndarray, solutions: np.ndarray, top: int = 5) -> list[dict]:
    """neurons.csv: the `digit_neurons` of every digit and unit over the boards ``puzzles`` (B, 81)."""
    y = mean_y(model, torch.from_numpy(np.asarray(puzzles, dtype=np.int64)))
    per_head = model.config.n_neurons // model.config.n_head
    return [
        {"digit": d, "unit": u, "index": i, "rank": r + 1, **row}
        for d in range(1, 10)
        for u in UNITS
        for i in range(9)
        for r, row in enumerate(digit_neurons(y, solutions, d, u, i, per_head, top))
    ]


def neurons_text(rows: list[dict], digit: int, unit: str, index: int) -> str:
    """The table of `neuron_rows` for one digit and unit, as markdown."""
    mine = [r for r in rows if (r["digit"], r["unit"], r["index"]) == (digit, unit, index)]
    head = f"neurons most selective for digit {digit} in {unit} {index} (mean y over the passes):\n\n"
    table = "| rank | head | neuron | selectivity | y there | y elsewhere |\n|---:|---:|---:|---:|---:|---:|\n"
    body = "".join(
        f"| {r['rank']} | {r['head']} | {r['neuron']} | {r['selectivity']:.3f} | "
        f"{r['inside']:.4g} | {r['outside']:.4g} |\n"
        for r in mine
    )
    return head + table + body


def write_sudoku_view(model, puzzle, solution, passes: int, boards, out, unit: tuple[int, str, int]) -> str:
    """passes.txt (`passes_text` of ``puzzle``) and, for BDH, neurons.csv (`neuron_rows` over ``boards``, a pair of
    (B, 81) puzzles and solutions) into the folder ``out``; returns what is printed: the passes and the table of the
    digit and unit ``unit`` (digit, ``row``/``col``/``box``, index)."""
    from bdh.model import BDH
    from bdh.outputs import write_text

    bp = board_passes(model, puzzle, passes, solution)
    text = passes_text(bp)
    write_text(out / "passes.txt", text)
    if isinstance(model, BDH):
        rows = neuron_rows(model, *boards)
        cols = ["digit", "unit", "index", "rank", "head", "neuron", "selectivity", "inside", "outside"]
        lines = [",".join(cols)] + [",".join(_cell(r[c]) for c in cols) for r in rows]
        write_text(out / "neurons.csv", "\n".join(lines) + "\n")
        text += "\n" + neurons_text(rows, *unit)
    return text


def _cell(v: object) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)
