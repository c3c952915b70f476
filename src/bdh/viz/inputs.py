"""What the viewer and plots are shown: a prompt, token ids, a pathfinding board or a Sudoku, as checked token ids, and
the run's task; the ``--board FILE`` format is in docs/viz.md."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bdh.errors import UserError
from bdh.outputs import input_file

BOARD_CELLS = {".": 0, "0": 0, "#": 1, "1": 1, "S": 2, "s": 2, "2": 2, "E": 3, "e": 3, "3": 3}
#: the longest input the viewer and the plots draw (the attention panel and the run cost O(T^2))
MAX_TOKENS = 2048


@dataclass
class ViewInput:
    """Token ids and how to draw them (``kind`` as in `bdh.viz.export.KINDS`)."""

    tokens: list[int]
    kind: str
    board_size: int | None = None
    description: str = ""
    #: every window of a probe whose first window is ``tokens`` (`bdh.analysis.probe`): statistics read them all
    windows: list[list[int]] | None = None


def output_stem(inp: ViewInput) -> str:
    """A file name for ``inp``: a text's first words (else its kind) and a hash, e.g. ``to-be-or-not-to-be-3f2a1c``."""
    import hashlib
    import re
    import unicodedata

    digest = hashlib.sha256(",".join(map(str, inp.tokens)).encode()).hexdigest()[:6]
    words = "probe" if inp.windows else ""
    if inp.kind == "text" and not words:
        text = unicodedata.normalize("NFKD", bytes(inp.tokens).decode("utf-8", "replace"))
        words = re.sub(r"[^a-z0-9]+", "-", text.encode("ascii", "ignore").decode().lower())[:24].strip("-")
    return f"{words or inp.kind}-{digest}"


def run_task(model_dir: Path) -> dict[str, Any] | None:
    """The ``task`` section of the run config beside a model folder, or None without a config.yaml."""
    from bdh.train.config import read_config_file

    for folder in (model_dir, model_dir.parent, model_dir.parent.parent):
        cfg = folder / "config.yaml"
        if cfg.is_file():
            task = read_config_file(cfg).get("task")
            return task if isinstance(task, dict) else None
    return None


def run_dir_of(model_dir: Path) -> Path:
    """The run folder holding a model folder (where config.yaml is), else the model folder itself."""
    for folder in (model_dir, model_dir.parent, model_dir.parent.parent):
        if (folder / "config.yaml").is_file():
            return folder
    return model_dir


def check_length(count: int, what: str) -> None:
    """Refuse an input longer than `MAX_TOKENS` (the viewer's cost grows with the square of its length)."""
    if count > MAX_TOKENS:
        raise UserError(
            f"{what}: {count:,} tokens; the viewer draws at most {MAX_TOKENS:,} (its cost grows with the square "
            "of the length): give a shorter input"
        )


def prompt_tokens(prompt: bytes | str, vocab_size: int) -> ViewInput:
    """The bytes of ``prompt`` (a str is encoded as UTF-8) as tokens of a byte-level model."""
    data = prompt.encode("utf-8") if isinstance(prompt, str) else bytes(prompt)
    if not data:
        raise UserError("viz: the prompt is empty")
    check_length(len(data), "the prompt")
    if vocab_size < 256 and max(data) >= vocab_size:
        bad = max(data)
        raise UserError(
            f"viz: the prompt has byte {bad} but the model's vocabulary has only {vocab_size} tokens "
            "(not a byte-level model)"
        )
    return ViewInput(list(data), "text", None, f"prompt of {len(data)} bytes")


def id_tokens(text: str, vocab_size: int) -> ViewInput:
    """Token ids given as integers separated by spaces or commas."""
    parts = [p for p in text.replace(",", " ").split() if p]
    if not parts:
        raise UserError("viz: --tokens is empty")
    try:
        ids = [int(p) for p in parts]
    except ValueError:
        raise UserError(f"viz: --tokens must be integers, got {text!r}") from None
    check_length(len(ids), "--tokens")
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise UserError(f"viz: token {bad[0]} is outside the model's vocabulary [0, {vocab_size})")
    return ViewInput(ids, "tokens", None, f"{len(ids)} token ids")


