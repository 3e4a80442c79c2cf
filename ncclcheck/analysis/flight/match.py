"""Match Flight Recorder entries across ranks and say where the ranks diverged.

Entries are matched per process group by ``collective_seq_id`` (p2p: the k-th send on a channel
with the k-th recv). At the first divergent sequence number of a group the ranks either called
different ops, with different sizes or dtypes, or some never got there; later entries of that
group are not compared (pairing after a divergence is unreliable). Works for gloo dumps too:
their ``pg_config`` does not name the groups (membership is rebuilt) and ``retired`` stands for
completion.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ncclcheck.analysis.flight.blame import Blame, Stuck, blame
from ncclcheck.model.findings import Evidence, Finding, by_severity
from ncclcheck.model.flight import DumpInfo, FlightReport, FrDump, FrEntry, GroupReport, RankStep, Unreadable
from ncclcheck.model.ids import flight as flight_ids
from ncclcheck.model.ranks import span

NOT_JOINED_FIX = (
    "find why those ranks never reached that call: a rank-dependent branch or early exit that skips a "
    "collective, uneven data (one rank runs out of batches first), or a rank stuck or crashed before it; "
    "look at its stack now (ncclcheck watch, py-spy dump --pid) or its log"
)
MISMATCH_FIX = (
    "every rank of a process group must issue the same collectives, in the same order, with the same "
    "sizes and dtypes: look for rank-dependent branches, data-dependent shapes or a different model/config "
    "on those ranks around the call sites shown; TORCH_DISTRIBUTED_DEBUG=DETAIL checks this on every call"
)
SIZE_FREE = frozenset({"all_to_all", "alltoall", "alltoall_base", "scatter", "gather"})


def analyse(
    dumps: Sequence[FrDump], unreadable: Sequence[Unreadable] = (), expected: Sequence[int] = ()
) -> FlightReport:
    """Compare every rank's dump, group by group; ``expected``: ranks known to exist (asked, but silent)."""
    by_rank: dict[int, FrDump] = {}
    for dump in sorted(dumps, key=_richness):  # a rank dumped twice (pickle and JSON): keep the one with stacks
        by_rank[dump.rank] = dump
    by_rank = dict(sorted(by_rank.items()))
    groups = _groups(by_rank)
    named = [u.rank + 1 for u in unreadable if u.rank is not None] + [r + 1 for r in expected]
    world = max([r + 1 for members in groups.values() for r in members] + [r + 1 for r in by_rank] + named + [0])
    missing = tuple(r for r in range(world) if r not in by_rank)
    findings: list[Finding] = list(_dump_findings(missing, unreadable, world))
    reports, stuck = [], []
    waits_on: dict[int, tuple[int, ...]] = {}  # a rank waiting in a p2p op nobody matched: on whom
    for (pg, desc), members in sorted(groups.items()):
        report, found = _group(pg, desc, members, by_rank)
        reports.append(report)
        if isinstance(found, Stuck):
            stuck.append(found)
        else:
            findings += found
        p2p = _p2p(pg, members, [by_rank[r] for r in members if r in by_rank])
        findings += p2p
        waits_on.update({r: f.culprits for f in p2p for r in f.ranks if r not in f.culprits})
    findings += [
        _not_joined(s, b, by_rank)
        for s, b in zip(stuck, blame(stuck, by_rank, _unseen(groups, by_rank, missing), waits_on))
    ]
    findings.sort(key=lambda f: min((e.line for e in f.evidence if e.line > 0), default=1 << 62))  # earliest op first
    infos = tuple(DumpInfo(d.file, d.rank, d.version, len(d.entries)) for d in by_rank.values())
    return FlightReport(infos, tuple(unreadable), world, missing, tuple(reports), by_severity(tuple(findings)))


def _unseen(
    groups: dict[tuple[str, str], tuple[int, ...]], by_rank: dict[int, FrDump], missing: tuple[int, ...]
) -> dict[str, tuple[int, ...]]:
    """Per group, the ranks whose part in it the dumps cannot show: members without a dump; where pg_config does not
    name the group (gloo), also any rank without one, and, for a group only one rank reports (gloo lists a group
    only once the rank used it), every other rank."""
    named = {name for d in by_rank.values() for name, _ in d.pg_ranks}
    out = {}
    for (pg, _), ranks in groups.items():
        unseen = {r for r in ranks if r not in by_rank}
        if pg not in named:
            unseen |= set(missing) | (set(by_rank) - set(ranks) if len(ranks) == 1 else set())
        out[pg] = tuple(sorted(unseen))
    return out


