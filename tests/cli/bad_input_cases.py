"""The machinery of the bad-input suites (`test_bad_input.py`, `test_bad_input_sweep.py`): a table of `Case`s,
each run through the real command line (``bdh.cli.main`` in this process) and checked the same way.

Each case runs in a fresh folder holding a copy of the fixture tree as ``fx/`` (`make_workdir`; only the parts
its argv names; see `bad_input_fixtures`) and writes its outputs to ``out/``. `check_case` holds it to:

1. the exit status (2 for a user mistake; 0 for a successful control);
2. for a mistake, stderr is exactly one non-empty line ``bdh: error: ...`` that names the offending value, flag
   or file (``Case.name``, plus ``Case.also`` where the message must say more, e.g. ``--overwrite``);
3. no ``Traceback`` in stdout or stderr, and no case runs past its time limit (nothing hangs);
4. every file under ``fx/`` is byte-identical afterwards (sha256) and nothing was added there (a success
   control lists the fixture paths it may replace in ``Case.changes``);
5. where the message tells the user what to do next (``Case.follow``), the advice is followed once, as the user
   would follow it (the command it prints, or the flag it names added to the same command), and must work:
   exit status ``Case.follow_exit`` (0), no traceback, then ``Case.follow_check``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import shutil
import signal
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from bdh.cli import main

from .bad_input_fixtures import snapshot

#: made by `readonly_folder` for the cases that need it (mode 0o555), relative to each case's cwd
RO = "fx/readonly"

#: a check of a case's (stdout bytes, stderr text, cwd)
Check = Callable[[bytes, str, Path], None]


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    kind: str
    argv: tuple[str, ...]
    name: str | None  # a substring of the error line naming the offending value, flag or file
    exit: int = 2
    also: tuple[str, ...] = ()  # more substrings the error line must hold
    changes: tuple[str, ...] = ()  # fixture paths (relative to fx/) a successful control may replace
    root_skip: bool = False  # a read-only folder: skipped where nothing stops this user (root without chattr)
    setup: Callable[[Path], Callable[[], None] | None] | None = None  # may return its own cleanup
    check: Check | None = None
    follow: Callable[[str, Case], Sequence[str]] | None = None  # (error line, case) -> the advised argv
    follow_exit: int = 0
    follow_check: Check | None = None
    needs: tuple[str, ...] = ()  # fixture paths the advice followed reads besides those the argv names

    @property
    def command(self) -> str:
        words = [a for a in self.argv if not a.startswith("-")]
        if words and words[0] in ("dmft", "bench", "experiment") and len(words) > 1:
            return f"{words[0]} {words[1]}"
        return words[0] if words else self.argv[0]


class CaseTable:
    """A list of `Case`s, added by `case` (a mistake) and `ok` (a control that succeeds)."""

    def __init__(self) -> None:
        self.cases: list[Case] = []

    def case(
        self, id: str, kind: str, argv: str | Sequence[str], name: str | None, *extra: str | Sequence[str], **kw
    ) -> None:
        """Add a case; ``argv`` is a shell-like string (shlex) or a list; ``extra`` lists are appended to it."""
        args = shlex.split(argv) if isinstance(argv, str) else list(argv)
        for more in extra:
            args += shlex.split(more) if isinstance(more, str) else list(more)
        self.cases.append(Case(id, kind, tuple(args), name, **kw))

    def ok(self, id: str, argv: str | Sequence[str], *extra: str | Sequence[str], kind: str = "ok", **kw) -> None:
        """Add a control that succeeds (exit status 0)."""
        self.case(id, kind, argv, None, *extra, exit=0, **kw)

    def counts(self) -> dict[str, int]:
        """Cases by kind, in the order the kinds first appear."""
        out: dict[str, int] = {}
        for c in self.cases:
            out[c.kind] = out.get(c.kind, 0) + 1
        return out


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _chattr(path: Path, flag: str) -> bool:
    """``chattr +i``/``-i``: the immutable attribute, which stops root too (where the file system and the
    process's capabilities allow it)."""
    import subprocess

    try:
        return subprocess.run(["chattr", flag, str(path)], capture_output=True, check=False).returncode == 0
    except OSError:
        return False


_CAN_STOP_ROOT: list[bool] = []


def readonly_stops_this_user() -> bool:
    """Whether `make_readonly` stops this process's writes: always for a user, for root where ``chattr +i`` works."""
    if not _is_root():
        return True
    if not _CAN_STOP_ROOT:
        probe = Path(tempfile.mkdtemp())
        works = _chattr(probe, "+i")
        if works:
            try:
                (probe / "x").write_text("x")
                works = False
            except OSError:
                pass
            _chattr(probe, "-i")
        shutil.rmtree(probe, ignore_errors=True)
        _CAN_STOP_ROOT.append(works)
    return _CAN_STOP_ROOT[0]


def make_readonly(path: Path) -> None:
    """Make a folder nobody may write in: mode 0o555, and immutable when running as root (`unmake_readonly`)."""
    path.chmod(0o555)
    if _is_root():
        _chattr(path, "+i")


def unmake_readonly(path: Path) -> None:
    if _is_root():
        _chattr(path, "-i")
    path.chmod(0o755)


def readonly_folder(cwd: Path) -> None:
    """A setup: ``fx/readonly``, a folder nobody may write in."""
    ro = cwd / RO
    ro.mkdir()
    (ro / "inside.txt").write_text("x\n")
    make_readonly(ro)


# ---------------------------------------------------------------------------------------------- advice followed


def advised_command(line: str) -> list[str]:
    """The argv of the first ``bdh ...`` command an error line advises (up to the end of the line, a ';', a
    ',' or a ')' that ends it), without the ``bdh``."""
    match = re.search(r"\bbdh ((?:train|bench|experiment|generate|eval|merge|viz|plot|inspect|info)\b[^;,)]*)", line)
    assert match, f"the message advises no bdh command: {line!r}"
    return shlex.split(match.group(1).strip().rstrip("."))


def follow_command(line: str, case: Case) -> list[str]:
    """Follow advice that prints a command: run that command."""
    return advised_command(line)


def follow_adding(*flags: str) -> Callable[[str, Case], list[str]]:
    """Follow advice that names flags (``pass --overwrite``, ``add --resume``): the same command with them."""

    def follow(line: str, case: Case) -> list[str]:
        for flag in flags:
            assert flag.split()[0] in line, f"the message does not advise {flag}: {line!r}"
        return [*case.argv, *(w for flag in flags for w in flag.split())]

    return follow


# ---------------------------------------------------------------------------------------------- running a case


class CaseTimeout(BaseException):
    """Raised by the alarm when a case runs too long (a BaseException: main() must not swallow it)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    if not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum, frame):
        raise CaseTimeout(f"the case ran for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


#: fixture folders whose entries are copied one by one (elsewhere a top-level entry of fx/ is copied whole)
GROUPS = {"models", "bad", "my models", "cfg", "bench", "data", "sw"}


def fixtures_named(argv: Sequence[str]) -> set[str] | None:
    """The parts of fx/ that ``argv`` names (relative to fx/), or None for all of it (``fx`` itself is named)."""
    wanted: set[str] = set()
    for arg in argv:
        for piece in {arg, arg.rpartition("=")[2]}:
            if piece.rstrip("/") == "fx":
                return None
            if piece.startswith("fx/"):
                parts = [x for x in piece[3:].split("/") if x]
                if parts:
                    wanted.add("/".join(parts[:2] if parts[0] in GROUPS and len(parts) > 1 else parts[:1]))
    return {
        w for w in wanted if not any(w.startswith(o + "/") for o in wanted)
    }  # a folder copied whole covers its entries


def make_workdir(pristine: Path, cwd: Path, monkeypatch, argv: Sequence[str] | None = None) -> Path:
    """A fresh cwd holding a copy of the fixtures as fx/ (only the parts ``argv`` names, when given), an empty
    out/, and tmp/ as the temporary folder (crash reports land there)."""
    fx = cwd / "fx"
    parts = None if argv is None else fixtures_named(argv)
    if parts is None:
        shutil.copytree(pristine, fx, symlinks=True)
    else:
        fx.mkdir(parents=True)
        for rel in sorted(parts):
            src = pristine / rel
            if src.is_dir():
                shutil.copytree(src, fx / rel, symlinks=True)
            elif src.exists():
                (fx / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, fx / rel)
    (cwd / "out").mkdir()
    (cwd / "tmp").mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(tempfile, "tempdir", str(cwd / "tmp"))
    return cwd


def unlock(cwd: Path) -> None:
    """Give the read-only fixture folder its write permission back (so that pytest can remove it)."""
    ro = cwd / RO
    if ro.exists():
        unmake_readonly(ro)


def run_main(argv: Sequence[str], limit: float = 60) -> int:
    try:
        with time_limit(limit):
            return main(list(argv))
    except SystemExit as exc:  # argparse's --help / --version
        return exc.code if isinstance(exc.code, int) else 2


def changed(before: dict[str, str], after: dict[str, str], allowed: Sequence[str]) -> list[str]:
    def free(path: str) -> bool:
        return any(path == a or path.startswith(a.rstrip("/") + "/") for a in allowed)

    problems = []
    for path in sorted(set(before) | set(after)):
        if free(path) or before.get(path) == after.get(path):
            continue
        if path not in after:
            problems.append(f"fx/{path} was removed")
        elif path not in before:
            problems.append(f"fx/{path} was added")
        else:
            problems.append(f"fx/{path} was changed")
    return problems


def one_line_problems(err: str, name: str | None, also: Sequence[str]) -> list[str]:
    """What is wrong with stderr for a user mistake (empty list: it is one good line)."""
    problems = []
    lines = err.splitlines()
    if len(lines) != 1 or not err.endswith("\n") or not lines[0].strip():
        problems.append(f"stderr should be exactly one non-empty line, got {len(lines)} line(s)")
    first = lines[0] if lines else ""
    if not first.startswith("bdh: error: "):
        problems.append("stderr should start with 'bdh: error: '")
    for want in ([name] if name else []) + list(also):
        if want not in err:
            problems.append(f"the message should contain {want!r}")
    return problems


def skip_if_the_device_exists(case: Case) -> None:
    """The device cases assume a machine without CUDA (and without 8 GPUs for cuda:7)."""
    import torch

    joined = " ".join(case.argv)
    if re.search(r"(--device |train\.device=)cuda(\s|$)", joined) and torch.cuda.is_available():
        pytest.skip("CUDA is available here: 'cuda' is a valid device")
    if "cuda:7" in joined and torch.cuda.is_available() and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")


def run_case(case: Case, pristine: Path, cwd: Path, monkeypatch, capsysbinary) -> None:
    """The whole test of one case (see the module doc): skipped where it cannot hold, run, checked, cleaned."""
    if case.root_skip and not readonly_stops_this_user():
        pytest.skip("running as root where chattr +i does not work: nothing stops its writes")
    skip_if_the_device_exists(case)
    workdir = make_workdir(pristine, cwd, monkeypatch, [*case.argv, *case.needs])
    cleanup = case.setup(workdir) if case.setup else None
    try:
        check_case(case, workdir, capsysbinary)
    finally:
        if cleanup is not None:
            cleanup()
        unlock(workdir)


def _shown(out: bytes, err: str) -> str:
    short = err if len(err) < 1500 else err[:700] + " ... " + err[-700:]
    return f"\nstderr: {short!r}\nstdout: {out[:300]!r}"


def check_case(case: Case, workdir: Path, capsysbinary) -> None:
    before = snapshot(workdir / "fx")
    capsysbinary.readouterr()
    code = run_main(case.argv)
    cap = capsysbinary.readouterr()
    out, err = cap.out, cap.err.decode("utf-8", "replace")
    after = snapshot(workdir / "fx")

    problems = []
    if code != case.exit:
        problems.append(f"exit status {code}, expected {case.exit}")
    if b"Traceback" in cap.out or "Traceback" in err:
        problems.append("a Traceback was printed")
    if case.exit == 2:
        problems += one_line_problems(err, case.name, case.also)
    problems += changed(before, after, case.changes)
    assert not problems, "; ".join(problems) + _shown(out, err)
    if case.check:
        case.check(out, err, workdir)
    if case.follow:
        _follow(case, err.splitlines()[0] if err else "", workdir, capsysbinary)


def _follow(case: Case, line: str, workdir: Path, capsysbinary) -> None:
    """Follow the advice of the error ``line`` once (`Case.follow`) and check that it works."""
    argv = list(case.follow(line, case))
    code = run_main(argv, limit=120)
    cap = capsysbinary.readouterr()
    out, err = cap.out, cap.err.decode("utf-8", "replace")
    problems = []
    if code != case.follow_exit:
        problems.append(f"the advice followed ({shlex.join(['bdh', *argv])}) exited with {code}")
    if b"Traceback" in out or "Traceback" in err:
        problems.append("following the advice printed a Traceback")
    assert not problems, "; ".join(problems) + f"\nadvice: {line!r}" + _shown(out, err)
    if case.follow_check:
        case.follow_check(out, err, workdir)
