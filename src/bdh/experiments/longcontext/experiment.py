"""``bdh experiment long-context``: every recipe trained per seed, then measured on long held-out streams.

Per run, into ``runs/<recipe>-s<seed>`` and ``results/<recipe>-s<seed>.json``: the windowed, carried and cut-to-T
losses, the recall probe, a long generation scored by an n-gram model and zlib, and the speed (`measure`).
``--resume`` skips a run whose result file exists; an interrupted run is trained again from the start."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bdh.analysis.recall import RECALL_LEAD, held_out_text, recall_accuracy, recall_trials
from bdh.errors import UserError

from ..common import train_lm
from ..ledger import Ledger
from ..scaffold import ExperimentFolder, Log
from .cause import cause_record, measurable
from .config import WINDOW_ONLY, Config
from .probes import NGramModel, generate_bytes, generation_scores, word_recall

#: config fields that only choose which runs are made: a resumed folder may add recipes or seeds
SELECTORS = ("recipes", "seeds", "threads")
#: bytes of held-out text that prompt the long generation
PROMPT_BYTES = 256


#: the output folder; its marker file ``long-context.json`` is what ``--resume`` continues
FOLDER = ExperimentFolder("long-context", SELECTORS)
MARKER = FOLDER.marker
prepare_resume = FOLDER.prepare_resume


class Data:
    """What every run is measured on: the held-out streams, the filler of the recall probe, the n-gram judge."""

    def __init__(self, config: Config):
        from bdh.analysis.loss_by_position import plan_streams, task_streams
        from bdh.tasks.text import TextConfig, TextTask

        self.task = TextTask(TextConfig(seq_len=config.seq_len, val_fraction=0.1))
        lanes, length = plan_streams(self.task, "val", config.eval_length, config.eval_lanes)
        if lanes < config.eval_lanes or length < config.eval_length:
            raise UserError(
                f"long-context: the validation split holds {lanes} lanes of {length:,} bytes, "
                f"not {config.eval_lanes} of {config.eval_length:,}; lower eval_lanes or eval_length"
            )
        self.streams = task_streams(self.task, "val", lanes, length)
        self.held_out = held_out_text(self.task)
        self.judge = NGramModel(self.task.stream.read(0, self.task.n_train), config.ngram)
        self.prompt = self.held_out[:PROMPT_BYTES].tobytes()
        healthy = self.held_out[PROMPT_BYTES : PROMPT_BYTES + config.generate_bytes].tobytes()
        self.reference = generation_scores(self.judge, healthy)


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def measure(model: torch.nn.Module, recurrent: bool, config: Config, data: Data, seed: int) -> dict[str, Any]:
    """Every measurement of one trained model: windowed, carried (`bdh.analysis.loss_by_position.carried_curve`), cut
    to T (`sliding_curve`; ``cut - carried`` is what the state adds), recall, generation and speed."""
    from bdh.analysis.loss_by_position import carried_curve, sliding_curve

    T, streams = config.seq_len, data.streams
    windowed, t_win = _timed(lambda: sliding_curve(model, streams, T, T, T))
    cut = sliding_curve(model, streams, T, T, config.cut_stride, keep=True)
    out: dict[str, Any] = {"windowed": windowed.to_dict(), "cut": cut.to_dict(), "recall": []}
    filler = data.held_out
    for d in config.distances:
        trials = recall_trials(filler, d, config.recall_trials, RECALL_LEAD, seed=1000 + seed)
        row = {"distance": d, "cut": recall_accuracy(model, trials, T)}
        if recurrent:
            row["carried"] = recall_accuracy(model, trials, None, chunk=T)
        out["recall"].append(row)
    if recurrent:
        carried, t_car = _timed(lambda: carried_curve(model, streams, T, chunk=T, keep=True))
        out["carried"] = carried.to_dict()
        out["words"] = word_recall(streams, carried.token_loss, cut.token_loss, T)
        tokens = streams.shape[0] * (streams.shape[1] - 1)
        out["speed"] = {"windowed_tokens_per_s": tokens / t_win, "carried_tokens_per_s": tokens / t_car}
        out["state_bytes"] = model.init_state(1).nbytes()
        if getattr(model, "log_u", None) is None and measurable(model):  # undamped Eq. 8: why does its state break?
            out["cause"] = cause_record(model, streams, T)
        text = generate_bytes(model, data.prompt, config.generate_bytes, seed=seed)
        out["generation"] = {**generation_scores(data.judge, text), "sample_end": text[-300:].decode("latin-1")}
    return out


def train_and_measure(config: Config, out: Path, recipe: str, seed: int, data: Data, log: Log) -> dict[str, Any]:
    """Train one run of ``recipe`` (into ``runs/<recipe>-s<seed>``, replacing an unfinished one) and measure it."""
    run_dir = out / "runs" / f"{recipe}-s{seed}"
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an earlier attempt that did not finish: its result file was never written
    log(f"long-context: training {recipe} (seed {seed}, {config.steps} steps)")
    start = time.time()
    task = {"name": "text", "data": None, "seq_len": config.seq_len, "val_fraction": 0.1}
    result = train_lm(
        run_dir,
        None,
        config.model_section(recipe),
        steps=config.steps,
        batch_size=config.batch_size,
        seq_len=config.seq_len,
        lr=config.lr,
        seed=seed,
        threads=config.threads,
        task=task,
        sections=config.sections(recipe),
    )
    train_s = time.time() - start
    log(f"long-context: measuring {recipe} (seed {seed})")
    record = measure(result.model, recipe not in WINDOW_ONLY, config, data, seed)
    record.update(recipe=recipe, seed=seed, train_seconds=train_s, measure_seconds=time.time() - start - train_s)
    return record


def run(config: Config, out: Path, *, log: Log = print, resume: bool = False) -> Path:
    """Train and measure every (recipe, seed), reusing finished ones with ``resume``; write the report."""
    from .report import write_report

    out = Path(out)
    FOLDER.mark(config.to_dict(), out, resume)
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    start = time.time()
    data = Data(config)
    runs = {f"{recipe}-s{seed}": (recipe, seed) for recipe in config.recipe_list for seed in config.seed_list}
    records = Ledger(out / "results").make_all(
        list(runs),
        lambda run: train_and_measure(config, out, *runs[run], data, log),
        resume=resume,
        reused=lambda run: log(f"long-context: {runs[run][0]} (seed {runs[run][1]}) already measured, reused"),
    )
    spent = sum(r["train_seconds"] + r["measure_seconds"] for r in records)  # resumed runs count their own time
    report = write_report(config, out, records, data.reference, spent)
    log(f"long-context: done in {(time.time() - start) / 60:.1f} min")
    return report
