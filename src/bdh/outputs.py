"""One way to write outputs: every file and folder ``bdh`` writes goes through this module.

`check_output` refuses, before any work, a non-empty target without ``--overwrite``/``--resume``, a target that is or
holds an input, and a file where a folder is wanted. Writes are atomic (a temporary beside the target, then a rename or
folder swap); a folder has one writer (`folder_lock`, an ``flock``); inputs are read only once known to be regular
files (`input_file`)."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

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
        return any(p.name != LOCK_NAME for p in path.iterdir())
    return path.stat().st_size > 0


def folder_entries(path: PathLike) -> list[Path]:
    """What a folder holds, without its lock file (`folder_lock`): a folder holding only that is empty."""
    return [p for p in Path(path).iterdir() if p.name != LOCK_NAME]


def empty_folder(path: PathLike) -> None:
    """Delete everything in a folder but its lock file (the folder's writer holds that lock)."""
    for entry in folder_entries(path):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def file_problem(path: Path) -> str | None:
    """What keeps ``path`` from being read as a regular file ("is missing", "is a folder", ...), or None;
    opens nothing."""
    if not os.path.lexists(path):
        return "is missing"
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        what = "loops" if exc.errno == errno.ELOOP else "points nowhere"
        return f"is a symbolic link that {what}" if path.is_symlink() else f"cannot be read ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
    return "is " + next((name for test, name in kinds if test(mode)), "a device, not a regular file")


class InputError(UserError):
    """An input path that is not what the command reads: a folder, a FIFO or a device where a file is wanted."""


def input_file(path: PathLike, what: str = "", missing: str = "no such file") -> Path:
    """``path`` checked to be a regular file (links followed), else one line naming ``what`` and what it is instead."""
    path = Path(path)
    problem = file_problem(path)
    if problem is None:
        return path
    name = f"{what} {path}" if what else str(path)
    if problem == "is missing":
        raise FileNotFoundError(f"{name}: {missing}")
    raise InputError(f"{name}: {problem}{'' if 'regular file' in problem else ', not a regular file'}")


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
    """An output target as a `Path`, checked before any work, or `OutputError` naming ``flag`` and ``how`` to
    allow it."""
    target = Path(path)
    name = f"{flag} {target}" if flag else str(target)
    resolved = _resolved(target)
    if resolved is None:
        raise OutputError(f"{name}: is a symbolic link that loops (or lies in one); give another path")
    for source in inputs:
        theirs = _resolved(Path(source))
        if theirs is not None and _overlaps(resolved, theirs):
            what = "is" if resolved == theirs else "contains"
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
    _check_parent(target, name)
    return target


def _resolved(path: Path) -> Path | None:
    """``path`` with its links followed, or None where a link on the way loops (its reader refuses it by name)."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # RuntimeError up to Python 3.12, OSError (ELOOP) from 3.13
        return None


def _check_parent(target: Path, name: str) -> None:
    """Refuse a target whose nearest existing parent is a file, or a folder this process cannot write in."""
    parent = existing_parent(target)
    if not parent.is_dir():
        raise OutputError(f"{name}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{name}: cannot write in {parent} (permission denied)")


#: the errors of a full disk, a quota or a file-size limit: the write failed, not the path
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class DiskFull(OutputError):
    """A file or folder that could not be written for want of space; ``path``: the one being written."""

    def __init__(
        self,
        path: Path,
        errnum: int,
        then: str = "run the command again",
        kept: str = "nothing was replaced (the temporary was removed)",
    ):
        super().__init__(f"{path}: not written: {os.strerror(errnum)}; {kept}; free some space and {then}")
        self.path, self.errno, self.kept = path, errnum, kept

    def continued_by(self, command: str) -> DiskFull:
        """The same error advising ``command``, which continues the work."""
        return DiskFull(self.path, self.errno, f"continue with: {command}", self.kept)


def _no_space(path: Path, exc: OSError | DiskFull, inside: Path | None = None) -> DiskFull | None:
    """The `DiskFull` for ``exc`` naming ``path`` (not a temporary inside ``inside``), or None to let ``exc`` go."""
    if isinstance(exc, DiskFull):
        inner = inside is not None and inside in exc.path.parents
        return DiskFull(path / exc.path.relative_to(inside), exc.errno) if inner else None
    return DiskFull(path, exc.errno) if exc.errno in NO_SPACE else None


def _temp_prefix(path: Path) -> str:
    """The start of a temporary name beside ``path``: ``.NAME.PID-`` (`clean_leftovers` reads the pid back)."""
    return f".{path.name}.{os.getpid()}-"


def _make_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"{path}: {path.parent} exists and is not a folder") from None


def _temporary(path: Path, make, suffix: str) -> str:
    """A temporary beside ``path`` (``make``: `tempfile.mkstemp` or `mkdtemp`); an unwritable folder is
    one `OutputError`."""
    try:
        return make(prefix=_temp_prefix(path), suffix=suffix, dir=path.parent)
    except PermissionError:
        raise OutputError(f"{path}: cannot write in {path.parent} (permission denied)") from None


#: the signals that stop a command; held while a temporary file is created so that it is always cleaned up
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _hold_signals() -> set | None:
    """Block the stop signals in this thread (POSIX main thread); returns what to restore, or None."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)


def _release_signals(held: set | None) -> None:
    if held is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """``with atomic_path(p) as tmp:`` write ``tmp``; on success it becomes ``p``, on failure ``p`` is untouched."""
    path = Path(path)
    _make_parent(path)
    held = _hold_signals()  # a Ctrl-C between creating the temporary and the try below would leave it behind
    try:
        fd, name = _temporary(path, tempfile.mkstemp, ".tmp")
        os.close(fd)
    except BaseException:
        _release_signals(held)
        raise
    tmp = Path(name)
    try:
        _release_signals(held)  # a signal held meanwhile is raised here, where the temporary is cleaned up
        yield tmp
        _put_in_place(tmp, path)
    except OSError as exc:  # a full disk names the file being written (DiskFull), in one line
        full = _no_space(path, exc)
        if full is None:
            raise
        raise full from None
    finally:
        if tmp.exists():
            tmp.unlink()


def _put_in_place(tmp: Path, path: Path) -> None:
    """``tmp`` made durable and renamed to ``path``; a refused rename names ``path`` (`OutputError`)."""
    with open(tmp, "rb+") as f:  # durable before the rename: a crash leaves the old file or the new one
        os.fsync(f.fileno())
    os.chmod(tmp, file_mode())
    try:
        os.replace(tmp, path)
    except OSError as exc:
        if exc.errno in NO_SPACE:
            raise
        raise OutputError(f"{path}: not written ({exc.strerror}); nothing was replaced") from None


@contextlib.contextmanager
def atomic_file(
    path: PathLike, mode: str = "wb", encoding: str | None = None, newline: str | None = None
) -> Iterator[IO]:
    """``with atomic_file(p, "w") as f:`` a file whose contents replace ``p`` only when the block succeeds."""
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


def append_text(path: PathLike, text: str) -> None:
    """Append ``text`` to ``path`` whole or not at all (a failed write is cut back; a full disk is `DiskFull`)."""
    path = Path(path)
    with open(path, "ab", buffering=0) as f:  # unbuffered: nothing is left to flush after a failure
        size = f.seek(0, os.SEEK_END)
        try:
            view = memoryview(text.encode("utf-8"))
            while view:
                view = view[f.write(view) :]
        except OSError as exc:
            f.truncate(size)
            full = _no_space(path, exc)
            if full is None:
                raise
            raise full from None


@contextlib.contextmanager
def atomic_folder(path: PathLike) -> Iterator[Path]:
    """``with atomic_folder(p) as tmp:`` fill ``tmp``; on success it replaces ``p``, on failure ``p`` is untouched."""
    path = Path(path)
    _make_parent(path)
    held = _hold_signals()  # as in `atomic_path`: the temporary is inside the try before a signal is raised
    try:
        tmp = Path(_temporary(path, tempfile.mkdtemp, ".tmp"))
    except BaseException:
        _release_signals(held)
        raise
    try:
        _release_signals(held)
        yield tmp
        os.chmod(tmp, folder_mode())
        if path.is_dir() and not path.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=_temp_prefix(path), suffix=".old", dir=path.parent))
            os.replace(path, old / "x")
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            if path.exists() or path.is_symlink():
                path.unlink()
            os.replace(tmp, path)
    except (OSError, DiskFull) as exc:  # a full disk names the folder's file being written, not the temporary
        full = _no_space(path, exc, inside=tmp)
        if full is None:
            raise
        raise full from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------- one writer per folder
