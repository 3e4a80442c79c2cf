"""``ncclcheck watch`` without a terminal: the ncclcheck.watch/1 JSON, or a rich table printed once."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ncclcheck.analysis.watch import short
from ncclcheck.model.watch import RankView, WatchState

SCHEMA = "ncclcheck.watch/1"
GLYPH = {"running": "●", "sleeping": "●", "disk-sleep": "◐", "stopped": "■", "zombie": "✗", "gone": "✗", "missing": "✗"}


def to_json(state: WatchState, interval_s: float, samples: int) -> dict[str, Any]:
    job = state.job
    return {
        "schema": SCHEMA,
        "job": {
            "id": job.id,
            "world_size": job.world_size,
            "nodes": job.nodes,
            "launcher_pid": job.launcher_pid,
            "local_ranks": [v.rank for v in state.ranks],
            "remote_ranks": max(job.world_size - len(state.ranks), 0),
            "interval_s": interval_s,
            "samples": samples,
        },
        "ranks": [rank_json(v) for v in state.ranks],
        "findings": [
            {"kind": f.kind, "ranks": list(f.ranks), "message": f.message, "fix": f.fix} for f in state.findings
        ],
        "notes": list(state.notes),
    }


def rank_json(v: RankView) -> dict[str, Any]:
    s = v.sample
    return {
        "rank": s.rank,
        "local_rank": s.local_rank,
        "host": s.host,
        "pid": s.pid,
        "status": s.status,
        "collective": v.collective,
        "call_site": v.call_site,
        "doing": v.doing,
        "since_s": round(v.since_s, 1),
        "cpu_percent": s.cpu_percent,
        "rss_bytes": s.rss_bytes,
        "threads": s.threads,
        "stack": [{"function": f.function, "file": f.filename, "line": f.line, "native": f.native} for f in s.stack],
        "stack_error": s.stack_error,
    }


HEALTHY = "✓ no problem seen: every rank progresses or has not stood still long enough"


def cells(v: RankView) -> dict[str, str]:
    """Every column either rank table (rich or Textual) shows, as text."""
    s = v.sample
    return {
        "": GLYPH.get(s.status, "?"),
        "rank": str(s.rank),
        "local": "" if s.local_rank is None else str(s.local_rank),
        "host": s.host,
        "pid": str(s.pid or "-"),
        "state": s.status,
        "in": v.doing,
        "collective": v.collective or f"({v.doing})",
        "call site": short(v.call_site) if v.call_site else "",
        "for": f"{v.since_s:.0f}s",
        "cpu": f"{s.cpu_percent:.0f}%",
        "rss": f"{s.rss_bytes >> 20}M",
    }


def flagged(state: WatchState) -> set[int]:
    return {r for f in state.findings for r in f.ranks}


def render(state: WatchState, console: Console) -> None:
    job = state.job
    console.print(Text(f"job {job.id}: world size {job.world_size}, {len(state.ranks)} rank(s) on this node"))
    table = Table()
    columns = ("", "rank", "pid", "state", "in", "call site", "for", "cpu", "rss")
    for column in columns:
        table.add_column("status" if column == "state" else column)
    bad = flagged(state)
    for v in state.ranks:
        text = cells(v)
        table.add_row(*(Text(text[c], style="bold red" if v.rank in bad else "") for c in columns))
    console.print(table)
    for f in state.findings:
        console.print(Text(f"✗ {f.kind}: {f.message}", style="bold red"))
        console.print(Text(f"  fix: {f.fix}", style="dim"))
    for note in state.notes:
        console.print(Text(f"! {note}", style="yellow"))
    if not state.findings:
        console.print(Text(HEALTHY, style="green"))
