"""Checks across lines and ranks, run once at the end of the fold: versions, interfaces, link layers,
loopback networking, timeouts that disagree, torchrun's failure summary, and timeouts annotated."""

from __future__ import annotations

import dataclasses
import re

from ncclcheck.analysis.logs.failure_tables import child_findings
from ncclcheck.analysis.logs.nccl import link_layer
from ncclcheck.analysis.nccl_rules import VIRTUAL_INTERFACE
from ncclcheck.model.findings import Evidence, Finding, Severity
from ncclcheck.model.ids import logs as logs_ids
from ncclcheck.model.logs import ChildFailure, RankLog, Timeout
from ncclcheck.model.ranks import span

P2P_OFF = {("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")}
LOOPBACK_IF = re.compile(r"^lo\b")
LINK_LOCAL = re.compile(r"\((?:fe80:|169\.254\.)")


def cross_checks(
    ranks: tuple[RankLog, ...],
    timeouts: tuple[Timeout, ...],
    failures: tuple[ChildFailure, ...],
    echoes: frozenset[int] = frozenset(),
) -> list[Finding]:
    """Findings that need more than one line: versions, link layers, interfaces, timeouts, torchrun summary
    (``echoes``: the ranks whose own error only says a peer closed the connection)."""
    jobs = jobs_of(ranks)
    versions = [f for job in jobs for f in _version_findings(job)] if len(jobs) > 1 else _version_findings(ranks)
    out = (
        _several_jobs(jobs) + versions + _interface_findings(ranks) + _link_layer_findings(ranks) + _loopback_net(ranks)
    )
    out += _timeout_mismatch(timeouts) + child_findings(failures, echoes)
    return out


def jobs_of(ranks: tuple[RankLog, ...]) -> list[tuple[RankLog, ...]]:
    """The processes grouped by the files they share a communicator through (NCCL's commId: every rank of a job
    sets up its world communicator, no rank of another job has its id); processes that printed no commId are
    in no group. One group, or none, when the logs say nothing of several jobs."""
    parent: dict[str, str] = {}

    def root(file: str) -> str:
        while parent.setdefault(file, file) != file:
            file = parent[file]
        return file

    owner: dict[str, str] = {}  # commId -> a file that holds it
    for r in ranks:
        for comm_id in r.comm_ids:
            parent[root(owner.setdefault(comm_id, r.file))] = root(r.file)
    groups: dict[str, list[RankLog]] = {}
    for r in ranks:
        if r.comm_ids:
            groups.setdefault(root(r.file), []).append(r)
    return [tuple(g) for g in groups.values()]


def _several_jobs(jobs: list[tuple[RankLog, ...]]) -> list[Finding]:
    if len(jobs) < 2:
        return []
    files = "; ".join(", ".join(dict.fromkeys(r.file for r in job[:3])) + ("…" if len(job) > 3 else "") for job in jobs)
    return [
        Finding(
            logs_ids.SEVERAL_JOBS,
            "warning",
            f"these logs may hold {len(jobs)} different jobs: their files share no NCCL communicator (commId): {files};"
            " a rank's lines in one job say nothing of another's, so ranks are not compared across them",
            "read one job's logs at a time (ncclcheck logs with that job's files or directory only)",
            (),
            tuple(Evidence(job[0].file, job[0].first_line, f"commId {job[0].comm_ids[0]}") for job in jobs),
        )
    ]


def _version_findings(ranks: tuple[RankLog, ...]) -> list[Finding]:
    versions: dict[str, list[RankLog]] = {}
    for r in ranks:
        if r.nccl_version:
            versions.setdefault(r.nccl_version, []).append(r)
    if len(versions) < 2:
        return []
    cores = {v.split("+")[0] for v in versions}
    parts = "; ".join(f"{v} on {', '.join(r.name for r in rs[:4])}" for v, rs in versions.items())
    severity: Severity = "error" if len(cores) > 1 else "warning"
    what = "different NCCL versions" if len(cores) > 1 else "the same NCCL built against different CUDA versions"
    evidence = tuple(Evidence(rs[0].file, rs[0].first_line, f"NCCL version {v}") for v, rs in versions.items())
    return [
        Finding(
            logs_ids.VERSION_MISMATCH,
            severity,
            f"ranks run {what}: {parts}",
            "install one torch/NCCL build on every node (same wheel, same LD_LIBRARY_PATH/LD_PRELOAD)",
            tuple(sorted(r.rank for rs in versions.values() for r in rs if r.rank is not None)),
            evidence,
        )
    ]


