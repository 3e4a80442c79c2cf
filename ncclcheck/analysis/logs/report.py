"""What ``ncclcheck logs`` concluded: the report every reader of logs (logs, smoke, run) shares."""

from __future__ import annotations

from dataclasses import dataclass

from ncclcheck.analysis.flight import FlightReport
from ncclcheck.model.findings import Finding
from ncclcheck.model.logs import ChildFailure, RankLog, Timeout


@dataclass(frozen=True)
class LogReport:
    """Everything ``ncclcheck logs`` concluded."""

    findings: tuple[Finding, ...]
    ranks: tuple[RankLog, ...]
    timeouts: tuple[Timeout, ...]
    failures: tuple[ChildFailure, ...]
    root_cause: Finding | None
    lines: int
    flight: FlightReport | None = None

    @property
    def failed(self) -> bool:
        return any(f.severity == "error" for f in self.findings)
