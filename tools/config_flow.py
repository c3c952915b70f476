"""Follow the run config of ``bdh train`` from its arguments down to the kernels: which files it passes through,
and how often it comes back to a file it had left.

    python tools/config_flow.py            # a one-step `bdh train --quick` into a temporary folder
    python tools/config_flow.py --trace    # and the path itself, one line per file change

The table counts every such call, and then only those where a config is passed to a function other than one of
a config's own methods (what consumes it, not what builds or checks it).

It also lists every config object built during the run, and by which function: "built in one place".

A config object is any instance of a class named ``...Config`` defined in a ``bdh`` module (the run config, its
model and task sections, the trainer's sections). Every call into a ``bdh`` function that receives one (as an
argument or as ``self``) is a step of its path, recorded by the callee's file. The path is that sequence of files
with repeats in a row merged; a *return* is a step into a file that the path had already visited and left. What
a config's own methods do with it (its ``typed_config`` checks and accessors) are steps like any other: a config
that is asked for a value from another file and the file that asked, alternating, counts as returns.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

#: a small model and one evaluation batch: the path does not depend on the sizes, the trace's time does
SMALL = [f"--set={kv}" for kv in ("model.n_layer=1", "model.n_embd=32", "model.n_neurons=256", "eval.batches=1")]


def _is_config(value: object) -> bool:
    kind = type(value)
    return kind.__name__.endswith("Config") and kind.__module__.startswith("bdh.")


def _caller(frame, root: str) -> tuple[str, str]:  # noqa: ANN001 (a frame)
    """The first ``bdh`` function above a config's ``__init__`` outside the config machinery (``typed_config``,
    dataclass-made frames): (file, name)."""
    while frame is not None and (
        frame.f_code.co_name == "__init__"
        or not frame.f_code.co_filename.startswith(root)
        or frame.f_code.co_filename.endswith("typed_config.py")
    ):
        frame = frame.f_back
    return (
        ("?", "?") if frame is None else (str(Path(frame.f_code.co_filename).relative_to(root)), frame.f_code.co_name)
    )


def trace_train(argv: Sequence[str]) -> tuple[list[tuple[str, str, bool]], list[tuple[str, str, str]]]:
    """``bdh ARGV`` run in this process: the (file, function, own) of every call into ``bdh`` that received a
    config, ``own`` when only as ``self`` (a config's own method); and every config object built, as (class,
    file, function) of the ``bdh`` function that built it."""
    import bdh
    from bdh.cli import main

    root = str(Path(bdh.__file__).resolve().parent)
    steps: list[tuple[str, str, bool]] = []
    built: list[tuple[str, str, str]] = []

    def profile(frame, event, arg):  # noqa: ANN001 (sys.setprofile's signature)
        if event != "call":
            return
        code = frame.f_code
        if code.co_name == "__init__" and _is_config(frame.f_locals.get("self")):
            built.append((type(frame.f_locals["self"]).__name__, *_caller(frame.f_back, root)))
        if not code.co_filename.startswith(root):
            return
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        given = [n for n in names if _is_config(frame.f_locals.get(n))]
        if given:
            own = given == ["self"]
            steps.append((str(Path(code.co_filename).relative_to(root)), code.co_name, own))

    sys.setprofile(profile)
    try:
        code = main(list(argv))
    finally:
        sys.setprofile(None)
    if code != 0:
        raise SystemExit(f"config_flow: bdh {' '.join(argv)} exited with {code}")
    return steps, built


def path_of(steps: Sequence[tuple[str, str, bool]]) -> list[str]:
    """The files of ``steps`` with repeats in a row merged."""
    files: list[str] = []
    for file, _, _ in steps:
        if not files or files[-1] != file:
            files.append(file)
    return files


def returns(files: Sequence[str]) -> int:
    """Steps into a file the path had already visited and left."""
    seen: set[str] = set()
    count = 0
    for i, file in enumerate(files):
        if file in seen and files[i - 1] != file:
            count += 1
        seen.add(file)
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", action="store_true", help="print the path, one line per file change")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["train", "--quick", "--run-dir", str(Path(tmp) / "run"), "--set", "train.max_steps=1", *SMALL]
        argv += ["--set", "sample.max_new_tokens=0", "--set", "train.threads=1"]
        steps, built = trace_train(argv)
    shown = " ".join("RUN" if a.startswith(tmp) else a for a in argv)
    print(f"bdh {shown}")
    print("| config built | times | by |")
    print("|---|---:|---|")
    for name in dict.fromkeys(b[0] for b in built):
        where = sorted({f"{file}:{fn}" for kind, file, fn in built if kind == name})
        print(f"| {name} | {sum(b[0] == name for b in built)} | {', '.join(where)} |")
    print()
    print("| calls counted | calls | files | path (files in a row merged) | returns to a file it had left |")
    print("|---|---:|---:|---:|---:|")
    for label, chosen in (
        ("every call receiving a config", steps),
        ("passed to a function (not a config's own method)", [s for s in steps if not s[2]]),
    ):
        files = path_of(chosen)
        print(f"| {label} | {len(chosen)} | {len(set(files))} | {len(files)} | {returns(files)} |")
        if args.trace:
            print("  " + " > ".join(files))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