def _richness(dump: FrDump) -> tuple[int, int]:
    return sum(1 for e in dump.entries if e.call_site), len(dump.entries)


def _groups(by_rank: dict[int, FrDump]) -> dict[tuple[str, str], tuple[int, ...]]:
    """Members of each group: pg_config where it names the group, else the default group spans the world."""
    configured: dict[str, tuple[int, ...]] = {}
    for dump in by_rank.values():
        configured.update(dump.pg_ranks)
    widest = max(configured.values(), key=len, default=())
    seen: dict[str, set[int]] = defaultdict(set)
    descs: dict[str, str] = {}
    for dump in by_rank.values():
        for e in dump.entries:
            seen[e.pg].add(dump.rank)
            descs.setdefault(e.pg, e.pg_desc)
    out = {}
    for pg, desc in descs.items():
        members = configured.get(pg) or (configured.get(desc) if desc else None)
        if not members and (desc == "default_pg" or pg == "0"):
            members = tuple(sorted(set(widest) | set(by_rank)))
        out[(pg, desc)] = members or tuple(sorted(seen[pg]))
    return out


def _dump_findings(missing: tuple[int, ...], unreadable: Sequence[Unreadable], world: int) -> list[Finding]:
    out = []
    if missing:
        out.append(
            Finding(
                flight_ids.FR_DUMPS_MISSING,
                "warning",
                f"no Flight Recorder dump from rank {span(missing)} (of {world}); their part cannot be checked, "
                "and a rank that never dumped is often the one that was dead or stuck",
                "collect <TORCH_FR_DUMP_TEMP_FILE><rank> from every node (default ~/.cache/torch/comm_lib_trace_rank_N); "
                "a rank with no dump: read its node's log and stack (py-spy dump)",
                missing,
            )
        )
    for bad in unreadable:
        out.append(
            Finding(
                flight_ids.FR_DUMP_UNREADABLE,
                "warning",
                f"{bad.file}: {bad.reason}",
                "re-collect the dump; a dump cut short usually means the process was killed "
                "while writing it (raise TORCH_FR_WAIT_TIMEOUT_DUMP_MILSEC)",
                evidence=(Evidence(bad.file, 0, bad.reason),),
            )
        )
    return out


def _group(
    pg: str, desc: str, members: tuple[int, ...], by_rank: dict[int, FrDump]
) -> tuple[GroupReport, list[Finding] | Stuck]:
    dumped = [r for r in members if r in by_rank]
    seqs = {r: {e.seq: e for e in by_rank[r].entries if e.pg == pg and not e.is_p2p} for r in dumped}
    last = {r: _last_enqueued(by_rank[r], pg, seqs[r]) for r in dumped}
    starts = [min(s) for s in seqs.values() if s]
    found: list[Finding] | Stuck = []
    divergent = None
    for seq in range(max(starts, default=0), max(last.values(), default=-1) + 1):
        present = {r: s[seq] for r, s in seqs.items() if seq in s}
        found = _compare(pg, desc, seq, present, [r for r in dumped if last[r] < seq], by_rank)
        if found:
            divergent = seq
            break
    else:
        found = _stalled(pg, desc, seqs, dumped, by_rank)
    steps = tuple(_step(r, by_rank[r], pg, seqs[r], last[r]) for r in dumped)
    return GroupReport(pg, desc, members, divergent, steps), found


def _last_enqueued(dump: FrDump, pg: str, seqs: dict[int, FrEntry]) -> int:
    counters = [p.enqueued for p in dump.progress if p.pg == pg]
    return max(counters + list(seqs) + [0])


def _step(rank: int, dump: FrDump, pg: str, seqs: dict[int, FrEntry], last: int) -> RankStep:
    progress = next((p for p in dump.progress if p.pg == pg), None)
    entry = seqs.get(max(seqs)) if seqs else None
    return RankStep(
        rank,
        last,
        progress.started if progress else -1,
        progress.completed if progress else max((s for s, e in seqs.items() if e.state == "completed"), default=-1),
        entry.op if entry else "",
        entry.call_site if entry else "",
    )


def _named(pg: str, desc: str) -> str:
    return f"process group {pg}{f' ({desc})' if desc and desc != 'undefined' else ''}"


