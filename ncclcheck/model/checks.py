"""The result of a per-node check, and the report of ``ncclcheck env``."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Status(str, Enum):
    """How a check came out; ``skip`` means its input is missing here (no IB, no GPU...)."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class Check:
    """One check: a stable id, a status, a one-line summary, detail lines and the fix."""

    id: str
    status: Status
    summary: str
    details: tuple[str, ...] = ()
    fix: str = ""

    @property
    def area(self) -> str:
        """The group a check is shown under: the id up to its first dot."""
        return self.id.split(".", 1)[0]


@dataclass(frozen=True)
class EnvReport:
    """Every check of one node, in display order."""

    host: str
    root: str
    nccl_rules: str
    checks: tuple[Check, ...]
    not_saved: tuple[str, ...] = ()  # under --root: what the saved tree lacks, so was not checked

    def count(self, status: Status) -> int:
        return sum(1 for c in self.checks if c.status is status)

    @property
    def failed(self) -> bool:
        return self.count(Status.FAIL) > 0

    @property
    def verdict(self) -> str:
        """``fail`` when any check fails, else ``pass`` (a warning or a skipped check fails no node)."""
        return "fail" if self.failed else "pass"
