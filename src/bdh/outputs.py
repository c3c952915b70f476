"""One way to write outputs: every file and folder that ``bdh`` writes goes through this module.

The rules, checked by `check_output` before any work starts:

- an existing non-empty target is refused unless the user asked to replace it (``--overwrite``, or
  ``--resume`` where a command continues its own folder);
- a target that is one of the command's inputs, or a folder that contains one, is always refused
  (``bdh merge M M M`` must not replace the model it reads);
- a file is wanted where a file is given, a folder where a folder is.

Then writing is atomic: a file is written to a temporary file beside it and renamed into place
(`write_bytes`, `write_text`, `atomic_file`, `atomic_path`); a folder is assembled under a temporary
name and swapped in (`atomic_folder`). An interrupted command leaves the old target or the new one,
never a half-written one. Files and folders get the modes the user's umask gives (``tempfile`` would
make them private), so every command's outputs look alike.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from bdh.errors import UserError

PathLike = str | os.PathLike


class OutputError(UserError):
    """An output target that cannot be written: exists, is an input, or lies where nothing can be written."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a new file gets under the current umask."""
    return 0o666 & ~_umask()


def folder_mode() -> int:
    """The mode a new folder gets under the current umask."""
    return 0o777 & ~_umask()


def _overlaps(target: Path, source: Path) -> bool:
    """Whether writing ``target`` could replace ``source``: the same path, or a folder that contains it."""
    return target == source or target in source.parents


def _is_nonempty(path: Path) -> bool:
    if path.is_dir():
        return any(path.iterdir())
    return path.stat().st_size > 0


def existing_parent(path: PathLike) -> Path:
    """The nearest existing folder above ``path`` (where its missing parents would be made)."""
    parent = Path(path).resolve().parent
    while not parent.exists():
        parent = parent.parent
    return parent


def check_output(
    path: PathLike,
    *,
    overwrite: bool = False,
    inputs: Sequence[PathLike] = (),
    folder: bool = False,
    flag: str = "--out",
    how: str = "pass --overwrite to replace it",
) -> Path:
    """Check an output target before any work; return it as a `Path`, or raise `OutputError`.

    ``inputs`` are the files and folders the command reads; ``folder`` says whether the target is a
    folder; ``flag`` names the argument in the message; ``how`` tells how to allow a replacement.
    """
    target = Path(path)
    name = f"{flag} {target}" if flag else str(target)
    resolved = target.resolve()
    for source in inputs:
        if _overlaps(resolved, Path(source).resolve()):
            what = "is" if resolved == Path(source).resolve() else "contains"
            raise OutputError(f"{name}: {what} an input of this command ({source}); write the output somewhere else")
    if target.exists():
        if folder and not target.is_dir():
            raise OutputError(f"{name}: exists and is not a folder")
        if not folder and target.is_dir():
            raise OutputError(f"{name}: is a folder; give a file name")
        if _is_nonempty(target) and not overwrite:
            raise OutputError(f"{name}: exists; {how}, or choose another path")
    elif target.is_symlink():
        raise OutputError(f"{name}: is a broken symbolic link")
    parent = existing_parent(target)
    if not parent.is_dir():
        raise OutputError(f"{name}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{name}: cannot write in {parent} (permission denied)")
    return target


def _make_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"{path}: {path.parent} exists and is not a folder") from None


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """``with atomic_path(p) as tmp:`` write to ``tmp`` (any writer that wants a file name); on success
    it becomes ``p`` with the umask's mode, on failure it is removed and ``p`` is untouched."""
    path = Path(path)
    _make_parent(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:  # durable before the rename: a crash leaves the old file or the new one
            os.fsync(f.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_file(
    path: PathLike, mode: str = "wb", encoding: str | None = None, newline: str | None = None
) -> Iterator[IO]:
    """``with atomic_file(p, "w") as f:`` an open file whose contents replace ``p`` only when the block ends
    without an error (for writers that stream in pieces)."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, encoding=encoding, newline=newline) as f:
            yield f


def write_bytes(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (parents made as needed)."""
    with atomic_file(path, "wb") as f:
        f.write(data)
    return Path(path)


def write_text(path: PathLike, text: str) -> Path:
    """Write ``text`` as UTF-8 to ``path`` atomically."""
    return write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_folder(path: PathLike) -> Iterator[Path]:
    """``with atomic_folder(p) as tmp:`` fill the folder ``tmp``; on success it replaces ``p`` (the old
    folder, if any, is removed after the swap), on failure it is removed and ``p`` is untouched."""
    path = Path(path)
    _make_parent(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        os.chmod(tmp, folder_mode())
        if path.is_dir() and not path.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / "x")
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            if path.exists() or path.is_symlink():
                path.unlink()
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