def _interface_findings(ranks: tuple[RankLog, ...]) -> list[Finding]:
    out = []
    for r in ranks:
        used = r.bootstrap + r.socket_interfaces
        bad = [i for i in used if VIRTUAL_INTERFACE.match(i) or LOOPBACK_IF.match(i) or LINK_LOCAL.search(i)]
        if bad:
            out.append(
                Finding(
                    logs_ids.SUSPICIOUS_INTERFACE,
                    "warning",
                    f"{r.name} uses {', '.join(dict.fromkeys(bad))} for NCCL sockets: a bridge, tunnel, loopback or"
                    " link-local address other nodes usually cannot reach",
                    "export NCCL_SOCKET_IFNAME=<the routed interface> (e.g. =eth0 or =^docker,veth,virbr,lo) on every"
                    " node; `ncclcheck env` shows what NCCL picks",
                    (r.rank,) if r.rank is not None else (),
                    (Evidence(r.file, r.first_line, ", ".join(used)),),
                )
            )
        env = dict(r.env)
        forced = {k: v for k, v in env.items() if (k, v) in P2P_OFF or (k == "NCCL_P2P_LEVEL" and v in ("LOC", "0"))}
        if forced and not any(f.id == logs_ids.P2P_DISABLED for f in out):
            text = " ".join(f"{k}={v}" for k, v in forced.items())
            out.append(
                Finding(
                    logs_ids.P2P_DISABLED,
                    "warning",
                    f"{text} set on {r.name}: GPU peer-to-peer (and shared memory) paths are turned off, traffic takes"
                    " slower routes",
                    "unset them unless you are testing on purpose or P2P is really broken on this machine",
                    (r.rank,) if r.rank is not None else (),
                    (Evidence(r.file, r.first_line, text),),
                )
            )
        if "NCCL_SOCKET_IFNAME" in env and not used and not r.init_complete:
            out.append(
                Finding(
                    logs_ids.SOCKET_IFNAME_NOT_FOUND,
                    "error",
                    f"NCCL_SOCKET_IFNAME={env['NCCL_SOCKET_IFNAME']} on {r.name} but NCCL never reports an interface"
                    " it uses: no interface here matches it",
                    "set NCCL_SOCKET_IFNAME to an interface (or prefix) that exists on every node; `ip -br addr`"
                    " or `ncclcheck env` on each node",
                    (r.rank,) if r.rank is not None else (),
                    (Evidence(r.file, r.first_line, "NCCL_SOCKET_IFNAME"),),
                )
            )
    return out[:20]


def _link_layer_findings(ranks: tuple[RankLog, ...]) -> list[Finding]:
    for r in ranks:
        layers = {link_layer(d) for d in r.net_devices}
        if {"IB", "RoCE"} <= layers:
            return [
                Finding(
                    logs_ids.MIXED_LINK_LAYERS,
                    "warning",
                    f"{r.name} uses InfiniBand and RoCE ports together ({' '.join(r.net_devices)})",
                    "restrict NCCL_IB_HCA to ports of one link layer (the ones on the fabric your peers use)",
                    (r.rank,) if r.rank is not None else (),
                    (Evidence(r.file, r.first_line, " ".join(r.net_devices)),),
                )
            ]
    return []


