"""Render an EnvReport: a rich table grouped by area, or the ``ncclcheck.env/1`` JSON document."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ncclcheck.model.checks import Check, EnvReport, Status

SCHEMA = "ncclcheck.env/1"
GLYPHS = {
    Status.OK: ("✓", "green"),
    Status.WARN: ("!", "yellow"),
    Status.FAIL: ("✗", "bold red"),
    Status.SKIP: ("-", "dim"),
}


def to_json(report: EnvReport) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "host": report.host,
        "root": report.root,
        "nccl_rules": report.nccl_rules,
        "verdict": report.verdict,
        "not_saved": list(report.not_saved),
        "counts": {s.value: report.count(s) for s in Status},
        "checks": [
            {"id": c.id, "status": c.status.value, "summary": c.summary, "details": list(c.details), "fix": c.fix}
            for c in report.checks
        ],
    }


def _cell(check: Check, verbose: bool) -> Group:
    parts: list[Text] = [Text(check.summary)]
    if verbose or check.status in (Status.WARN, Status.FAIL):
        parts += [Text(f"  {line}", style="dim") for line in check.details]
    if check.fix and check.status in (Status.WARN, Status.FAIL):
        parts += [Text(f"  fix: {line}", style="cyan") for line in check.fix.splitlines()]
    return Group(*parts)


def render(report: EnvReport, console: Console, verbose: bool = False) -> None:
    # on a terminal the table fills its width; without one it takes its natural width (see views/console.py)
    table = Table(
        title=f"ncclcheck env on {report.host}", title_justify="left", show_lines=False, expand=console.is_terminal
    )
    table.add_column("", width=1, no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("finding", ratio=1, overflow="fold")
    area = None
    for check in report.checks:
        if area is not None and check.area != area:
            table.add_section()
        area = check.area
        glyph, style = GLYPHS[check.status]
        table.add_row(Text(glyph, style=style), Text(check.id, style=style), _cell(check, verbose))
    console.print(table)
    console.print(
        Text(
            f"NCCL rules applied: {report.nccl_rules}"
            + (f"; files read under {report.root}" if report.root != "/" else ""),
            style="dim",
        )
    )
    console.print(verdict(report))


def verdict(report: EnvReport) -> Text:
    fails, warns = report.count(Status.FAIL), report.count(Status.WARN)
    if fails:
        names = ", ".join(c.id for c in report.checks if c.status is Status.FAIL)
        return Text(f"✗ {fails} check(s) fail ({names}), {warns} warn: fix the failures before launching", "bold red")
    tail = f" ({warns} warning(s) above)" if warns else ""
    if report.not_saved:
        lacks = ", ".join(report.not_saved)
        return Text(
            f"✓ nothing in the saved tree blocks NCCL or gloo{tail}; not checked (the tree holds no"
            f" {lacks}): save one with `python3 probes/save_tree.py DIR` on the node",
            "bold yellow",
        )
    where = "in the saved tree" if report.root != "/" else "on this node"
    return Text(f"✓ nothing {where} blocks NCCL or gloo{tail}", "bold green")
