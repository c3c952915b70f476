"""Bad input to every ``bdh`` command: one line on stderr, exit status 2, and the user's files untouched.

A table of cases drives the real command line in this process (``bdh.cli.main``), each run and checked by
`bad_input_cases.run_case` (the exit status, one line naming the offending value, flag or file, no traceback,
the fixture tree of `bad_input_fixtures` byte-identical afterwards).

Then: internal errors (exit 1, one line naming a file that holds the traceback; ``--debug`` propagates),
a few cases with real argv bytes in a subprocess, and Hypothesis properties of ``--set`` values.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from bdh.cli import main

from .bad_input_cases import (
    RO,
    Case,
    CaseTable,
    changed,
    make_workdir,
    one_line_problems,
    readonly_folder,
    run_case,
    run_main,
    unlock,
)
from .bad_input_fixtures import TINY_TRAIN, set_args, snapshot

# ---------------------------------------------------------------------------------------------- the case table

#: fixture paths, relative to each case's cwd
RUN = "fx/run"
TAMPERED = "fx/tampered-run"
BDH_A = "fx/models/bdh"
BDH_B = "fx/models/bdh-b"
BDH_1L = "fx/models/bdh-1layer"
GPT = "fx/models/gpt"
BOARD_M = "fx/models/board"
LONG_FILE = "fx/long-prompt.txt"
SPACEY = "fx/my models/modèle ü"
SPACEY_NOTES = "fx/my models/notes ü.txt"
RANDOM_W = "fx/bad/random-weights"
TRUNC = "fx/bad/truncated"
EMPTY_W = "fx/bad/empty-weights"
NOT_JSON = "fx/bad/not-json"
UNKNOWN_T = "fx/bad/unknown-type"
EMPTY_DIR = "fx/bad/empty-folder"
PNG_PT = "fx/bad/image.pt"
EMPTY_PT = "fx/bad/empty.pt"
EMPTY_TXT = "fx/bad/empty.txt"
TRUNC_PT = "fx/bad/truncated.pt"
OFFICIAL = "fx/official.pt"
TEXT = "fx/data/text.txt"
PROMPT_BIN = "fx/prompt.bin"
PRECIOUS = "fx/precious.txt"
NOTES = "fx/notes.txt"
FULL = "fx/full"

#: small settings appended to a command so that, if a check is missing, the work it then starts is short
GEN = ["--max-new-tokens", "2", "--device", "cpu"]
EVAL = ["--batches", "1", "--device", "cpu"]
INSPECT = ["--no-figures", "--tokens", "8", "--windows", "1", "--max-nodes", "16", "--seeds", "1"]
BIF = ["--beta", "1", "--steps", "20", "--keep", "10", "--lyap-steps", "10"]
TRAJ = ["--beta", "1", "--steps", "20", "--keep", "10", "--lyap-steps", "10", "--max-lag", "5"]
CONV = ["--n", "3,6", "--seeds", "1", "--steps", "10", "--keep", "5"]
PROBE = ["--temperatures", "1", "--steps", "8", "--transient", "2", "--features", "2"]
BENCH = ["--quick", "--models", "bdh", "--steps", "1", "--seeds", "0", "--lrs", "1e-3", "--widths", "8"]
SYN = ["--search", "4", "--heldout", "4", "--top", "1"]
TINY_SET = set_args([*TINY_TRAIN, "train.max_steps=1"])

#: a prompt far beyond any sensible viewer limit
LONG_PROMPT = "a" * 20_000
#: a prompt of bytes that are not UTF-8, as Python hands them to main() (surrogate escapes)
NON_UTF8 = os.fsdecode(b"\xff\xfe")


TABLE = CaseTable()
case, ok, CASES = TABLE.case, TABLE.ok, TABLE.cases
_readonly_folder = readonly_folder

EXISTS = ("--overwrite",)  # what a refused existing output must tell the user

# ---- the command line itself
case("bdh-unknown-global-flag", "flag", "--frobnicate info", "--frobnicate")
case("bdh-unknown-command", "flag", "infoo", "infoo")
# a mistyped flag: the nearest flag of that subcommand suggested, its own help named
case("generate-a-folder-of-runs", "missing", "generate fx", "holds no model", GEN, also=("the newest fx/run",))
case("train-mistyped-flag", "flag", "train --quik", "--quik", also=("did you mean '--quick'?", "'bdh train --help'"))
case(
    "dmft-mistyped-flag",
    "flag",
    "dmft bifurcation --stepz 3 --out out/d",
    "--stepz",
    also=("did you mean '--steps'?", "'bdh dmft bifurcation --help'"),
)

case("dmft-unknown-subcommand", "flag", "dmft nope --out out/d", "nope")
case("bench-no-suite", "flag", "bench", "recall")
case("bench-unknown-suite", "flag", "bench nosuch", "nosuch")
case("experiment-no-name", "flag", "experiment", "no-bptt")
case("experiment-unknown-name", "flag", "experiment nosuch", "nosuch")

# ---- info
ok("info-defaults-ok", "info")
ok("info-spacey-model-ok", ["info", SPACEY])
case("info-missing-source", "missing", "info fx/nope.json", "nope.json")
case("info-missing-source-nonascii", "odd-path", ["info", "fx/my models/absent é.json"], "absent é.json")
case("info-config-not-json", "corrupt", f"info {NOT_JSON}/config.json", "not-json")
case("info-folder-config-not-json", "corrupt", f"info {NOT_JSON}", "not-json")
case("info-empty-file", "empty", f"info {EMPTY_TXT}", "empty.txt")
case("info-png-file", "corrupt", f"info {PNG_PT}", "image.pt")
case("info-unknown-model-type", "corrupt", f"info {UNKNOWN_T}", "llama9000")
case("info-gpt-folder", "value", f"info {GPT}", "gpt")
case("info-empty-folder", "missing", f"info {EMPTY_DIR}", "empty-folder")
case("info-json-unknown-field", "value", "info fx/cfg/unknown-field.json", "n_layers")
case("info-json-wrong-type", "value", "info fx/cfg/bad-type.json", "n_layer")
case("info-json-not-an-object", "value", "info fx/cfg/list.json", "list.json")
case("info-n-head-zero", "number", "info --n-head 0", "--n-head")
case("info-n-layer-negative", "number", "info --n-layer -1", "--n-layer")
case("info-n-embd-non-numeric", "number", "info --n-embd wide", "--n-embd")
case("info-n-neurons-1e400", "number", "info --n-neurons 1e400", "--n-neurons")
case("info-batch-size-zero", "number", "info --batch-size 0", "--batch-size")
case("info-block-size-nan", "number", "info --block-size nan", "--block-size")
case("info-n-head-not-divisor", "number", "info --n-head 3", "n_head")
case("info-attention-bad-choice", "value", "info --attention flash", "flash")
case("info-unknown-flag", "flag", "info --n-layers 2", "--n-layers")

# ---- convert
CONV_FLAGS = "--n-layer 1 --n-embd 16 --n-head 2 --mlp-internal-dim-multiplier 4"
ok("convert-ok", f"convert {OFFICIAL} out/converted {CONV_FLAGS}")
ok("convert-spacey-out-ok", ["convert", OFFICIAL, "out/mes modèles/é ü"], CONV_FLAGS)
case("convert-missing-checkpoint", "missing", "convert fx/nope.pt out/c", "nope.pt", CONV_FLAGS)
case("convert-png-as-pt", "corrupt", f"convert {PNG_PT} out/c", "image.pt", CONV_FLAGS)
case("convert-empty-pt", "empty", f"convert {EMPTY_PT} out/c", "empty.pt", CONV_FLAGS)
case("convert-truncated-pt", "corrupt", f"convert {TRUNC_PT} out/c", "truncated.pt", CONV_FLAGS)
case(
    "convert-safetensors-as-pt", "corrupt", f"convert {BDH_A}/model.safetensors out/c", "model.safetensors", CONV_FLAGS
)
case("convert-folder-as-checkpoint", "missing", f"convert {BDH_A} out/c", "models/bdh", CONV_FLAGS)
case("convert-wrong-size-flags", "value", f"convert {OFFICIAL} out/c --n-embd 32 --n-head 2", "official.pt")
case("convert-vocab-size-nan", "number", f"convert {OFFICIAL} out/c --vocab-size nan", "--vocab-size")
case("convert-dropout-out-of-range", "number", f"convert {OFFICIAL} out/c --dropout 1.5", "--dropout")
case("convert-n-layer-zero", "number", f"convert {OFFICIAL} out/c --n-layer 0", "--n-layer")
case("convert-out-nonempty-folder", "exists", f"convert {OFFICIAL} {FULL}", "fx/full", CONV_FLAGS, also=EXISTS)
case("convert-out-existing-file", "exists", f"convert {OFFICIAL} {PRECIOUS}", "precious.txt", CONV_FLAGS)
case("convert-out-is-the-checkpoint", "is-input", f"convert {OFFICIAL} {OFFICIAL} --overwrite", "input", CONV_FLAGS)
case("convert-out-contains-the-checkpoint", "is-input", f"convert {OFFICIAL} fx --overwrite", "input", CONV_FLAGS)
case("convert-out-under-a-file", "readonly", f"convert {OFFICIAL} {PRECIOUS}/out", "precious.txt", CONV_FLAGS)
case(
    "convert-out-readonly-folder",
    "readonly",
    f"convert {OFFICIAL} {RO}/out",
    "readonly",
    CONV_FLAGS,
    root_skip=True,
    setup=_readonly_folder,
)

# ---- merge
ok("merge-ok", f"merge {BDH_A} {BDH_B} out/merged")
ok("merge-run-and-model-ok", f"merge {RUN} {BDH_B} out/merged")
ok("merge-spacey-paths-ok", ["merge", SPACEY, BDH_B, "out/sortie é/fusion ü"])
ok("merge-overwrite-ok", f"merge {BDH_A} {BDH_B} {FULL} --overwrite", changes=("full",))
case("merge-m-m-m", "is-input", f"merge {BDH_A} {BDH_A} {BDH_A}", "input")
case("merge-m-m-m-overwrite", "is-input", f"merge {BDH_A} {BDH_A} {BDH_A} --overwrite", "input")
case("merge-out-is-a", "is-input", f"merge {BDH_A} {BDH_B} {BDH_A} --overwrite", "input")
case("merge-out-is-b", "is-input", f"merge {BDH_A} {BDH_B} {BDH_B} --overwrite", "input")
case("merge-out-contains-inputs", "is-input", f"merge {BDH_A} {BDH_B} fx/models --overwrite", "input")
case("merge-out-is-the-run", "is-input", f"merge {RUN} {BDH_B} {RUN} --overwrite", "input")
case("merge-out-is-the-runs-best", "is-input", f"merge {RUN} {BDH_B} {RUN}/best --overwrite", "input")
case("merge-spacey-out-is-input", "odd-path", ["merge", SPACEY, BDH_B, SPACEY, "--overwrite"], "input")
case("merge-out-nonempty-folder", "exists", f"merge {BDH_A} {BDH_B} {FULL}", "fx/full", also=EXISTS)
case("merge-out-existing-file", "exists", f"merge {BDH_A} {BDH_B} {PRECIOUS}", "precious.txt")
case("merge-out-under-a-file", "readonly", f"merge {BDH_A} {BDH_B} {PRECIOUS}/out", "precious.txt")
case(
    "merge-out-readonly-folder",
    "readonly",
    f"merge {BDH_A} {BDH_B} {RO}/out",
    "readonly",
    root_skip=True,
    setup=_readonly_folder,
)
case("merge-missing-a", "missing", f"merge fx/nope {BDH_B} out/m", "fx/nope")
case("merge-missing-b", "missing", f"merge {BDH_A} fx/gone out/m", "fx/gone")
case("merge-missing-nonascii", "odd-path", ["merge", "fx/my models/absent ü", BDH_B, "out/m"], "absent ü")
case("merge-a-is-a-file", "missing", f"merge {PRECIOUS} {BDH_B} out/m", "precious.txt")
case("merge-random-weights", "corrupt", f"merge {RANDOM_W} {BDH_B} out/m", "random-weights")
case("merge-truncated-weights", "corrupt", f"merge {TRUNC} {BDH_B} out/m", "truncated")
case("merge-empty-weights", "corrupt", f"merge {EMPTY_W} {BDH_B} out/m", "empty-weights")
case("merge-config-not-json", "corrupt", f"merge {BDH_A} {NOT_JSON} out/m", "not-json")
case("merge-unknown-model-type", "corrupt", f"merge {BDH_A} {UNKNOWN_T} out/m", "llama9000")
case("merge-empty-folder", "missing", f"merge {EMPTY_DIR} {BDH_B} out/m", "empty-folder")
case("merge-gpt-model", "value", f"merge {GPT} {BDH_B} out/m", "GPT")
case("merge-weight-nan", "number", f"merge {BDH_A} {BDH_B} out/m --average --weight nan", "--weight")
case("merge-weight-2", "number", f"merge {BDH_A} {BDH_B} out/m --average --weight 2", "--weight")
case("merge-weight-non-numeric", "number", f"merge {BDH_A} {BDH_B} out/m --average --weight half", "--weight")
case("merge-unknown-flag", "flag", f"merge {BDH_A} {BDH_B} out/m --checkpoint step-2", "--checkpoint")
case("merge-missing-argument", "flag", f"merge {BDH_A} {BDH_B}", "out_dir")

# ---- train (every --set case prints the config only, or is tiny)
PC = "--print-config"
case("train-lr-nan", "set", f"train --set optim.lr=nan {PC}", "optim.lr")
case("train-lr-inf", "set", f"train --set optim.lr=inf {PC}", "optim.lr")
case("train-lr-1e400", "set", f"train --set optim.lr=1e400 {PC}", "optim.lr")
case("train-lr-negative", "set", f"train --set optim.lr=-0.001 {PC}", "optim.lr", also=("> 0, got -0.001",))
case("train-lr-non-numeric", "set", f"train --set optim.lr=fast {PC}", "optim.lr")
case(  # a row too short for a fact: the curriculum would write nothing, silently
    "train-facts-rows-too-short",
    "set",
    f"train --set task.seq_len=64 --set task.facts=5 {PC}",
    "task.facts",
    also=("65 bytes", "task.seq_len to 66"),
)
case("train-device-cuda", "device", f"train --set train.device=cuda {PC}", "CUDA", also=("train.device",))
case("train-device-banana", "device", f"train --set train.device=banana {PC}", "banana", also=("train.device",))
case("train-device-cuda-7", "device", f"train --set train.device=cuda:7 {PC}", "cuda:7", also=("train.device",))
case(
    "train-micro-batch-not-divisor",
    "set",
    f"train --set train.batch_size=8 --set train.micro_batch_size=3 {PC}",
    "micro_batch_size",
)
case("train-batch-size-zero", "set", f"train --set train.batch_size=0 {PC}", "batch_size")
case("train-max-steps-negative", "set", f"train --set train.max_steps=-5 {PC}", "max_steps")
case("train-max-minutes-nan", "set", f"train --set train.max_minutes=nan {PC}", "max_minutes")
case("train-bptt-bad-choice", "set", f"train --set train.bptt=sometimes {PC}", "bptt")
case("train-precision-bad-choice", "set", f"train --set train.precision=fp8 {PC}", "precision")
case("train-betas-wrong-length", "set", f"train --set optim.betas=[0.9] {PC}", "betas")
case("train-unknown-key", "set", f"train --set optim.lrr=0.1 {PC}", "optim.lrr")
case("train-unknown-section", "set", f"train --set optimizer.lr=0.1 {PC}", "optimizer")
case("train-set-without-equals", "set", f"train --set optim.lr {PC}", "optim.lr")
case("train-model-n-head-not-divisor", "set", f"train --set model.n_head=3 {PC}", "n_head")
case("train-unknown-model", "set", f"train --set model.name=llama9000 {PC}", "llama9000")
case("train-unknown-task", "set", f"train --set task.name=nosuchtask {PC}", "nosuchtask")
case("train-config-missing", "missing", f"train fx/nope.yaml {PC}", "nope.yaml")
case("train-config-broken-yaml", "corrupt", f"train fx/cfg/broken.yaml {PC}", "broken.yaml")
case("train-config-png", "corrupt", f"train {PNG_PT} {PC}", "image.pt")
case("train-config-unknown-key", "set", f"train fx/cfg/unknown-key.yaml {PC}", "lrr")
case("train-config-wrong-type", "set", f"train fx/cfg/wrong-type.yaml {PC}", "max_steps")
case("train-config-not-a-mapping", "corrupt", f"train fx/cfg/list.yaml {PC}", "list.yaml")
case("train-data-missing", "missing", "train", "nope.txt", TINY_SET, "--set task.data=fx/nope.txt --run-dir out/r")
case("train-data-empty", "empty", "train", "empty.txt", TINY_SET, f"--set task.data={EMPTY_TXT} --run-dir out/r")
case(
    "train-init-from-missing", "missing", "train", "fx/gone", TINY_SET, "--set train.init_from=fx/gone --run-dir out/r"
)
case("train-run-dir-nonempty", "exists", "train", "fx/full", TINY_SET, f"--run-dir {FULL}")
case("train-run-dir-nonempty-via-set", "exists", "train", "fx/full", TINY_SET, f"--set run_dir={FULL}")
case("train-run-dir-is-a-run", "exists", "train", "fx/run", TINY_SET, f"--run-dir {RUN}")
case("train-run-dir-is-a-file", "exists", "train", "precious.txt", TINY_SET, f"--run-dir {PRECIOUS}")
case("train-run-dir-under-a-file", "readonly", "train", "precious.txt", TINY_SET, f"--run-dir {PRECIOUS}/run")
case(
    "train-run-dir-readonly",
    "readonly",
    "train",
    "readonly",
    TINY_SET,
    f"--run-dir {RO}/run",
    root_skip=True,
    setup=_readonly_folder,
)
case("train-resume-missing", "missing", "train --resume fx/nope", "fx/nope")
case("train-resume-model-folder", "missing", f"train --resume {BDH_A}", "models/bdh")
case("train-resume-with-config", "flag", f"train fx/cfg/ok.yaml --resume {RUN}", "--resume")
case("train-resume-with-run-dir", "flag", f"train --resume {RUN} --run-dir out/r", "--run-dir")
case("train-checkpoint-without-resume", "flag", f"train --checkpoint step-2 {PC}", "--checkpoint")
case("train-resume-missing-checkpoint", "missing", f"train --resume {RUN} --checkpoint step-99", "step-99")
case("train-unknown-flag", "flag", "train --lr 0.1", "--lr")
ok("train-print-config-ok", f"train {PC}", TINY_SET)

# ---- generate
ok("generate-ok", f"generate {RUN} --prompt hi", GEN)
ok(
    "generate-non-utf8-prompt-ok",
    ["generate", RUN, "--prompt", NON_UTF8],
    GEN,
    check=lambda out, err, cwd: _assert(
        out.startswith(b"\xff\xfe"), f"stdout should start with the prompt bytes: {out[:20]!r}"
    ),
)
ok(
    "generate-prompt-file-ok",
    f"generate {RUN} --prompt-file {PROMPT_BIN}",
    GEN,
    check=lambda out, err, cwd: _assert(
        out.startswith(b"\xff\xfe ROMEO\xc3"), f"stdout should start with the file's bytes: {out[:20]!r}"
    ),
)
ok("generate-spacey-model-ok", ["generate", SPACEY, "--prompt", "é"], GEN)
case("generate-temperature-nan", "number", f"generate {RUN} --temperature nan", "--temperature", GEN)
case("generate-temperature-inf", "number", f"generate {RUN} --temperature inf", "--temperature", GEN)
case("generate-temperature-negative", "number", f"generate {RUN} --temperature -1", "--temperature", GEN)
case("generate-temperature-non-numeric", "number", f"generate {RUN} --temperature hot", "--temperature", GEN)
case("generate-top-k-zero", "number", f"generate {RUN} --top-k 0", "--top-k", GEN)
case("generate-top-k-negative", "number", f"generate {RUN} --top-k -3", "--top-k", GEN)
case("generate-top-k-fraction", "number", f"generate {RUN} --top-k 1.5", "--top-k", GEN)
case("generate-top-p-zero", "number", f"generate {RUN} --top-p 0", "--top-p", GEN)
case("generate-top-p-above-one", "number", f"generate {RUN} --top-p 1.5", "--top-p", GEN)
case("generate-top-p-nan", "number", f"generate {RUN} --top-p nan", "--top-p", GEN)
case("generate-penalty-below-one", "number", f"generate {RUN} --repetition-penalty 0.5", "--repetition-penalty", GEN)
case("generate-penalty-inf", "number", f"generate {RUN} --repetition-penalty inf", "--repetition-penalty", GEN)
case("generate-stop-empty", "empty", ["generate", RUN, "--stop", ""], "--stop", GEN)
case("generate-stream-with-value", "flag", f"generate {RUN} --no-stream=1", "--no-stream", GEN)
ok("generate-sampling-options-ok", f"generate {RUN} --prompt hi --top-p 0.9 --repetition-penalty 1.2 --stop e", GEN)
ok(
    "generate-no-stream-ok",
    f"generate {RUN} --prompt hi --no-stream",
    GEN,
    check=lambda out, err, cwd: _assert(out.startswith(b"hi") and "tokens/s" in err, f"{out[:20]!r} {err!r}"),
)
case(
    "generate-max-new-tokens-negative", "number", f"generate {RUN} --device cpu --max-new-tokens -1", "--max-new-tokens"
)
case(
    "generate-max-new-tokens-non-numeric",
    "number",
    f"generate {RUN} --device cpu --max-new-tokens many",
    "--max-new-tokens",
)
case(
    "generate-max-new-tokens-1e400", "number", f"generate {RUN} --device cpu --max-new-tokens 1e400", "--max-new-tokens"
)
case("generate-seed-non-numeric", "number", f"generate {RUN} --seed lucky", "--seed", GEN)
case("generate-device-banana", "device", f"generate {RUN} --max-new-tokens 2 --device banana", "banana")
case("generate-device-cuda", "device", f"generate {RUN} --max-new-tokens 2 --device cuda", "CUDA")
case("generate-device-cuda-7", "device", f"generate {RUN} --max-new-tokens 2 --device cuda:7", "cuda:7")
case("generate-empty-prompt", "empty", ["generate", RUN, "--prompt", ""], "--prompt", GEN)
case("generate-prompt-file-missing", "missing", f"generate {RUN} --prompt-file fx/nope.bin", "nope.bin", GEN)
case("generate-prompt-file-empty", "empty", f"generate {RUN} --prompt-file {EMPTY_TXT}", "empty.txt", GEN)
case("generate-prompt-file-is-a-folder", "missing", f"generate {RUN} --prompt-file {FULL}", "fx/full", GEN)
case(
    "generate-prompt-file-nonascii-missing",
    "odd-path",
    ["generate", RUN, "--prompt-file", "fx/my models/invite é.txt"],
    "invite é.txt",
    GEN,
)
case(
    "generate-prompt-and-prompt-file", "flag", f"generate {RUN} --prompt hi --prompt-file {PROMPT_BIN}", "--prompt", GEN
)
case("generate-missing-run", "missing", "generate fx/nope", "fx/nope", GEN)
case("generate-missing-spacey-run", "odd-path", ["generate", "fx/my models/nope é"], "nope é", GEN)
case("generate-source-is-a-file", "missing", f"generate {PRECIOUS}", "precious.txt", GEN)
case("generate-empty-folder", "missing", f"generate {EMPTY_DIR}", "empty-folder", GEN)
case("generate-random-weights", "corrupt", f"generate {RANDOM_W}", "random-weights", GEN)
case("generate-truncated-weights", "corrupt", f"generate {TRUNC}", "truncated", GEN)
case("generate-config-not-json", "corrupt", f"generate {NOT_JSON}", "not-json", GEN)
case("generate-unknown-model-type", "corrupt", f"generate {UNKNOWN_T}", "llama9000", GEN)
case("generate-tampered-checkpoint", "corrupt", f"generate {TAMPERED}", "tampered-run", GEN)
case("generate-missing-checkpoint", "missing", f"generate {RUN} --checkpoint step-99", "step-99", GEN)
case("generate-unknown-flag", "flag", f"generate {RUN} --tempreature 1", "--tempreature", GEN)

# ---- eval
ok("eval-ok", f"eval {RUN}", EVAL)
ok("eval-data-ok", f"eval {BDH_A} --data {TEXT}", EVAL)
case("eval-missing-run", "missing", "eval fx/nope", "fx/nope", EVAL)
case("eval-source-is-a-file", "missing", f"eval {PRECIOUS}", "precious.txt", EVAL)
case("eval-random-weights", "corrupt", f"eval {RANDOM_W} --data {TEXT}", "random-weights", EVAL)
case("eval-truncated-weights", "corrupt", f"eval {TRUNC} --data {TEXT}", "truncated", EVAL)
case("eval-tampered-checkpoint", "corrupt", f"eval {TAMPERED}", "tampered-run", EVAL)
case("eval-model-folder-without-data", "missing", f"eval {BDH_A}", "models/bdh", EVAL)
case("eval-data-missing", "missing", f"eval {RUN} --data fx/nope.txt", "nope.txt", EVAL)
case("eval-data-empty-file", "empty", f"eval {RUN} --data {EMPTY_TXT}", "empty.txt", EVAL)
case("eval-data-empty-folder", "empty", f"eval {RUN} --data {EMPTY_DIR}", "empty-folder", EVAL)
case("eval-missing-checkpoint", "missing", f"eval {RUN} --checkpoint step-99", "step-99", EVAL)
case("eval-batch-size-zero", "number", f"eval {RUN} --batch-size 0", "--batch-size", EVAL)
case("eval-batch-size-non-numeric", "number", f"eval {RUN} --batch-size some", "--batch-size", EVAL)
case("eval-batches-negative", "number", f"eval {RUN} --device cpu --batches -1", "--batches")
case("eval-device-banana", "device", f"eval {RUN} --batches 1 --device banana", "banana")
case("eval-device-cuda", "device", f"eval {RUN} --batches 1 --device cuda", "CUDA")
case("eval-device-cuda-7", "device", f"eval {RUN} --batches 1 --device cuda:7", "cuda:7")

# ---- runs
ok("runs-ok", "runs fx")
case("runs-missing-folder", "missing", "runs fx/nope", "fx/nope")
case("runs-folder-is-a-file", "missing", f"runs {PRECIOUS}", "precious.txt")
case("runs-unknown-flag", "flag", "runs fx --all", "--all")

# ---- corpus
ok(
    "corpus-ok",
    "corpus out/new.txt --size 1KB",
    check=lambda out, err, cwd: _assert(
        (cwd / "out/new.txt").stat().st_size >= 1000, "out/new.txt should hold >= 1 KB"
    ),
)
ok("corpus-spacey-path-ok", ["corpus", "out/mes corpus/é ü.txt", "--size", "1KB"])
ok(
    "corpus-overwrite-ok",
    f"corpus {NOTES} --size 1KB --overwrite",
    changes=("notes.txt",),
    check=lambda out, err, cwd: _assert(
        b"my notes" not in (cwd / NOTES).read_bytes(), "--overwrite should replace notes.txt"
    ),
)
case("corpus-existing-file", "exists", f"corpus {NOTES} --size 1KB", "notes.txt", also=EXISTS)
case("corpus-existing-spacey-file", "odd-path", ["corpus", SPACEY_NOTES, "--size", "1KB"], "notes ü.txt", also=EXISTS)
case("corpus-out-is-a-folder", "exists", f"corpus {FULL} --size 1KB", "fx/full")
case("corpus-out-under-a-file", "readonly", f"corpus {PRECIOUS}/c.txt --size 1KB", "precious.txt")
case(
    "corpus-out-readonly-folder",
    "readonly",
    f"corpus {RO}/c.txt --size 1KB",
    "readonly",
    root_skip=True,
    setup=_readonly_folder,
)
case("corpus-size-words", "number", "corpus out/c.txt --size huge", "--size")
case("corpus-size-zero", "number", "corpus out/c.txt --size 0", "--size")
case("corpus-size-negative", "number", "corpus out/c.txt --size -1KB", "--size")
case("corpus-size-nan", "number", "corpus out/c.txt --size nan", "--size")
case("corpus-size-terabytes", "number", "corpus out/c.txt --size 1TB", "--size")
case("corpus-pairs-malformed", "value", "corpus out/c.txt --size 1KB --pairs en", "'en'")
case("corpus-pairs-unknown-language", "value", "corpus out/c.txt --size 1KB --pairs en-xx", "xx")
case("corpus-concept-rate-1-5", "number", "corpus out/c.txt --size 1KB --concept-rate 1.5", "--concept-rate")
case("corpus-concept-rate-nan", "number", "corpus out/c.txt --size 1KB --concept-rate nan", "--concept-rate")
case("corpus-seed-non-numeric", "number", "corpus out/c.txt --size 1KB --seed abc", "--seed")
case("corpus-missing-out", "flag", "corpus --size 1KB", "out")

# ---- dmft bifurcation / trajectory / convergence / probe
ok("dmft-bifurcation-ok", "dmft bifurcation --out out/bif", BIF)
case("dmft-bifurcation-missing-out", "flag", "dmft bifurcation", "--out", BIF)
case("dmft-bifurcation-out-nonempty", "exists", f"dmft bifurcation --out {FULL}", "fx/full", BIF, also=EXISTS)
case("dmft-bifurcation-out-is-a-file", "exists", f"dmft bifurcation --out {PRECIOUS}", "precious.txt", BIF)
case("dmft-bifurcation-out-under-a-file", "readonly", f"dmft bifurcation --out {PRECIOUS}/d", "precious.txt", BIF)
case(
    "dmft-bifurcation-out-readonly",
    "readonly",
    f"dmft bifurcation --out {RO}/d",
    "readonly",
    BIF,
    root_skip=True,
    setup=_readonly_folder,
)
case(
    "dmft-bifurcation-out-spacey-nonempty",
    "odd-path",
    ["dmft", "bifurcation", "--out", "fx/my models"],
    "my models",
    BIF,
    also=EXISTS,
)
case("dmft-bifurcation-beta-nan", "number", "dmft bifurcation --out out/d", "nan", BIF, "--beta nan")
case("dmft-bifurcation-beta-negative", "number", "dmft bifurcation --out out/d", "-1", BIF, "--beta -1")
case("dmft-bifurcation-beta-reversed", "number", "dmft bifurcation --out out/d", "3:0:5", BIF, "--beta 3:0:5")
case("dmft-bifurcation-beta-zero-count", "number", "dmft bifurcation --out out/d", "0:3:0", BIF, "--beta 0:3:0")
case("dmft-bifurcation-beta-words", "number", "dmft bifurcation --out out/d", "a,b", BIF, "--beta a,b")
case("dmft-bifurcation-steps-zero", "number", "dmft bifurcation --out out/d", "--steps", BIF, "--steps 0")
case("dmft-bifurcation-steps-non-numeric", "number", "dmft bifurcation --out out/d", "--steps", BIF, "--steps many")
case("dmft-bifurcation-keep-over-steps", "number", "dmft bifurcation --out out/d", "--keep", BIF, "--keep 50")
case("dmft-bifurcation-gamma-nan", "number", "dmft bifurcation --out out/d", "--gamma", BIF, "--gamma nan")
case("dmft-bifurcation-gamma-inf", "number", "dmft bifurcation --out out/d", "--gamma", BIF, "--gamma inf")
case(
    "dmft-bifurcation-epsilon-non-numeric", "number", "dmft bifurcation --out out/d", "--epsilon", BIF, "--epsilon tiny"
)
case("dmft-bifurcation-chunk-zero", "number", "dmft bifurcation --out out/d", "--chunk", BIF, "--chunk 0")
case("dmft-bifurcation-init-bad-choice", "value", "dmft bifurcation --out out/d", "random", BIF, "--init random")
case("dmft-trajectory-missing-beta", "flag", "dmft trajectory --out out/t --steps 20 --keep 10", "--beta")
case("dmft-trajectory-too-many-betas", "number", "dmft trajectory --out out/t", "50", TRAJ, "--beta 0:3:50")
case("dmft-trajectory-beta-inf", "number", "dmft trajectory --out out/t", "inf", TRAJ, "--beta inf")
case("dmft-trajectory-max-lag-zero", "number", "dmft trajectory --out out/t", "--max-lag", TRAJ, "--max-lag 0")
case("dmft-trajectory-out-nonempty", "exists", f"dmft trajectory --out {FULL}", "fx/full", TRAJ, also=EXISTS)
case("dmft-trajectory-out-is-a-file", "exists", f"dmft trajectory --out {PRECIOUS}", "precious.txt", TRAJ)
case("dmft-convergence-n-words", "number", "dmft convergence --out out/c", "--n", CONV, "--n a,b")
case("dmft-convergence-n-one-size", "number", "dmft convergence --out out/c", "--n", CONV, "--n 30")
case("dmft-convergence-n-too-small", "number", "dmft convergence --out out/c", "--n", CONV, "--n 1,2")
case("dmft-convergence-beta-nan", "number", "dmft convergence --out out/c", "--beta", CONV, "--beta nan")
case("dmft-convergence-beta-inf", "number", "dmft convergence --out out/c", "--beta", CONV, "--beta inf")
case("dmft-convergence-seeds-zero", "number", "dmft convergence --out out/c", "--seeds", CONV, "--seeds 0")
case("dmft-convergence-out-nonempty", "exists", f"dmft convergence --out {FULL}", "fx/full", CONV, also=EXISTS)
case("dmft-convergence-out-under-a-file", "readonly", f"dmft convergence --out {PRECIOUS}/c", "precious.txt", CONV)
case("dmft-probe-missing-run", "missing", "dmft probe fx/nope --out out/p", "fx/nope", PROBE)
case("dmft-probe-random-weights", "corrupt", f"dmft probe {RANDOM_W} --out out/p", "random-weights", PROBE)
case("dmft-probe-unknown-model-type", "corrupt", f"dmft probe {UNKNOWN_T} --out out/p", "llama9000", PROBE)
case("dmft-probe-gpt-model", "value", f"dmft probe {GPT} --out out/p", "gpt", PROBE)
case("dmft-probe-temperatures-nan", "number", f"dmft probe {RUN} --out out/p", "nan", PROBE, "--temperatures nan")
case("dmft-probe-temperatures-negative", "number", f"dmft probe {RUN} --out out/p", "-1", PROBE, "--temperatures -1")
case("dmft-probe-temperatures-words", "number", f"dmft probe {RUN} --out out/p", "hot", PROBE, "--temperatures hot")
case("dmft-probe-steps-zero", "number", f"dmft probe {RUN} --out out/p", "--steps", PROBE, "--steps 0")
case("dmft-probe-transient-negative", "number", f"dmft probe {RUN} --out out/p", "--transient", PROBE, "--transient -1")
case("dmft-probe-delta-nan", "number", f"dmft probe {RUN} --out out/p", "--delta", PROBE, "--delta nan")
case("dmft-probe-delta-zero", "number", f"dmft probe {RUN} --out out/p", "--delta", PROBE, "--delta 0")
case("dmft-probe-empty-prompt", "empty", ["dmft", "probe", RUN, "--out", "out/p", "--prompt", ""], "--prompt", PROBE)
case("dmft-probe-out-nonempty", "exists", f"dmft probe {RUN} --out {FULL}", "fx/full", PROBE, also=EXISTS)
case("dmft-probe-out-is-the-run", "is-input", f"dmft probe {RUN} --out {RUN} --overwrite", "input", PROBE)
case("dmft-probe-out-contains-the-run", "is-input", f"dmft probe {RUN} --out fx --overwrite", "input", PROBE)
case("dmft-probe-out-is-a-file", "exists", f"dmft probe {RUN} --out {PRECIOUS}", "precious.txt", PROBE)

# ---- inspect
case("inspect-missing-run", "missing", "inspect fx/nope --out out/i", "fx/nope", INSPECT)
case("inspect-random-weights", "corrupt", f"inspect {RANDOM_W} --out out/i", "random-weights", INSPECT)
case("inspect-truncated-weights", "corrupt", f"inspect {TRUNC} --out out/i", "truncated", INSPECT)
case("inspect-config-not-json", "corrupt", f"inspect {NOT_JSON} --out out/i", "not-json", INSPECT)
case("inspect-gpt-model", "value", f"inspect {GPT} --out out/i", "gpt", INSPECT)
case("inspect-missing-checkpoint", "missing", f"inspect {RUN} --checkpoint step-99 --out out/i", "step-99", INSPECT)
case("inspect-out-nonempty", "exists", f"inspect {RUN} --out {FULL}", "fx/full", INSPECT, also=EXISTS)
case("inspect-out-is-a-file", "exists", f"inspect {RUN} --out {PRECIOUS}", "precious.txt", INSPECT)
case("inspect-out-is-the-run", "is-input", f"inspect {RUN} --out {RUN} --overwrite", "input", INSPECT)
case("inspect-out-is-the-model-folder", "is-input", f"inspect {RUN} --out {RUN}/best --overwrite", "input", INSPECT)
case("inspect-out-under-a-file", "readonly", f"inspect {RUN} --out {PRECIOUS}/i", "precious.txt", INSPECT)
case("inspect-spacey-out-is-input", "odd-path", ["inspect", SPACEY, "--out", SPACEY, "--overwrite"], "input", INSPECT)
case("inspect-layer-out-of-range", "number", f"inspect {RUN} --out out/i --layer 5", "--layer", INSPECT)
case("inspect-head-out-of-range", "number", f"inspect {RUN} --out out/i --head 9", "--head", INSPECT)
case("inspect-tokens-one", "number", f"inspect {RUN} --out out/i", "--tokens", INSPECT, "--tokens 1")
case("inspect-windows-zero", "number", f"inspect {RUN} --out out/i", "--windows", INSPECT, "--windows 0")
case("inspect-max-nodes-zero", "number", f"inspect {RUN} --out out/i", "--max-nodes", INSPECT, "--max-nodes 0")
case("inspect-seeds-non-numeric", "number", f"inspect {RUN} --out out/i", "--seeds", INSPECT, "--seeds few")
case("inspect-data-missing", "missing", f"inspect {RUN} --out out/i --data fx/nope.txt", "nope.txt", INSPECT)
case("inspect-data-empty", "empty", f"inspect {RUN} --out out/i --data {EMPTY_TXT}", "empty.txt", INSPECT)
case("inspect-data-is-a-folder", "missing", f"inspect {RUN} --out out/i --data {FULL}", "fx/full", INSPECT)
case("inspect-prompt-one-byte", "empty", f"inspect {RUN} --out out/i --prompt a", "--prompt", INSPECT)
case(
    "inspect-prompt-too-long",
    "number",
    ["inspect", RUN, "--out", "out/i", "--prompt", LONG_PROMPT],
    "--prompt",
    INSPECT,
    check=lambda out, err, cwd: _limit_in_help("inspect", err),
)
case(
    "inspect-prompt-file-too-long",
    "number",
    f"inspect {RUN} --out out/i --prompt-file {LONG_FILE}",
    "long-prompt.txt",
    INSPECT,
)
case(
    "inspect-prompt-file-missing",
    "missing",
    f"inspect {RUN} --out out/i --prompt-file fx/nope.txt",
    "nope.txt",
    INSPECT,
)
case("inspect-prompt-and-data", "flag", f"inspect {RUN} --out out/i --prompt ab --data {TEXT}", "--data", INSPECT)

# ---- viz
ok("viz-ok", f"viz {RUN} --out out/v.html --prompt hi --device cpu")
ok("viz-spacey-paths-ok", ["viz", SPACEY, "--out", "out/vue é ü.html", "--prompt", "hé"])
ok("viz-overwrite-ok", f"viz {RUN} --out {PRECIOUS} --overwrite --prompt hi", changes=("precious.txt",))
case("viz-missing-run", "missing", "viz fx/nope --out out/v.html", "fx/nope")
case("viz-random-weights", "corrupt", f"viz {RANDOM_W} --out out/v.html", "random-weights")
case("viz-truncated-weights", "corrupt", f"viz {TRUNC} --out out/v.html", "truncated")
case("viz-empty-weights", "corrupt", f"viz {EMPTY_W} --out out/v.html", "empty-weights")
case("viz-config-not-json", "corrupt", f"viz {NOT_JSON} --out out/v.html", "not-json")
case("viz-empty-folder", "missing", f"viz {EMPTY_DIR} --out out/v.html", "empty-folder")
case("viz-gpt-model", "value", f"viz {GPT} --out out/v.html", "gpt")
case("viz-missing-checkpoint", "missing", f"viz {RUN} --checkpoint step-99 --out out/v.html", "step-99")
case("viz-device-banana", "device", f"viz {RUN} --out out/v.html --device banana", "banana")
case("viz-device-cuda", "device", f"viz {RUN} --out out/v.html --device cuda", "CUDA")
case("viz-device-cuda-7", "device", f"viz {RUN} --out out/v.html --device cuda:7", "cuda:7")
case("viz-out-existing-file", "exists", f"viz {RUN} --out {PRECIOUS} --prompt hi", "precious.txt", also=EXISTS)
case(
    "viz-out-existing-spacey-file",
    "odd-path",
    ["viz", SPACEY, "--out", SPACEY_NOTES, "--prompt", "hi"],
    "notes ü.txt",
    also=EXISTS,
)
case("viz-out-is-a-folder", "exists", f"viz {RUN} --out {FULL} --prompt hi", "fx/full")
case(
    "viz-out-is-the-weights",
    "is-input",
    f"viz {RUN} --out {RUN}/best/model.safetensors --prompt hi",
    "model.safetensors",
)
case("viz-out-is-the-run", "is-input", f"viz {RUN} --out {RUN} --overwrite --prompt hi", "fx/run")
case("viz-out-under-a-file", "readonly", f"viz {RUN} --out {PRECIOUS}/out.html --prompt hi", "precious.txt")
case(
    "viz-out-readonly-folder",
    "readonly",
    f"viz {RUN} --out {RO}/v.html --prompt hi",
    "readonly",
    root_skip=True,
    setup=_readonly_folder,
)
case("viz-empty-prompt", "empty", ["viz", RUN, "--out", "out/v.html", "--prompt", ""], "--prompt")
case("viz-tokens-words", "value", f"viz {RUN} --out out/v.html --tokens 'a b'", "--tokens")
case("viz-token-out-of-vocab", "value", f"viz {RUN} --out out/v.html --tokens 999", "999")
ok("viz-board-ok", f"viz {BOARD_M} --out out/v.html --board fx/board.txt")
ok("viz-non-utf8-prompt-ok", ["viz", RUN, "--out", "out/v.html", "--prompt", NON_UTF8])
case("viz-board-missing", "missing", f"viz {BOARD_M} --out out/v.html --board fx/nope-board.txt", "nope-board.txt")
case("viz-board-unknown-cell", "corrupt", f"viz {BOARD_M} --out out/v.html --board fx/board-bad.txt", "'X'")
case("viz-board-ragged", "corrupt", f"viz {BOARD_M} --out out/v.html --board fx/board-ragged.txt", "row 2")
case("viz-board-png", "corrupt", f"viz {BOARD_M} --out out/v.html --board {PNG_PT}", "image.pt")
case("viz-prompt-on-board-model", "value", f"viz {BOARD_M} --out out/v.html --prompt hello", "byte")
case("viz-prompt-file-missing", "missing", f"viz {RUN} --out out/v.html --prompt-file fx/nope.txt", "nope.txt")
case("viz-prompt-file-empty", "empty", f"viz {RUN} --out out/v.html --prompt-file {EMPTY_TXT}", "empty.txt")
case("viz-board-on-text-model", "value", f"viz {RUN} --out out/v.html --board fx/board-bad.txt", "--board")
case("viz-sudoku-short", "value", f"viz {RUN} --out out/v.html --sudoku 123", "sudoku")
case("viz-prompt-and-tokens", "flag", f"viz {RUN} --out out/v.html --prompt hi --tokens 1", "--tokens")
case("viz-hubs-zero", "number", f"viz {RUN} --out out/v.html --prompt hi --hubs 0", "--hubs")
case("viz-hubs-negative", "number", f"viz {RUN} --out out/v.html --prompt hi --hubs -4", "--hubs")
case("viz-edges-per-hub-zero", "number", f"viz {RUN} --out out/v.html --prompt hi --edges-per-hub 0", "--edges-per-hub")
case("viz-heat-neurons-zero", "number", f"viz {RUN} --out out/v.html --prompt hi --heat-neurons 0", "--heat-neurons")
case("viz-attn-top-non-numeric", "number", f"viz {RUN} --out out/v.html --prompt hi --attn-top lots", "--attn-top")
case("viz-port-70000", "number", f"viz {RUN} --out out/v.html --prompt hi --serve --port 70000", "--port")
case("viz-port-negative", "number", f"viz {RUN} --out out/v.html --prompt hi --serve --port -1", "--port")


def _limit_in_help(command: str, err: str) -> None:
    """The 20,000-byte prompt is refused with the limit, and `bdh COMMAND --help` states the same limit."""
    help_text = _help_of(command)
    said = {int(n.replace(",", "").replace("_", "")) for n in re.findall(r"\d[\d,_]*\d|\d", err)}
    documented = {int(n.replace(",", "").replace("_", "")) for n in re.findall(r"\d[\d,_]*\d|\d", help_text)}
    limits = {n for n in said if 0 < n < 20_000 and n in documented}
    _assert(
        bool(limits),
        f"the error should name a limit below 20,000 that 'bdh {command} --help' documents; error: {err!r}",
    )


case(
    "viz-prompt-too-long",
    "number",
    ["viz", RUN, "--out", "out/v.html", "--prompt", LONG_PROMPT],
    "--prompt",
    check=lambda out, err, cwd: _limit_in_help("viz", err),
)
case(
    "viz-prompt-file-too-long",
    "number",
    f"viz {RUN} --out out/v.html --prompt-file {LONG_FILE}",
    "long-prompt.txt",
    check=lambda out, err, cwd: _limit_in_help("viz", err),
)

# ---- plot
ok("plot-ok", f"plot {RUN} --out out/plots")
case("plot-missing-run", "missing", "plot fx/nope --out out/p", "fx/nope")
case("plot-run-is-a-file", "missing", f"plot {PRECIOUS} --out out/p", "precious.txt")
case("plot-random-weights", "corrupt", f"plot {RANDOM_W} --out out/p", "random-weights")
case("plot-missing-checkpoint", "missing", f"plot {RUN} --checkpoint step-99 --out out/p", "step-99")
case("plot-device-banana", "device", f"plot {RUN} --out out/p --device banana", "banana")
case("plot-device-cuda", "device", f"plot {RUN} --out out/p --device cuda", "CUDA")
case("plot-device-cuda-7", "device", f"plot {RUN} --out out/p --device cuda:7", "cuda:7")
case("plot-bench-missing", "missing", f"plot {RUN} --out out/p --bench fx/nope.csv", "nope.csv")
case("plot-bench-empty", "empty", f"plot {RUN} --out out/p --bench fx/bench/empty.csv", "empty.csv")
case("plot-bench-no-suite-column", "corrupt", f"plot {RUN} --out out/p --bench fx/bench/nosuite.csv", "nosuite.csv")
case("plot-bench-png", "corrupt", f"plot {RUN} --out out/p --bench {PNG_PT}", "image.pt")
case("plot-out-is-a-file", "exists", f"plot {RUN} --out {PRECIOUS}", "precious.txt")
case("plot-out-nonempty", "exists", f"plot {RUN} --out {FULL}", "fx/full", also=EXISTS)
case("plot-out-is-the-run", "is-input", f"plot {RUN} --out {RUN} --overwrite", "input")
case("plot-out-contains-the-run", "is-input", f"plot {RUN} --out fx --overwrite", "input")
case("plot-out-under-a-file", "readonly", f"plot {RUN} --out {PRECIOUS}/plots", "precious.txt")
case("plot-spacey-out-is-input", "odd-path", ["plot", SPACEY, "--out", SPACEY, "--overwrite"], "input")
case("plot-head-out-of-range", "number", f"plot {RUN} --out out/p --head 9", "--head")
case("plot-avg-degree-zero", "number", f"plot {RUN} --out out/p --avg-degree 0", "--avg-degree")
case("plot-layer-out-of-range", "number", f"plot {RUN} --out out/p --layer 7", "--layer")
case("plot-tokens-words", "value", f"plot {RUN} --out out/p --tokens x", "--tokens")
case("plot-prompt-file-missing", "missing", f"plot {RUN} --out out/p --prompt-file fx/nope.txt", "nope.txt")
case("plot-empty-prompt", "empty", ["plot", RUN, "--out", "out/p", "--prompt", ""], "--prompt")

# ---- bench recall / boardpath / sudoku
ok("bench-recall-dry-run-ok", "bench recall --quick --dry-run")
for suite in ("recall", "boardpath", "sudoku"):
    b = f"bench {suite}"
    case(f"bench-{suite}-device-banana", "device", f"{b} --out out/b", "banana", BENCH, "--device banana")
    case(f"bench-{suite}-device-cuda", "device", f"{b} --out out/b", "CUDA", BENCH, "--device cuda")
    case(f"bench-{suite}-out-nonempty", "exists", f"{b} --out {FULL}", "fx/full", BENCH, also=EXISTS)
    case(f"bench-{suite}-out-is-a-file", "exists", f"{b} --out {PRECIOUS}", "precious.txt", BENCH)
    case(f"bench-{suite}-steps-zero", "number", f"{b} --out out/b", "--steps", BENCH, "--steps 0")
case("bench-recall-device-cuda-7", "device", "bench recall --out out/b", "cuda:7", BENCH, "--device cuda:7")
case("bench-recall-out-under-a-file", "readonly", f"bench recall --out {PRECIOUS}/b", "precious.txt", BENCH)
case("bench-recall-resume-foreign-folder", "exists", f"bench recall --out {FULL} --resume", "runs.csv", BENCH)
case("bench-recall-steps-non-numeric", "number", "bench recall --out out/b", "--steps", BENCH, "--steps many")
case("bench-recall-lrs-nan", "number", "bench recall --out out/b", "--lrs", BENCH, "--lrs nan")
case("bench-recall-lrs-negative", "number", "bench recall --out out/b", "--lrs", BENCH, "--lrs -1e-3")
case("bench-recall-lrs-repeated", "number", "bench recall --out out/b", "--lrs", BENCH, "--lrs 1e-3,1e-3")
case("bench-recall-seeds-words", "number", "bench recall --out out/b", "--seeds", BENCH, "--seeds a")
case("bench-recall-widths-not-multiple-of-4", "number", "bench recall --out out/b", "--widths", BENCH, "--widths 6")
case("bench-recall-unknown-model", "value", "bench recall --out out/b", "llama9000", BENCH, "--models llama9000")
case("bench-recall-threads-zero", "number", "bench recall --out out/b", "--threads", BENCH, "--threads 0")
case("bench-recall-full-and-quick", "flag", "bench recall --out out/b --full --quick", "--quick")
case("bench-sudoku-lrs-inf", "number", "bench sudoku --out out/b", "--lrs", BENCH, "--lrs inf")

# ---- experiment synapses / merge / no-bptt
for name in ("synapses", "merge", "no-bptt", "scaling"):
    e = f"experiment {name} --quick"
    case(f"experiment-{name}-out-nonempty", "exists", f"{e} --out {FULL}", "fx/full", also=EXISTS)
    case(f"experiment-{name}-out-is-a-file", "exists", f"{e} --out {PRECIOUS}", "precious.txt")
    case(f"experiment-{name}-unknown-field", "set", f"{e} --show-config --set stepz=1", "stepz")
ok("experiment-merge-show-config-ok", "experiment merge --quick --show-config")
case("experiment-merge-out-under-a-file", "readonly", f"experiment merge --quick --out {PRECIOUS}/e", "precious.txt")
case(
    "experiment-merge-out-readonly",
    "readonly",
    f"experiment merge --quick --out {RO}/e",
    "readonly",
    root_skip=True,
    setup=_readonly_folder,
)
case(
    "experiment-merge-spacey-out-nonempty",
    "odd-path",
    ["experiment", "merge", "--quick", "--out", "fx/my models"],
    "my models",
    also=EXISTS,
)
case("experiment-no-bptt-set-without-equals", "set", "experiment no-bptt --quick --show-config --set steps", "steps")
case("experiment-no-bptt-lr-nan", "set", "experiment no-bptt --quick --show-config --set lr=nan", "lr")
case(
    "experiment-no-bptt-n-head-not-divisor", "set", "experiment no-bptt --quick --show-config --set n_head=3", "n_head"
)
case("experiment-no-bptt-pairs-bad", "set", "experiment no-bptt --quick --show-config --set pairs=en-en", "pairs")
case(
    "experiment-merge-steps-negative", "set", "experiment merge --quick --show-config --set base_steps=-1", "base_steps"
)
case("experiment-scaling-resume-needs-out", "flag", "experiment scaling --quick --resume", "--resume")
case("experiment-scaling-quick-and-full", "flag", "experiment scaling --quick --full", "--full")
case("experiment-scaling-lr-inf", "set", "experiment scaling --quick --show-config --set lrs=[inf]", "lrs")
case("experiment-merge-threads-zero", "number", "experiment merge --quick --out out/e --threads 0", "--threads")

# ---- synapses
case("synapses-missing-run", "missing", "synapses fx/nope --out out/s", "fx/nope", SYN)
case("synapses-random-weights", "corrupt", f"synapses {RANDOM_W} --out out/s", "random-weights", SYN)
case("synapses-unknown-model-type", "corrupt", f"synapses {UNKNOWN_T} --out out/s", "llama9000", SYN)
case("synapses-gpt-model", "value", f"synapses {GPT} --out out/s", "gpt", SYN)
case("synapses-one-layer-model", "value", f"synapses {BDH_1L} --out out/s", "--layer", SYN)
case("synapses-missing-checkpoint", "missing", f"synapses {RUN} --checkpoint step-99 --out out/s", "step-99", SYN)
case("synapses-concept-unknown", "value", f"synapses {RUN} --out out/s --concept weather", "weather", SYN)
case("synapses-language-unknown", "value", f"synapses {RUN} --out out/s --language xx", "xx", SYN)
case(
    "synapses-same-languages",
    "value",
    f"synapses {RUN} --out out/s --language fr --second-language fr",
    "--second-language",
    SYN,
)
case("synapses-layer-zero", "number", f"synapses {RUN} --out out/s --layer 0", "--layer", SYN)
case("synapses-head-out-of-range", "number", f"synapses {RUN} --out out/s --head 9", "--head", SYN)
case("synapses-head-negative", "number", f"synapses {RUN} --out out/s --head -1", "--head", SYN)
case("synapses-search-one", "number", f"synapses {RUN} --out out/s", "--search", SYN, "--search 1")
case("synapses-heldout-zero", "number", f"synapses {RUN} --out out/s", "--heldout", SYN, "--heldout 0")
case("synapses-top-zero", "number", f"synapses {RUN} --out out/s", "--top", SYN, "--top 0")
case("synapses-statistic-unknown", "value", f"synapses {RUN} --out out/s --statistic median", "median", SYN)
case("synapses-out-nonempty", "exists", f"synapses {RUN} --out {FULL}", "fx/full", SYN, also=EXISTS)
case("synapses-out-is-a-file", "exists", f"synapses {RUN} --out {PRECIOUS}", "precious.txt", SYN)
case("synapses-out-is-the-run", "is-input", f"synapses {RUN} --out {RUN} --overwrite", "input", SYN)
case("synapses-out-contains-the-run", "is-input", f"synapses {RUN} --out fx --overwrite", "input", SYN)
case("synapses-out-under-a-file", "readonly", f"synapses {RUN} --out {PRECIOUS}/s", "precious.txt", SYN)


# ---- an unknown flag, for every command not covered above
for argv, flag in [
    (f"eval {RUN} --data-dir fx/data", "--data-dir"),
    ("corpus out/c.txt --bytes 1KB", "--bytes"),
    ("dmft bifurcation --out out/d --betas 1", "--betas"),
    ("dmft trajectory --out out/d --beta 1 --lag 3", "--lag"),
    ("dmft convergence --out out/d --sizes 3,6", "--sizes"),
    (f"dmft probe {RUN} --out out/p --sweep 1", "--sweep"),
    (f"inspect {RUN} --out out/i --figures", "--figures"),
    (f"viz {RUN} --out out/v.html --colour red", "--colour"),
    (f"plot {RUN} --out out/p --format pdf", "--format"),
    ("bench recall --quick --out out/b --gpu", "--gpu"),
    ("bench boardpath --quick --out out/b --size 8", "--size"),
    ("bench sudoku --quick --out out/b --puzzles 10", "--puzzles"),
    ("experiment synapses --quick --out out/e --fast", "--fast"),
    ("experiment merge --quick --out out/e --steps 3", "--steps"),
    ("experiment no-bptt --quick --out out/e --bptt", "--bptt"),
    (f"synapses {RUN} --out out/s --concepts currency", "--concepts"),
    (f"convert {OFFICIAL} out/c --force", "--force"),
]:
    words = [w for w in shlex.split(argv) if not w.startswith("-")]
    command = "-".join(words[:2]) if words[0] in ("dmft", "bench", "experiment") else words[0]
    case(f"{command}-unknown-flag", "flag", argv, flag)


def _assert(cond: bool, message: str) -> None:
    assert cond, message


# ---------------------------------------------------------------------------------------------- machinery


_HELP: dict[str, str] = {}


def _help_of(command: str) -> str:
    if command not in _HELP:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
            main([command, "--help"])
        _HELP[command] = buf.getvalue()
    return _HELP[command]


@pytest.fixture
def workdir(pristine, tmp_path, monkeypatch) -> Path:
    """A case folder with all the fixtures (for the tests outside the table)."""
    yield make_workdir(pristine, tmp_path / "case", monkeypatch)
    unlock(tmp_path / "case")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, pristine: Path, tmp_path: Path, monkeypatch, capsysbinary):
    run_case(case, pristine, tmp_path / "case", monkeypatch, capsysbinary)


def test_table_is_large_and_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]
    assert len(CASES) >= 170
    errors = [c for c in CASES if c.exit == 2]
    assert all(c.name for c in errors), "every error case names what the message must contain"
    # every subcommand of `bdh --help` (and of its groups) has cases
    commands = {c.command for c in CASES}
    for want in (
        "info",
        "convert",
        "merge",
        "train",
        "generate",
        "eval",
        "runs",
        "corpus",
        "dmft bifurcation",
        "dmft trajectory",
        "dmft convergence",
        "dmft probe",
        "inspect",
        "viz",
        "plot",
        "bench recall",
        "bench boardpath",
        "bench sudoku",
        "experiment synapses",
        "experiment merge",
        "experiment no-bptt",
        "synapses",
    ):
        assert want in commands, want


# ---------------------------------------------------------------------------------------------- internal errors


def _traceback_file(line: str) -> Path | None:
    for candidate in re.findall(r"(/[^\s;,'\"()]+)", line):
        path = Path(candidate.rstrip(".:"))
        if path.is_file():
            return path
    return None


@pytest.mark.parametrize(
    "module, func, argv, exc",
    [
        ("model_cmds", "cmd_info", ["info"], KeyError("boom")),
        ("model_cmds", "cmd_merge", ["merge", BDH_A, BDH_B, "out/m"], ValueError("internal")),
        ("train_cmds", "cmd_generate", ["generate", RUN], RuntimeError("tensor went sideways")),
        ("data_cmds", "cmd_corpus", ["corpus", "out/c.txt"], ZeroDivisionError("division by zero")),
    ],
    ids=["info-keyerror", "merge-plain-valueerror", "generate-runtimeerror", "corpus-zerodivision"],
)
def test_internal_error_is_exit_1_with_the_traceback_in_a_file(
    module, func, argv, exc, workdir, monkeypatch, capsysbinary
):
    import importlib
    import tempfile

    def broken(args):
        raise exc

    monkeypatch.setattr(importlib.import_module(f"bdh.cli.{module}"), func, broken)
    crash_dir = workdir / "crash"
    crash_dir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(crash_dir))
    monkeypatch.delenv("BDH_DEBUG", raising=False)
    before = snapshot(workdir / "fx")
    capsysbinary.readouterr()
    code = run_main(argv)
    err = capsysbinary.readouterr().err.decode("utf-8", "replace")
    assert code == 1, f"exit {code}; stderr {err!r}"
    lines = err.splitlines()
    assert len(lines) == 1 and "internal error" in lines[0] and "Traceback" not in err, err
    assert not lines[0].startswith("bdh: error: "), "an internal error must not look like a user mistake"
    path = _traceback_file(lines[0])
    assert path is not None, f"the line should name the file holding the traceback: {err!r}"
    text = path.read_text(encoding="utf-8", errors="replace")
    assert "Traceback" in text and type(exc).__name__ in text
    assert changed(before, snapshot(workdir / "fx"), ()) == []


@pytest.mark.parametrize("how", ["--debug", "BDH_DEBUG=1"])
def test_debug_lets_an_internal_error_propagate(how, workdir, monkeypatch, capsysbinary):
    from bdh.cli import model_cmds

    def broken(args):
        raise KeyError("boom")

    monkeypatch.setattr(model_cmds, "cmd_info", broken)
    argv = ["info"]
    if how == "--debug":
        argv = ["--debug", "info"]
        monkeypatch.delenv("BDH_DEBUG", raising=False)
    else:
        monkeypatch.setenv("BDH_DEBUG", "1")
    with pytest.raises(KeyError, match="boom"):
        main(argv)


def test_a_user_error_of_several_lines_is_printed_whole_on_one_line(workdir, monkeypatch, capsysbinary):
    from bdh.cli import model_cmds
    from bdh.errors import UserError

    def broken(args):
        raise UserError("first part of the message\n  second part naming fx/precious.txt\nthird part")

    monkeypatch.setattr(model_cmds, "cmd_info", broken)
    capsysbinary.readouterr()
    assert run_main(["info"]) == 2
    err = capsysbinary.readouterr().err.decode()
    assert one_line_problems(err, "first part", ("second part naming fx/precious.txt", "third part")) == [], err


def test_a_user_error_subclass_raised_deep_inside_is_exit_2(workdir, monkeypatch, capsysbinary):
    """A UserError from the library (not the CLI layer) is still a user mistake."""
    from bdh.cli import model_cmds
    from bdh.model.io import CheckpointError

    def broken(args):
        raise CheckpointError("fx/models/bdh/model.safetensors: not a readable safetensors file")

    monkeypatch.setattr(model_cmds, "cmd_merge", broken)
    capsysbinary.readouterr()
    assert run_main(["merge", BDH_A, BDH_B, "out/m"]) == 2
    err = capsysbinary.readouterr().err.decode()
    assert one_line_problems(err, "model.safetensors", ()) == [], err


# ---------------------------------------------------------------------------------------------- real argv bytes


def _bdh_process(args: Sequence[bytes | str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONIOENCODING="", LC_ALL="C.UTF-8")
    env.pop("BDH_DEBUG", None)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    argv = [os.fsencode(sys.executable), b"-m", b"bdh", *(os.fsencode(a) for a in args)]
    return subprocess.run(argv, cwd=cwd, capture_output=True, timeout=120, env=env, check=False)


def test_process_generate_keeps_prompt_bytes_that_are_not_utf8(workdir):
    before = snapshot(workdir / "fx")
    proc = _bdh_process(
        [b"generate", RUN, b"--prompt", b"\xff\xfe\x80", b"--max-new-tokens", b"2", b"--device", b"cpu"], workdir
    )
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    assert proc.stdout.startswith(b"\xff\xfe\x80"), proc.stdout[:20]
    assert b"Traceback" not in proc.stderr
    assert changed(before, snapshot(workdir / "fx"), ()) == []


def test_process_merge_m_m_m_is_refused_and_m_is_unchanged(workdir):
    before = snapshot(workdir / "fx")
    proc = _bdh_process([b"merge", BDH_A, BDH_A, BDH_A], workdir)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2, err
    assert one_line_problems(err, "input", ()) == [], err
    assert b"Traceback" not in proc.stdout + proc.stderr
    assert changed(before, snapshot(workdir / "fx"), ()) == []


def test_process_a_path_that_is_not_utf8_is_named_in_one_line(workdir):
    """A file name of bytes that are not UTF-8: the message is printed (escaped), not a UnicodeEncodeError."""
    before = snapshot(workdir / "fx")
    proc = _bdh_process([b"generate", b"fx/no-such-\xff\xfe-run", b"--device", b"cpu"], workdir)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2, err
    assert one_line_problems(err, "no-such-", ()) == [], err
    assert b"Traceback" not in proc.stdout + proc.stderr
    assert changed(before, snapshot(workdir / "fx"), ()) == []


# ---------------------------------------------------------------------------------------------- properties

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a test-only extra
    given = None

if given is not None:
    PROPERTY = settings(
        max_examples=12,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )

    NON_FINITE = st.sampled_from(["nan", "NaN", ".nan", "inf", "-inf", ".inf", "-.inf", "1e400", "-1e400", "Infinity"])
    NEGATIVE = st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False).map(repr)
    WORDS = st.text(
        alphabet="abcdfghjklmopqrstuvwxz", min_size=1, max_size=10
    )  # no 'e', 'i', 'n', 'y': never a number or bool

    def _user_mistake(capsysbinary, argv: Sequence[str], name: str) -> None:
        capsysbinary.readouterr()
        code = run_main(argv)
        cap = capsysbinary.readouterr()
        err = cap.err.decode("utf-8", "replace")
        assert code == 2, f"{argv}: exit {code}; stderr {err!r}"
        assert one_line_problems(err, name, ()) == [], f"{argv}: {err!r}"
        assert b"Traceback" not in cap.out and "Traceback" not in err

    @PROPERTY
    @given(value=st.one_of(NON_FINITE, NEGATIVE, WORDS))
    def test_property_train_refuses_bad_learning_rates(value, workdir, capsysbinary):
        import yaml

        parsed = yaml.safe_load(value)
        negative = isinstance(parsed, float) and parsed < 0 and parsed > float("-inf")
        # a negative lr may be reported through the min_lr <= lr rule, which names 'lr=<value>'
        _user_mistake(
            capsysbinary, ["train", "--set", f"optim.lr={value}", "--print-config"], "lr" if negative else "optim.lr"
        )

    @PROPERTY
    @given(key=st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=2, max_size=12))
    def test_property_train_refuses_unknown_keys(key, workdir, capsysbinary):
        from bdh.train.config import OptimConfig

        key = f"x{key}"
        if key in {f.name for f in dataclasses.fields(OptimConfig)}:
            return
        _user_mistake(capsysbinary, ["train", "--set", f"optim.{key}=1", "--print-config"], key)

    @PROPERTY
    @given(heads=st.integers(min_value=-4, max_value=300).filter(lambda k: k <= 0 or 128 % k or 2048 % k))
    def test_property_train_refuses_head_counts_that_do_not_divide(heads, workdir, capsysbinary):
        _user_mistake(capsysbinary, ["train", "--set", f"model.n_head={heads}", "--print-config"], "n_head")

    @PROPERTY
    @given(value=st.one_of(NON_FINITE, NEGATIVE, WORDS))
    def test_property_generate_refuses_bad_temperatures(value, workdir, capsysbinary):
        _user_mistake(capsysbinary, ["generate", RUN, "--temperature", value, *GEN], "--temperature")

    @PROPERTY
    @given(value=st.one_of(NON_FINITE, WORDS, st.integers(max_value=0).map(str)))
    def test_property_merge_refuses_bad_weights(value, workdir, capsysbinary):
        if value.lstrip("-").isdigit() and int(value) == 0:
            value = "-1"  # 0 is a valid weight (all of A)
        _user_mistake(capsysbinary, ["merge", BDH_A, BDH_B, "out/m", "--average", "--weight", value], "--weight")
        assert not (workdir / "out" / "m").exists()

    @PROPERTY
    @given(
        field=st.sampled_from(["steps", "lr", "batch_size", "seq_len", "n_layer", "corpus_bytes"]),
        value=st.one_of(NON_FINITE, WORDS, st.just("-3")),
    )
    def test_property_experiment_refuses_bad_field_values(field, value, workdir, capsysbinary):
        _user_mistake(
            capsysbinary, ["experiment", "no-bptt", "--quick", "--show-config", "--set", f"{field}={value}"], field
        )
