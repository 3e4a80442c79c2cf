"""A diagnosis finding shared by ``smoke`` and ``logs``: a stable id, severity, ranks, evidence and a fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from ncclcheck.model.ids import logs as logs_ids
from ncclcheck.model.waits import End, Hop

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)


@dataclass(frozen=True)
class Evidence:
    """The line a finding rests on: where it is and what it says."""

    file: str
    line: int
    text: str


WAITED = frozenset(
    {
        logs_ids.COLLECTIVE_TIMEOUT,
        logs_ids.GLOO_TIMEOUT,
        logs_ids.STORE_CLIENTS_MISSING,
        logs_ids.SOCKET_MESSAGE_TRUNCATED,  # the rank that received it: which side is wrong is not in the line
        logs_ids.GLOO_CONNECT_FAILED,  # the rank that could not reach the others: the address may be theirs
    }
)  # findings whose ranks are the ones that waited


@dataclass(frozen=True)
class Finding:
    """What is wrong, on which ranks, how we know, and what to do about it."""

    id: str
    severity: Severity
    message: str
    fix: str = ""
    ranks: tuple[int, ...] = ()  # every rank involved
    evidence: tuple[Evidence, ...] = ()
    culprits: tuple[int, ...] = ()  # the ranks to blame, only where the evidence singles them out
    roles: tuple[tuple[int, str], ...] = ()  # what each rank named does in it (``waiting``, ``dst=1``), where said
    chain: tuple[Hop, ...] = ()  # the waits followed from the waiting ranks to where they end (watch, run)
    end: End | None = None  # the class of wait the chain ends in, which picks the fix

    @property
    def blamed(self) -> tuple[int, ...]:
        """The ranks a reader should look at first: the culprits, else every rank involved; but the ranks of a
        timeout waited on another: none of them is to blame unless the evidence singled it out."""
        return self.culprits or (() if self.id in WAITED else self.ranks)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "severity": self.severity,
            "ranks": list(self.ranks),
            "culprits": list(self.culprits),
            "message": self.message,
            "fix": self.fix,
            "evidence": [{"file": e.file, "line": e.line, "text": e.text} for e in self.evidence],
            **({"chain": [h.to_json() for h in self.chain], "end": self.end} if self.chain else {}),
        }


def by_severity(findings: tuple[Finding, ...]) -> tuple[Finding, ...]:
    """Errors first, then warnings, then info; stable within a severity."""
    return tuple(sorted(findings, key=lambda f: SEVERITIES.index(f.severity)))
