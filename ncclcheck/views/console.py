"""The rich console every command prints to."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console

# Without a terminal (a CI log, a file, a pipe) no line is hard-wrapped: a path, a command or a URL in a fix
# must stay whole to be pasted, and the reader's viewer wraps long lines itself. Tables still need a width to lay
# out against: one wider than any path (PATH_MAX is 4096), so they take their natural width and nothing folds.
UNWRAPPED_WIDTH = 10_000


def make_console(file: TextIO | None = None) -> Console:
    """On a terminal, rich's own wrapping at the terminal's width; without one, lines are never wrapped."""
    console = Console(file=file)
    if console.is_terminal:
        return console
    return Console(file=file, width=UNWRAPPED_WIDTH, soft_wrap=True)