LOCK_NAME = ".bdh.lock"

#: the folders this process holds: resolved path -> [lock file descriptor, depth of nesting]
_HELD: dict[Path, list[int]] = {}


class FolderBusy(OutputError):
    """A folder another process is writing into (its lock is held)."""


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    return pid > 0


def _holder(fd: int) -> str:
    """Who holds a lock, from its file: ``pid 123 on host h (bdh train ...) since 12:00:01``."""
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
    except OSError:
        text = ""
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    if "pid" not in fields:
        return "another process (it has not written its name yet)"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(fields.get("time", 0) or 0)))
    return f"pid {fields['pid']} on host {fields.get('host', '?')} ({fields.get('command', '?')}), since {since}"


def _lock_file(lock: Path, folder: Path) -> int:
    """An open descriptor of ``lock`` holding its exclusive flock, or `FolderBusy` naming the holder."""
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, file_mode())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise FolderBusy(
                f"{folder}: in use by {holder}; one writer at a time: wait for it to end, or stop that process"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:  # else the holder removed the file while we waited on the old one: take the new one
            return fd
        os.close(fd)


@contextlib.contextmanager
def folder_lock(path: PathLike) -> Iterator[Path]:
    """``with folder_lock(folder):`` be the one writer of ``folder`` (made if needed) for the block.

    The lock is ``folder/.bdh.lock``, an exclusive ``flock`` (dropped by the kernel when its holder dies) holding
    ``pid``, ``host``, ``command``, ``time``. Another process gets `FolderBusy`; in this one the lock nests. On leaving
    the lock file goes, and the folder too if left empty."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{folder}: exists and is not a folder")
    key = _resolved(folder)
    if key is None:
        raise OutputError(f"{folder}: is a symbolic link that loops (or lies in one); give another folder")
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield folder
        finally:
            _HELD[key][1] -= 1
        return
    created = not folder.exists()
    if created:
        _check_parent(folder, str(folder))
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / LOCK_NAME
    fd = _lock_file(lock, folder)
    command = " ".join(["bdh", *sys.argv[1:]])[:200].replace("\n", " ")
    info = f"pid={os.getpid()}\nhost={socket.gethostname()}\ncommand={command}\ntime={time.time()}\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, info.encode("utf-8", "replace"), 0)
    _HELD[key] = [fd, 1]
    try:
        clean_leftovers(folder)
        yield folder
    finally:
        del _HELD[key]
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if the block left it empty


def refuse_held(root: PathLike) -> None:
    """`FolderBusy` while another process holds the `folder_lock` of ``root`` or of a folder inside it; takes
    no lock."""
    root = Path(root)
    if not root.is_dir() or root.is_symlink():
        return
    for lock in sorted(root.rglob(LOCK_NAME)):
        if lock.parent.resolve() in _HELD:
            continue
        try:
            fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue  # gone meanwhile, or not ours to read: its writer's own lock still guards it
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released by the close below
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise FolderBusy(
                f"{lock.parent}: in use by {_holder(fd)}; one writer at a time: wait for it to end, or stop that "
                "process"
            ) from None
        finally:
            os.close(fd)


def holds_lock(path: PathLike) -> bool:
    """Whether this process holds the `folder_lock` of ``path``."""
    return Path(path).resolve() in _HELD


#: a temporary of `atomic_path` / `atomic_folder`: ``.NAME.PID-XXXX.tmp`` or ``.old``
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)-[^.]+\.(?P<kind>tmp|old)$")


def clean_leftovers(folder: PathLike, depth: int = 2) -> list[Path]:
    """Remove the temporaries of dead writers in ``folder`` (to ``depth`` levels), first putting back an orphaned
    ``.old`` folder; returns what was removed. The caller holds the lock."""
    removed: list[Path] = []
    folder = Path(folder)
    if not folder.is_dir() or folder.is_symlink():
        return removed
    for entry in sorted(folder.iterdir()):
        match = _LEFTOVER.match(entry.name)
        if match is None or pid_alive(int(match["pid"])):
            if depth > 1 and entry.is_dir() and not entry.is_symlink() and match is None:
                removed += clean_leftovers(entry, depth - 1)
            continue
        target = folder / match["name"]
        kept = entry / "x"
        if match["kind"] == "old" and kept.is_dir() and not os.path.lexists(target):
            os.replace(kept, target)
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def json_default(value: Any) -> Any:
    """The ``default`` of every ``json.dumps`` of results: NumPy values, dataclasses as dicts, paths as strings."""
    import numpy as np

    if isinstance(value, np.generic):  # NumPy scalars: floats, integers, booleans
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


def json_ready(value: Any) -> Any:
    """``value`` as strict JSON values (`json_default`; string keys, lists), NaN and infinities as None."""
    return json.loads(json.dumps(value, default=json_default), parse_constant=lambda _: None)
