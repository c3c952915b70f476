"""The names a BDH config chooses its computation by are written once, in `bdh.model.names`."""

import ast
from pathlib import Path

import bdh
from bdh.model import names

SRC = Path(bdh.__file__).parent


def tuple_literals(path: Path) -> list[tuple]:
    """Every tuple or list of string constants written in a source file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Tuple, ast.List)) and node.elts:
            if all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
                found.append(tuple(e.value for e in node.elts))
    return found


def test_attention_forms_and_positional_schemes_are_defined_only_in_names():
    written = {names.ATTENTION_FORMS, names.POSITIONAL, names.MODES}
    again = [
        f"{p.relative_to(SRC)}: {t}"
        for p in SRC.rglob("*.py")
        if p.name != "names.py"
        for t in tuple_literals(p)
        if t in written
    ]
    assert again == []
    assert names.MODES[: len(names.ATTENTION_FORMS)] == names.ATTENTION_FORMS
