"""Hang records that ``ncclcheck run`` wrote (DIR/hangs/hang-*.json, the ncclcheck.watch/2 JSON), found under
the paths given to ``ncclcheck logs``: a hang seen live joins the post-mortem."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from ncclcheck.model.run import HangRecord, RunDir, hang_from_json


def find(paths: Sequence[str]) -> tuple[HangRecord, ...]:
    found = []
    for root in paths:
        if not os.path.isdir(root):
            continue
        for directory, dirs, files in os.walk(root):
            dirs.sort()
            if os.path.basename(directory) != RunDir.HANGS:
                continue
            for name in sorted(files):
                if name.startswith("hang-") and name.endswith(".json"):
                    record = read(os.path.join(directory, name))
                    if record is not None:
                        found.append(record)
    return tuple(found)


def read(path: str) -> HangRecord | None:
    """One record (model.run.hang_from_json), or None when it cannot be read or is no hang record."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        return hang_from_json(data, path, os.path.getmtime(path))
    except (OSError, ValueError):
        return None
