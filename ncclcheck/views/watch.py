"""``ncclcheck watch`` without a terminal: the ncclcheck.watch/2 JSON, or a rich table printed once; the job list."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ncclcheck.model.findings import Finding
from ncclcheck.model.ranks import span
from ncclcheck.model.shares import RankShare
from ncclcheck.model.stacks import short
from ncclcheck.model.watch import Job, NodeStatus, RankView, WatchState

SCHEMA = "ncclcheck.watch/2"
PLACES = 5  # places per rank in the JSON
JOBS_SCHEMA = "ncclcheck.watch-jobs/1"
CULPRIT, UNDECIDED = "✗", "?"  # the flag column: blamed; involved where the evidence cannot tell who is to blame
STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
VERDICT_STYLE = {
    "problem": "bold red",
    "warning": "yellow",
    "pending": "yellow",
    "undecided": "yellow",
    "finished": "cyan",
    "ok": "green",
}


def to_json(state: WatchState, interval_s: float) -> dict[str, Any]:
    job = state.job
    return {
        "schema": SCHEMA,
        "verdict": {"status": state.verdict.status, "message": state.verdict.message},
        "job": {
            **job_json(job),
            "local_ranks": [v.rank for v in state.ranks],
            "remote_ranks": len(job.remote()),
            "launcher_running": state.launcher_running,
        },
        "window": {"seconds": round(state.window_s, 2), "samples": state.samples, "interval_s": interval_s},
        "ranks": [rank_json(v) for v in state.ranks],
        "findings": [finding_json(f) for f in state.findings],
        "notes": list(state.notes),
        "shares": [share_json(x) for x in state.shares],
        **({"nodes": [node_json(n) for n in state.nodes]} if state.nodes else {}),
    }


def share_json(x: RankShare) -> dict[str, Any]:
    """Where a rank's time went over the window: shares of its sampled stacks by kind and by place."""
    return {
        "rank": x.rank,
        "host": x.host,
        "wait": round(x.wait, 3),
        "deviation": round(x.deviation, 3),
        "kinds": {kind: round(share, 3) for kind, share in x.shares},
        "main_thread_cpu_percent": None if x.cpu_percent is None else round(x.cpu_percent, 1),
        "main_thread_cpu_wait_percent": None if x.cpu_wait_percent is None else round(x.cpu_wait_percent, 1),
        "places": [
            {"kind": p.kind, "what": p.what, "call_site": p.site, "share": round(p.samples / x.samples, 3)}
            for p in x.places[:PLACES]
        ],
        "samples": x.samples,
        "rounds": x.rounds,
        "seconds": round(x.seconds, 1),
    }


def node_json(n: NodeStatus) -> dict[str, Any]:
    return {
        "node_rank": n.node_rank,
        "host": n.host,
        "agent": n.agent,
        "ranks": list(n.ranks),
        "sample_age_s": None if n.sample_age_s is None else round(n.sample_age_s, 1),
        "address": n.address or None,
        "heartbeat_age_s": None if n.heartbeat_age_s is None else round(n.heartbeat_age_s, 1),
        "left_rendezvous": n.left_rendezvous,
        "detail": n.detail,
    }


def nodes_line(nodes: tuple[NodeStatus, ...]) -> str:
    """``nodes 15/16 reporting, 1 silent``."""
    counts = {kind: sum(1 for n in nodes if n.agent == kind) for kind in ("silent", "unreachable", "missing")}
    rest = "".join(f", {count} {kind}" for kind, count in counts.items() if count)
    return f"nodes {sum(1 for n in nodes if n.agent == 'ok')}/{len(nodes)} reporting{rest}"


def job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "world_size": job.world_size,
        "nodes": job.nodes,
        "launcher_pid": job.launcher_pid,
        "script": job.script,
        "cwd": job.cwd,
        "started": job.started,
        "found_as": job.how,
        "ranks_here": [r.rank for r in job.ranks],
    }


def jobs_json(jobs: tuple[Job, ...]) -> dict[str, Any]:
    return {"schema": JOBS_SCHEMA, "jobs": [job_json(j) for j in jobs]}


def jobs_lines(jobs: tuple[Job, ...]) -> list[str]:
    """One line per job: what a user needs to tell them apart."""
    return [
        f"  {j.id}  world size {j.world_size}, rank {span([r.rank for r in j.ranks])} here, "
        f"launcher pid {j.launcher_pid or '-'}, started {started(j)}: {j.script or '?'} in {j.cwd or '?'}"
        for j in jobs
    ]


def started(job: Job) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.started)) if job.started else "?"


def finding_json(f: Finding) -> dict[str, Any]:
    return {
        "kind": f.id,
        "severity": f.severity,
        "ranks": list(f.ranks),
        "culprits": list(f.culprits),
        "message": f.message,
        "fix": f.fix,
        **({"roles": {str(rank): role for rank, role in f.roles}} if f.roles else {}),
        **({"chain": [h.to_json() for h in f.chain], "end": f.end} if f.chain or f.end else {}),
    }


