"""``bdh bench sudoku``: BDH, GPT and Hyper-SET on a ladder of Sudoku difficulties, and the test-time depth sweep.

Every model trained once with the recurrent recipe (`RECIPE`) on augmented boards over the ladder's range of givens,
then scored on each rung (`bdh.bench.ladder`: 60-70, 45-50 and 34-40 givens by default, and any ``puzzle,solution``
CSV), beside the trivial row and the exact solver; every weight-shared model also at other pass counts on every rung
(`bdh.tasks.depth.depth_sweep`, Hyper-SET's Fig. 3): ``ladder.md``, ``depth.csv``, ``depth.md``, ``plots/depth-sudoku``.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from bdh.outputs import write_text
from bdh.typed_config import bounded, one_of

from . import ladder
from .boards import BOARD_FULL, BoardSweep
from .ladder import Rung, rungs_of
from .results import write_csv
from .spec import QUICK, TRIVIAL, BenchError, RunSpec, SuiteDef, Trivial, redefault

#: what the models are told of the board: ``none`` (GPT and Hyper-SET learned 1D positions, BDH its RoPE), ``positions``
#: (row, column and box embeddings; BDH's ``input_positions``) or ``peers`` (those, and attention only between cells
#: of a row, column or box; BDH's ``attend``, its linear attention's scores masked; `bdh.baselines.grid`).
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
    (the generator's range of the training boards), ``rungs`` (the generated rungs of the ladder, ``LO-HI`` givens),
    ``csv_rungs`` (``puzzle,solution`` CSV files scored as further rungs, their first ``num_val`` rows),
    ``train_csv`` (train on this CSV's boards instead of generated ones), ``depth_passes`` (the pass counts of the
    depth sweep) and the recurrent recipe: ``structure`` (`STRUCTURES`), ``share_gpt`` (GPT as one block applied
    ``n_layer`` times), ``deep_supervision`` and ``random_depth`` (of every weight-shared model,
    `bdh.model.recurrence`), ``augment`` (the training boards' symmetries, `bdh.tasks.sudoku_augment`) and ``stop``
    (the depth sweep stops a board once it settles)."""

    suite = "sudoku"

    # The CPU default (docs/bench.md, the ladder as measured): the recurrent recipe, 1,000 steps, on 2,000 boards
    # over the ladder's givens, augmented; one width and learning rate; every rung scored and swept to 1,024 passes.
    widths: tuple[int, ...] = redefault(BoardSweep, "widths", (32,))
    lrs: tuple[float, ...] = redefault(BoardSweep, "lrs", (3e-3,))
    steps: int = redefault(BoardSweep, "steps", 1000)
    eval_batch_size: int = redefault(BoardSweep, "eval_batch_size", 100)
    min_givens: int = bounded(34, ge=17, le=81)
    max_givens: int = bounded(70, ge=17, le=81)
    rungs: tuple[str, ...] = ("60-70", "45-50", "34-40")  # checked in validate (`bdh.bench.ladder.givens_rung`)
    csv_rungs: tuple[str, ...] = ()
    train_csv: str | None = None
    depth_passes: tuple[int, ...] = bounded((1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024), ge=1, le=4096)
    structure: str = one_of("peers", STRUCTURES)
    share_gpt: bool = True
    deep_supervision: bool = True
    random_depth: tuple[int, int] | None = (2, 8)  # checked in validate
    augment: bool = True
    stop: bool = True

    #: the presets (`bdh.typed_config.TypedConfig.PRESETS`, ``--quick`` / ``--full``), both with the recurrent recipe:
    #: quick: Tiny sizes for smoke tests (easy puzzles, a few steps, one rung).
    #: full: Hyper-SET-sized data (9000 / 1000 puzzles) and deeper, wider models, for a GPU; the generated rungs down
    #: to 24-34 givens (Hyper-SET's sudoku-hard, 17-34, and Sudoku-Extreme are ``--train-csv`` / ``--csv-rungs``).
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "quick": {
            **QUICK,
            "num_train": 64,
            "num_val": 32,
            "min_givens": 45,
            "max_givens": 50,
            "rungs": ("45-50",),
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
            "max_givens": 70,
            "rungs": ("60-70", "45-50", "34-40", "24-34"),
            "n_layer": 12,
            "depth_passes": (6, 12, 24, 48, 96, 192, 384, 768, 1024),
            "eval_batch_size": 250,
            **RECIPE,
            "random_depth": (4, 16),
        },
    }

    def __post_init__(self) -> None:
        from bdh.typed_config import parse_list

        for name in ("rungs", "csv_rungs"):  # a flag's value (or a YAML string): comma-separated
            if isinstance(getattr(self, name), str):
                setattr(self, name, parse_list(getattr(self, name), str, self._key(name), unique=True))
        super().__post_init__()

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
        self.ladder()  # the rungs' own checks
        if self.train_csv is not None and (not isinstance(self.train_csv, str) or not self.train_csv):
            raise BenchError(f"{self._key('train_csv')}: must be a CSV file path or null, got {self.train_csv!r}")

    def ladder(self) -> list[Rung]:
        """The rungs of the ladder (`bdh.bench.ladder`): the generated ``rungs``, then the ``csv_rungs`` files."""
        for name in ("rungs", "csv_rungs"):
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) and v for v in value):
                wanted = "LO-HI givens" if name == "rungs" else "CSV paths"
                raise BenchError(f"{self._key(name)}: expected a list of {wanted}, got {value!r}")
        rungs = rungs_of(tuple(self.rungs), tuple(self.csv_rungs), self.suite)
        if not rungs:
            raise BenchError(f"{self._key('rungs')}: give at least one rung (rungs or csv_rungs)")
        return rungs

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
        """`BoardSweep.model_section`; BDH with the board's ``structure`` and (weight-shared unless ablated) the
        recurrent depth options."""
        section = super().model_section(model, width, vocab_size=vocab_size, seq_len=seq_len)
        if section["name"] == "bdh" and self.structure != "none":
            section = {
                **section,
                "input_positions": "sudoku",
                **({"attend": "sudoku"} if self.structure == "peers" else {}),
            }
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