def _loopback_net(ranks: tuple[RankLog, ...]) -> list[Finding]:
    """NET transport between two ranks on the same host: intra-node traffic looped through the NIC."""
    host_of = {r.rank: r.host for r in ranks if r.rank is not None and r.host}
    seen = {
        (c.src, c.dst, c.transport): r
        for r in ranks
        for c in r.connections
        if c.kind == "NET" and host_of.get(c.src) and host_of.get(c.src) == host_of.get(c.dst)
    }
    pairs = sorted(seen)
    if not pairs:
        return []
    evidence = tuple(
        Evidence(r.file, r.first_line, f"{r.name}: {a} -> {b} via {t}") for (a, b, t), r in list(seen.items())[:5]
    )
    text = ", ".join(f"{a}->{b} via {t}" for a, b, t in pairs[:6])
    return [
        Finding(
            logs_ids.INTRA_NODE_NET,
            "warning",
            f"ranks on the same host talk through the network: {text} (P2P and SHM were not usable between them)",
            "check `nvidia-smi topo -m` (GPUs split across CPU sockets or PCIe roots) and NCCL_P2P_*/NCCL_SHM_DISABLE;"
            " the job now depends on NIC loopback working",
            tuple(sorted({p for a, b, _ in pairs for p in (a, b)})),
            evidence,
        )
    ]


# Collectives whose every rank passes as many elements (NCCL needs it): a rank with another count waits for data the
# others never send. (ALLGATHER, ALLTOALL, GATHER, SCATTER and send/recv may differ by rank or by role.)
SAME_SIZE_OPS = frozenset({"ALLREDUCE", "BROADCAST", "REDUCE", "_ALLGATHER_BASE", "_REDUCE_SCATTER_BASE"})


def _timeout_mismatch(timeouts: tuple[Timeout, ...]) -> list[Finding]:
    by_rank: dict[int, Timeout] = {}
    for t in timeouts:
        if t.rank is not None:
            by_rank.setdefault(t.rank, t)
    steps = {(t.pg, t.seq, t.op) for t in by_rank.values()}
    if len(steps) == 1:
        return _size_mismatch(by_rank)
    if len(steps) < 2 or len({pg for pg, _, _ in steps}) > 1:
        return []
    parts = "; ".join(f"rank {r} at SeqNum {t.seq} {t.op}" for r, t in sorted(by_rank.items())[:8])
    return [
        Finding(
            logs_ids.COLLECTIVE_MISMATCH,
            "error",
            f"ranks timed out in different collectives (desynchronised): {parts}",
            "the ranks issued different collectives or a different number of them: look for rank-dependent branches;"
            " TORCH_DISTRIBUTED_DEBUG=DETAIL or a Flight Recorder dump names the call sites",
            tuple(sorted(by_rank)),
            tuple(Evidence(t.file, t.line, f"SeqNum={t.seq}, OpType={t.op}") for t in by_rank.values())[:5],
        )
    ]


def _size_mismatch(by_rank: dict[int, Timeout]) -> list[Finding]:
    """Ranks that timed out in the same collective of the default group (known from the watchdog's group lines), one
    every rank must pass as many elements to, with different counts: a shape that differs by rank (the last batch,
    padding, a shard). The one rank whose count no other has,
    where all the others agree, is named; otherwise nobody."""
    if any(t.pg is None or t.subgroup for t in by_rank.values()):
        return []  # a group's instances (tp 0-1, tp 2-3) share its id, and their sizes may differ: only the world's
    sizes = {r: t.numel_in for r, t in by_rank.items() if t.numel_in is not None and t.op in SAME_SIZE_OPS}
    if len(set(sizes.values())) < 2:
        return []
    counts: dict[int, list[int]] = {}
    for r, n in sizes.items():
        counts.setdefault(n, []).append(r)
    odd = [rs[0] for rs in counts.values() if len(rs) == 1]
    culprits = tuple(odd) if len(counts) == 2 and len(odd) == 1 and len(sizes) >= 3 else ()
    t = next(iter(by_rank.values()))
    parts = "; ".join(f"rank {r} NumelIn={n}" for r, n in sorted(sizes.items())[:8])
    return [
        Finding(
            logs_ids.COLLECTIVE_SIZE_MISMATCH,
            "error",
            f"ranks timed out in the same collective (SeqNum {t.seq} {t.op}) with different sizes: {parts}",
            "the ranks passed tensors of different sizes to one collective: look for a shape that depends on the rank"
            " (the last batch, padding, a data shard); TORCH_DISTRIBUTED_DEBUG=DETAIL checks every collective's"
            " shapes across ranks and names the call site",
            tuple(sorted(sizes)),
            tuple(
                Evidence(x.file, x.line, f"SeqNum={x.seq}, OpType={x.op}, NumelIn={x.numel_in}")
                for x in by_rank.values()
            )[:5],
            culprits,
        )
    ]


