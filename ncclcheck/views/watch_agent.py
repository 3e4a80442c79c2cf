"""``ncclcheck watch --agent``: one JSON line per sample of this node's ranks (schema ncclcheck.watch-agent/1).

A line holds each rank's sample and how long it has stood still (the agent tracks its own ranks on its own
clock, so the viewer never compares two nodes' clocks), and a rank's stack only when it changed since the
line before: an unchanged rank costs a few hundred bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ncclcheck.model.flight import FrDump, dump_to_json
from ncclcheck.model.shares import tally_to_json
from ncclcheck.model.stacks import Frame
from ncclcheck.model.waits import Deep
from ncclcheck.model.watch import AGENT_SCHEMA, RendezvousEndpoint, WatchState


def agent_line(
    state: WatchState | None,
    host: str,
    sent: dict[int, tuple[Frame, ...]],
    now: float,
    seq: int,
    error: str | None = None,
    done: str | None = None,
    rendezvous: RendezvousEndpoint | None = None,
    interval_s: float | None = None,
    flight: Sequence[FrDump] | None = None,
    rounds_sent: dict[int, float] | None = None,
    deep_sent: dict[int, Deep | None] | None = None,
) -> dict[str, Any]:
    """The line for this sample; ``sent`` (each rank's stack as last sent) is brought up to date. ``flight``: this
    node's ranks' live Flight Recorders, given when they changed (an empty one: the stall they were asked in is over).
    ``rounds_sent``: the end of each rank's last round sent, brought up to date (None: send every round held);
    ``deep_sent``: each rank's closer look as last sent, brought up to date: a look is sent when it changed (``null``
    once the rank moved on), not at every line (None: with every line that has one)."""
    line: dict[str, Any] = {"schema": AGENT_SCHEMA, "host": host, "time": round(now, 3), "seq": seq}
    if interval_s is not None:
        line["interval_s"] = interval_s  # how often this agent writes: the viewer calls it silent after 4 of them
    if error is not None:
        line["error"] = error
    if state is None:
        line["ranks"] = []
        if done:
            line["done"] = done
        return line
    job = state.job
    groups = {p.group_rank for p in job.ranks if p.group_rank is not None}
    line.update(
        node_rank=groups.pop() if len(groups) == 1 else None,
        job={
            "id": job.id,
            "world_size": job.world_size,
            "nodes": job.nodes,
            "launcher_pid": job.launcher_pid,
            "script": job.script,
            "launcher_running": state.launcher_running,
        },
        rendezvous=None
        if rendezvous is None
        else {"endpoint": rendezvous.text(), "address": rendezvous.address, "run_id": rendezvous.run_id},
        window_s=round(state.window_s, 2),
        samples=state.samples,
        ranks=[],
        notes=list(state.notes),
        recording=state.recording,
    )
    for v in state.ranks:
        s = v.sample
        rank: dict[str, Any] = {
            "rank": s.rank,
            "local_rank": s.local_rank,
            "pid": s.pid,
            "status": s.status,
            "exit_code": s.exit_code,
            "cpu_percent": s.cpu_percent,
            "rss_bytes": s.rss_bytes,
            "threads": s.threads,
            "socket_bytes": s.net_bytes,
            "stack_error": s.stack_error,
            "collective": v.collective,
            "call_site": v.call_site,
            "doing": v.doing,
            "since_s": round(v.since_s, 2),
            "still_s": round(v.still_s, 2),
            "quiet_s": round(v.quiet_s, 2),
            "idle_s": round(v.idle_s, 2),
            "idle_samples": v.idle_samples,
            "moved_samples": v.moved_samples,
            "progressing": v.progressing,
            "main_cpu_percent": None if v.main_cpu_percent is None else round(v.main_cpu_percent, 1),
            "held_s": round(v.held_s, 2),
        }
        if v.args is not None:
            rank["args"] = v.args.to_json()
        if deep_sent is None:  # a rank standing still outside a collective: what it waits on, for the viewer's chain
            if s.deep is not None:
                rank["deep"] = s.deep.to_json()
        elif deep_sent.get(s.rank) != s.deep:
            rank["deep"] = None if s.deep is None else s.deep.to_json()
            deep_sent[s.rank] = s.deep
        if s.p2p is not None:
            rank["p2p"] = s.p2p.to_json()
        if s.ended is not None:
            rank["ended"] = round(s.ended, 3)
        if s.code is not None:
            rank["code"] = s.code.to_json()
        if sent.get(s.rank) != s.stack:
            rank["stack"] = [[f.function, f.filename, f.line, f.native] for f in s.stack]
            sent[s.rank] = s.stack
        last = rounds_sent.get(s.rank, float("-inf")) if rounds_sent is not None else float("-inf")
        new = [t for t in v.tallies if t.end > last]
        if new:
            rank["rounds"] = [tally_to_json(t) for t in new]
            if rounds_sent is not None:
                rounds_sent[s.rank] = new[-1].end
        line["ranks"].append(rank)
    if flight is not None:
        line["flight"] = [dump_to_json(d) for d in flight]
    if done:
        line["done"] = done
    return line
