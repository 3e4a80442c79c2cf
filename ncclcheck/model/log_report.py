"""What ``ncclcheck logs`` concluded: the report every reader of logs (logs, smoke, run) shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ncclcheck.model.findings import Finding
from ncclcheck.model.flight import FlightReport
from ncclcheck.model.ids import logs as logs_ids
from ncclcheck.model.logs import ChildFailure, RankLog, Timeout
from ncclcheck.model.stack_dumps import Stood

LogStatus = Literal["pass", "fail", "unknown"]


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
    stacks: tuple[Stood, ...] = ()  # where each process of the stack dumps in the logs stands
    empty: tuple[str, ...] = ()  # the inputs that held nothing but whitespace: nothing in them was judged
    nothing_read: bool = False  # every input was empty (no dump either): no verdict over nothing, never "pass"

    @property
    def failed(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    @property
    def unrecognised(self) -> bool:
        """A line said it is an error and no rule explains it: the logs are never "pass" then."""
        return any(f.id == logs_ids.UNRECOGNISED_ERROR and f.severity != "info" for f in self.findings)

    @property
    def status(self) -> LogStatus:
        """``fail`` (an error), ``unknown`` (no known error, but an error line nothing explains, a log that could not
        be read whole, stack dumps that single out no culprit: one instant of a job, never proof of health, or
        nothing read at all) or ``pass``."""
        if self.failed:
            return "fail"
        return "unknown" if self.unrecognised or self.incomplete or self.stacks or self.nothing_read else "pass"