RAS_BESIDE_TIMEOUT = (
    "; beside torch's watchdog timeout (SeqNum {seqs}): if this report was taken during the hang, every rank"
    " launched that collective and is alive, so the collective was launched everywhere and did not finish: look"
    " below the Python code (the NICs and links between the ranks, a GPU fault: `dmesg` Xid, a kernel that never"
    " returned), not for a rank that never called it"
)


FAILED_TOO = frozenset({logs_ids.PROCESS_TAKEN_DOWN, logs_ids.WATCHDOG_EXCEPTION})


def annotate_timeouts(
    findings: list[Finding],
    timeouts: tuple[Timeout, ...],
    ranks: tuple[RankLog, ...],
    seen: frozenset[int] = frozenset(),
    heard: frozenset[int] | None = None,
) -> list[Finding]:
    """Who reported a timeout and who did not (the suspects), for NCCL's watchdog and gloo's own timeouts.

    A rank whose other lines are here but that did not report the timeout is a suspect (a culprit). A rank
    that must exist (NCCL's nranks, a collective's group size, a number below a reporter's) but left no
    line at all is named as such: it may be the stuck one, or its log may be elsewhere (a partial log
    never makes a culprit of a rank it does not show). ``heard``: the ranks whose own output (a launcher's prefix, a
    rank its text names, torchrun's table) is here, of ``seen``; a rank seen only in NCCL's own lines (an
    NCCL_DEBUG_FILE, which never holds torch's watchdog) is no suspect of silence: its torch output is elsewhere.
    """
    known = max([r.nranks or 0 for r in ranks] + [len(seen)])
    # a collective smaller than the ranks these logs know cannot be the default group's, whatever the line names
    timeouts = tuple(_smaller_than_the_job(t, known) for t in timeouts)
    world = tuple(t for t in timeouts if not t.subgroup)
    # every rank whose own line says its collective timed out reported it, also in a line read as no Timeout (a
    # terminal cut it before "Timeout(ms)=", torch 2.3-2.5's "Timeout at NCCL work: N"): never a suspect of silence
    said = {r for f in findings if f.id == logs_ids.COLLECTIVE_TIMEOUT for r in f.ranks}
    nccl = sorted({t.rank for t in world if t.rank is not None} | said) if world else []
    gloo = sorted({r for f in findings if f.id == logs_ids.GLOO_TIMEOUT for r in f.ranks})
    several = any(f.id == logs_ids.SEVERAL_JOBS for f in findings)  # cross_checks' jobs_of: ranks not compared across
    # ranks whose own watchdog failed a collective and took them down did not sit silent, whichever collective it was
    # (the line does not say): never a suspect of "did not report it", and never cleared either
    failed = {r for f in findings if f.id in FAILED_TOO for r in f.ranks}
    implied = max([r.nranks or 0 for r in ranks] + [_group_size(t) for t in world] + [0])
    out = []
    for f in findings:
        if f.id == logs_ids.RAS_ALL_OK and nccl:
            f = dataclasses.replace(
                f, message=f.message + RAS_BESIDE_TIMEOUT.format(seqs=span(sorted({t.seq for t in timeouts})))
            )
        reporters = nccl if f.id == logs_ids.COLLECTIVE_TIMEOUT else gloo if f.id == logs_ids.GLOO_TIMEOUT else []
        if f.id == logs_ids.COLLECTIVE_TIMEOUT and not world and timeouts:
            f = dataclasses.replace(f, message=f.message + _subgroup_note(timeouts), culprits=())
        elif reporters and several:
            note = (
                f"; reported by rank(s) {span(reporters)}; these logs may hold more than one job (several-jobs):"
                " which rank they waited on cannot be told across them"
            )
            f = Finding(f.id, f.severity, f.message + note, f.fix, tuple(reporters), f.evidence, ())
        elif reporters:
            exist = set(range(max(implied, max(reporters) + 1))) | seen
            down = sorted((failed - set(reporters)) & exist)
            heard_of = seen if heard is None else heard
            suspects = sorted((heard_of - set(reporters) - failed) & exist)
            unseen = sorted(exist - seen - set(reporters) - failed)
            nccl_only = sorted((seen - heard_of - set(reporters) - failed) & exist)
            note = f"; reported by rank(s) {span(reporters)}"
            if down:
                note += (
                    f"; rank(s) {span(down)} did not sit silent: their watchdog took them down after a collective"
                    " failed there too (which one is not in these logs), so whether the others waited on them cannot"
                    " be told from these lines"
                )
            if suspects:
                note += f"; rank(s) {span(suspects)} did not report it: look at them first"
            if unseen:
                note += (
                    f"; rank(s) {span(unseen)} did not report it (no line of theirs is in these logs: stuck, or"
                    " their logs are elsewhere)"
                )
            if nccl_only:
                note += (
                    f"; rank(s) {span(nccl_only)} did not report it, but only NCCL's own lines of theirs are here (an"
                    " NCCL_DEBUG_FILE never holds torch's watchdog): their torch output is elsewhere, so whether they"
                    " were stuck cannot be told from these lines"
                )
            if not suspects and not unseen and not down and not nccl_only:
                note += "; no other rank's lines are in these logs: which rank they waited on cannot be told here"
            f = Finding(
                f.id,
                f.severity,
                f.message + note,
                f.fix,
                tuple(sorted({*reporters, *down, *suspects, *unseen, *nccl_only})),
                f.evidence,
                tuple(suspects),
            )
        out.append(f)
    return out