#: the suite's own flags (sweep field -> argparse options, `bdh.cli.bench_cmds`)
FLAGS = {
    "rungs": {"metavar": "LO-HI,...", "help": "generated rungs, comma-separated (default 60-70,45-50,34-40)"},
    "csv_rungs": {
        "metavar": "CSV,...",
        "help": "puzzle,solution CSV files scored as further rungs (e.g. sudoku-hard's or Sudoku-Extreme's test.csv)",
    },
    "train_csv": {"metavar": "CSV", "help": "train on this CSV's boards (augmented) instead of generated ones"},
}


def data_paths(folder: Path) -> tuple[Path, Path]:
    """Where `make_data` writes the puzzle sets in ``folder`` (train.csv, val.csv)."""
    return folder / "train.csv", folder / "val.csv"


def data_note(sweep: SudokuSweep) -> str:
    """What `make_data` generates, in words."""
    if sweep.train_csv is not None:
        return f"nothing (training on {sweep.train_csv}; its {sweep.num_val} rows after {sweep.num_train} validate)"
    return f"{sweep.num_train} + {sweep.num_val} puzzles"


def make_data(sweep: SudokuSweep, folder: Path) -> tuple[Path, Path]:
    """Generate the puzzle sets once into ``folder`` (train.csv, val.csv); kept if already there, and nothing
    generated where the sweep trains on its ``train_csv``."""
    from bdh.tasks.sudoku import Sudoku, SudokuConfig

    paths = data_paths(folder)
    if sweep.train_csv is not None or all(p.is_file() for p in paths):
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
    """Every run of the sweep, on the puzzle files ``data`` (from `make_data`), or on ``train_csv`` (its
    ``num_train`` rows, then ``num_val`` rows to validate)."""
    sweep.validate()
    files = {"train_csv": str(data[0]), "val_csv": str(data[1])} if sweep.train_csv is None else {}
    task = {
        "name": "sudoku",
        **(files or {"train_csv": sweep.train_csv}),
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


class LadderColumns:
    """The suite's ``extra`` hook: a trained model (or the trivial answer) scored on every rung of the ladder
    (``board_<rung>``, ``cell_<rung>``), and a weight-shared model's depth sweep on every rung as a JSON column
    (``depth``: rung -> passes -> metrics). A class, so that a worker process can be handed it."""

    def __init__(self, sweep: SudokuSweep) -> None:
        self.sweep = sweep

    def __call__(self, spec: RunSpec, model: torch.nn.Module, task: Any) -> dict[str, Any]:
        from bdh.tasks.depth import depth_sweep

        sweep, out, curves = self.sweep, {}, {}
        device = next(iter(model.parameters()), torch.zeros(0)).device
        for rung in sweep.ladder():
            boards = ladder.rung_task(rung, sweep.num_val, sweep.data_seed)
            got = ladder.score(model, boards, sweep.eval_batch_size, spec.seed)
            out.update({f"{kind}_{rung.column}": round(got[kind], 4) for kind in ("board", "cell")})
            if weight_shared(model):
                curve = depth_sweep(
                    model,
                    boards,
                    list(sweep.depth_passes),
                    batch_size=sweep.eval_batch_size,
                    seed=spec.seed,
                    device=device,
                    stop=sweep.stop,
                )
                curves[rung.name] = {str(k): {m: round(v, 4) for m, v in c.items()} for k, c in curve.items()}
        model.train()
        out["depth"] = json.dumps(curves, sort_keys=True, separators=(",", ":")) if curves else ""
        return out


def depth_rows(results: list[dict[str, Any]], trained: int) -> list[dict[str, Any]]:
    """One row per (result row, rung, pass count) from the ``depth`` column."""
    out = []
    for r in results:
        text = r.get("depth") or ""
        for rung, curve in json.loads(text).items() if text else ():
            for k, m in sorted(curve.items(), key=lambda kv: int(kv[0])):
                row = {"suite": "sudoku-depth", "model": r["model"], "width": r["width"], "lr": r["lr"]}
                out.append({**row, "seed": r["seed"], "rung": rung, "trained_passes": trained, "passes": int(k), **m})
    return out


def trained_depth(sweep: SudokuSweep) -> str:
    """The passes of training, in words: ``n_layer``, or the range ``random_depth`` draws from."""
    if sweep.random_depth is None:
        return str(sweep.n_layer)
    lo, hi = sweep.random_depth
    return f"{lo}-{hi} passes drawn per batch, loss at every pass" if sweep.deep_supervision else f"{lo}-{hi}"


def trained_marks(sweep: SudokuSweep) -> tuple[int, ...]:
    """The pass counts of training, marked on the depth plot: ``n_layer``, or the ends of ``random_depth``."""
    return (sweep.n_layer,) if sweep.random_depth is None else tuple(sorted(set(sweep.random_depth)))


def finisher(sweep: SudokuSweep):
    """Writes ladder.csv and ladder.md (every rung, with the exact solver), depth.csv, depth.md and
    plots/depth-sudoku (one panel per rung, one line per model, the trained depth marked) from the chosen rows."""

    def finish(results: list[dict[str, Any]], out: Path) -> list[Path]:
        rungs = sweep.ladder()
        solver = {r.name: ladder.solver_row(ladder.rung_task(r, sweep.num_val, sweep.data_seed)) for r in rungs}
        table = ladder.ladder_rows(results, rungs, solver)
        files = [out / "ladder.csv", out / "ladder.md"]
        cols = ["model", "width", "rung", "seeds", "board_mean", "board_min", "board_max", "cell_mean"]
        write_csv(files[0], table, [*cols, "cell_min", "cell_max", "ms_per_board"])
        write_text(files[1], ladder.ladder_markdown(table, rungs))
        rows = depth_rows(results, sweep.n_layer)
        if not rows:
            return files
        files += [out / "depth.csv", out / "depth.md"]
        head = ["suite", "model", "width", "lr", "seed", "rung", "trained_passes", "passes"]
        write_csv(files[-2], rows, [*head, "cell_accuracy", "board_accuracy"])
        write_text(files[-1], ladder.depth_markdown(rows, trained_depth(sweep)))
        from bdh.viz import plots

        # the trivial answer has no depth: a horizontal line at its board accuracy on each rung
        reference = [
            {"series": TRIVIAL, "rung": g.name, "board_accuracy": r[f"board_{g.column}"]}
            for r in results
            if r["model"] == TRIVIAL
            for g in rungs
        ]
        for r in rows:
            r["series"] = f"{r['model']} w{r['width']}"
        files += plots.suite_plot(
            rows + reference,
            out / "plots" / "depth-sudoku",
            "passes",
            "board_accuracy",
            series="series",
            facet="rung",
            title=f"sudoku: board accuracy against test-time passes (trained with {trained_depth(sweep)})",
            reference=TRIVIAL,
            log_x=True,
            x_marks=trained_marks(sweep),
        )
        return files

    return finish


def train_size(task: Any) -> int:
    """The puzzles of a Sudoku task's training set."""
    return int(task.size("train"))


def suite_def(sweep: SudokuSweep) -> SuiteDef:
    """The Sudoku suite: every rung's board and cell accuracy and the depth sweep of ``sweep`` (`LadderColumns`), and
    the trivial answer (one digit on every blank)."""
    rungs = ladder.columns(sweep.ladder())
    return SuiteDef(
        name="sudoku",
        setting_columns=["givens"],
        metrics=["board_accuracy", "cell_accuracy"],
        score=["board_accuracy", "cell_accuracy"],
        extra=LadderColumns(sweep),
        extra_columns=[*rungs, "depth"],
        extra_metrics=rungs,
        # the blank token's most frequent training target: one digit, the same on every blank
        trivial=Trivial("trivial (predict the most frequent digit)", train_size),
    )
