"""``ncclcheck run``'s words: the evidence switched on (one line each, at start), a hang caught live (one line),
and the verdict at the end; report.json (schema ncclcheck.run/1)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.ranks import span
from ncclcheck.model.run import EnvSetting, HangRecord, RunVerdict
from ncclcheck.views.logs import to_json as logs_json

SCHEMA = "ncclcheck.run/1"
STYLE = {"pass": "bold green", "fail": "bold red", "hang": "bold red"}
MARK = {"pass": "✓", "fail": "✗", "hang": "✗"}


def start_lines(settings: tuple[EnvSetting, ...], notes: tuple[str, ...], run_dir: str, console: Console) -> None:
    console.print(Text(f"ncclcheck run: evidence in {run_dir}", style="bold"))
    for s in settings:
        if s.kept:
            console.print(Text(f"  kept   {s.kept_name}={s.value} (yours): {s.what}", style="dim"))
        else:
            console.print(Text(f"  set    {'/'.join(s.names)}={s.value}: {s.what}; cost: {s.cost}"))
    for note in notes:
        console.print(Text(f"  note   {note}", style="yellow"))


def hang_line(record: HangRecord, console: Console) -> None:
    console.print(Text(f"ncclcheck run: hang: {record.message} (recorded in {record.path})", style="bold red"))


def to_json(
    command: list[str],
    run_dir: str,
    host: str,
    exit_code: int,
    duration_s: float,
    verdict: RunVerdict,
    findings: tuple[Finding, ...],
    hangs: tuple[HangRecord, ...],
    settings: tuple[EnvSetting, ...],
    notes: tuple[str, ...],
    files: dict[str, list[str]],
    report: LogReport,
    log_files: list[str],
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "command": command,
        "run_dir": run_dir,
        "host": host,
        "exit_code": exit_code,
        "duration_s": round(duration_s, 1),
        "verdict": {
            "status": verdict.status,
            "root_cause": verdict.root_cause,
            "ranks": list(verdict.ranks),
            "message": verdict.message,
        },
        "findings": [f.to_json() for f in findings],
        "hangs": [
            {
                "path": h.path,
                "time": h.time,
                "kinds": list(h.kinds),
                "ranks": list(h.ranks),
                "culprits": list(h.culprits),
                "message": h.message,
            }
            for h in hangs
        ],
        "evidence": {
            "set": {name: s.value for s in settings if not s.kept for name in s.names},
            "kept": {s.kept_name: s.value for s in settings if s.kept},
            "notes": list(notes),
            **files,
        },
        "logs": logs_json(report, log_files),
    }


def render(verdict: RunVerdict, findings: tuple[Finding, ...], exit_code: int, run_dir: str, console: Console) -> None:
    for f in findings:
        if f.severity in ("error", "warning"):
            who = f" (rank {span(f.blamed)})" if f.blamed else ""
            console.print(
                Text(
                    f"{'✗' if f.severity == 'error' else '!'} {f.id}{who}: {f.message}",
                    style="red" if f.severity == "error" else "yellow",
                )
            )
            if f.fix:
                console.print(Text(f"  fix: {f.fix}", style="dim"))
    who = f" (rank {span(verdict.ranks)})" if verdict.ranks else ""
    console.print(Text(f"{MARK[verdict.status]} {verdict.status}{who}: {verdict.message}", style=STYLE[verdict.status]))
    console.print(Text(f"exit code {exit_code}; report: {run_dir}/report.json", style="dim"))
