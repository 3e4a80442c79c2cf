"""The Flight Recorder part of the logs report: dumps read, missing ranks, and per-group progress."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ncclcheck.model.flight import FlightReport
from ncclcheck.model.ranks import span


def flight_json(report: FlightReport) -> dict[str, Any]:
    return {
        "world_size": report.world_size,
        "dumps": [{"file": d.file, "rank": d.rank, "version": d.version, "entries": d.entries} for d in report.dumps],
        "unreadable": [{"file": u.file, "reason": u.reason} for u in report.unreadable],
        "missing_ranks": list(report.missing_ranks),
        "groups": [
            {
                "process_group": g.pg,
                "desc": g.desc,
                "ranks": list(g.ranks),
                "first_divergent_seq": g.first_divergent_seq,
                "pg_status": {
                    str(s.rank): {
                        "last_enqueued": s.enqueued,
                        "last_started": s.started,
                        "last_completed": s.completed,
                        "last_op": s.last_op,
                        "call_site": s.call_site,
                    }
                    for s in g.steps
                },
            }
            for g in report.groups
        ],
    }


def render_flight(report: FlightReport, console: Console) -> None:
    ranks = span([d.rank for d in report.dumps]) or "none"
    missing = f", missing rank {span(report.missing_ranks)}" if report.missing_ranks else ""
    console.print(Text(f"Flight Recorder: {len(report.dumps)} dump(s), rank {ranks} of {report.world_size}{missing}"))
    for group in report.groups:
        diverged = (
            f"first divergent collective #{group.first_divergent_seq}" if group.first_divergent_seq else "no divergence"
        )
        table = Table(title=Text(f"process group {group.pg} {group.desc}: {diverged}"), title_justify="left")
        for column in ("rank", "enqueued", "started", "completed", "last op", "call site"):
            table.add_column(
                column, justify="right" if column in ("rank", "enqueued", "started", "completed") else "left"
            )
        for s in group.steps:
            style = (
                "bold red" if group.first_divergent_seq is not None and s.enqueued < group.first_divergent_seq else ""
            )
            table.add_row(
                *(
                    Text("-" if v == -1 else str(v), style=style)
                    for v in (s.rank, s.enqueued, s.started, s.completed, s.last_op, s.call_site)
                )
            )
        if any(-1 in (s.started, s.completed) for s in group.steps):
            table.caption = "- : not in the dump (gloo records no start of a collective; a dump without pg_status)"
        console.print(table)
