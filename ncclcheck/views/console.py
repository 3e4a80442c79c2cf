"""The rich console every command prints to."""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console


def make_console(file: TextIO | None = None) -> Console:
    """A terminal's own width; 130 columns when piped, so nccl-tests' columns are not squeezed."""
    return Console(width=None if sys.stdout.isatty() and file is None else 130, file=file)