def _compare(
    pg: str, desc: str, seq: int, present: dict[int, FrEntry], behind: list[int], by_rank: dict[int, FrDump]
) -> list[Finding] | Stuck:
    """Findings at one sequence number: differing op, sizes or dtypes; or ranks that never got there (judged once
    every group is read: they may wait in another group's collective)."""
    where = f"{_named(pg, desc)}, collective #{seq}"
    # (finding, what must agree, what the message shows of it)
    checks: list[tuple[str, Callable[[FrEntry], object], Callable[[FrEntry], str]]] = [
        (flight_ids.FR_OP_MISMATCH, lambda e: e.op, lambda e: ""),
        (flight_ids.FR_SIZE_MISMATCH, _sizes, lambda e: f" with {_shape(e)}"),
        (flight_ids.FR_DTYPE_MISMATCH, _dtypes, lambda e: f" with {_dtype(e)}"),
    ]
    for fid, key, detail in checks:
        odd = _odd_ones({r: key(e) for r, e in present.items()})
        if odd != ():
            return [_mismatch(fid, where, present, odd or (), key, detail, by_rank)]
    if behind and present and not all(e.state == "completed" for e in present.values()):
        return Stuck(pg, desc, seq, tuple(sorted(present.items())), tuple(behind))
    return []


def _sizes(e: FrEntry) -> object:
    if e.op in SIZE_FREE:
        return None
    return (e.input_sizes, e.output_sizes)


def _dtypes(e: FrEntry) -> object:
    return frozenset(e.input_dtypes) | frozenset(e.output_dtypes)


def _odd_ones(values: dict[int, object]) -> tuple[int, ...] | None:
    """Ranks whose value differs from a strict majority's: () when all agree, None when they differ and no value
    is held by more than half the ranks (a tie: the dumps cannot tell which side is wrong)."""
    counts = Counter(values.values())
    if len(counts) < 2:
        return ()
    top, held = counts.most_common(1)[0]
    if held * 2 <= len(values):
        return None
    return tuple(sorted(r for r, v in values.items() if v != top))


def _shape(e: FrEntry) -> str:
    ins = ",".join("x".join(map(str, s)) or "scalar" for s in e.input_sizes)
    outs = ",".join("x".join(map(str, s)) or "scalar" for s in e.output_sizes)
    return f"in [{ins}] out [{outs}]"


def _dtype(e: FrEntry) -> str:
    return "/".join(sorted(set(e.input_dtypes) | set(e.output_dtypes))) or "no dtype"


def _mismatch(
    fid: str,
    where: str,
    present: dict[int, FrEntry],
    odd: tuple[int, ...],
    key: Callable[[FrEntry], object],
    detail: Callable[[FrEntry], str],
    by_rank: dict[int, FrDump],
) -> Finding:
    """``odd``: the ranks out of step with a strict majority; () on a tie, where nobody is blamed."""
    variants: dict[object, list[int]] = defaultdict(list)
    for r in sorted(present):
        variants[key(present[r])].append(r)
    parts = []
    for rs in variants.values():
        e = present[rs[0]]
        parts.append(f"rank {span(rs)} called {e.op}{detail(e)}{f' at {e.call_site}' if e.call_site else ''}")
    if odd:
        blame = f"rank {span(odd)} {'is' if len(odd) == 1 else 'are'} out of step with the majority"
    else:
        blame = "no value is held by a majority, so the dumps cannot tell which side is wrong: compare both call sites"
    message = f"{where}: " + "; ".join(parts) + f" ({blame})"
    return Finding(
        fid,
        "error",
        message,
        MISMATCH_FIX,
        tuple(sorted(present)),
        _evidence(present, sorted(present), by_rank),
        culprits=odd,
    )


