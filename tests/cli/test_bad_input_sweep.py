"""A sweep of what a careless or unlucky user does, through the command line as they would: interrupted runs,
damaged, cut, empty and foreign files, folders, FIFOs and devices given as files, a second writer at work,
numbers too large, values of the wrong type, missing and read-only folders, and the advice of every message.

The cases run on the machinery of the bad-input suite (`bad_input_cases`: one line ``bdh: error: ...`` naming
the culprit, no traceback, nothing hangs, the fixture tree unchanged but where a control may change it), on
its fixture tree plus ``fx/sw/`` (`bad_input_fixtures.build_sweep_fixtures`: the states interrupted and damaged
runs leave). Where a message tells the user what to do next, the case follows that advice once and checks
that it works (``Case.follow``). Interruptions are real: processes stopped by SIGTERM or SIGINT at a set point
(`SIGNALLED`), exit status 128 + the signal, and the command they print to continue is run.

docs: the kinds and counts of the cases are in CONTRIBUTING.md ("The bad-input suites"; checked below).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from .bad_input_cases import (
    Case,
    CaseTable,
    advised_command,
    follow_adding,
    follow_command,
    make_readonly,
    one_line_problems,
    readonly_folder,
    run_case,
    run_main,
    unmake_readonly,
)
from .bad_input_fixtures import TINY_TRAIN, build_sweep_fixtures, set_args

SRC = Path(__file__).resolve().parents[2] / "src"

TABLE = CaseTable()
case, CASES = TABLE.case, TABLE.cases

#: the kind of a control (a case that succeeds) by the first word of its id
CONTROL_KINDS = {
    "interrupted": "interrupted",
    "damaged": "damaged",
    "folder": "not-a-file",
    "concurrent": "concurrent",
    "missing": "missing",
    "readonly": "read-only",
}


def ok(id: str, argv: str | Sequence[str], *extra: str | Sequence[str], **kw) -> None:
    """A control that succeeds, counted with the cases of its kind."""
    TABLE.ok(id, argv, *extra, kind=CONTROL_KINDS[id.split("-")[0]], **kw)


#: fixture paths, relative to each case's cwd
RUN = "fx/run"
RUN4 = "fx/sw/run4"
BDH_A = "fx/models/bdh"
BOARD_M = "fx/models/board"
OFFICIAL = "fx/official.pt"
TEXT = "fx/data/text.txt"
PRECIOUS = "fx/precious.txt"
NOTES = "fx/notes.txt"
FULL = "fx/full"
PIPE = "fx/pipe"  # a FIFO, made by the case's setup (`fifo`)
DEV = os.devnull  # a device

#: small settings: if a check is missing, the work that starts is short
TINY = set_args([*TINY_TRAIN, "train.max_steps=1"])
GEN = ["--max-new-tokens", "2", "--device", "cpu"]
EVAL = ["--batches", "1", "--device", "cpu"]
INSPECT = ["--no-figures", "--tokens", "8", "--windows", "1", "--max-nodes", "16", "--seeds", "1"]
BENCH = ["--quick", "--models", "bdh", "--steps", "1", "--seeds", "0", "--lrs", "1e-3", "--widths", "8"]
#: the scaling experiment at one size, one learning rate, two steps (a run of each model)
SCALING = [
    "--quick",
    *set_args(["lrs=[0.003]", "steps=2", "curve_points=1", "n_neurons=[128]", "gpt_layers=[1]", "gpt_heads=[2]"]),
]
PROBE = ["--temperatures", "1", "--steps", "8", "--transient", "2", "--features", "2"]
PC = "--print-config"


# ---------------------------------------------------------------------------------------------- setups


def fifo(rel: str = PIPE) -> Callable[[Path], None]:
    """A setup: a FIFO at ``rel`` (made in the case's folder: copying one would block)."""

    def make(cwd: Path) -> None:
        os.mkfifo(cwd / rel)

    return make


def readonly(rel: str) -> Callable[[Path], Callable[[], None]]:
    """A setup: ``rel`` (a folder of the case's fixtures) made read-only, its mode given back afterwards."""

    def make(cwd: Path) -> Callable[[], None]:
        make_readonly(cwd / rel)
        return lambda: unmake_readonly(cwd / rel)

    return make


LOCKER = """
import sys, time
from bdh.outputs import folder_lock
with folder_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(600)
"""

#: the processes holding a folder's lock, by pid (for the advice "stop that process")
HOLDERS: dict[int, subprocess.Popen] = {}


def env() -> dict[str, str]:
    e = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    e.pop("BDH_DEBUG", None)
    e["PYTHONPATH"] = str(SRC) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def held(rel: str) -> Callable[[Path], Callable[[], None]]:
    """A setup: another process writing into ``rel`` (it holds the folder's lock) until the case ends."""

    def make(cwd: Path) -> Callable[[], None]:
        proc = subprocess.Popen(
            [sys.executable, "-c", LOCKER, str(cwd / rel)], env=env(), stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout.readline().strip() == "locked"
        HOLDERS[proc.pid] = proc

        def stop() -> None:
            proc.kill()
            proc.wait()
            HOLDERS.pop(proc.pid, None)

        return stop

    return make


# ---------------------------------------------------------------------------------------------- advice followed


def follow_stopping_the_holder(line: str, case: Case) -> list[str]:
    """'one writer at a time: wait for it to end, or stop that process': stop the pid it names, run it again."""
    pid = int(re.search(r"in use by pid (\d+)", line).group(1))
    proc = HOLDERS.pop(pid)
    proc.terminate()
    proc.wait()
    return list(case.argv)


def follow_command_with(*extra: str) -> Callable[[str, Case], list[str]]:
    """Follow the command a message prints, with the user's own settings (``extra``) added."""
    return lambda line, case: [*advised_command(line), *extra]


def follow_giving_the_folder(line: str, case: Case) -> list[str]:
    """'(or the folder X)': the same command with the folder X for the source the message named."""
    new = re.search(r"the folder (\S+?)\)", line).group(1)
    old = next(a for a in case.argv if a.startswith("fx/") and new.startswith(a))
    return [new if a == old else a for a in case.argv]


def follow_suggestion(line: str, case: Case) -> list[str]:
    """'(did you mean 'x'?)': the same command with the suggested key for the mistyped one."""
    right = re.search(r"did you mean '([^']+)'", line).group(1)
    fixed = []
    for a in case.argv:
        key, sep, value = a.partition("=")
        head, dot, last = key.rpartition(".")
        fixed.append(f"{head}{dot}{right}{sep}{value}" if sep and last != right and right[:2] == last[:2] else a)
    assert fixed != list(case.argv), line
    return fixed


def follow_replacing(old: str, new: str, said: str) -> Callable[[str, Case], list[str]]:
    """Advice that names a value to give instead (``said`` in the message): ``old`` replaced by ``new``."""

    def follow(line: str, case: Case) -> list[str]:
        assert said in line, line
        return [new if a == old else a for a in case.argv]

    return follow


def follow_overwrite_not_resume(line: str, case: Case) -> list[str]:
    """'start it anew with --overwrite instead of --resume'."""
    assert "--overwrite instead of --resume" in line, line
    return [a for a in case.argv if a != "--resume"] + ["--overwrite"]


def stderr_has(*words: str) -> Callable[[bytes, str, Path], None]:
    def check(out: bytes, err: str, cwd: Path) -> None:
        for word in words:
            assert word in err, (word, err)

    return check


def exists(*paths: str) -> Callable[[bytes, str, Path], None]:
    def check(out: bytes, err: str, cwd: Path) -> None:
        for p in paths:
            assert (cwd / p).exists(), p

    return check


# ---------------------------------------------------------------------------------------------- interrupted runs
# what interrupted runs leave behind (the interruptions themselves: SIGNALLED, below)

case(
    "interrupted-rerun-before-checkpoint",
    "interrupted",
    "train --run-dir fx/sw/no-ckpt",
    "fx/sw/no-ckpt",
    TINY,
    also=("bdh train --resume fx/sw/no-ckpt", "--overwrite"),
    follow=follow_command,
    follow_check=exists("fx/sw/no-ckpt/checkpoints/step-2"),
)
case(
    "interrupted-rerun-before-checkpoint-overwrite",
    "interrupted",
    "train --run-dir fx/sw/no-ckpt",
    "fx/sw/no-ckpt",
    TINY,
    follow=follow_adding("--overwrite"),
    follow_check=exists("fx/sw/no-ckpt/checkpoints/step-1"),
)
ok(
    "interrupted-resume-before-checkpoint-ok",
    "train --resume fx/sw/no-ckpt --set log.progress=lines",
    changes=("sw/no-ckpt",),
    check=stderr_has("no checkpoint yet", "metrics.jsonl logged after step 0 is dropped"),
)
case(  # its checkpoint holds a BDH: the error named a field of the other model's config
    "interrupted-resume-as-another-model",
    "interrupted",
    f"train --resume {RUN4} --set model.name=gpt",
    "model.name=gpt",
    also=("a resumed run keeps its model", "new run"),
)
case("interrupted-generate-before-checkpoint", "interrupted", "generate fx/sw/no-ckpt", "fx/sw/no-ckpt", GEN)
case("interrupted-eval-before-checkpoint", "interrupted", "eval fx/sw/no-ckpt", "fx/sw/no-ckpt", EVAL)
ok(
    "interrupted-plot-before-checkpoint-draws-the-curves-ok",
    "plot fx/sw/no-ckpt --out out/p",
    check=lambda out, err, cwd: _assert(b"holds no model yet" in out, out),
)
ok("interrupted-runs-lists-it-ok", "runs fx/sw/no-ckpt", check=lambda out, err, cwd: _assert(b"no-ckpt" in out, out))
case(
    "interrupted-bench-first-run",
    "interrupted",
    "bench recall --out fx/sw/bench-cut",
    "fx/sw/bench-cut",
    BENCH,
    also=("--resume", "--overwrite"),
    follow=follow_adding("--resume"),
    follow_check=exists("fx/sw/bench-cut/results.md"),
)
case(
    "interrupted-bench-first-run-overwrite",
    "interrupted",
    "bench recall --out fx/sw/bench-cut",
    "fx/sw/bench-cut",
    BENCH,
    follow=follow_adding("--overwrite"),
    follow_check=exists("fx/sw/bench-cut/results.md"),
)
case(
    "interrupted-scaling-rerun",
    "interrupted",
    "experiment scaling --out fx/sw/scaling-cut",
    "fx/sw/scaling-cut",
    SCALING,
    also=("--resume", "--overwrite"),
    follow=follow_adding("--resume"),
    follow_check=exists("fx/sw/scaling-cut/report.md"),
)
ok(
    "interrupted-leftovers-cleaned-by-resume-ok",
    "train --resume fx/sw/leftovers",
    changes=("sw/leftovers",),
    check=lambda out, err, cwd: _assert(
        not [p for p in (cwd / "fx/sw/leftovers").rglob(".*") if p.name != ".bdh.lock"], "leftovers remain"
    ),
)
ok("interrupted-leftovers-kept-by-a-reader-ok", "generate fx/sw/leftovers", GEN)
ok("interrupted-mid-swap-reader-loads-the-checkpoint-ok", "generate fx/sw/mid-swap", GEN, check=stderr_has("step-2"))
ok(
    "interrupted-mid-swap-best-put-back-ok",
    "train --resume fx/sw/mid-swap",
    changes=("sw/mid-swap",),
    check=exists("fx/sw/mid-swap/best/model.safetensors"),
)

# ---------------------------------------------------------------------------------------------- damaged files
for command, extra in (("generate", GEN), ("eval", EVAL), ("viz", ["--out", "out/v.html", "--prompt", "hi"])):
    case(f"damaged-cut-config-{command}", "damaged", f"{command} fx/sw/cut-config", "config.yaml", extra)
case(
    "damaged-cut-config-resume",
    "damaged",
    "train --resume fx/sw/cut-config",
    "config.yaml",
    also=("--overwrite",),
    follow=follow_command_with(*TINY),
    follow_check=exists("fx/sw/cut-config/checkpoints/step-1"),
)
case("damaged-empty-config-resume", "damaged", "train --resume fx/sw/empty-config", "is empty")
case("damaged-empty-config-eval", "damaged", "eval fx/sw/empty-config", "config.yaml", EVAL)
ok("damaged-cut-config-runs-skips-it-ok", "runs fx/sw/cut-config")
for name, said in (("ckpt-cut", "model.safetensors"), ("ckpt-state-flipped", "trainer_state"), ("ckpt-meta-bad", "")):
    case(
        f"damaged-{name}-resume",
        "damaged",
        f"train --resume fx/sw/{name} --set train.max_steps=6",
        f"fx/sw/{name}/checkpoints/step-4",
        also=(said, "--checkpoint step-2"),
        follow=follow_adding("--checkpoint step-2"),
        follow_check=exists(f"fx/sw/{name}/checkpoints/step-6"),
    )
case(
    "damaged-ckpt-cut-generate-that-checkpoint",
    "damaged",
    "generate fx/sw/ckpt-cut --checkpoint step-4",
    "step-4",
    GEN,
)
ok("damaged-ckpt-cut-generate-best-ok", "generate fx/sw/ckpt-cut", GEN)
for command, extra in (("generate", GEN), ("eval", EVAL), ("merge", ["fx/models/bdh-b", "out/m"])):
    case(f"damaged-best-config-{command}", "damaged", f"{command} fx/sw/best-config-changed", "config.json", extra)
    case(
        f"damaged-best-no-weights-{command}",
        "damaged",
        f"{command} fx/sw/best-no-weights",
        "model.safetensors",
        extra,
        also=("--checkpoint step-2", "checkpoints/step-2"),
        follow=follow_giving_the_folder if command == "merge" else follow_adding("--checkpoint step-2"),
    )
case("damaged-metrics-folder-runs", "damaged", "runs fx/sw/metrics-folder", "metrics.jsonl", also=("is a folder",))
case(
    "damaged-metrics-folder-resume",
    "damaged",
    "train --resume fx/sw/metrics-folder --set train.max_steps=3",
    "metrics.jsonl",
)
ok(  # one damaged run among many: listed without it, one warning naming it
    "damaged-metrics-folder-among-runs-warns-ok",
    "runs fx/sw",
    check=lambda out, err, cwd: _assert(
        b"run4" in out and "bdh: warning: " in err and "metrics-folder not listed" in err, (out, err)
    ),
)
case("damaged-metrics-folder-plot", "damaged", "plot fx/sw/metrics-folder --out out/p", "metrics.jsonl")
ok("damaged-metrics-cut-runs-warns-ok", "runs fx/sw/metrics-cut", check=stderr_has("damaged line(s) skipped"))
ok(
    "damaged-metrics-cut-resume-repairs-ok",
    "train --resume fx/sw/metrics-cut --set train.max_steps=3",
    changes=("sw/metrics-cut",),
    check=stderr_has("damaged line(s) dropped (repaired"),
)
case("foreign-hf-generate", "damaged", "generate fx/sw/foreign-hf", "gpt2", GEN)
case("foreign-hf-info", "damaged", "info fx/sw/foreign-hf", "gpt2")
case("foreign-hf-init-from", "damaged", "train", "gpt2", TINY, f"--set train.init_from=fx/sw/foreign-hf {PC}")
case("foreign-shapes-generate", "damaged", "generate fx/sw/foreign-shapes", "foreign-shapes", GEN)
case("foreign-shapes-merge", "damaged", "merge fx/sw/foreign-shapes fx/models/bdh out/m", "foreign-shapes")
case("foreign-pt-as-safetensors-eval", "damaged", f"eval fx/sw/pt-as-safetensors --data {TEXT}", "pt-as", EVAL)
case(
    "foreign-pt-as-safetensors-info-warns",
    "damaged",
    "info fx/sw/pt-as-safetensors",
    None,
    exit=0,
    check=stderr_has("bdh: warning:", "model.safetensors", "truncated or corrupted"),
)
# a config.json edited to keep every shape but change what the weights mean: refused naming the field
case("damaged-edited-damping-generate", "damaged", "generate fx/sw/edited-damping", "damping", GEN, also=("saved",))
case("damaged-edited-damping-eval", "damaged", f"eval fx/sw/edited-damping --data {TEXT}", "damping", EVAL)
case(
    "damaged-best-damping-edited-generate",
    "damaged",
    "generate fx/sw/best-damping-edited",
    "config.json",
    GEN,
    also=("does not match its checksum", "damping is 0.5"),
)
case(  # a checkpoint is the record of its run: any edit refused, the way to another n_layer named
    "damaged-best-n-layer-edited-generate",
    "damaged",
    "generate fx/sw/best-n-layer-edited",
    "config.json",
    GEN,
    also=("n_layer is 3", "a folder of their own"),
)
ok(  # n_layer: the layers share their weights, a user may change it on purpose: a warning
    "damaged-edited-n-layer-generate-warns-ok",
    "generate fx/sw/edited-n-layer",
    GEN,
    check=stderr_has("bdh: warning: ", "n_layer is 3 but the weights were saved with 2"),
)
case("foreign-tensors-convert", "damaged", "convert fx/sw/foreign.pt out/c", "foreign.pt")
case(
    "foreign-bench-binary-ledger",
    "damaged",
    "bench recall --out fx/sw/bench-bad-ledger --resume",
    "runs.csv",
    BENCH,
    also=("--overwrite",),
    follow=follow_overwrite_not_resume,
    follow_check=exists("fx/sw/bench-bad-ledger/results.md"),
)
case(
    "foreign-bench-ledger-columns",
    "damaged",
    "bench recall --out fx/sw/bench-foreign-ledger --resume",
    "runs.csv",
    BENCH,
    also=("no column",),
)
case(  # a repeated row would count as a second seed
    "damaged-bench-ledger-repeated-row",
    "damaged",
    "bench recall --out fx/sw/bench-ledger-dup --resume",
    "runs.csv",
    BENCH,
    also=("line 4", "same run as line 2"),
    follow=follow_overwrite_not_resume,
    follow_check=exists("fx/sw/bench-ledger-dup/results.md"),
)
for name, said in (("nan", "lr 'nan'"), ("abc", "accuracy 'abc'"), ("no-metric", "no column 'accuracy'")):
    case(
        f"damaged-bench-ledger-{name}",
        "damaged",
        f"bench recall --out fx/sw/bench-ledger-{name} --resume",
        "runs.csv",
        BENCH,
        also=("line 2", said),
    )
case(
    "foreign-bench-folder-resume",
    "damaged",
    f"bench recall --out {FULL} --resume",
    "runs.csv",
    BENCH,
    also=("--overwrite instead of --resume",),
    follow=follow_overwrite_not_resume,
    follow_check=exists("fx/full/results.md"),
)
case(  # --overwrite would delete the run
    "foreign-bench-resume-a-training-run",
    "damaged",
    f"bench recall --out {RUN} --resume",
    RUN,
    BENCH,
    also=("training run folder", "another --out"),
    check=lambda out, err, cwd: _assert("--overwrite" not in err, f"advises deleting a run: {err!r}"),
)
case(
    "foreign-bench-folder-no-resume-advice",
    "damaged",
    f"bench recall --out {FULL}",
    "fx/full",
    BENCH,
    check=lambda out, err, cwd: _assert("--resume" not in err, f"a foreign folder cannot be resumed: {err!r}"),
)
case(
    "damaged-long-context-marker",
    "damaged",
    "experiment long-context --quick --out fx/sw/lc-bad-marker --resume --set steps=1",
    "long-context.json",
)

# ---------------------------------------------------------------------------------------------- not a file
for kind, path, setup, said in (
    ("folder", FULL, None, "is a folder"),
    ("fifo", PIPE, fifo(), "is a FIFO"),
    ("device", DEV, None, "is a device"),
):
    kw = {"setup": setup} if setup else {}
    case(f"{kind}-as-train-config", "not-a-file", f"train {path} {PC}", said, **kw)
    case(f"{kind}-as-prompt-file", "not-a-file", f"generate {RUN} --prompt-file {path}", said, GEN, **kw)
    case(f"{kind}-as-viz-prompt-file", "not-a-file", f"viz {RUN} --out out/v.html --prompt-file {path}", said, **kw)
    case(f"{kind}-as-plot-bench", "not-a-file", f"plot {RUN} --out out/p --bench {path}", said, **kw)
    case(f"{kind}-as-viz-board", "not-a-file", f"viz {BOARD_M} --out out/v.html --board {path}", said, **kw)
    case(f"{kind}-as-inspect-data", "not-a-file", f"inspect {RUN} --out out/i --data {path}", said, INSPECT, **kw)
    case(f"{kind}-as-convert-checkpoint", "not-a-file", f"convert {path} out/c", said, **kw)
    if kind != "folder":  # a folder is valid there: of text files, a model folder
        case(f"{kind}-as-train-data", "not-a-file", "train", said, TINY, f"--set task.data={path} {PC}", **kw)
        case(f"{kind}-as-eval-data", "not-a-file", f"eval {RUN} --data {path}", said, EVAL, **kw)
        case(f"{kind}-as-info-source", "not-a-file", f"info {path}", said, **kw)
        case(f"{kind}-as-resume-folder", "not-a-file", f"train --resume {path}", "not a folder", **kw)
        case(f"{kind}-as-runs-folder", "not-a-file", f"runs {path}", "not a folder", **kw)
        case(f"{kind}-as-init-from", "not-a-file", "train", "not a folder", TINY, f"--set train.init_from={path}", **kw)
ok("folder-of-texts-as-eval-data-ok", f"eval {RUN} --data fx/sw/texts", EVAL)
ok("folder-of-texts-as-train-data-ok", "train", TINY, f"--set task.data=fx/sw/texts {PC}")

# ---------------------------------------------------------------------------------------------- a second writer
BUSY = "fx/sw/run4"
for id, argv, extra in (
    ("resume", f"train --resume {BUSY} --set train.max_steps=5", []),
    ("run-dir-overwrite", f"train --run-dir {BUSY} --overwrite", TINY),
    ("bench-resume", f"bench recall --out {BUSY} --resume", BENCH),
    ("experiment-merge", f"experiment merge --quick --out {BUSY} --overwrite", []),
):
    case(
        f"concurrent-{id}",
        "concurrent",
        argv,
        "one writer at a time",
        extra,
        also=("in use by pid",),
        setup=held(BUSY),
        follow=follow_stopping_the_holder if id == "resume" else None,
        follow_check=exists(f"{BUSY}/checkpoints/step-5") if id == "resume" else None,
    )
case(
    "concurrent-scaling-resume",
    "concurrent",
    "experiment scaling --out fx/sw/scaling-cut --resume",
    "one writer at a time",
    SCALING,
    setup=held("fx/sw/scaling-cut"),
)
case(  # a worker of an earlier attempt (its parent killed) still trains into a run folder
    "concurrent-bench-resume-a-run-held",
    "concurrent",
    "bench recall --out fx/sw/bench-cut --resume",
    "one writer at a time",
    BENCH,
    also=("in use by pid", "N32-D2-w8-lr0.001-s0"),
    setup=held("fx/sw/bench-cut/runs/bdh/N32-D2-w8-lr0.001-s0"),
    follow=follow_stopping_the_holder,
    follow_check=exists("fx/sw/bench-cut/results.md"),
)
for id, argv in (
    ("generate", f"generate {BUSY} --prompt hi {' '.join(GEN)}"),
    ("eval", f"eval {BUSY} {' '.join(EVAL)}"),
    ("runs", f"runs {BUSY}"),
    ("viz", f"viz {BUSY} --out out/v.html --prompt hi"),
    ("merge", f"merge {BUSY} {BDH_A} out/m"),
):
    ok(f"concurrent-reader-{id}-ok", argv, setup=held(BUSY))

# ---------------------------------------------------------------------------------------------- huge numbers
HUGE = "9" * 30
for key in ("train.max_steps", "train.batch_size", "eval.batches", "checkpoint.keep", "sample.max_new_tokens"):
    case(f"huge-{key}", "huge-number", "train", key, TINY, f"--set {key}={HUGE} {PC}")
case(
    "huge-model-n-layer",
    "huge-number",
    "train",
    "model",
    TINY,
    f"--set model.n_layer={2**32} {PC}",
    also=("give a smaller model",),
    follow=follow_replacing(f"model.n_layer={2**32}", "model.n_layer=2", "model.n_layer"),
)
case("huge-model-n-neurons", "huge-number", "train", "model", TINY, f"--set model.n_neurons={2**40} {PC}")
case(
    "huge-batch-memory",
    "huge-number",
    "train",
    "train.micro_batch_size",
    TINY,
    f"--set train.batch_size={2**24} --set task.seq_len=64 {PC}",
    follow=lambda line, case: [*case.argv, "--set", "train.micro_batch_size=2"],
)
case("huge-task-seq-len", "huge-number", "train", "seq_len", TINY, f"--set task.seq_len={HUGE} {PC}")
case("huge-generate-max-new-tokens", "huge-number", f"generate {RUN} --max-new-tokens {HUGE}", "--max-new-tokens")
case("huge-generate-seed", "huge-number", f"generate {RUN} --seed {HUGE}", "--seed", GEN)
case("huge-eval-batches", "huge-number", f"eval {RUN} --device cpu --batches {HUGE}", "--batches")
case("huge-eval-batch-size", "huge-number", f"eval {RUN} --device cpu --batches 1 --batch-size {HUGE}", "--batch-size")
case("huge-info-n-layer", "huge-number", f"info --n-layer {HUGE}", "--n-layer")
case("huge-corpus-size", "huge-number", f"corpus out/c.txt --size {HUGE}KB", "--size")
case("huge-bench-steps", "huge-number", "bench recall --out out/b", "--steps", BENCH, f"--steps {HUGE}")
case("huge-bench-widths", "huge-number", "bench recall --out out/b", "--widths", BENCH, f"--widths {HUGE}")
case("huge-scaling-steps", "huge-number", f"experiment scaling --quick --show-config --set steps={HUGE}", "steps")
case("huge-inspect-tokens", "huge-number", f"inspect {RUN} --out out/i", "--tokens", INSPECT, f"--tokens {HUGE}")
case("huge-viz-hubs", "huge-number", f"viz {RUN} --out out/v.html --prompt hi --hubs {HUGE}", "--hubs")
case(  # each count within its bounds, together more than memory holds: refused before numpy allocates
    "huge-dmft-probe-steps-memory",
    "huge-number",
    f"dmft probe {RUN} --out out/d",
    "--steps",
    PROBE,
    "--steps 1000000 --temperatures 0.5:1.5:20000",  # 0.9 TiB
    also=("GiB available",),
)
case("huge-dmft-probe-steps", "huge-number", f"dmft probe {RUN} --out out/d", "--steps", PROBE, f"--steps {HUGE}")
# a count of the mean-field lab past its declared bound (below 2^63, but it would run for days): refused at once,
# the flag and the range named, however the number is written
DMFT = {
    "bifurcation": "dmft bifurcation --out out/d --beta 1",
    "trajectory": "dmft trajectory --out out/d --beta 1",
    "convergence": "dmft convergence --out out/d --n 3,6",
    "probe": f"dmft probe {RUN} --out out/d --temperatures 1",
}
for command, flag, value, bounds in (
    ("bifurcation", "--steps", "1000000000000000", "[1, 10000000]"),
    ("bifurcation", "--steps", "1e15", "[1, 10000000]"),
    ("bifurcation", "--keep", "1e15", "[1, 1000000]"),
    ("bifurcation", "--lyap-steps", "1e15", "[1, 1000000]"),
    ("trajectory", "--steps", "1e15", "[1, 10000000]"),
    ("trajectory", "--max-lag", "1e15", "[1, 1000000]"),
    ("convergence", "--steps", "1e15", "[1, 10000000]"),
    ("convergence", "--seeds", "1000000000000000", "[1, 1000]"),
    ("probe", "--steps", "1e15", "[8, 1000000]"),
    ("probe", "--transient", "1000000000000000", "[0, 1000000]"),
):
    case(
        f"huge-dmft-{command}-{flag[2:]}-{value}", "huge-number", DMFT[command], flag, f"{flag} {value}", also=(bounds,)
    )
for command, flag in (("bifurcation", "--beta"), ("trajectory", "--beta"), ("probe", "--temperatures")):
    case(f"huge-dmft-{command}-{flag[2:]}-count", "huge-number", DMFT[command], flag, f"{flag} 0:3:1000000000000000")

# ---------------------------------------------------------------------------------------------- wrong types
for setting, key in (
    ("train.max_steps=[1]", "train.max_steps"),
    ("optim.lr=true", "optim.lr"),
    ("model.n_layer=2.5", "model.n_layer"),
    ("task.seq_len='16'", "task.seq_len"),
    ("train.device=1", "train.device"),
    ("log.progress=7", "log.progress"),
    ("sample.prompt=[a]", "sample.prompt"),
    ("train=5", "train"),
    ("model=[1,2]", "model"),
    ("name=[x]", "name"),
):
    case(f"type-set-{key}-{setting.partition('=')[2]}", "wrong-type", ["train", *TINY, "--set", setting, PC], key)
case("type-config-section-scalar", "wrong-type", f"train fx/cfg/wrong-type.yaml {PC}", "max_steps")
case("type-generate-max-new-tokens", "wrong-type", f"generate {RUN} --max-new-tokens 1.5", "--max-new-tokens")
case("type-info-n-layer", "wrong-type", "info --n-layer 2.5", "--n-layer")
case("type-bench-seeds", "wrong-type", "bench recall --out out/b", "--seeds", BENCH, "--seeds 1.5")
case("type-bench-widths", "wrong-type", "bench recall --out out/b", "--widths", BENCH, "--widths eight")
case("type-experiment-lrs", "wrong-type", "experiment scaling --quick --show-config --set lrs=abc", "lrs")
case("type-experiment-seeds", "wrong-type", "experiment scaling --quick --show-config --set seeds=1.5", "seeds")
case(
    "type-experiment-n-neurons", "wrong-type", "experiment scaling --quick --show-config --set n_neurons=x", "n_neurons"
)

# ---------------------------------------------------------------------------------------------- missing folders
case("missing-data-folder", "missing", "train", "fx/nope", TINY, f"--set task.data=fx/nope/ {PC}")
case(
    "missing-init-from-checkpoint",
    "missing",
    "train",
    "step-99",
    TINY,
    f"--set train.init_from={RUN}/checkpoints/step-99",
)
case("missing-eval-data-folder", "missing", f"eval {RUN} --data fx/nope/", "fx/nope", EVAL)
case("missing-generate-best", "missing", f"generate {RUN}/nope/best", "nope", GEN)
case("missing-runs-folder", "missing", "runs fx/nope/runs", "fx/nope")
case("missing-resume-checkpoint-folder", "missing", f"train --resume {RUN} --checkpoint step-7", "step-7")
ok("missing-run-dir-parents-made-ok", "train --run-dir out/a/b/c", TINY, check=exists("out/a/b/c/checkpoints/step-1"))
ok(
    "missing-bench-out-resume-starts-ok",
    "bench recall --out out/new --resume",
    BENCH,
    check=exists("out/new/results.md"),
)

# ---------------------------------------------------------------------------------------------- read-only folders
RO = "fx/readonly"
for id, argv, extra in (
    ("bench-out", f"bench recall --out {RO}/b", BENCH),
    ("scaling-out", f"experiment scaling --out {RO}/s", SCALING),
    ("plot-out", f"plot {RUN} --out {RO}/p", []),
    ("inspect-out", f"inspect {RUN} --out {RO}/i", INSPECT),
    ("synapses-out", f"synapses {RUN} --out {RO}/s --search 4 --heldout 4 --top 1", []),
    ("dmft-probe-out", f"dmft probe {RUN} --out {RO}/d", PROBE),
    ("corpus-out", f"corpus {RO}/c.txt --size 1KB", []),
):
    case(f"readonly-{id}", "read-only", argv, "readonly", extra, root_skip=True, setup=readonly_folder)
case(
    "readonly-run-resume",
    "read-only",
    f"train --resume {RUN4} --set train.max_steps=5",
    "run4",
    root_skip=True,
    setup=readonly(RUN4),
)
case(
    "readonly-run-checkpoints",
    "read-only",
    f"train --resume {RUN4} --set train.max_steps=5",
    "checkpoints",
    root_skip=True,
    setup=readonly(f"{RUN4}/checkpoints"),
    changes=("sw/run4/metrics.jsonl", "sw/run4/config.yaml", "sw/run4/best"),
)
for id, argv in (
    ("generate", f"generate {RUN4} --prompt hi {' '.join(GEN)}"),
    ("eval", f"eval {RUN4} {' '.join(EVAL)}"),
):
    ok(f"readonly-run-{id}-ok", argv, root_skip=True, setup=readonly(RUN4))

# ---------------------------------------------------------------------------------------------- advice followed
case(
    "advice-finished-run-rerun",
    "advice",
    f"train --run-dir {RUN}",
    "fx/run",
    TINY,
    also=(f"bdh train --resume {RUN}",),
    follow=follow_command,
    follow_check=lambda out, err, cwd: _train_longer(out, cwd),
)


def _train_longer(out: bytes, cwd: Path) -> None:
    """The next advice, 'nothing to do (to train longer: bdh train --resume R --set train.max_steps=M with M > 2)',
    followed with M = 3."""
    line = out.decode()
    assert "nothing to do" in line, line
    argv = [w.replace("=M", "=3") for w in advised_command(line.split("to train longer: ")[1].split(" with M")[0])]
    assert run_main(argv) == 0 and (cwd / RUN / "checkpoints" / "step-3").is_dir(), argv


case(
    "advice-resume-shorter-than-checkpoint",
    "advice",
    f"train --resume {RUN4} --set train.max_steps=3",
    "train.max_steps",
    also=("step 4",),
    follow=follow_replacing("train.max_steps=3", "train.max_steps=5", "reaches step 4"),
    follow_check=exists(f"{RUN4}/checkpoints/step-5"),
)
case(
    "advice-unknown-key",
    "advice",
    ["train", *TINY, "--set", "optim.lrr=0.01", PC],
    "optim.lrr",
    also=("did you mean 'lr'",),
    follow=follow_suggestion,
)
case(
    "advice-set-with-a-space",
    "advice",
    ["train", "--set", "optim.lr", "0.01", PC],
    "--set optim.lr=0.01",
    follow=lambda line, case: ["train", *shlex.split(line.rpartition(", ")[2]), PC],
)
for id, argv, out in (
    ("merge", f"merge {BDH_A} fx/models/bdh-b {FULL}", "full"),
    ("corpus", f"corpus {NOTES} --size 1KB", "notes.txt"),
    ("viz", f"viz {RUN} --out {PRECIOUS} --prompt hi", "precious.txt"),
    ("inspect", f"inspect {RUN} --out {FULL} {' '.join(INSPECT)}", "full"),
    (
        "convert",
        f"convert {OFFICIAL} {FULL} --n-layer 1 --n-embd 16 --n-head 2 --mlp-internal-dim-multiplier 4",
        "full",
    ),
    ("dmft", f"dmft bifurcation --out {FULL} --beta 1 --steps 20 --keep 10 --lyap-steps 10", "full"),
):
    case(f"advice-{id}-overwrite", "advice", argv, out, also=("--overwrite",), follow=follow_adding("--overwrite"))
case(
    "advice-checkpoint-without-resume",
    "advice",
    f"train --checkpoint step-2 {PC}",
    "--checkpoint",
    also=("--resume RUN_DIR",),
    follow=follow_adding(f"--resume {RUN}"),
    needs=(RUN,),
)
case(
    "advice-eval-model-folder-needs-data",
    "advice",
    f"eval {BDH_A}",
    "models/bdh",
    EVAL,
    also=("--data",),
    follow=follow_adding(f"--data {TEXT}"),
    needs=(TEXT,),
)
case(
    "advice-scaling-foreign-resume",
    "advice",
    f"experiment scaling --out {FULL} --resume",
    "fx/full",
    SCALING,
    also=("give another --out",),
    follow=follow_replacing(FULL, "out/s", "give another --out"),
    follow_check=exists("out/s/report.md"),
)

# ---------------------------------------------------------------------------------------------- the command's inputs
# --overwrite of an output that is, or holds, one of the command's own inputs: refused before anything is deleted
OVER = "--overwrite"
for id, argv, said in (
    ("train-data-in-run-dir", f"train --run-dir {RUN} {OVER} --set task.data={RUN}/config.yaml", "contains"),
    ("train-init-from-in-run-dir", f"train --run-dir {RUN} {OVER} --set train.init_from={RUN}/best", "contains"),
    ("train-init-from-run-dir", f"train --run-dir {RUN} {OVER} --set train.init_from={RUN}", "is"),
    ("train-config-in-run-dir", f"train {RUN}/config.yaml --run-dir {RUN} {OVER}", "contains"),
    ("length-text-model-out", f"experiment length --quick --out {BDH_A} {OVER} --set text_models=[{BDH_A}]", "is"),
    (
        "length-text-model-in-out",
        f"experiment length --quick --out fx/models {OVER} --set text_models=[{BDH_A}]",
        "contains",
    ),
    ("scaling-data-in-out", f"experiment scaling --quick --set data={TEXT} --out fx/data {OVER}", "contains"),
):
    extra = TINY if argv.startswith("train") else []
    case(f"own-input-{id}", "own-input", argv, f"{said} an input of this command", extra)


def loop(rel: str = "out/loop") -> Callable[[Path], None]:
    """A setup: ``rel``, a symbolic link to itself (every path through it loops)."""

    def make(cwd: Path) -> None:
        os.symlink(Path(rel).name, cwd / rel)

    return make


for id, argv in (
    ("train-run-dir", ["train --run-dir out/loop", TINY]),
    ("train-run-dir-inside", ["train --run-dir out/loop/run", TINY]),
    ("bench-out", ["bench recall --out out/loop", BENCH]),
    ("experiment-out", ["experiment scaling --out out/loop", SCALING]),
    ("inspect-out", [f"inspect {RUN} --out out/loop", INSPECT]),
    ("merge-out", [f"merge {BDH_A} fx/models/bdh-b out/loop"]),
):
    case(f"loop-{id}", "not-a-file", argv[0], "out/loop", *argv[1:], also=("loops",), setup=loop())

# a ledger's score a run cannot record: refused, never counted (nan was dropped and another learning rate won)
for name, said in (("acc-nan", "accuracy 'nan'"), ("acc-5", "accuracy '5.0'"), ("acc-1e308", "accuracy '1e308'")):
    case(
        f"damaged-bench-ledger-{name}",
        "damaged",
        f"bench recall --out fx/sw/bench-ledger-{name} --resume",
        "runs.csv",
        BENCH,
        also=("line 2", said, "[0, 1]"),
    )
# a length experiment's record cut, emptied, not its object, binary, a row twice, a score nan: named with the
# command that rebuilds it, never an internal error on --resume
for name, said in (
    ("cut", "is not JSON"),
    ("empty", "is not JSON"),
    ("list", "not an object"),
    ("object", "has no model"),
    ("binary", "is not text"),
    ("dup", "a second time"),
    ("nan", "not a finite number"),
):
    case(
        f"damaged-length-record-{name}",
        "damaged",
        f"experiment length --quick --out fx/sw/len-{name} --resume",
        "results/bdh-induction-s0.json",
        also=(said, f"bdh experiment length --out fx/sw/len-{name} --resume"),
    )

case(  # a --quick folder resumed without --quick: the command that continues it keeps --quick
    "advice-length-resume-keeps-quick",
    "advice",
    "experiment length --out fx/sw/len-dup --resume",
    "fx/sw/len-dup",
    also=("bdh experiment length --quick --out fx/sw/len-dup --resume",),
    follow=follow_command,
    follow_exit=2,
    follow_check=stderr_has("a second time"),
)
for name in ("damping", "n-layer"):  # bdh info describes config.json: an edit the weights do not match is said
    ok(f"damaged-edited-{name}-info-warns-ok", f"info fx/sw/edited-{name}", check=stderr_has("saved with"))

# ---------------------------------------------------------------------------------------------- refused before a step
# every field a length run will use, checked before its first training step (they failed after hours of training)
LENGTH = "experiment length --quick --out out/l --set"
for id, sets, name, also in (
    ("text-model-not-json", "text_models=[fx/bad/not-json]", "length.text_models", ("not-json",)),
    ("text-model-other-vocab", f"text_models=[{BOARD_M}]", "length.text_models", ("5 tokens",)),
    ("text-model-tampered", "text_models=[fx/tampered-run/best]", "length.text_models", ("checksum",)),
    ("short-len-for-pairs", "recall_pairs=6 --set short_steps=5 --set short_len=16", "length.short_len", ("pairs",)),
    ("max-length", f"max_length={2**40}", "length.max_length", ("GiB",)),
    ("test-sequences", "test_sequences=1000000000000", "length.test_sequences", ("2**16",)),
    ("device", "device=nonsense", "length.device", ("nonsense",)),
    ("lr-at-t-alone", "lr_at_t=0.01", "length.lr_at_t", ("short_steps",)),
    ("batch-at-t-alone", "batch_at_t=4", "length.batch_at_t", ("short_steps",)),
):
    named = re.findall(r"\[(fx/[^]]+)\]", sets)  # a list's paths: not found by the fixture copy
    case(f"before-training-length-{id}", "before-training", f"{LENGTH} {sets}", name, also=also, needs=tuple(named))


# ------------------------------------------------------------------------------------ the capacity map's new options
# every option the capacity map added (the length experiment's facts axis and zoo sizing, the delta rule's write
# options, inspect --recall/--pairs) fed a bad value through the command line: one line naming it. A table of its
# own (not a kind of the sweep's counts above); each case is cheap: refused before any work.
OPTIONS = CaseTable()
DELTA = f"train {' '.join(TINY)} {PC} --set model.state_write=delta --set"
for id, argv, name, also in (
    ("facts-zero", f"{LENGTH} facts=[0]", "length.facts", (">= 1",)),
    ("facts-word", f"{LENGTH} facts=[x]", "length.facts", ("'x'",)),
    ("facts-repeated", f"{LENGTH} facts=[2,2]", "length.facts", ("repeated",)),
    ("facts-past-the-vocabulary", f"{LENGTH} facts=[100]", "length.facts", ("recall_vocab",)),
    ("facts-without-recall", f"{LENGTH} tasks=[induction] --set facts=[4]", "length.facts", ("recall_gap",)),
    ("facts-read-zero", f"{LENGTH} facts_read=[0]", "length.facts_read", (">= 1",)),
    ("facts-read-repeated", f"{LENGTH} facts_read=[4,4]", "length.facts_read", ("repeated",)),
    ("facts-read-past-the-vocabulary", f"{LENGTH} facts_read=[100]", "length.facts_read", ("recall_vocab",)),
    ("facts-read-without-recall", f"{LENGTH} tasks=[induction] --set facts_read=[4]", "length.facts_read", ()),
    ("zoo-match-unknown", f"{LENGTH} zoo_match=states", "length.zoo_match", ("params, state",)),
    ("zoo-match-list", f"{LENGTH} zoo_match=[state]", "length.zoo_match", ("string",)),
    ("write-topk-zero", f"{DELTA} model.write_topk=0", "model.write_topk", (">= 1",)),
    ("write-topk-past-the-neurons", f"{DELTA} model.write_topk=1000", "write_topk", ("neurons per head",)),
    ("write-topk-signed", f"{DELTA} model.write_topk=2 --set model.write_keys=signed", "write_topk", ("unit",)),
    ("write-topk-without-delta", f"train {' '.join(TINY)} {PC} --set model.write_topk=2", "write_topk", ("delta",)),
    ("write-keys-unknown", f"{DELTA} model.write_keys=positive", "model.write_keys", ("centred, signed",)),
    (
        "write-keys-centred-without-delta",
        f"train {' '.join(TINY)} {PC} --set model.write_keys=centred",
        "write_keys",
        (),
    ),
    ("write-keys-signed-without-delta", f"train {' '.join(TINY)} {PC} --set model.write_keys=signed", "write_keys", ()),
    ("write-gate-annealed-alone", f"{DELTA} model.write_gate=annealed", "gate_anneal_steps", ("both",)),
    (
        "write-gate-annealed-without-delta",
        f"train {' '.join(TINY)} {PC} --set model.write_gate=annealed",
        "write_gate",
        (),
    ),
    ("gate-anneal-steps-zero", f"{DELTA} model.write_gate=annealed --set model.gate_anneal_steps=0", "gate_anneal", ()),
    ("gate-anneal-steps-fraction", f"{DELTA} model.write_gate=annealed --set model.gate_anneal_steps=1.5", "1.5", ()),
    ("gate-anneal-steps-alone", f"{DELTA} model.gate_anneal_steps=100", "gate_anneal_steps", ("annealed",)),
    ("recall-too-short", f"inspect {BDH_A} --recall 3", "--recall", ()),
    ("recall-word", f"inspect {BDH_A} --recall long", "--recall", ("long",)),
    ("recall-no-room-for-the-pairs", f"inspect {BDH_A} --recall 40 --pairs 16", "--pairs", ()),
    ("pairs-zero", f"inspect {BDH_A} --recall 1024 --pairs 0", "--pairs", ()),
    ("pairs-huge", f"inspect {BDH_A} --recall 1024 --pairs {2**64}", "--pairs", ()),
):
    OPTIONS.case(f"capacity-map-{id}", "value", argv, name, also=also)


@pytest.mark.parametrize("case", OPTIONS.cases, ids=[c.id for c in OPTIONS.cases])
def test_the_capacity_map_s_options_refuse_bad_values_in_one_line(
    case: Case, sweep_pristine: Path, tmp_path: Path, monkeypatch, capsysbinary
):
    run_case(case, sweep_pristine, tmp_path / "case", monkeypatch, capsysbinary)


def _assert(cond: bool, message: object) -> None:
    assert cond, message


# ---------------------------------------------------------------------------------------------- the table's tests


@pytest.fixture(scope="module")
def sweep_pristine(pristine, tmp_path_factory) -> Path:
    """The bad-input fixture tree with the sweep's own states added under fx/sw/ (built once)."""
    fx = tmp_path_factory.mktemp("sweep") / "fx"
    shutil.copytree(pristine, fx, symlinks=True)
    return build_sweep_fixtures(fx)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_sweep(case: Case, sweep_pristine: Path, tmp_path: Path, monkeypatch, capsysbinary):
    run_case(case, sweep_pristine, tmp_path / "case", monkeypatch, capsysbinary)


def test_the_sweep_is_large_and_every_kind_is_there():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]
    assert len(CASES) + len(SIGNALLED) >= 100
    kinds = set(TABLE.counts()) | {"interrupted"}
    want = {"interrupted", "damaged", "not-a-file", "concurrent", "huge-number", "wrong-type", "missing", "read-only"}
    assert want <= kinds, want - kinds
    assert sum(1 for c in CASES if c.follow) >= 20  # advice followed


def test_the_docs_give_the_counts_of_the_sweep():
    """CONTRIBUTING.md's table of the sweep: one row per kind with its count (in-process cases + signalled)."""
    text = (Path(__file__).resolve().parents[2] / "CONTRIBUTING.md").read_text(encoding="utf-8")
    counts = TABLE.counts()
    counts["interrupted"] = counts.get("interrupted", 0) + len(SIGNALLED)
    for kind, n in counts.items():
        assert re.search(rf"^\| `{re.escape(kind)}` \| {n} \|", text, re.M), f"CONTRIBUTING.md: | `{kind}` | {n} |"
    advice = sum(1 for c in CASES if c.follow) + sum(1 for s in SIGNALLED if s.follows)
    assert re.search(rf"\b{advice} pieces of advice\b", text), f"CONTRIBUTING.md: {advice} pieces of advice"


# ---------------------------------------------------------------------------------------------- real signals

#: ``bdh ARGV`` that pauses at ``module:function`` (announcing PAUSED on stderr) so that a signal lands there
PAUSING = """
import importlib, sys, time
module, name = sys.argv[1].rsplit(":", 1)
mod = importlib.import_module(module)
real = getattr(mod, name)
def paused(*args, **kwargs):
    print("PAUSED", file=sys.stderr, flush=True)
    time.sleep(120)
    return real(*args, **kwargs)
setattr(mod, name, paused)
from bdh.cli import main
sys.exit(main(sys.argv[2:]))
"""


@dataclasses.dataclass(frozen=True)
class Signalled:
    """``bdh ARGV`` stopped by ``sig`` where it pauses at ``at`` (a ``module:function``), or once stderr shows
    ``after`` (a line of its own log): it exits with 128 + sig and says ``said``; ``follows``: the command it
    prints to continue is run and must finish (exit 0), leaving ``leaves``."""

    id: str
    argv: tuple[str, ...]
    sig: int
    said: tuple[str, ...]
    at: str | None = None
    after: str | None = None
    follows: bool = False
    leaves: str | None = None


SIGNALLED = [
    Signalled(
        "generate-sigterm",
        ("generate", RUN, "--prompt", "hi", *GEN),
        signal.SIGTERM,
        ("bdh: interrupted (SIGTERM)",),
        at="bdh.cli.train_cmds:_stream_bytes",
    ),
    Signalled(
        "eval-sigterm",
        ("eval", RUN, *EVAL),
        signal.SIGTERM,
        ("interrupted (SIGTERM)",),
        at="bdh.train.evaluate:evaluate",
    ),
    Signalled(
        "train-sigterm-during-setup",
        ("train", "--run-dir", "out/r", *TINY),
        signal.SIGTERM,
        ("interrupted (SIGTERM)",),
        at="bdh.train.runtime.device:check_fits",
    ),
    Signalled(
        "bench-sigterm-during-a-run",
        ("bench", "recall", "--out", "out/b", *BENCH[:-4], "--lrs", "1e-3", "--widths", "8", "--steps", "150"),
        signal.SIGTERM,
        ("bench recall interrupted (SIGTERM)", "continue with: bdh bench recall"),
        after="bench recall [1/1]",
        follows=True,
        leaves="out/b/results.md",
    ),
    Signalled(
        "bench-sigint-after-the-last-run",
        ("bench", "recall", "--out", "out/b", *BENCH),
        signal.SIGINT,
        ("bench recall interrupted (SIGINT)", "the finished runs are kept in out/b/runs.csv"),
        at="bdh.bench.runner:_write_results",
        follows=True,
        leaves="out/b/results.md",
    ),
    Signalled(
        "scaling-sigterm-after-the-last-run",
        ("experiment", "scaling", "--out", "out/s", *SCALING),
        signal.SIGTERM,
        ("experiment scaling interrupted (SIGTERM)", "continue with: bdh experiment scaling"),
        at="bdh.experiments.scaling.report:write_report",
        follows=True,
        leaves="out/s/report.md",
    ),
    Signalled(
        "scaling-sigint-during-a-run",
        ("experiment", "scaling", "--out", "out/s", *SCALING, "--set", "steps=300"),
        signal.SIGINT,
        ("experiment scaling interrupted (SIGINT)", "continue with: bdh experiment scaling"),
        after="scaling plan",
    ),
]


def _sigint_as_at_a_terminal() -> None:
    """The child's SIGINT as a command typed at a terminal has it: a test suite started as a shell's background
    job (``cmd &``) inherits SIGINT ignored, which the child would keep, and then Ctrl-C would never reach it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(proc: subprocess.Popen, word: str, timeout: float = 120) -> list[str]:
    """Read stderr lines until one holds ``word``; the lines read."""
    lines: list[str] = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            raise AssertionError(f"the process ended before {word!r}: {''.join(lines)}")
        lines.append(line)
        if word in line:
            return lines
    raise AssertionError(f"no {word!r} within {timeout} s")


@pytest.mark.parametrize("s", SIGNALLED, ids=[s.id for s in SIGNALLED])
def test_signalled(s: Signalled, sweep_pristine: Path, tmp_path: Path, monkeypatch, capsysbinary):
    from .bad_input_cases import make_workdir

    cwd = make_workdir(sweep_pristine, tmp_path / "case", monkeypatch, s.argv)
    driver = ["-c", PAUSING, s.at] if s.at else ["-m", "bdh"]
    proc = subprocess.Popen(
        [sys.executable, *driver, *s.argv],
        cwd=cwd,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_as_at_a_terminal,
    )
    try:
        before = _wait_for(proc, "PAUSED" if s.at else s.after)
        proc.send_signal(s.sig)
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "".join(before) + rest
    assert proc.returncode == 128 + s.sig, f"exit {proc.returncode}: {err}"
    assert "Traceback" not in err, err
    last = [line for line in err.splitlines() if line.startswith("bdh:")]
    assert len(last) == 1 and err.rstrip().endswith(last[0]), err  # one line, the last
    for word in s.said:
        assert word in last[0], (word, last[0])
    leftovers = [p for p in cwd.rglob(".*.tmp")]
    assert not leftovers, leftovers
    if s.follows:
        argv = advised_command(last[0])
        capsysbinary.readouterr()
        code = run_main(argv, limit=120)
        out = capsysbinary.readouterr()
        assert code == 0, out.err.decode(errors="replace")
        assert s.leaves is None or (cwd / s.leaves).exists(), s.leaves


def test_one_line_problems_is_the_suites_rule():
    """The rule the cases are held to refuses two lines and a missing prefix (so that a case can fail)."""
    assert one_line_problems("bdh: error: x\n", "x", ()) == []
    assert one_line_problems("bdh: error: x\nmore\n", "x", ())
    assert one_line_problems("error: x\n", "x", ())
    assert one_line_problems("bdh: error: x\n", "y", ())