def _smaller_than_the_job(t: Timeout, known: int) -> Timeout:
    """A timeout with no group named whose collective spans fewer ranks than the logs know (its NumelOut/NumelIn): a
    sub-group's, and the "[Rank N]" its line gave is that group's rank, not the job's."""
    size = _group_size(t)
    if t.pg is not None or not 0 < size < known:
        return t
    return dataclasses.replace(t, pg="?", group_rank=t.rank, rank=None)


def _subgroup_note(timeouts: tuple[Timeout, ...]) -> str:
    """Who reported a timeout in a sub-group, and that the group's other members are not named: its ranks are the
    group's, not the job's, and which global ranks belong to it is not in these lines."""
    groups: dict[tuple[str | None, str | None], list[Timeout]] = {}
    for t in timeouts:
        groups.setdefault((t.pg, t.pg_desc), []).append(t)
    parts = []
    for (pg, desc), ts in list(groups.items())[:4]:
        size = max((_group_size(t) for t in ts), default=0)
        unnamed = pg == "?"  # no group named, but a collective smaller than the job
        name = f"a {size}-member process group" if unnamed else f"process group {pg}{f' ({desc})' if desc else ''}"
        who = sorted({t.group_rank for t in ts if t.group_rank is not None})
        glob = sorted({t.rank for t in ts if t.rank is not None})
        said = f"rank(s) {span(who)} of {name}" if who else f"a member of {name}"
        said += f" (global rank(s) {span(glob)})" if glob else f" ({_whose(who)} global rank is not in these lines)"
        if unnamed:
            said += " (not the default group: these logs know more ranks than its collective spans)"
        left = size - len(who)
        one = size > len(who) and bool(who) and left == 1
        others = (
            (f"the other {left} members" if left > 1 else "the other member")
            if size > len(who) and who
            else ("the other members")
        )
        seqs = span(sorted({t.seq for t in ts}))
        if one:
            parts.append(
                f"reported by {said}; the other member of that group is not in these logs: its own log (or a Flight"
                f" Recorder dump) says whether it reached SeqNum {seqs}"
            )
            continue
        parts.append(
            f"reported by {said}; {others} of that group are not in these logs: which of them it waited on cannot be"
            f" told here; their own logs (or a Flight Recorder dump) say whether they reached SeqNum {seqs}"
        )
    return "; " + "; ".join(parts)


def _whose(ranks: list[int]) -> str:
    return "its" if len(ranks) == 1 else "their"


def _group_size(t: Timeout) -> int:
    if t.numel_in and t.numel_out and t.numel_in != t.numel_out:
        big, small = max(t.numel_in, t.numel_out), min(t.numel_in, t.numel_out)
        return big // small if small and big % small == 0 else 0
    return 0
