"""How a long-running command ends on a signal: SIGTERM and SIGHUP become an exception (``Ended``), so a command
unwinds through its cleanup (its job's tree, its workers) as ^C's KeyboardInterrupt does, and can say which signal
ended it (exit 128+N). ``handling`` installs handlers for the length of a ``with`` block and restores the old ones
after it, on every path: the one way each command (logs, smoke, run, watch across nodes, the watch agent) does it."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Optional

Handler = Callable[[int, Optional[FrameType]], Any]
ENDING = (signal.SIGTERM, signal.SIGHUP)  # what a scheduler, a CI cancel or a closed terminal sends


class Ended(Exception):
    """SIGTERM or SIGHUP reached ncclcheck."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def raise_ended(signum: int, frame: FrameType | None) -> None:
    """A signal handler: raise Ended in the main thread."""
    raise Ended(signum)


@contextmanager
def handling(signals: tuple[signal.Signals, ...] = ENDING, handler: Handler = raise_ended) -> Iterator[None]:
    """``handler`` for ``signals`` inside the block (by default: SIGTERM and SIGHUP raise ``Ended``); the
    handlers that were there before are back after it, whatever ends the block."""
    previous: dict[signal.Signals, Handler | int | None] = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
