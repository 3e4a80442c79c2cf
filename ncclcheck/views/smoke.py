"""Render a smoke run: nccl-tests' columns per op, the hang diagnosis, findings, the verdict; or its JSON."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ncclcheck.model.findings import by_severity
from ncclcheck.model.smoke import Fingerprint, Hang, OpResult, SmokeSummary, StandingStill, size_text
from ncclcheck.views.transports import render_transports, transports_json

SCHEMA = "ncclcheck.smoke/1"
REDOP = {"reduce": "sum", "all_reduce": "sum", "reduce_scatter": "sum"}
ROOT = {"broadcast": "0", "reduce": "0", "gather": "0", "scatter": "0"}
COLUMNS = ("size(B)", "count", "type", "redop", "root", "time(us)", "p95(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong")
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def to_json(summary: SmokeSummary) -> dict[str, Any]:
    hang = summary.hang
    return {
        "schema": SCHEMA,
        "world_size": summary.world_size,
        "nodes": summary.nodes,
        "node_rank": summary.node_rank,
        "scope": summary.scope,
        "backend": summary.backend,
        "log_dir": summary.log_dir,
        "state": summary.state,
        "finished": summary.finished,
        "results": [dataclasses.asdict(r) for r in summary.results],
        "hang": None if hang is None else hang_json(hang),
        "fingerprints": [dataclasses.asdict(f) for f in summary.fingerprints],
        "transports": transports_json(summary.transports),
        "findings": [f.to_json() for f in by_severity(summary.findings)],
        "verdict": summary.verdict,
    }


def hang_json(hang: Hang) -> dict[str, Any]:
    return {
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
    }


def status_line(results: tuple[OpResult, ...], still: tuple[StandingStill, ...] = ()) -> Text:
    """The one live line on a terminal: how far the run is, the last result, and which ranks stand still."""
    standing = "".join(f"; {s.text()}" for s in still)
    if not results:
        return Text(f"starting the ranks ...{standing}")
    last, wrong = results[-1], sum(r.status != "ok" for r in results)
    size = "" if last.op == "barrier" else f" {size_text(last.bytes)}"
    bad = f", {wrong} not ok" if wrong else ""
    return Text(f"{len(results)} result(s){bad}; last: {last.op}{size} {last.time_us_p50 or 0:.1f} us{standing}")


def still_line(still: tuple[StandingStill, ...]) -> Text:
    """Without a terminal, now and then while ranks stand still: who, where, and how long of their deadline."""
    return Text("  … " + "; ".join(s.text() for s in still), style="yellow")


def op_line(op: str, results: list[OpResult]) -> Text:
    """One line per op once its sizes are done (without a terminal: a CI log gets ten lines, not hundreds)."""
    bad = [r for r in results if r.status != "ok"]
    sizes = (
        ""
        if op == "barrier"
        else f" {len(results)} size(s) {size_text(results[0].bytes)}..{size_text(results[-1].bytes)}"
    )
    best = max((r.busbw_gbps or 0.0 for r in results), default=0.0)
    bw = f", busbw up to {best:.3f} GB/s" if best else ""
    state = f"{len(bad)} not ok ({bad[0].status} at {size_text(bad[0].bytes)})" if bad else "ok"
    return Text(f"  {op:<15}{sizes}{bw}: {state}", style="bold red" if bad else "green")


def results_table(summary: SmokeSummary) -> Table:
    who = "job" if summary.scope == "job" else f"node {summary.node_rank}'s ranks"
    table = Table(
        title=f"ncclcheck smoke ({who}): {summary.world_size} ranks, {summary.nodes} node(s), {summary.backend}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
    )
    table.add_column("op", no_wrap=True)
    widest = max((len(str(r.bytes)) for r in summary.results), default=1)
    for name in COLUMNS:
        # sizes and counts are never cut to "20971…": on a narrow terminal the other columns give way
        keep = widest if name in ("size(B)", "count") else 7 if "(" in name else None
        table.add_column(name, justify="right", no_wrap=True, min_width=keep)
    previous = None
    for r in summary.results:
        unsized = r.op == "barrier" or _never_ran(r)  # a barrier moves no data of its own
        table.add_row(
            r.op if r.op != previous else "",
            "-" if unsized else str(r.bytes),
            "-" if r.op == "barrier" or r.status in ("hang", "error") else str(r.count),
            "float",
            REDOP.get(r.op, "none"),
            ROOT.get(r.op, "-1"),
            _outcome(r) or _num(r.time_us_p50),
            _num(r.time_us_p95),
            _num(r.algbw_gbps, 3),
            _num(r.busbw_gbps, 3),
            str(r.wrong) if r.status not in ("hang", "error") else "N/A",
            style=None if r.status == "ok" else "bold red",
            end_section=False,
        )
        previous = r.op
    return table


def _never_ran(r: OpResult) -> bool:
    """The row of an op a failure stopped before any rank entered it: no size is known (bytes 0)."""
    return r.status == "error" and not r.bytes and r.op != "init"


def _outcome(r: OpResult) -> str | None:
    """In the time column of a row that has no time: what happened to the op instead."""
    if r.status == "hang":
        return "hung"
    if r.status == "error":
        return "not run" if _never_ran(r) else "failed"
    return None


def render(summary: SmokeSummary, console: Console) -> None:
    console.print(results_table(summary))
    _render_fingerprints(summary.fingerprints, console)
    if summary.transports:
        render_transports(summary.transports, console)
    if summary.hang:
        _render_hang(summary.hang, console)
    for finding in by_severity(summary.findings):
        style = SEVERITY_STYLE.get(finding.severity, "")
        console.print(Text(f"{finding.severity}: {finding.message}", style=style))
        if finding.fix:
            console.print(Text(f"   fix: {finding.fix}", style="dim"))
    console.print(Text(f"logs: {summary.log_dir}", style="dim"))
    if summary.verdict in ("running", "interrupted"):
        shown = f"{len(summary.results)} op/size result(s) so far"
        console.print(
            Text(
                f"■ {summary.verdict}: no verdict, the run was ended before it concluded; {shown}", style="bold yellow"
            )
        )
        return
    ok = summary.verdict == "pass"
    console.print(
        Text(f"{'✓ pass' if ok else '✗ fail'}: " + _verdict_text(summary), style="bold green" if ok else "bold red")
    )


def _render_fingerprints(prints: tuple[Fingerprint, ...], console: Console) -> None:
    hosts: dict[str, list[Fingerprint]] = {}
    for p in prints:
        hosts.setdefault(p.host, []).append(p)
    for host, group in hosts.items():
        first = group[0]
        ranks = ",".join(str(p.rank) for p in group)
        nccl = f", NCCL {first.nccl}" if first.nccl else ""
        ib = f", IB {' '.join(first.ib_ports)}" if first.ib_ports else ""
        console.print(
            Text(
                f"{host}: rank(s) {ranks}, torch {first.torch}{nccl}, sockets on {first.socket_ifname or '?'}{ib}",
                style="dim",
            )
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
    errors = [f for f in summary.findings if f.severity == "error"]
    if errors:
        return errors[0].message
    wrong = [r for r in summary.results if r.status != "ok"]
    if wrong:
        return f"{len(wrong)} op/size result(s) wrong"
    if not summary.finished:
        return "the run did not finish"
    return f"{len(summary.results)} op/size results verified" + ("" if summary.scope == "job" else " on this node")


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