def _not_joined(stuck: Stuck, why: Blame, by_rank: dict[int, FrDump]) -> Finding:
    present = dict(stuck.present)
    first = present[min(present)]
    site = f" at {first.call_site}" if first.call_site else ""
    waits = dict(why.waits)
    idle = [r for r in stuck.behind if r not in waits]
    said = [f"rank {span(idle)} never issued it (not all ranks joined the collective)"] if idle else []
    for r, e in sorted(waits.items()):
        there = f" at {e.call_site}" if e.call_site else ""
        said.append(f"rank {r} never joined it: it waits in {_op(e)} of {_named(e.pg, e.pg_desc)}{there}")
    for r, n, usual in why.skipped:
        said.append(
            f"rank {r} entered that collective after {n} collective(s) in its other groups since the previous one "
            f"of that group, where at least {usual} came before it every earlier time: it skipped one"
        )
    if why.unseen:
        said.append(
            f"it waits there for rank {span(why.unseen)}, whose part in that group the dumps do not show: nobody can be named"
        )
    elif why.explained:
        said.append(f"it waits for rank {span(why.culprits)} there; the others are not to blame")
    elif any(e.is_p2p for e in waits.values()) and not why.culprits:
        said.append(
            "the send or recv it waits in cannot be paired with its peer's from the recorders: nobody can be named"
        )
    elif waits and not why.culprits:
        said.append(
            "the ranks wait for each other: they issued the collectives of two groups in different orders, "
            "and the dumps cannot tell which order is right"
        )
    message = (
        f"{_named(stuck.pg, stuck.desc)}, collective #{stuck.seq}: rank {span(sorted(present))} entered "
        f"{first.op}{site} and {'is' if len(present) == 1 else 'are'} waiting; " + "; ".join(said)
    )
    return Finding(
        flight_ids.FR_NOT_JOINED,
        "info" if why.explained else "error",
        message,
        NOT_JOINED_FIX,
        tuple(sorted([*present, *stuck.behind])),
        _evidence(present, sorted(present)[:2], by_rank)
        + tuple(
            Evidence(by_rank[r].file, e.record_id, f"rank {r}: waits in {e.lib}:{_op(e)} of group {e.pg}")
            for r, e in sorted(waits.items())
        ),
        culprits=() if why.explained else why.culprits,
    )


def _op(e: FrEntry) -> str:
    """``all_reduce #4``; a p2p op by its channel in the group's ranks: ``recv 1<-0``."""
    return f"{e.op} {e.peer}" if e.is_p2p else f"{e.op} #{e.seq}"


def _stalled(
    pg: str, desc: str, seqs: dict[int, dict[int, FrEntry]], dumped: list[int], by_rank: dict[int, FrDump]
) -> list[Finding]:
    """Everyone entered the same last collective and nobody finished it. What each GPU did with it says where the
    hang is, where NCCL recorded when collectives start on the GPU (start events: TORCH_NCCL_ENABLE_TIMING=1):
    - some ranks' GPUs started it, the others' only have it queued: those GPUs never reached it, their stream still
      busy with work queued before it (a long or hung kernel, a wait on another group): they are the culprits;
    - every rank's GPU started it: the collective itself does not finish: the transport;
    - no GPU started it, or no start is recorded at all: the dumps cannot tell a busy GPU from the transport."""
    if not dumped or not all(seqs[r] for r in dumped):
        return []
    tops = {r: seqs[r][max(seqs[r])] for r in dumped}
    if len({e.seq for e in tops.values()}) != 1 or any(e.state == "completed" for e in tops.values()):
        return []
    if len(dumped) < 2 or any(e.lib == "gloo" for e in tops.values()):
        return []  # a gloo entry not yet retired is normal at dump time; only NCCL's states say "stuck"
    e = tops[dumped[0]]
    where = f"{_named(pg, desc)}, collective #{e.seq} ({e.op})"
    started = [r for r in dumped if tops[r].state == "started"]
    behind = {r: b for r in dumped if tops[r].state != "started" and (b := _behind(by_rank[r], tops[r])) is not None}
    queued = [r for r in dumped if tops[r].state != "started" and r not in behind]
    if started and behind and not queued:  # each waits on another group's collective: that group says why
        told = "; ".join(
            f"rank {r} has it queued behind process group {b.pg}'s {b.op} #{b.seq} ({b.state}, not completed)"
            for r, b in sorted(behind.items())
        )
        message = (
            f"{where}: rank {span(started)}'s GPU started it and waits; {told}: the hang is in that collective, "
            "whose group's own finding says why"
        )
        fix = "read the finding of the group named (its ranks' calls, or its transport) first: this one waits on it"
        return [
            Finding(flight_ids.FR_STALLED, "warning", message, fix, tuple(dumped), _evidence(tops, dumped[:2], by_rank))
        ]
    if started and queued:
        message = (
            f"{where}: rank {span(started)}'s GPU started it and waits; rank {span(queued)} queued it, but "
            f"{'its GPU' if len(queued) == 1 else 'their GPUs'} never started it: the stream is still busy with work "
            "queued before it"
        )
        shown = [queued[0], started[0]]
        return [
            Finding(
                flight_ids.FR_NOT_STARTED,
                "error",
                message,
                NOT_STARTED_FIX,
                tuple(dumped),
                _evidence(tops, shown, by_rank),
                culprits=tuple(queued),
            )
        ]
    if started:
        message = f"{where}: every rank's GPU started it, with matching arguments, and none completed it"
        fix = (
            "the code agrees; the transport does not: run ncclcheck env on every node and ncclcheck logs on the"
            " NCCL_DEBUG=INFO logs (IB/NET errors, a wrong interface)"
        )
    elif _start_events(by_rank, pg, dumped):
        message = (
            f"{where}: every rank queued it, with matching arguments, and no rank's GPU started it: each stream is "
            "still busy with work queued before it"
        )
        fix = NOT_STARTED_FIX
    else:
        message = (
            f"{where}: every rank queued it, with matching arguments, and none completed it; these dumps hold no start"
            " events, so a rank whose GPU is still busy with work queued before it and a transport that does not"
            " deliver look the same here"
        )
        fix = (
            "rerun under `ncclcheck run` (it records start events) or with TORCH_NCCL_ENABLE_TIMING=1, and the dumps"
            " tell the two apart; meanwhile `nvidia-smi` (a GPU busy at 100% on one rank) and ncclcheck logs on the"
            " NCCL_DEBUG=INFO logs (IB/NET errors)"
        )
    return [
        Finding(flight_ids.FR_STALLED, "warning", message, fix, tuple(dumped), _evidence(tops, dumped[:2], by_rank))
    ]


