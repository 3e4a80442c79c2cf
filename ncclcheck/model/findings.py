"""A diagnosis finding shared by ``smoke`` and ``logs``: a stable id, severity, ranks, evidence and a fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Evidence:
    """The line a finding rests on: where it is and what it says."""

    file: str
    line: int
    text: str


@dataclass(frozen=True)
class Finding:
    """What is wrong, on which ranks, how we know, and what to do about it."""

    id: str
    severity: str
    message: str
    fix: str = ""
    ranks: tuple[int, ...] = ()
    evidence: tuple[Evidence, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "severity": self.severity,
            "ranks": list(self.ranks),
            "message": self.message,
            "fix": self.fix,
            "evidence": [{"file": e.file, "line": e.line, "text": e.text} for e in self.evidence],
        }


def by_severity(findings: tuple[Finding, ...]) -> tuple[Finding, ...]:
    """Errors first, then warnings, then info; stable within a severity."""
    return tuple(sorted(findings, key=lambda f: SEVERITIES.index(f.severity)))
