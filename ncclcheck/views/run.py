"""``ncclcheck run``'s words: the evidence switched on (one line each, at start), a hang or a slow episode caught
live (one line each), and the verdict at the end; report.json (schema ncclcheck.run/1)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.text import Text

from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ranks import span
from ncclcheck.model.run import EnvSetting, HangRecord, PaceNote, RunDir, RunOutcome, SlowEpisode
from ncclcheck.views.logs import to_json as logs_json

SCHEMA = "ncclcheck.run/1"
PACE = watch_ids.COMMUNICATION_BOUND
STYLE = {"pass": "bold green", "slow": "bold yellow", "fail": "bold red", "hang": "bold red"}
MARK = {"pass": "✓", "slow": "!", "fail": "✗", "hang": "✗"}


def start_lines(settings: tuple[EnvSetting, ...], notes: tuple[str, ...], run_dir: RunDir, console: Console) -> None:
    console.print(Text(f"ncclcheck run: evidence in {run_dir.root}", style="bold"))
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


def to_json(outcome: RunOutcome) -> dict[str, Any]:
    o = outcome
    return {
        "schema": SCHEMA,
        "command": list(o.command),
        "run_dir": o.run_dir.root,
        "host": o.host,
        "exit_code": o.exit_code,
        "duration_s": round(o.duration_s, 1),
        "verdict": {
            "status": o.verdict.status,
            "root_cause": o.verdict.root_cause,
            "ranks": list(o.verdict.ranks),
            "message": o.verdict.message,
        },
        "findings": [f.to_json() for f in o.findings],
        "hangs": [
            {
                "path": h.path,
                "time": h.time,
                "kinds": list(h.kinds),
                "ranks": list(h.ranks),
                "culprits": list(h.culprits),
                "message": h.message,
            }
            for h in o.hangs
        ],
        "slow": [episode_json(e) for e in o.slow],
        "communication_bound": note_json(o.pace),
        "evidence": {
            "set": {name: s.value for s in o.settings if not s.kept for name in s.names},
            "kept": {s.kept_name: s.value for s in o.settings if s.kept},
            "notes": list(o.notes),
            **{kind: list(paths) for kind, paths in o.files},
        },
        "logs": logs_json(o.report, list(o.log_files)),
    }


def render(outcome: RunOutcome, console: Console) -> None:
    for f in outcome.findings:
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
    _slow_lines(outcome.slow, outcome.pace, console)
    verdict = outcome.verdict
    who = f" (rank {span(verdict.ranks)})" if verdict.ranks else ""
    console.print(Text(f"{MARK[verdict.status]} {verdict.status}{who}: {verdict.message}", style=STYLE[verdict.status]))
    console.print(Text(f"exit code {outcome.exit_code}; report: {outcome.run_dir.report}", style="dim"))


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
