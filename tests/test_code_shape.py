"""The shape of ``src/bdh`` (tools/code_shape.py): no function over 60 lines, no file over 600, no import cycle."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "code_shape.py"

#: what is still above the limits (its size when it was listed); an entry that no longer breaks a limit fails the
#: test too, so the list only shrinks. Empty since the three Triton kernels were split into ``@triton.jit`` helpers
#: (Triton inlines them: each kernel is still one GPU program).
KNOWN: dict[str, str] = {}


@pytest.fixture(scope="module")
def code_shape():
    spec = importlib.util.spec_from_file_location("code_shape", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["code_shape"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("code_shape", None)


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_the_tool_finds_long_functions_long_files_and_cycles(code_shape, tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(code_shape.MAX_FUNCTION))  # + the def line: one too many
    root = _write(
        tmp_path,
        {
            "__init__.py": "from . import a\n",  # a package importing its modules is not a cycle with them
            "a.py": "from .b import f\n\n\ndef g():\n" + body,
            "b.py": "def f():\n    from .a import g  # lazy: still a cycle\n",
            "c.py": "import pkg.a\n" + "\n" * code_shape.MAX_FILE,
            "sub/__init__.py": "",
            "sub/d.py": "from .. import c\n\n\nclass K:\n    def short(self):\n        return 1\n",
        },
    )
    shape = code_shape.measure(root)
    assert shape.functions == [("a.py", "g", code_shape.MAX_FUNCTION + 1)]
    assert shape.files == [("c.py", code_shape.MAX_FILE + 1)]
    assert shape.cycles == [["pkg.a", "pkg.b"]]


def test_the_tool_reads_relative_imports_of_a_package(code_shape, tmp_path):
    root = _write(
        tmp_path,
        {"__init__.py": "", "sub/__init__.py": "from .d import K\n", "sub/d.py": "from . import e\n", "sub/e.py": ""},
    )
    shape = code_shape.measure(root)
    assert shape.cycles == []
    root = _write(tmp_path, {"sub/e.py": "from .d import K  # e -> d -> e\n"})
    assert code_shape.measure(root).cycles == [["pkg.sub.d", "pkg.sub.e"]]


def test_src_has_no_long_function_no_long_file_and_no_import_cycle(code_shape):
    shape = code_shape.measure()
    found = {f"{rel}:{name}": f"{n} lines" for rel, name, n in shape.functions}
    found.update({rel: f"{n} lines" for rel, n in shape.files})
    found.update({" <-> ".join(c): "import cycle" for c in shape.cycles})
    assert {k: v for k, v in found.items() if k not in KNOWN} == {}
    assert [k for k in KNOWN if k not in found] == [], "these no longer break a limit: drop them from KNOWN"


def test_test_files_outside_packages_have_unique_names():
    """pytest imports a test file outside a package by its basename: two such files of one name stop the collection
    of the whole suite ("import file mismatch")."""
    tests = Path(__file__).resolve().parent
    seen: dict[str, list[str]] = {}
    for path in tests.rglob("test_*.py"):
        if not (path.parent / "__init__.py").is_file():
            seen.setdefault(path.name, []).append(str(path.relative_to(tests)))
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}
