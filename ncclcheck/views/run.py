"""``ncclcheck run``'s words: the evidence switched on (one line each, at start), a hang or a slow episode caught
live (one line each), and the verdict at the end; report.json (schema ncclcheck.run/1)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.text import Text

from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.ranks import span
from ncclcheck.model.run import EnvSetting, HangRecord, PaceNote, RunVerdict, SlowEpisode
from ncclcheck.views.logs import to_json as logs_json

SCHEMA = "ncclcheck.run/1"
PACE = "communication-bound"
STYLE = {"pass": "bold green", "slow": "bold yellow", "fail": "bold red", "hang": "bold red"}
MARK = {"pass": "✓", "slow": "!", "fail": "✗", "hang": "✗"}


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


def slow_line(episode: SlowEpisode, console: Console) -> None:
    console.print(Text(f"ncclcheck run: slow: {episode.message} (recorded in {episode.path})", style="yellow"))


def pace_line(note: PaceNote, console: Console) -> None:
    console.print(Text(f"ncclcheck run: note: {PACE}: {note.message}", style="dim"))


def episode_json(e: SlowEpisode) -> dict[str, Any]:
    """A slow episode, as report.json lists it and its own record in DIR/slow carries it."""
    return {
        "kind": e.kind,
        "culprits": list(e.culprits),
        "start": round(e.start, 3),
        "end": round(e.end, 3),
        "seconds": round(e.seconds, 1),
        "looks": e.looks,
        "faster_without_wait": e.factor,
        "message": e.message,
        "fix": e.fix,
        "path": e.path,
    }


def note_json(note: PaceNote | None) -> dict[str, Any] | None:
    if note is None:
        return None
    return {
        "first": round(note.first, 3),
        "last": round(note.last, 3),
        "looks": note.looks,
        "message": note.message,
        "fix": note.fix,
    }


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
    slow: tuple[SlowEpisode, ...] = (),
    pace: PaceNote | None = None,
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
        "slow": [episode_json(e) for e in slow],
        "communication_bound": note_json(pace),
        "evidence": {
            "set": {name: s.value for s in settings if not s.kept for name in s.names},
            "kept": {s.kept_name: s.value for s in settings if s.kept},
            "notes": list(notes),
            **files,
        },
        "logs": logs_json(report, log_files),
    }


def render(
    verdict: RunVerdict,
    findings: tuple[Finding, ...],
    exit_code: int,
    run_dir: str,
    console: Console,
    slow: tuple[SlowEpisode, ...] = (),
    pace: PaceNote | None = None,
) -> None:
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
    _slow_lines(slow, pace, console)
    who = f" (rank {span(verdict.ranks)})" if verdict.ranks else ""
    console.print(Text(f"{MARK[verdict.status]} {verdict.status}{who}: {verdict.message}", style=STYLE[verdict.status]))
    console.print(Text(f"exit code {exit_code}; report: {run_dir}/report.json", style="dim"))


def _slow_lines(slow: tuple[SlowEpisode, ...], pace: PaceNote | None, console: Console) -> None:
    for e in slow:
        when = f"{_clock(e.start)}–{_clock(e.end)}, {e.seconds:.0f} s"
        console.print(Text(f"! {e.kind} (rank {span(list(e.culprits))}), {when}: {e.message}", style="yellow"))
        if e.fix:
            console.print(Text(f"  fix: {e.fix}", style="dim"))
        console.print(Text(f"  record: {e.path}", style="dim"))
    if pace is not None:
        looks = f"{pace.looks} look{'s' if pace.looks > 1 else ''}"
        console.print(Text(f"note {PACE} ({looks}): {pace.message}", style="dim"))
        console.print(Text(f"  fix: {pace.fix}", style="dim"))


def _clock(epoch: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch))
