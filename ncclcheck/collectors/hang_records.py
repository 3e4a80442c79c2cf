"""Hang records that ``ncclcheck run`` wrote (DIR/hangs/hang-*.json, the ncclcheck.watch/2 JSON), found under
the paths given to ``ncclcheck logs``: a hang seen live joins the post-mortem."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from ncclcheck.model.run import HangRecord, RunDir


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
    """One record, or None when it is not a watch JSON with a hang's finding (a partial write, another file). Its
    errors, else its warnings: run records a straggler whose line still moves and a start-up wait as warnings."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        findings = data.get("findings", [])
        errors = [f for f in findings if f.get("severity") == "error"]
        errors = errors or [f for f in findings if f.get("severity") == "warning"]
        if not str(data.get("schema", "")).startswith("ncclcheck.watch/") or not errors:
            return None
        first = errors[0]
        hosts = sorted({str(r.get("host")) for r in data.get("ranks", []) if r.get("host")})
        return HangRecord(
            path,
            float(data.get("time") or os.path.getmtime(path)),
            tuple(str(f["kind"]) for f in errors),
            tuple(int(r) for r in first.get("ranks", [])),
            tuple(int(r) for r in first.get("culprits", [])),
            str(first["message"]),
            ",".join(hosts),
            data.get("ended_job") is True,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