NOT_STARTED_FIX = (
    "find what those ranks queued on the GPU before this collective: a kernel that never ends (a spin-wait, streams"
    " waiting on each other), a very slow one (a slow or throttled GPU: ncclcheck env, nvidia-smi -q), or a collective"
    " of another process group it waits on (its Flight Recorder entries); `py-spy dump --native` shows the host thread"
)


def _behind(dump: FrDump, entry: FrEntry) -> FrEntry | None:
    """The collective of another group this rank issued before ``entry`` and that has not finished, if any: what its
    GPU may still be busy with (a collective waited on makes the next one queue behind it)."""
    return next(
        (
            e
            for e in reversed(dump.entries)
            if e.record_id < entry.record_id and e.pg != entry.pg and not e.is_p2p and e.state != "completed"
        ),
        None,
    )


def _start_events(by_rank: dict[int, FrDump], pg: str, dumped: list[int]) -> bool:
    """Whether the ranks record when collectives start on the GPU: a group's last started collective counted (it
    stays -1 without start events, while collectives complete)."""
    return any(p.started >= 0 for r in dumped for p in by_rank[r].progress if p.pg == pg)


def _evidence(entries: dict[int, FrEntry], ranks: list[int], by_rank: dict[int, FrDump]) -> tuple[Evidence, ...]:
    return tuple(
        Evidence(
            by_rank[r].file,
            entries[r].record_id,
            f"rank {r}: {entries[r].lib}:{entries[r].op} #{entries[r].seq} {_shape(entries[r])} "
            f"{_dtype(entries[r])} {_state(entries[r])} {entries[r].call_site}".rstrip(),
        )
        for r in ranks[:4]
    )


def _state(e: FrEntry) -> str:
    return e.state if e.finished or e.state != "completed" else "completed (never retired: not launched)"


