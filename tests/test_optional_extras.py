"""The README's install (`pip install -e ".[test,hf]"`) runs the whole test suite: every module of the package and
every benchmark script imports without the other extras (gpu, eval, wandb) and without packages no extra declares.

A module that needs an optional package imports it where it is used; the only modules that import one at the top
are the Triton kernels themselves (`bdh/model/kernels/triton/*_jit.py`), which the launchers beside them import
when a kernel runs. The check runs in a fresh interpreter in which those packages are made unimportable, so it
holds whatever this machine has installed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")

ROOT = Path(__file__).resolve().parents[1]
#: the extras the README's install line names
README_EXTRAS = ("test", "hf")


def optional_imports() -> set[str]:
    """Top-level import names of the extras the README's install leaves out (the project itself and ruff, which is
    a command, aside), and of psutil, which no extra declares and which the package must not need."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def names(extra: str) -> set[str]:
        return {re.match(r"[A-Za-z0-9_.-]+", r).group().replace("-", "_").lower() for r in extras[extra]}

    installed = set().union(*(names(e) for e in README_EXTRAS))
    return (
        ({"psutil"} | set().union(*(names(e) for e in extras if e not in README_EXTRAS))) - installed - {"bdh", "ruff"}
    )


def test_the_readme_s_install_line_names_the_extras_this_test_assumes():
    assert 'pip install -e ".[' + ",".join(README_EXTRAS) + ']"' in (ROOT / "README.md").read_text()


PROBE = textwrap.dedent(
    """
    import importlib, importlib.util, json, pkgutil, sys
    blocked, benchmarks = json.loads(sys.argv[1]), sys.argv[2]
    for name in blocked:
        sys.modules[name] = None  # `import name` now raises ModuleNotFoundError
    import bdh
    failed = {}
    for info in pkgutil.walk_packages(bdh.__path__, "bdh."):
        try:
            importlib.import_module(info.name)
        except ImportError as e:
            failed[info.name] = f"{type(e).__name__}: {e}"
    sys.path.insert(0, benchmarks)
    import pathlib
    for path in sorted(pathlib.Path(benchmarks).glob("*.py")):
        spec = importlib.util.spec_from_file_location(path.stem + "_benchmark", path)
        sys.modules[spec.name] = module = importlib.util.module_from_spec(spec)  # dataclasses look it up
        try:
            spec.loader.exec_module(module)
        except ImportError as e:
            failed["benchmarks/" + path.name] = f"{type(e).__name__}: {e}"
    print(json.dumps(failed))
    """
)


def test_every_module_and_benchmark_imports_without_the_other_extras():
    blocked = optional_imports()
    assert {"triton", "wandb", "lm_eval", "psutil"} <= blocked
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(sorted(blocked)), str(ROOT / "benchmarks")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    failed = json.loads(out.stdout.strip().splitlines()[-1])
    kernels = {m for m in failed if re.fullmatch(r"bdh\.model\.kernels\.triton\.\w+_jit", m)}
    assert all("triton" in failed[m] for m in kernels), failed
    assert {m: e for m, e in failed.items() if m not in kernels} == {}


@pytest.mark.parametrize("module", ["bdh.model.kernels.triton.chunked"])
def test_a_triton_launcher_imports_without_triton(module):
    """The launchers (what the choice table names) import without Triton; only running a kernel needs it."""
    code = f"import sys; sys.modules['triton'] = None; import {module}"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_every_test_that_needs_another_extra_is_marked_extra():
    """.ci/run runs the README's install and test command first, then adds the extras and runs `-m extra`: a test
    that skips without an extra runs in that second pass only if it carries the mark."""
    optional = "|".join(sorted(optional_imports()))
    needs = re.compile(rf"""(importorskip|skipif\(\s*importlib\.util\.find_spec)\(\s*["']({optional})["']""")
    unmarked = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        text = path.read_text()
        gpu_only = "pytestmark = pytest.mark.cuda" in text  # the GPU tests: they run only where a GPU is
        if path != Path(__file__) and needs.search(text) and "pytest.mark.extra" not in text and not gpu_only:
            unmarked.append(str(path.relative_to(ROOT)))
    assert unmarked == []
