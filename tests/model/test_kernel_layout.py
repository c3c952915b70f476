"""The kernels' folder as its map says (`bdh.model.kernels`' docstring, `choose`'s table): every file named there
exists and every file there is named, so a reader who follows the map finds what runs."""

import re
from pathlib import Path

import bdh.model.kernels as kernels
from bdh.model.kernels import choice

ROOT = Path(kernels.__file__).resolve().parent


def _files() -> list[Path]:
    return sorted(p for ext in ("*.py", "*.c") for p in ROOT.rglob(ext) if p.name != "__init__.py")


def test_the_package_docstring_names_every_file_of_the_folder():
    doc = kernels.__doc__
    missing = [p.relative_to(ROOT).as_posix() for p in _files() if not re.search(rf"\b{re.escape(p.name)}\b", doc)]
    assert missing == []
    for folder in ("pytorch/", "cpu/", "triton/"):
        assert re.search(rf"^\s+{folder}\s", doc, re.M), folder  # each backend has its line


def test_every_file_the_choice_table_names_exists():
    source = Path(choice.__file__).read_text(encoding="utf-8")
    named = set(re.findall(r"\b((?:pytorch|cpu|triton)/\w+\.py|dispatch\.py)", source))
    assert {"cpu/ops.py", "pytorch/shared_keys.py", "triton/chunked.py", "dispatch.py"} <= named  # the regex reads it
    assert sorted(n for n in named if not (ROOT / n).is_file()) == []
