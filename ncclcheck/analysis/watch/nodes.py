"""Every node's agent report merged into one job-wide look, judged by the same analysis as one node's.

Each agent tracks its own ranks on its own clock (how long each stood still), so nothing here compares two
nodes' clocks: a report's age is the viewer's time since the line arrived. A node whose agent stopped
reporting is *silent*, and its ranks count as unseen, never as stuck or dead: what cannot be seen is named,
and `stalled` (blame the transport) needs every rank of the job seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ncclcheck.analysis.watch.judge import EXITED, Judging, judge
from ncclcheck.analysis.watch.shares import rank_shares
from ncclcheck.analysis.watch.track import Tracked
from ncclcheck.analysis.watch.verdict import summarise
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ranks import span
from ncclcheck.model.watch import (
    AgentReport,
    Job,
    NodeStatus,
    RankProc,
    RendezvousMap,
    RendezvousNode,
    WatchState,
)

SILENT_MIN_S = 10.0  # a node is silent after this long without a line, and at least SILENT_INTERVALS samples
SILENT_INTERVALS = 4
STALE_BEAT_S = 15.0  # torchrun's agents beat every 5 s; three missed and the others drop the node
LATE_BEAT_S = 7.5  # one beat missed: late, and nothing is said of the node either way
FANOUT_FIX = (
    "run the agent by hand on that node (`python -m ncclcheck watch --agent --once`): ncclcheck must be importable "
    "there (--agent-cmd names another python or venv), the fan-out tool must reach the node, and py-spy must be "
    "allowed to read the ranks"
)
SILENT_FIX = (
    "look at that node: `ncclcheck watch` there, or its torchrun agent and dmesg; a node that answers nothing "
    "(ssh hangs) is down or wedged, and its ranks are the ones the others wait on"
)
LAUNCHER_FIX = (
    "see why the launcher (torchrun) on that node ended (its output, dmesg: OOM killer); the ranks there run on as "
    "orphans until they finish or fail, and an elastic restart cannot happen"
)
NO_RANKS_FIX = "read that node's launcher output and `ncclcheck logs` for why its ranks ended or never started"


def merge(
    reports: Mapping[str, AgentReport],
    text: Mapping[str, Iterable[str]],
    now: float,
    judging: Judging,
    interval_s: float,
    started: bool = True,
    expected_nodes: int | None = None,
    rendezvous: RendezvousMap | None = None,
    expected_hosts: tuple[str, ...] = (),
) -> WatchState:
    """The job-wide state: nodes that report are judged together; silent and failed ones become findings.
    ``text``: what the fan-out printed that was not an agent line, by label; ``started``: False while the
    fan-out is still starting its agents (no node is missing yet); ``expected_nodes``: how many nodes the job
    holds, where the launcher (SLURM) says so; else the ranks' GROUP_WORLD_SIZE; ``rendezvous``: torchrun's
    own map of the job (every node's address and heartbeat), where it could be read; ``expected_hosts``: the
    job's nodes by name, where the launcher (SLURM) lists them."""
    silent_after = max(SILENT_MIN_S, SILENT_INTERVALS * interval_s)
    mapped = {n.node_rank: n for n in rendezvous.nodes} if rendezvous else {}
    nodes: list[NodeStatus] = []
    live: list[AgentReport] = []
    for r in sorted(reports.values(), key=lambda r: (r.node_rank is None, r.node_rank or 0, r.host)):
        age = max(now - r.received, 0.0)
        ranks = tuple(v.rank for v in r.views)
        where = _mapped(mapped.get(r.node_rank) if r.node_rank is not None else None)
        if mapped and r.node_rank is not None and r.node_rank not in mapped:
            where = {"left_rendezvous": True}  # the map was read and no longer lists it
        if r.error and not r.views:
            nodes.append(NodeStatus(r.host, r.node_rank, "unreachable", (), age, r.error, **where))
        elif age > max(silent_after, SILENT_INTERVALS * (r.interval_s or 0.0)) and not r.done:
            nodes.append(NodeStatus(r.host, r.node_rank, "silent", ranks, age, **where))
        else:
            nodes.append(NodeStatus(r.host, r.node_rank, "ok", ranks, age, r.done or "", **where))
            live.append(r)
    job = _job(reports.values(), live)
    views = tuple(sorted((v for r in live for v in r.views), key=lambda v: v.rank))
    samples = min((r.samples for r in live if r.views), default=0)
    window = min((r.window_s for r in live if r.views), default=0.0)
    running = [r.launcher_running for r in live if r.launcher_running is not None]
    recording = any(r.recording for r in live)
    tracked = Tracked(now, window, samples, views, any(running) if running else None, recording)
    expected = max(expected_nodes or job.nodes or 0, len(mapped))
    heard_ranks = {n.node_rank for n in nodes if n.node_rank is not None}
    nodes += [
        NodeStatus(m.addr, m.node_rank, "missing", (), None, **_mapped(m))
        for m in sorted(mapped.values(), key=lambda m: m.node_rank)
        if m.node_rank not in heard_ranks
    ]  # named by torchrun's own map
    if rendezvous is not None and rendezvous.error is None and mapped:
        heard_ranks |= set(mapped)
        nodes += [
            NodeStatus("?", rank, "missing", (), None, left_rendezvous=True)
            for rank in range(expected)
            if rank not in heard_ranks
        ]  # the job had it (its node count), torchrun's map no longer lists it
    nodes += _slurm_missing(nodes, expected_hosts)
    missing = max(expected - len(nodes), 0)
    nodes += [NodeStatus("?", None, "missing", (), None) for _ in range(missing)]
    notes = tuple(dict.fromkeys(n for r in live for n in r.notes))
    if rendezvous is not None and rendezvous.error:
        notes += (f"torchrun's rendezvous map is not known: {rendezvous.error}",)
    orphans = [r for r in live if r.launcher_running is False and any(v.sample.status not in EXITED for v in r.views)]
    beats = [m.heartbeat_age_s for m in mapped.values() if m.heartbeat_age_s is not None and not m.removed]
    freshest = min(beats, default=None)
    findings = _node_findings(nodes, text, job, started, orphans, freshest) + judge(tracked, job, judging)
    # by severity; within one, a finding that names a culprit (the job's straggler) before the nodes' own (a
    # launcher gone, which names none): the headline lists them in this order
    findings = tuple(sorted(findings, key=lambda f: (("error", "warning", "info").index(f.severity), not f.culprits)))
    limit = judging.threshold(window)
    verdict = summarise(views, samples, window, findings, limit, judging.stall_s, judging.final, recording)
    return WatchState(
        now,
        job,
        views,
        findings,
        verdict,
        window,
        samples,
        notes,
        tracked.launcher_running,
        tuple(nodes),
        rank_shares(views),
        recording,
    )


def _job(every: Iterable[AgentReport], live: list[AgentReport]) -> Job:
    """The job as the reporting agents describe it: its ranks are the ones seen."""
    reports = list(every)
    ids = [r.job_id for r in reports if r.job_id]
    world = max((r.world_size or 0 for r in reports), default=0)
    nodes = max((r.nodes or 0 for r in reports), default=0) or None
    procs = tuple(
        RankProc(v.sample.pid or 0, v.rank, v.sample.local_rank, world, None, r.node_rank, r.host, "")
        for r in live
        for v in r.views
    )
    return Job(ids[0] if ids else "?", max(world, len(procs)), nodes, None, tuple(sorted(procs, key=lambda p: p.rank)))


def _mapped(m: RendezvousNode | None) -> dict[str, Any]:
    """What torchrun's rendezvous says of a node, as NodeStatus fields."""
    if m is None:
        return {}
    return {"address": m.addr, "heartbeat_age_s": m.heartbeat_age_s, "left_rendezvous": m.removed}


def _beat(n: NodeStatus, freshest: float | None) -> tuple[str, bool | None]:
    """What the node's torchrun heartbeat says, and whether it has stopped (None: not known).

    Stopped is judged against the freshest heartbeat of the others, not this viewer's clock: the nodes'
    clocks write the heartbeats, and a skewed clock must not make a live node look dead."""
    if n.left_rendezvous and n.heartbeat_age_s is None:
        return (
            f"; torchrun's rendezvous no longer lists node {n.node_rank}: its torchrun left it (ended, or was "
            "dropped by the others when its heartbeat stopped)",
            None,
        )
    age = n.heartbeat_age_s
    if age is None:
        return "", None
    if n.left_rendezvous:
        return (
            f"; torchrun's rendezvous no longer lists it: its torchrun left (ended, or was dropped by the "
            f"others when its heartbeat stopped), its last heartbeat {age:.0f} s ago",
            None,
        )
    lag = age - (freshest if freshest is not None else 0.0)
    if lag > STALE_BEAT_S:
        return f"; its torchrun agent's heartbeat is {age:.0f} s old: the node is down or wedged", True
    if lag > LATE_BEAT_S:
        others = f" (the freshest node's is {freshest:.0f} s old)" if freshest is not None else ""
        return f"; its torchrun agent's heartbeat is {age:.0f} s old{others}: late, not yet stopped", None
    return f"; its torchrun agent's heartbeat is {age:.0f} s old: torchrun runs there", False


def _node_findings(
    nodes: list[NodeStatus],
    text: Mapping[str, Iterable[str]],
    job: Job,
    started: bool,
    reports_without_launcher: Iterable[AgentReport] = (),
    freshest: float | None = None,
) -> tuple[Finding, ...]:
    out: list[Finding] = []
    seen = {r.rank for r in job.ranks}
    unseen = [r for r in range(job.world_size) if r not in seen]
    for n in nodes:
        name = _name(n)
        beat, stopped = _beat(n, freshest)
        if n.agent == "silent":
            lost = f" (rank {span(list(n.ranks))} not seen since)" if n.ranks else ""
            why = (
                beat
                if stopped
                else f"{beat}: its agent or the fan-out's connection to it is wedged"
                if stopped is False
                else f"{beat}: the node, its agent or the fan-out's connection to it is wedged"
            )
            out.append(
                Finding(
                    watch_ids.NODE_SILENT,
                    "error",
                    f"{name}: its agent has sent nothing for {n.sample_age_s or 0:.0f} s{lost}{why}",
                    SILENT_FIX,
                    ranks=n.ranks,
                    culprits=n.ranks,
                )
            )
        elif n.agent == "unreachable":
            out.append(
                Finding(
                    watch_ids.NODE_UNREACHABLE,
                    "error",
                    f"{name}: its agent could not watch: {n.detail}",
                    NO_RANKS_FIX if "no " in n.detail else FANOUT_FIX,
                    ranks=(),
                    culprits=(),
                )
            )
    for r in reports_without_launcher:
        out.append(
            Finding(
                watch_ids.LAUNCHER_GONE,
                "warning",
                f"{r.host}: the job's launcher on this node has exited while rank "
                f"{span([v.rank for v in r.views])} run on: nothing will restart them or report how "
                "they end, and its rendezvous heartbeat has stopped",
                LAUNCHER_FIX,
                ranks=tuple(v.rank for v in r.views),
                culprits=(),
            )
        )
    missing = [n for n in nodes if n.agent == "missing" and n.node_rank is None and n.host == "?"]
    named = [n for n in nodes if n.agent == "missing" and (n.node_rank is not None or n.host != "?")]
    said = [f"{label + ': ' if label else ''}{line}" for label, lines in text.items() for line in lines]
    words = f"; the fan-out said: {' | '.join(said[-4:])}" if said else ""
    for n in named if started else ():
        beat, stopped = _beat(n, freshest)
        if stopped is False:
            beat += ", so the agent did not start there or its output does not come back"
        out.append(
            Finding(
                watch_ids.NODE_MISSING,
                "error",
                f"{_name(n)}: no agent output{beat}{words}",
                FANOUT_FIX if stopped is False else SILENT_FIX,
                ranks=(),
                culprits=(),
            )
        )
    if started and not nodes:
        words = f": it printed {' | '.join(said[-4:])}" if said else " and printed nothing"
        out.append(
            Finding(
                watch_ids.NODE_MISSING, "error", f"no agent reported at all{words}", FANOUT_FIX, ranks=(), culprits=()
            )
        )
    elif missing and started:
        what = f" (rank {span(unseen)} not seen)" if unseen else ""
        out.append(
            Finding(
                watch_ids.NODE_MISSING,
                "error",
                f"{len(missing)} of {len(nodes)} nodes sent no agent output{what}{words}",
                FANOUT_FIX,
                ranks=tuple(unseen),
                culprits=(),
            )
        )
    elif said and (unseen or any(n.agent != "ok" for n in nodes)):
        out.append(
            Finding(
                watch_ids.FANOUT_OUTPUT,
                "warning",
                f"the fan-out printed, besides agent lines: {' | '.join(said[-4:])}",
                FANOUT_FIX,
                ranks=(),
                culprits=(),
            )
        )
    return tuple(out)


def _slurm_missing(nodes: list[NodeStatus], expected_hosts: tuple[str, ...]) -> list[NodeStatus]:
    """The job's nodes (SLURM's names) that sent nothing, named only when the names line up: as many unmatched
    names as nodes short (agents in containers may call their host something else: then only a count)."""
    if not expected_hosts or any(n.agent == "missing" for n in nodes):  # torchrun's map named them already
        return []
    heard = [n for n in nodes if n.agent != "missing"]
    known = {_short(n.host) for n in heard} | {_short(n.address) for n in heard if n.address}
    unmatched = [h for h in expected_hosts if _short(h) not in known]
    return (
        [NodeStatus(h, None, "missing", (), None) for h in unmatched]
        if len(unmatched) == len(expected_hosts) - len(heard)
        else []
    )


def _short(host: str) -> str:
    return host.split(".")[0]


def _name(n: NodeStatus) -> str:
    if n.node_rank is None:
        return n.host
    if n.host == "?":
        return f"node {n.node_rank}"
    also = f", {n.address}" if n.address and n.address != n.host else ""
    return f"node {n.node_rank} ({n.host}{also})"
