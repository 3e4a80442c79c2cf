"""A Python stack as py-spy reads it, and a call site as people read it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

LIBRARY_PARTS = ("/torch/", "/threading.py", "<frozen runpy>", "/runpy.py")
# the interpreter's own library (/usr/lib/python3.11/queue.py, a conda or pyenv prefix alike), not what pip installs
STDLIB = re.compile(r"/lib(?:64)?/python\d+(?:\.\d+)?t?/(?!site-packages/|dist-packages/)")
# ncclcheck's own frames in a job: run's hook (its copy in the run dir, or the module itself) wraps init_process_group
OURS = ("/control/hook/", "/ncclcheck/collectors/control_hook")


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


def mine(frame: Frame) -> bool:
    """Whether a frame is the user's own code: not torch, not the standard library, not a C frame, not ncclcheck's
    hook around their call."""
    if frame.native or frame.filename.startswith("<") or STDLIB.search(frame.filename):
        return False
    return not any(part in frame.filename for part in LIBRARY_PARTS + OURS)


def short(site: str | None) -> str:
    """``train.py:88`` from ``/home/u/train.py:88 (step)``."""
    if not site:
        return "an unknown place"
    where = site.split(" (")[0]
    return os.path.basename(where)
