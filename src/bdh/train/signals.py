"""`StopSignals`: a first SIGINT or SIGTERM ends a run after the step with a checkpoint; a second stops at once."""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType

from bdh.errors import Interrupted


class StopSignals:
    """A context in which SIGINT and SIGTERM ask the run to stop: ``received`` is the first signal's number."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """The first signal ends the run after the current step; a second one at once (`Interrupted`)."""
        if self.received is not None:
            raise Interrupted(signum)
        self.received = signum

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        for sig, old in self._previous.items():
            signal.signal(sig, old)
        self._previous.clear()


__all__ = ["StopSignals"]
