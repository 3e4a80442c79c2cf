"""Turn the issues a check found into one Check: worst status, summary, details and fixes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ncclcheck.model.checks import Check, Status

SEVERITY = {Status.OK: 0, Status.SKIP: 0, Status.WARN: 1, Status.FAIL: 2}


@dataclass(frozen=True)
class Issue:
    """One problem a check found: how bad, what is wrong, and the fix."""

    status: Status
    text: str
    fix: str = ""


def fail(text: str, fix: str = "") -> Issue:
    return Issue(Status.FAIL, text, fix)


def warn(text: str, fix: str = "") -> Issue:
    return Issue(Status.WARN, text, fix)


def conclude(
    check_id: str, ok_summary: str, issues: Iterable[Issue], details: Iterable[str] = (), fact: bool = True
) -> Check:
    """The worst issue sets the status and the summary; every issue becomes a detail line.

    ``fact``: the OK summary states a fact (kept as a line beside the problems); False when it claims
    health ("no problem found"), which must never show next to a problem.
    """
    found = sorted(issues, key=lambda i: -SEVERITY[i.status])
    if not found:
        return Check(check_id, Status.OK, ok_summary, tuple(details))
    worst = found[0]
    summary = worst.text if len(found) == 1 else f"{worst.text} (+{len(found) - 1} more)"
    fixes: list[str] = []
    for issue in found:
        if issue.fix and issue.fix not in fixes:
            fixes.append(issue.fix)
    lines = [f"{issue.status.value.upper()}: {issue.text}" for issue in found] if len(found) > 1 else []
    if ok_summary and fact:
        lines.append(ok_summary)
    return Check(check_id, worst.status, summary, (*lines, *details), "\n".join(fixes))


def skip(check_id: str, reason: str, details: Iterable[str] = ()) -> Check:
    return Check(check_id, Status.SKIP, reason, tuple(details))
