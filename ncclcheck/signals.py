"""SIGTERM and SIGHUP as an exception, so that a command ending on one unwinds through its cleanup (its job's
tree, its workers) like ^C's KeyboardInterrupt does, and can say which signal ended it (exit 128+N)."""

from __future__ import annotations

from types import FrameType


class Ended(Exception):
    """SIGTERM or SIGHUP reached ncclcheck."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def raise_ended(signum: int, frame: FrameType | None) -> None:
    """A signal handler: raise Ended in the main thread."""
    raise Ended(signum)
