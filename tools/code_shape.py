"""The shape of the code under ``src/bdh``: long functions, long files and import cycles.

The limits of CONTRIBUTING.md ("Rules the tests and review hold you to") as a measure anyone can run::

    python tools/code_shape.py            # list what breaks them; exit 1 if anything does
    python tools/code_shape.py --counts   # one line: the three counts

* a function (or method, nested or not) is too long when it spans more than `MAX_FUNCTION` lines, from its
  ``def`` line to its last line, its docstring included (``ast``'s ``lineno`` to ``end_lineno``);
* a file is too long when it has more than `MAX_FILE` lines;
* an import cycle is a strongly connected component of more than one module in the graph "module A imports
  module B", read with ``ast`` from every ``import`` statement of a module, the ones inside functions included
  (a lazy import still ties the two modules together). ``from package import name`` is an edge to the module
  ``package.name`` when that is a module, else to ``package``; the parent packages Python imports on the way
  are not edges (a package's ``__init__`` importing its own modules is not a cycle with them).

"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

MAX_FUNCTION = 60
MAX_FILE = 600
ROOT = Path(__file__).resolve().parents[1] / "src" / "bdh"


@dataclass(frozen=True)
class Shape:
    """What breaks the limits: (path, name, lines) of long functions, (path, lines) of long files, and the
    import cycles as sorted lists of module names."""

    functions: list[tuple[str, str, int]]
    files: list[tuple[str, int]]
    cycles: list[list[str]]


def module_name(path: Path, root: Path) -> str:
    """``bdh.train.trainer`` for ``root/train/trainer.py``; a package is named by its ``__init__``'s folder."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, int]]:
    """(qualified name, lines) of every function of ``tree``, nested ones included."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{node.name}"
            found.append((name, node.end_lineno - node.lineno + 1))
            found.extend(_functions(node, name + "."))
        elif isinstance(node, ast.ClassDef):
            found.extend(_functions(node, f"{prefix}{node.name}."))
        else:
            found.extend(_functions(node, prefix))
    return found


def _imports(tree: ast.AST, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that module ``name`` imports anywhere in ``tree``."""
    package = name if is_package else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in out if m in modules and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def measure(root: Path = ROOT) -> Shape:
    """The long functions, long files and import cycles of the package at ``root``."""
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(p, root): p for p in paths}
    functions, files, graph = [], [], {}
    for name, path in modules.items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
        graph[name] = _imports(tree, name, path.name == "__init__.py", set(modules))
        rel = path.relative_to(root).as_posix()
        lines = len(text.splitlines())
        if lines > MAX_FILE:
            files.append((rel, lines))
        functions.extend((rel, f, n) for f, n in _functions(tree) if n > MAX_FUNCTION)
    return Shape(functions, files, _cycles(graph))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", action="store_true", help="print the three counts on one line")
    args = parser.parse_args(argv)
    shape = measure()
    if args.counts:
        print(
            f"functions over {MAX_FUNCTION} lines: {len(shape.functions)}; files over {MAX_FILE} lines: "
            f"{len(shape.files)}; import cycles: {len(shape.cycles)}"
        )
    else:
        for rel, name, n in sorted(shape.functions, key=lambda f: -f[2]):
            print(f"function {rel}:{name}: {n} lines")
        for rel, n in shape.files:
            print(f"file {rel}: {n} lines")
        for cycle in shape.cycles:
            print(f"import cycle: {' <-> '.join(cycle)}")
    return 1 if shape.functions or shape.files or shape.cycles else 0


if __name__ == "__main__":
    sys.exit(main())
