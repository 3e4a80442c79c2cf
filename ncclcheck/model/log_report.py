"""What ``ncclcheck logs`` concluded: the report every reader of logs (logs, smoke, run) shares."""

from __future__ import annotations

from dataclasses import dataclass

from ncclcheck.model.findings import Finding
from ncclcheck.model.flight import FlightReport
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
    notes: tuple[str, ...] = ()  # what could not be read whole (a cut .gz, a binary or unreadable file)
    incomplete: bool = False  # a log was cut short or unreadable: no "pass" over it

    @property
    def failed(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    @property
    def unrecognised(self) -> bool:
        """A line said it is an error and no rule explains it: the logs are never "pass" then."""
        return any(f.id == "unrecognised-error" for f in self.findings)

    @property
    def status(self) -> str:
        """``fail`` (an error), ``unknown`` (no known error, but an error line nothing explains, or a log that
        could not be read whole) or ``pass``."""
        return "fail" if self.failed else "unknown" if self.unrecognised or self.incomplete else "pass"
