"""Filesystem reads shared by the probes, where every failure means "no value".

Real sysfs answers EINVAL for empty GID slots and for ``carrier`` of an admin-down
link, so any OSError is treated like a missing file: probes never crash on a read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any


class SavedTreeError(ValueError):
    """A file of a saved tree (``env --root``) that is there but cannot be read as what it should be."""


def path(root: str, *parts: str) -> str:
    """Join ``parts`` under ``root`` (``/`` on a live node, a copied tree in tests)."""
    return os.path.join(root, *parts)


def read(file: str) -> str | None:
    """The stripped text of ``file``, or None when it is absent or unreadable."""
    try:
        with open(file, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except (OSError, ValueError):
        return None


def parse_int(text: object) -> int | None:
    """A whole decimal number (blanks around it allowed), else None: the one plain-integer parser of ncclcheck.

    NCCL's own settings are read with ``analysis.nccl_rules.nccl_int`` (C's strtoll), not this.
    """
    if text is None:
        return None
    try:
        return int(str(text).strip(), 10)
    except ValueError:
        return None


def read_int(file: str) -> int | None:
    """The integer in ``file`` (decimal or 0x-hex), or None."""
    text = read(file)
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


def listdir(directory: str) -> list[str]:
    """Entries of ``directory`` sorted naturally (mlx5_2 before mlx5_10); [] when absent."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(names, key=natural_key)


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders embedded numbers numerically."""
    key: list[tuple[int, int | str]] = []
    digits = ""
    text = ""
    for char in name:
        if char.isdigit():
            if text:
                key.append((1, text))
                text = ""
            digits += char
        else:
            if digits:
                key.append((0, int(digits)))
                digits = ""
            text += char
    if digits:
        key.append((0, int(digits)))
    if text:
        key.append((1, text))
    return tuple(key)


def root_from_argv(argv: Sequence[str]) -> str:
    """The ``--root DIR`` of a probe's command line, ``/`` when absent."""
    args = list(argv)
    if "--root" in args and args.index("--root") + 1 < len(args):
        return args[args.index("--root") + 1]
    return "/"


def print_json(facts: Any) -> int:
    """Print a probe's frozen dataclass as JSON; the exit code of a probe's ``main``."""
    print(json.dumps(asdict(facts), indent=1))
    return 0
