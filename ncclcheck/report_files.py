"""Where reports are written: the one place outside collectors that writes files (views only build them)."""

from __future__ import annotations

import json
import os
from typing import Any


def unwritable(path: str | None) -> str | None:
    """Why a report cannot be written to ``path`` (checked before anything starts); None when it can."""
    if path is None:
        return None
    if os.path.isdir(path):
        return "is a directory"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"no directory {parent}"
    if not os.access(parent, os.W_OK):
        return f"{parent} is not writable"
    return None


def replace_json(path: str, data: Any) -> None:
    """Replace ``path`` atomically, so a reader (or a killed run) never sees half a file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1)
    os.replace(tmp, path)


def new_json(path: str, data: Any) -> None:
    """Write a new file; an existing one is never overwritten (FileExistsError)."""
    with open(path, "x", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1)
