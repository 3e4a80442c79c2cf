"""Render a smoke run: nccl-tests' columns per op, the hang diagnosis, the verdict; or ``ncclcheck.smoke/1`` JSON."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ncclcheck.model.smoke import Hang, OpResult

SCHEMA = "ncclcheck.smoke/1"
REDOP = {"reduce": "sum", "all_reduce": "sum", "reduce_scatter": "sum"}
ROOT = {"broadcast": "0", "reduce": "0", "gather": "0", "scatter": "0"}


@dataclasses.dataclass(frozen=True)
class SmokeSummary:
    world_size: int
    nodes: int
    backend: str
    results: tuple[OpResult, ...]
    hang: Hang | None
    errors: tuple[str, ...]
    log_dir: str
    finished: bool

    @property
    def verdict(self) -> str:
        bad = self.hang or self.errors or any(r.status != "ok" for r in self.results)
        return "fail" if bad or not self.finished else "pass"


def to_json(summary: SmokeSummary) -> dict[str, Any]:
    hang = summary.hang
    return {
        "schema": SCHEMA,
        "world_size": summary.world_size,
        "nodes": summary.nodes,
        "backend": summary.backend,
        "log_dir": summary.log_dir,
        "finished": summary.finished,
        "results": [dataclasses.asdict(r) for r in summary.results],
        "hang": None
        if hang is None
        else {
            "op": hang.op,
            "bytes": hang.bytes,
            "culprits": list(hang.culprits),
            "message": hang.message,
            "ranks": {
                str(s.rank): {
                    "state": s.state,
                    "collective": s.collective,
                    "call_site": s.call_site,
                    "stack": list(s.stack),
                }
                for s in hang.ranks
            },
        },
        "findings": [{"id": "smoke-error", "severity": "error", "message": e} for e in summary.errors]
        + ([{"id": "smoke-hang", "severity": "error", "message": hang.message}] if hang else []),
        "verdict": summary.verdict,
    }


def write_json(summary: SmokeSummary, path: str) -> None:
    """Replace ``path`` atomically, so a reader (or a killed run) never sees half a file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(to_json(summary), handle, indent=1)
    os.replace(tmp, path)


def progress_line(result: OpResult) -> Text:
    style = "green" if result.status == "ok" else "bold red"
    return Text(f"  {result.op:<15} {result.bytes:>10} B  {result.time_us_p50 or 0:>10.1f} us  {result.status}", style)


def render(summary: SmokeSummary, console: Console) -> None:
    table = Table(
        title=f"ncclcheck smoke: {summary.world_size} ranks, {summary.nodes} node(s), {summary.backend}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
    )
    for name in (
        "op",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time(us)",
        "p95(us)",
        "algbw(GB/s)",
        "busbw(GB/s)",
        "#wrong",
    ):
        table.add_column(name, justify="left" if name == "op" else "right", no_wrap=name != "op")
    for r in summary.results:
        style = None if r.status == "ok" else "bold red"
        table.add_row(
            r.op,
            str(r.bytes),
            str(r.count),
            "float",
            REDOP.get(r.op, "none"),
            ROOT.get(r.op, "-1"),
            _num(r.time_us_p50),
            _num(r.time_us_p95),
            _num(r.algbw_gbps, 3),
            _num(r.busbw_gbps, 3),
            str(r.wrong) if r.status != "hang" else "N/A",
            style=style,
        )
    console.print(table)
    if summary.hang:
        _render_hang(summary.hang, console)
    for error in summary.errors:
        console.print(Text(f"error: {error}", style="bold red"))
    console.print(Text(f"logs: {summary.log_dir}", style="dim"))
    ok = summary.verdict == "pass"
    console.print(
        Text(f"{'✓ pass' if ok else '✗ fail'}: " + _verdict_text(summary), style="bold green" if ok else "bold red")
    )


def _render_hang(hang: Hang, console: Console) -> None:
    console.print(Text(f"hang in {hang.op} ({hang.bytes} B): {hang.message}", style="bold red"))
    for state in hang.ranks:
        mark = "✗" if state.rank in hang.culprits else " "
        console.print(
            Text(
                f" {mark} rank {state.rank}: {state.state}, collective {state.collective or '-'},"
                f" at {state.call_site or '-'}"
            )
        )
        for line in state.stack[:6]:
            console.print(Text(f"      {line}", style="dim"))


def _verdict_text(summary: SmokeSummary) -> str:
    if summary.hang:
        return f"{summary.hang.op} hung; culprit rank(s) {list(summary.hang.culprits) or 'none: all stalled'}"
    if summary.errors:
        return summary.errors[0]
    wrong = [r for r in summary.results if r.status != "ok"]
    if wrong:
        return f"{len(wrong)} op/size result(s) wrong"
    return f"{len(summary.results)} op/size results verified"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
