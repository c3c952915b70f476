"""Several runs of a sweep at once, one worker process each (``jobs``): only this process records; Ctrl-C stops every
worker; a worker dies with its parent; its error is raised here."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bdh.errors import Interrupted, UserError, one_line

#: seconds a stopped worker has to end its run's step before it is killed
GRACE_S = 30.0
#: seconds between checks that every busy worker is still alive (and, in a worker, that its parent is)
POLL_S = 1.0
#: prctl's option "send me this signal when my parent dies" (linux/prctl.h)
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Job:
    """One run to train: its position in the caller's list, its spec and its run folder."""

    index: int
    spec: Any
    run_dir: Path


@dataclass(frozen=True)
class Failure:
    """What a worker sends back for a run that raised: the exception's kind, message and traceback."""

    kind: str
    message: str
    trace: str
    user_error: bool
    signum: int | None

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        return cls(
            type(exc).__name__,
            one_line(exc),
            "".join(traceback.format_exception(exc)),
            isinstance(exc, UserError),
            getattr(exc, "signum", None) if isinstance(exc, Interrupted) else None,
        )

    def error(self, job: Job, interrupted: type[Interrupted]) -> BaseException:
        """The exception the parent raises for it (a run stopped by a signal: ``interrupted``)."""
        if self.signum is not None:
            return interrupted(self.signum)
        if self.user_error:
            return UserError(self.message)
        return RuntimeError(f"run {job.run_dir.name} failed in a worker: {self.kind}: {self.message}\n{self.trace}")


def _watch_parent(parent: int) -> None:
    """Kill this process once ``parent`` is no longer its parent (it died: the process was handed to another)."""
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os.kill(os.getpid(), signal.SIGKILL)


def _die_with_parent(parent: int) -> None:
    """End this worker when ``parent`` ends (prctl's SIGKILL on Linux, and a watching thread)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    threading.Thread(target=_watch_parent, args=(parent,), name="bdh-parent-watch", daemon=True).start()


def _serve(worker: int, tasks: Any, results: Any, parent: int) -> None:
    """A worker's loop: train each run handed (``train(spec, run_dir)``) until None."""
    _die_with_parent(parent)  # no orphan trains on into a run folder that a resume is about to train again
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops every worker
    while (task := tasks.get()) is not None:
        train, job = task
        try:
            results.put((worker, True, train(job.spec, job.run_dir)))
        except BaseException as exc:  # sent back to the parent, which raises it
            results.put((worker, False, Failure.of(exc)))


class _Pool:
    """The worker processes, each with its own task queue, and one queue of results."""

    def __init__(self, jobs: int) -> None:
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: never fork a process whose thread pools run
        self.results = ctx.Queue()
        self.tasks = [ctx.SimpleQueue() for _ in range(jobs)]
        self.processes = [
            ctx.Process(
                target=_serve, args=(w, self.tasks[w], self.results, os.getpid()), daemon=True, name=f"bdh-worker-{w}"
            )
            for w in range(jobs)
        ]
        for p in self.processes:
            p.start()

    def next_result(self, busy: dict[int, Job]) -> tuple[int, bool, Any]:
        """The next finished run; a busy worker that died instead raises a one-line RuntimeError."""
        while True:
            try:
                return self.results.get(timeout=POLL_S)
            except queue.Empty:
                for w, job in busy.items():
                    code = self.processes[w].exitcode
                    if code is not None:
                        raise RuntimeError(
                            f"a worker process ended (exit code {code}) while training {job.run_dir}"
                        ) from None

    def close(self) -> None:
        """Stop the workers after their step (SIGTERM), killed after `GRACE_S`."""
        for p, tasks in zip(self.processes, self.tasks, strict=True):
            if p.is_alive():
                with contextlib.suppress(OSError):
                    tasks.put(None)  # read once the run in progress has ended: the worker's loop ends
                p.terminate()
        for p in self.processes:
            p.join(GRACE_S)
            if p.is_alive():
                p.kill()
                p.join()
        self.results.close()


def run_jobs(
    jobs: Sequence[Job],
    train: Callable[[Any, Path], Any],
    workers: int,
    on_start: Callable[[Job], None],
    on_done: Callable[[Job, Any], None],
    interrupted: type[Interrupted] = Interrupted,
) -> None:
    """Train every job in ``workers`` processes; ``on_start``, ``on_done`` run here; the first error stops the rest."""
    pending = list(jobs)
    pool = _Pool(min(workers, len(pending)))
    idle, busy = list(range(len(pool.processes))), {}
    try:
        while pending or busy:
            while pending and idle:
                w, job = idle.pop(0), pending.pop(0)
                on_start(job)
                busy[w] = job
                pool.tasks[w].put((train, job))
            w, ok, result = pool.next_result(busy)
            job = busy.pop(w)
            idle.append(w)
            if not ok:
                raise result.error(job, interrupted)
            on_done(job, result)
        for tasks in pool.tasks:
            tasks.put(None)
    finally:
        pool.close()