def _p2p(pg: str, members: tuple[int, ...], dumps: list[FrDump]) -> list[Finding]:
    """The k-th send on a channel pairs with the k-th recv; a send nobody receives (or a recv nobody sends) hangs.
    A channel's ends are the group's own ranks (NCCL writes ``send 1->2`` in the group's numbering): ``members`` in
    the group's order gives their global ranks.
    Counting pairs them only where both ranks' recorders hold the group's p2p from its first op; where one lost its
    start (a wrapped ring buffer, an agent's tail), only the newest op of each side is compared: one waiting while
    the other side's newest on that channel completed."""
    sends: dict[tuple[int, int], list[tuple[int, FrEntry]]] = defaultdict(list)
    recvs: dict[tuple[int, int], list[tuple[int, FrEntry]]] = defaultdict(list)
    whole: dict[int, bool] = {}
    for dump in dumps:
        mine = [e for e in dump.entries if e.pg == pg and e.is_p2p]
        whole[dump.rank] = min((e.p2p_seq for e in mine), default=1) <= 1
        for e in mine:
            send = e.op.startswith("send")
            if (channel := _channel(e, members)) is not None and channel[0 if send else 1] == dump.rank:
                (sends if send else recvs)[channel].append((dump.rank, e))  # (else the group's order is not known)
    waits: list[_Unmatched] = []
    by = {d.rank: d for d in dumps}
    for channel in sorted(set(sends) | set(recvs)):
        src, dst = channel
        s, r = sends[channel], recvs[channel]
        if src not in whole or dst not in whole:
            continue
        number = ""
        if whole[src] and whole[dst]:
            if len(s) == len(r):
                continue
            extra = s[len(r)] if len(s) > len(r) else r[len(s)]
            number = f" #{min(len(s), len(r)) + 1}"
        elif s and r and s[-1][1].finished != r[-1][1].finished:
            extra = s[-1] if r[-1][1].finished else r[-1]
        else:
            continue  # a side with none of its ops on this channel in its window, or both waiting: cannot pair
        if extra[1].finished:
            continue
        peer = dst if extra[1].op.startswith("send") else src
        site = f" at {extra[1].call_site}" if extra[1].call_site else ""
        said = (
            f"rank {extra[0]} posted {extra[1].op}{number} on channel {src}->{dst}{site}; "
            f"rank {peer} never posted the matching {'recv' if extra[1].op.startswith('send') else 'send'}"
        )
        waits.append(_Unmatched(extra[0], peer, said, _evidence({extra[0]: extra[1]}, [extra[0]], by)))
    return _unmatched(pg, waits)


@dataclass(frozen=True)
class _Unmatched:
    """A p2p op nobody matched: the rank that posted it waits on ``peer``."""

    rank: int
    peer: int
    said: str
    evidence: tuple[Evidence, ...]


def _unmatched(pg: str, waits: list[_Unmatched]) -> list[Finding]:
    """A finding per op nobody matched, blaming the peer that never posted its side; ops that wait on one another
    in a cycle (rank 0's recv from 1, rank 1's recv from 0) are one deadlock, every rank in it to blame."""
    cycle = _cycle({w.rank: w.peer for w in waits})
    told = [next(w for w in waits if w.rank == r) for r in cycle]
    out = []
    if told:
        order = " → ".join(str(r) for r in [*cycle, cycle[0]])
        message = (
            f"process group {pg}: {'; '.join(w.said for w in told)} — a deadlock in the code: rank "
            f"{span(sorted(cycle))} wait on one another in a cycle ({order}) and none posts the op its peer needs; "
            "the network is not the cause"
        )
        every = tuple(sorted(cycle))
        evidence = tuple(e for w in told for e in w.evidence)
        out.append(
            Finding(flight_ids.FR_P2P_UNMATCHED, "error", message, MISMATCH_FIX, every, evidence, culprits=every)
        )
    for w in waits:
        if w not in told:
            out.append(
                Finding(
                    flight_ids.FR_P2P_UNMATCHED,
                    "error",
                    f"process group {pg}: {w.said}",
                    MISMATCH_FIX,
                    tuple(sorted({w.rank, w.peer})),
                    w.evidence,
                    culprits=(w.peer,),
                )
            )
    return out


def _cycle(on: dict[int, int]) -> list[int]:
    """The first cycle in who waits on whom (rank -> the rank it waits on), from the lowest rank in it; [] if none."""
    for start in sorted(on):
        path, r = [start], on[start]
        while r in on and r not in path:
            path.append(r)
            r = on[r]
        if r in path and len(path) - path.index(r) > 1:
            return path[path.index(r) :]
    return []


def _channel(e: FrEntry, members: tuple[int, ...]) -> tuple[int, int] | None:
    """(src, dst) as global ranks from ``send 1->2`` / ``recv 3<-0`` (group ranks); None for a recv from any source,
    or a group rank past the members known."""
    arrow = "->" if "->" in e.peer else "<-"
    a, _, b = e.peer.partition(arrow)
    if not (a.isdigit() and b.isdigit()) or max(int(a), int(b)) >= len(members):
        return None
    src, dst = (int(a), int(b)) if arrow == "->" else (int(b), int(a))
    return members[src], members[dst]