def rank_json(v: RankView) -> dict[str, Any]:
    s = v.sample
    return {
        "rank": s.rank,
        "local_rank": s.local_rank,
        "host": s.host,
        "pid": s.pid,
        "status": s.status,
        "tracer": s.tracer,
        "exit_code": s.exit_code,
        "collective": v.collective,
        "call_site": v.call_site,
        "doing": v.doing,
        "since_s": round(v.since_s, 1),
        "still_s": round(v.still_s, 1),
        "quiet_s": round(v.quiet_s, 1),
        "idle_s": round(v.idle_s, 1),
        "progressing": v.progressing,
        "cpu_percent": s.cpu_percent,
        "main_thread_cpu_percent": None if v.main_cpu_percent is None else round(v.main_cpu_percent, 1),
        "socket_bytes": s.net_bytes,
        "rss_bytes": s.rss_bytes,
        "threads": s.threads,
        "stack": [{"function": f.function, "file": f.filename, "line": f.line, "native": f.native} for f in s.stack],
        "stack_error": s.stack_error,
        "args": v.args.to_json() if v.args else None,
        **({"deep": s.deep.to_json()} if s.deep is not None else {}),
        **({"p2p": s.p2p.to_json()} if s.p2p is not None else {}),
    }


def flags(state: WatchState) -> dict[int, str]:
    """Each flagged rank's glyph: ✗ for the ranks a finding blames, ? for those involved where none is blamed."""
    out: dict[int, str] = {}
    for f in state.findings:
        if f.severity == "info":
            continue
        for rank in f.ranks if not f.culprits else ():
            out.setdefault(rank, UNDECIDED)
        for rank in f.culprits:
            out[rank] = CULPRIT
    return out


def cells(v: RankView, flag: str = "", share: RankShare | None = None, window_s: float | None = None) -> dict[str, str]:
    """Every column either rank table (rich or Textual) shows, as text (``wait``: its share of time waiting in
    collectives over the window, where the rounds of samples tell it)."""
    s = v.sample
    call = v.args.text() if v.args else None  # the call with its telling arguments: "recv from rank 1"
    return {
        "": flag,
        "rank": str(s.rank),
        "local": "" if s.local_rank is None else str(s.local_rank),
        "host": s.host,
        "pid": str(s.pid or "-"),
        "state": s.status,
        "in": call or v.doing,
        "collective": call or v.collective or f"({v.doing})",
        "call site": short(v.call_site) if v.call_site else "",
        "for": stood(v, window_s),
        "wait": f"{share.wait:.0%}" if share is not None else "",
        "cpu": f"{s.cpu_percent:.0f}%",
        "rss": f"{s.rss_bytes >> 20}M",
    }


def stood(v: RankView, window_s: float | None) -> str:
    """How long the rank has stood at its place: watch counts from its first look, so a rank there since then has
    stood there at least that long ("≥"), maybe much longer."""
    there_before = window_s is not None and v.since_s >= window_s - 1e-6
    return f"{'≥' if there_before else ''}{v.since_s:.0f}s"


def row_style(flag: str) -> str:
    return "bold red" if flag == CULPRIT else "bold yellow" if flag == UNDECIDED else ""


def render(state: WatchState, console: Console) -> None:
    job = state.job
    where = (
        f"{nodes_line(state.nodes)}, {len(state.ranks)} rank(s) seen"
        if state.nodes
        else (f"{len(state.ranks)} rank(s) on this node")
    )
    console.print(
        Text(
            f"job {job.id}: world size {job.world_size}, {where}; "
            f"watched {state.window_s:.1f} s ({state.samples} samples)"
        )
    )
    table = Table()
    waits = {x.rank: x for x in state.shares}
    columns = ("", "rank", "pid", "state", "in", "call site", "for") + (("wait",) if waits else ())
    columns += ("cpu", "rss") + (("host",) if state.nodes else ())
    for column in columns:
        table.add_column("status" if column == "state" else column)
    marks = flags(state)
    for v in state.ranks:
        flag = marks.get(v.rank, "")
        text = cells(v, flag, waits.get(v.rank), state.window_s)
        table.add_row(*(Text(text[c], style=row_style(flag)) for c in columns))
    console.print(table)
    if marks:
        console.print(
            Text(f"{CULPRIT} the rank(s) to blame   {UNDECIDED} involved, the evidence cannot tell", style="dim")
        )
    for f in state.findings:
        console.print(Text(f"{'✗' if f.severity == 'error' else '!'} {f.id}: {f.message}", style=STYLE[f.severity]))
        if f.fix:
            console.print(Text(f"  fix: {f.fix}", style="dim"))
    for note in state.notes:
        console.print(Text(f"! {note}", style="yellow"))
    console.print(Text(state.verdict.message, style=VERDICT_STYLE.get(state.verdict.status, "")))
