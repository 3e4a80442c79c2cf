"""A Python stack as py-spy reads it, and a call site as people read it."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Frame:
    """One frame of a py-spy dump, innermost first: Python, or C/C++ (``native``, from ``--native``)."""

    function: str
    filename: str
    line: int
    native: bool = False


def in_c10d(frames: tuple[Frame, ...]) -> bool:
    """Whether a torch.distributed API frame (``distributed_c10d.py``) is on the stack: its arguments are worth reading."""
    return any(f.filename.endswith("distributed_c10d.py") for f in frames)


def short(site: str | None) -> str:
    """``train.py:88`` from ``/home/u/train.py:88 (step)``."""
    if not site:
        return "an unknown place"
    where = site.split(" (")[0]
    return os.path.basename(where)