def parse_board(text: str, expected_size: int | None = None) -> tuple[list[int], int]:
    """(tokens, S) of a pathfinding board in the file format of the module doc."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("//"):
            continue
        cells = []
        for ch in line.replace(" ", "").replace("\t", ""):
            if ch not in BOARD_CELLS:
                raise UserError(f"board line {n}: unknown cell {ch!r} (use . # S E or 0 1 2 3)")
            cells.append(BOARD_CELLS[ch])
        rows.append(cells)
    if not rows:
        raise UserError("board: the file has no rows")
    S = len(rows)
    wrong = [i for i, r in enumerate(rows) if len(r) != S]
    if wrong:
        raise UserError(f"board: {S} rows but row {wrong[0] + 1} has {len(rows[wrong[0]])} cells (a board is S x S)")
    if expected_size is not None and S != expected_size:
        raise UserError(
            f"board: the board is {S} x {S} but the model was trained on {expected_size} x {expected_size} boards"
        )
    flat = [c for r in rows for c in r]
    for value, name in ((2, "start (S)"), (3, "end (E)")):
        if flat.count(value) != 1:
            raise UserError(f"board: needs exactly one {name} cell, found {flat.count(value)}")
    return flat, S


def parse_sudoku(text: str) -> list[int]:
    """81 tokens of a Sudoku puzzle (0 = blank)."""
    s = "".join(text.split())
    if len(s) != 81:
        raise UserError(f"sudoku: a puzzle is 81 cells, got {len(s)}")
    bad = [c for c in s if c not in ".0123456789"]
    if bad:
        raise UserError(f"sudoku: unknown cell {bad[0]!r} (use 1-9 for givens, 0 or . for blanks)")
    return [0 if c == "." else int(c) for c in s]


def board_input(path: str, vocab_size: int, expected_size: int | None) -> ViewInput:
    """A pathfinding board read from ``path`` (checked against the model's vocabulary and board size)."""
    from bdh.tasks.boardpath import VOCAB_SIZE

    if vocab_size != VOCAB_SIZE:
        raise UserError(
            f"viz: --board needs a board pathfinding model (vocabulary {VOCAB_SIZE}); this model has {vocab_size}"
        )
    p = input_file(path, "--board", missing="no such board file")
    try:
        tokens, S = parse_board(p.read_text(encoding="utf-8", errors="replace"), expected_size)
    except UserError as exc:
        raise UserError(f"--board {p}: {exc}") from None
    return ViewInput(tokens, "boardpath", S, f"board {p.name} ({S} x {S})")


def sudoku_input(text: str, vocab_size: int) -> ViewInput:
    """A Sudoku puzzle (checked against the model's vocabulary)."""
    if vocab_size != 10:
        raise UserError(f"viz: --sudoku needs a Sudoku model (vocabulary 10); this model has {vocab_size}")
    tokens = parse_sudoku(text)
    return ViewInput(tokens, "sudoku", 9, f"sudoku with {sum(t > 0 for t in tokens)} givens")


def default_input(task: dict[str, Any] | None, vocab_size: int, causal: bool, seed: int = 0) -> ViewInput:
    """A board or puzzle from the run's task, else the probe text's first window (byte models)."""
    import numpy as np

    name = (task or {}).get("name")
    if name is None and not causal:
        name = {5: "boardpath", 10: "sudoku"}.get(vocab_size)
    if name == "boardpath":
        from bdh.tasks.boardpath import generate_boards

        S = int((task or {}).get("board_size", 10))
        wall = float((task or {}).get("wall_prob", 0.3))
        gen = np.random.default_rng(seed)
        for _ in range(20):
            boards, _ = generate_boards(gen, 8, S, wall)
            if len(boards):
                return ViewInput(boards[0].tolist(), "boardpath", S, f"generated {S} x {S} board (seed {seed})")
        raise UserError("viz: could not generate a solvable board; give one with --board")
    if name == "sudoku":
        from bdh.tasks.sudoku import generate_puzzle

        puzzle, _ = generate_puzzle(np.random.default_rng(seed), 30, 40)
        return ViewInput(puzzle.tolist(), "sudoku", 9, f"generated sudoku (seed {seed})")
    if vocab_size >= 256:
        from bdh.analysis.probe import probe

        tokens, description = probe()
        rows = tokens.tolist()
        return ViewInput(rows[0], "text", None, description, windows=rows)
    raise UserError(
        f"viz: give an input (--prompt, --tokens, --board or --sudoku) for this model (vocabulary {vocab_size})"
    )


def choose_input(
    model: Any,
    model_dir: Path,
    prompt: bytes | None = None,
    tokens: str | None = None,
    board: str | None = None,
    sudoku: str | None = None,
    seed: int = 0,
) -> ViewInput:
    """What ``model`` is shown: ``prompt``, ``tokens``, a ``board`` file, a ``sudoku``, else `default_input`."""
    cfg = model.config
    task = run_task(model_dir)
    if prompt is not None:
        return prompt_tokens(prompt, cfg.vocab_size)
    if tokens is not None:
        return id_tokens(tokens, cfg.vocab_size)
    if board is not None:
        size = (task or {}).get("board_size") if (task or {}).get("name") == "boardpath" else None
        return board_input(board, cfg.vocab_size, None if size is None else int(size))
    if sudoku is not None:
        return sudoku_input(sudoku, cfg.vocab_size)
    return default_input(task, cfg.vocab_size, cfg.causal, seed)


def report_path(run_dir: Path, prefix: str, inp: ViewInput | None, suffix: str = "") -> Path:
    """``run_dir/reports/<prefix>-<output_stem><suffix>`` (``prefix`` alone without an input)."""
    name = prefix if inp is None else f"{prefix}-{output_stem(inp)}"
    return run_dir / "reports" / f"{name}{suffix}"
