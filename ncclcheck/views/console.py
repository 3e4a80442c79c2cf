"""The rich console every command prints to."""

from __future__ import annotations

import io
from typing import TextIO

from rich.console import Console

# Without a terminal (a CI log, a file, a pipe) no line is hard-wrapped: a path, a command or a URL in a fix
# must stay whole to be pasted, and the reader's viewer wraps long lines itself. Tables still need a width to lay
# out against: one wider than any path (PATH_MAX is 4096), so they take their natural width and nothing folds.
UNWRAPPED_WIDTH = 10_000


class PipedConsole(Console):
    """A console whose closed pipe ends the command as every other output does: rich's own answer is
    ``SystemExit(1)``, which reads as "a problem found"; a ``BrokenPipeError`` reaches ``cli.main``, which says
    nothing more and returns ``exits.PIPE`` (141, as a shell reports ``cat big | head``)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # what is still buffered is dropped, not written again
        raise BrokenPipeError


def make_console(file: TextIO | None = None) -> Console:
    """On a terminal, rich's own wrapping at the terminal's width; without one, lines are never wrapped."""
    console = PipedConsole(file=file)
    if console.is_terminal:
        return console
    return PipedConsole(file=file, width=UNWRAPPED_WIDTH, soft_wrap=True)


class Lenient(io.TextIOBase):
    """A stream that outlives its reader: once a write fails (the pipe's reader went away: ``ncclcheck run ... |
    tee log`` after ^C), the rest is dropped instead of raised, so a command that must finish its work (end the job,
    write its report) is not stopped by its own words."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream, self.gone = stream, False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self.stream.write(text)
            except (OSError, ValueError):
                self.gone = True
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except (OSError, ValueError):
                self.gone = True

    def isatty(self) -> bool:
        return not self.gone and self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", None) or "utf-8"
