"""Render a LogReport: the verdict first, findings by severity with evidence and fix, the transport map; or JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from ncclcheck.model.log_report import LogReport
from ncclcheck.model.ranks import span
from ncclcheck.views.logs_flight import flight_json, render_flight
from ncclcheck.views.plain import plain
from ncclcheck.views.transports import render_transports, transports_json

SCHEMA = "ncclcheck.logs/2"
STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def to_json(report: LogReport, files: list[str]) -> dict[str, Any]:
    cause = report.root_cause
    return {
        "schema": SCHEMA,
        "files": files,
        "lines": report.lines,
        "verdict": {
            "status": report.status,
            "root_cause": cause.id if cause else None,
            "message": cause.message if cause else None,
            "ranks": list(cause.ranks) if cause else [],
            "culprits": list(cause.culprits) if cause else [],
        },
        "findings": [f.to_json() for f in report.findings],
        "ranks": transports_json(report.ranks),
        "timeouts": [plain(t) for t in report.timeouts],
        "failures": [plain(f) for f in report.failures],
        "flight_recorder": flight_json(report.flight) if report.flight else None,
        "notes": list(report.notes),
        "stacks": [
            {
                "source": s.process.source,
                "line": s.thread.line if s.thread else s.process.line,
                "process": s.process.label,
                "pid": s.process.pid,
                "rank": s.process.rank,
                "place": s.place,
                "op": s.op,
                "thread": s.thread.name if s.thread else None,
                "site": s.site,
                "certain": s.certain,
                "words": s.words,
            }
            for s in report.stacks
        ],
    }


def render(report: LogReport, files: list[str], console: Console) -> None:
    cause = report.root_cause
    if cause:
        who = f" (rank {span(cause.blamed)})" if cause.blamed else ""
        console.print(Text(f"✗ root cause{who}: {cause.message}", style="bold red"))
        console.print(Text(f"  fix: {cause.fix}"))
    elif report.nothing_read:
        console.print(Text(f"? nothing read: {_named(report.empty)}: no verdict over nothing", style="bold yellow"))
    elif report.unrecognised:
        console.print(
            Text(
                "? no known error, but a line no rule explains says it is one: read it below (the verdict stays open)",
                style="bold yellow",
            )
        )
    elif report.stacks:
        console.print(
            Text(
                "? the stack dumps say where each process stands (below); they single out no culprit: the verdict "
                "stays open",
                style="bold yellow",
            )
        )
    elif any(f.severity == "warning" for f in report.findings):
        console.print(Text("! no error, but warnings below", style="bold yellow"))
    elif report.incomplete:
        console.print(
            Text(
                f"? no problem found in the {report.lines} line(s) that could be read; not everything could"
                " be (notes below): no verdict over what is missing",
                style="bold yellow",
            )
        )
    else:
        notes = "; what the logs say is below" if report.findings else ""  # facts only (info), no warning
        console.print(
            Text(f"✓ no problem found in {report.lines} lines of {len(files)} file(s){notes}", style="bold green")
        )
    for finding in report.findings:
        if finding is cause:
            continue
        ranks = f" [ranks {span(finding.blamed)}]" if finding.blamed else ""
        console.print(Text(f"{finding.severity} {finding.id}{ranks}: {finding.message}", style=STYLE[finding.severity]))
        console.print(Text(f"  fix: {finding.fix}", style="dim"))
        for ev in finding.evidence[:2]:
            console.print(Text(f"  {ev.file}:{ev.line}: {ev.text[:160]}", style="dim"))
    if cause:
        for ev in cause.evidence[:3]:
            console.print(Text(f"evidence {ev.file}:{ev.line}: {ev.text[:200]}", style="dim"))
    for note in report.notes:
        console.print(Text(f"! {note}", style="yellow"))
    if report.stacks:
        render_stacks(report, console)
    if report.flight:
        render_flight(report.flight, console)
    if report.ranks:
        render_transports(report.ranks, console)


def _named(empty: tuple[str, ...]) -> str:
    """The empty inputs in words: a few by name, the rest counted."""
    shown = ", ".join(empty[:3]) + (f" and {len(empty) - 3} more" if len(empty) > 3 else "")
    what = "is empty (or holds" if len(empty) == 1 else "are empty (or hold"
    return f"{shown} {what} only whitespace)"


def render_stacks(report: LogReport, console: Console) -> None:
    """Where each process of the stack dumps stands; a listing's many copies of one place are counted once."""
    console.print(Text(f"stacks: {len(report.stacks)} process(es) in the dumps", style="bold"))
    seen: dict[tuple[str, str], int] = {}
    for s in report.stacks:
        key = (s.place, s.words)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 1:
            rank = f"rank {s.process.rank} " if s.process.rank is not None else ""
            console.print(Text(f"  {s.place:<11} {rank}{s.process.label}: {s.words}"))
    for (place, words), n in seen.items():
        if n > 1:
            console.print(Text(f"  {place:<11} … and {n - 1} more that {words}", style="dim"))
