"""``bdh bench sudoku``: BDH, GPT and Hyper-SET on Sudoku, and the test-time depth sweep.

Width x learning rate x seed on one puzzle set generated into the folder (``data/``); every weight-shared model is
also evaluated at other layer counts (`bdh.tasks.depth.depth_sweep`, Hyper-SET's Fig. 3): ``depth.csv`` and
``plots/depth-sudoku``. The reference row gives every blank the most frequent digit."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from bdh.outputs import write_text
from bdh.typed_config import bounded, one_of

from .boards import BOARD_FULL, BoardSweep
from .results import write_csv
from .spec import QUICK, TRIVIAL, BenchError, RunSpec, SuiteDef, Trivial, redefault

#: what the attention baselines (GPT, Hyper-SET) are told of the board: ``none`` (learned 1D positions), ``positions``
#: (row, column and box embeddings) or ``peers`` (those, and attention only between cells of a row, column or box;
#: `bdh.baselines.grid`). BDH reads the board with its own RoPE either way.
STRUCTURES = ("none", "positions", "peers")


#: the recurrent recipe of the presets (HRM / TRM / the RRN, docs/bench.md "Sudoku"): the board's structure for the
#: attention baselines, every model weight-shared, a loss at every pass, augmented boards, boards stopped once settled
RECIPE: dict[str, Any] = {
    "structure": "peers",
    "share_gpt": True,
    "deep_supervision": True,
    "augment": True,
    "stop": True,
}


@dataclass
class SudokuSweep(BoardSweep):
    """The Sudoku sweep: the fields of `BoardSweep` (``n_layer``: the trained depth), plus ``min_givens``/``max_givens``
    (the generator's range), ``depth_passes`` (the layer counts of the depth sweep) and the recurrent recipe:
    ``structure`` (`STRUCTURES`), ``share_gpt`` (GPT as one block applied ``n_layer`` times), ``deep_supervision``
    and ``random_depth`` (of every weight-shared model, `bdh.model.recurrence`), ``augment`` (the training boards'
    symmetries, `bdh.tasks.sudoku_augment`) and ``stop`` (the depth sweep stops a board once it settles)."""

    suite = "sudoku"

    # The CPU default (docs/bench.md): easy puzzles (11-21 blanks), so that whole boards get solved within
    # the budget; one width and the learning rate that won the old default for every model.
    widths: tuple[int, ...] = redefault(BoardSweep, "widths", (32,))
    lrs: tuple[float, ...] = redefault(BoardSweep, "lrs", (3e-3,))
    steps: int = redefault(BoardSweep, "steps", 2000)
    eval_batch_size: int = redefault(BoardSweep, "eval_batch_size", 100)
    min_givens: int = bounded(60, ge=17, le=81)
    max_givens: int = bounded(70, ge=17, le=81)
    depth_passes: tuple[int, ...] = bounded((2, 4, 6, 8), ge=1, le=4096)
    structure: str = one_of("none", STRUCTURES)
    share_gpt: bool = False
    deep_supervision: bool = False
    random_depth: tuple[int, int] | None = None  # checked in validate
    augment: bool = False
    stop: bool = False

    #: the presets (`bdh.typed_config.TypedConfig.PRESETS`, ``--quick`` / ``--full``), both with the recurrent recipe:
    #: quick: Tiny sizes for smoke tests (easy puzzles, a few steps).
    #: full: Hyper-SET-sized data (9000 / 1000 puzzles, 24..34 givens) and deeper, wider models, for a GPU; the depth
    #: sweep to 1,024 passes.
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "quick": {
            **QUICK,
            "num_train": 64,
            "num_val": 32,
            "min_givens": 45,
            "max_givens": 50,
            "n_layer": 2,
            "depth_passes": (1, 2, 4, 8),
            "n_head": 2,
            "time_freq": 16,
            "eval_batch_size": 32,
            **RECIPE,
            "random_depth": (1, 3),
        },
        "full": {
            **BOARD_FULL,
            "num_train": 9000,
            "num_val": 1000,
            "min_givens": 24,
            "max_givens": 34,
            "n_layer": 12,
            "depth_passes": (6, 12, 24, 48, 96, 192, 384, 768, 1024),
            "eval_batch_size": 250,
            **RECIPE,
            "random_depth": (4, 16),
        },
    }

    def validate(self) -> None:
        """The rules between fields: those of `BoardSweep` (every model one the suite can run), and min_givens <=
        max_givens, random_depth's lo <= hi (the model configs' own checks, named as the sweep's fields)."""
        for name in ("share_gpt", "deep_supervision", "augment", "stop"):
            if not isinstance(getattr(self, name), bool):
                raise BenchError(f"{self._key(name)}: must be true or false, got {getattr(self, name)!r}")
        from bdh.model.recurrence import depth_complaint

        if self.random_depth is not None and (bad := depth_complaint(self.random_depth, False, True)) is not None:
            raise BenchError(f"{self._key('random_depth')}: {bad[1]}")
        super().validate()
        if self.min_givens > self.max_givens:
            raise BenchError(
                f"{self._key('min_givens')}: must not exceed max_givens = {self.max_givens} "
                f"(need 17 <= min_givens <= max_givens <= 81), got {self.min_givens}"
            )

    def shapes(self) -> list[dict[str, int]]:
        """The one setting's vocabulary (the digits and the blank) and tokens (the 81 cells): the task's."""
        from bdh.tasks.sudoku import Sudoku

        return [{"vocab_size": Sudoku.vocab_size, "seq_len": Sudoku.seq_len}]

    @property
    def setting(self) -> str:
        return f"G{self.min_givens}-{self.max_givens}"

    def model_options(self) -> dict[str, dict[str, Any]]:
        """`BoardSweep.model_options` with the recurrent recipe, so that GPT and Hyper-SET are sized as they run: the
        board's structure, GPT's shared block, and deep supervision and a random depth where the passes are shared."""
        board: dict[str, Any] = {}
        if self.structure != "none":
            board = {"positional": "sudoku", "attend": "sudoku" if self.structure == "peers" else "all"}
        depth = self._depth_options()
        gpt = {**board, **({"share_layers": True, **depth} if self.share_gpt else {})}
        return {"hyperset": {**super().model_options()["hyperset"], **board, **depth}, "gpt": gpt}

    def model_section(self, model: str, width: int, *, vocab_size: int, seq_len: int) -> dict[str, Any]:
        """`BoardSweep.model_section`; BDH (weight-shared unless ablated) also with the recurrent depth options."""
        section = super().model_section(model, width, vocab_size=vocab_size, seq_len=seq_len)
        if section["name"] == "bdh" and not section.get("unshared_layers"):
            section = {**section, **self._depth_options()}
        return section

    def _depth_options(self) -> dict[str, Any]:
        out: dict[str, Any] = {"deep_supervision": True} if self.deep_supervision else {}
        if self.random_depth is not None:
            out["random_depth"] = list(self.random_depth)
        return out


#: the sweep class of the suite (what ``bdh bench sudoku`` builds, `bdh.bench.spec`)
SWEEP = SudokuSweep


def data_paths(folder: Path) -> tuple[Path, Path]:
    """Where `make_data` writes the puzzle sets in ``folder`` (train.csv, val.csv)."""
    return folder / "train.csv", folder / "val.csv"


def data_note(sweep: SudokuSweep) -> str:
    """What `make_data` generates, in words."""
    return f"{sweep.num_train} + {sweep.num_val} puzzles"


def make_data(sweep: SudokuSweep, folder: Path) -> tuple[Path, Path]:
    """Generate the puzzle sets once into ``folder`` (train.csv, val.csv); kept if already there."""
    from bdh.tasks.sudoku import Sudoku, SudokuConfig

    paths = data_paths(folder)
    if all(p.is_file() for p in paths):
        return paths
    task = Sudoku(
        SudokuConfig(
            num_train=sweep.num_train,
            num_val=sweep.num_val,
            min_givens=sweep.min_givens,
            max_givens=sweep.max_givens,
            data_seed=sweep.data_seed,
        )
    )
    for split, path, n in (("train", paths[0], sweep.num_train), ("val", paths[1], sweep.num_val)):
        buf = io.StringIO()
        buf.write("puzzle,solution\n")
        for i in range(n):
            p, s = task.puzzle(split, i, sweep.data_seed)
            buf.write("".join(str(int(v)) for v in p) + "," + "".join(str(int(v)) for v in s) + "\n")
        write_text(path, buf.getvalue())
    return paths


def plan(sweep: SudokuSweep, data: tuple[Path, Path]) -> list[RunSpec]:
    """Every run of the sweep, on the puzzle files ``data`` (from `make_data`)."""
    sweep.validate()
    task = {
        "name": "sudoku",
        "train_csv": str(data[0]),
        "val_csv": str(data[1]),
        "num_train": sweep.num_train,
        "num_val": sweep.num_val,
        **({"augment": True} if sweep.augment else {}),
    }
    specs = []
    for w in sweep.widths:
        for m in sweep.models:
            section = sweep.model_section(m, w, **sweep.shapes()[0])
            specs += sweep.runs(
                m, w, sweep.setting, {"givens": f"{sweep.min_givens}-{sweep.max_givens}"}, section, task
            )
    return specs


def weight_shared(model: torch.nn.Module) -> bool:
    """Whether the model can run a different number of layer passes at test time: what the model class
    declares (its ``weight_shared`` property; CONTRIBUTING.md, "Adding a model"), False when it declares nothing."""
    return bool(getattr(model, "weight_shared", False))


class DepthColumns:
    """The suite's ``extra`` hook: the depth sweep of a trained weight-shared model, as a JSON column. A class, so
    that a worker process can be handed it."""

    def __init__(self, sweep: SudokuSweep) -> None:
        self.sweep = sweep

    def __call__(self, spec: RunSpec, model: torch.nn.Module, task: Any) -> dict[str, Any]:
        from bdh.tasks.depth import depth_sweep

        if not weight_shared(model):
            return {"depth": ""}
        device = next(model.parameters()).device
        curve = depth_sweep(
            model,
            task,
            list(self.sweep.depth_passes),
            batch_size=self.sweep.eval_batch_size,
            seed=spec.seed,
            device=device,
            stop=self.sweep.stop,
        )
        model.train()
        return {
            "depth": json.dumps(
                {str(k): {m: round(v, 4) for m, v in c.items()} for k, c in curve.items()},
                sort_keys=True,
                separators=(",", ":"),
            )
        }


def depth_rows(results: list[dict[str, Any]], trained: int) -> list[dict[str, Any]]:
    """One row per (result row, pass count) from the ``depth`` column."""
    out = []
    for r in results:
        text = r.get("depth") or ""
        if not text:
            continue
        for k, m in sorted(json.loads(text).items(), key=lambda kv: int(kv[0])):
            out.append(
                {
                    "suite": "sudoku-depth",
                    "model": r["model"],
                    "width": r["width"],
                    "lr": r["lr"],
                    "seed": r["seed"],
                    "trained_passes": trained,
                    "passes": int(k),
                    **m,
                }
            )
    return out


def trained_depth(sweep: SudokuSweep) -> str:
    """The passes of training, in words: ``n_layer``, or the range ``random_depth`` draws from."""
    if sweep.random_depth is None:
        return str(sweep.n_layer)
    lo, hi = sweep.random_depth
    return f"{lo}-{hi} passes drawn per batch, loss at every pass" if sweep.deep_supervision else f"{lo}-{hi}"


def finisher(sweep: SudokuSweep):
    """Writes depth.csv and plots/depth-sudoku from the chosen rows."""

    def finish(results: list[dict[str, Any]], out: Path) -> list[Path]:
        rows = depth_rows(results, sweep.n_layer)
        if not rows:
            return []
        # the trivial answer has no depth: a horizontal line at its cell accuracy
        reference = [
            {"series": TRIVIAL, "board_accuracy": r["board_accuracy"]} for r in results if r["model"] == TRIVIAL
        ]
        path = out / "depth.csv"
        write_csv(
            path,
            rows,
            ["suite", "model", "width", "lr", "seed", "trained_passes", "passes", "cell_accuracy", "board_accuracy"],
        )
        files = [path]
        from bdh.viz import plots

        for r in rows:
            r["series"] = f"{r['model']} w{r['width']}"
        files += plots.suite_plot(
            rows + reference,
            out / "plots" / "depth-sudoku",
            "passes",
            "board_accuracy",
            series="series",
            title=f"sudoku: board accuracy against test-time layer passes (trained with {trained_depth(sweep)})",
            reference=TRIVIAL,
        )
        return files

    return finish


def train_size(task: Any) -> int:
    """The puzzles of a Sudoku task's training set."""
    return int(task.size("train"))


def suite_def(sweep: SudokuSweep) -> SuiteDef:
    """The Sudoku suite, with the depth sweep of ``sweep`` and the trivial answer (one digit on every blank)."""
    return SuiteDef(
        name="sudoku",
        setting_columns=["givens"],
        metrics=["board_accuracy", "cell_accuracy"],
        score=["board_accuracy", "cell_accuracy"],
        extra=DepthColumns(sweep),
        extra_columns=["depth"],
        # the blank token's most frequent training target: one digit, the same on every blank
        trivial=Trivial("trivial (predict the most frequent digit)", train_size),
    )
