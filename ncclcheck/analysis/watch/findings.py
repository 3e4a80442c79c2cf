"""Each watch finding, worded: what is wrong, on which ranks, who is to blame where the evidence says so, the fix."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ncclcheck.analysis.stacks import CUDA_SYNC, P2P
from ncclcheck.analysis.watch.chains import FIXES, sentence
from ncclcheck.analysis.watch.local import follow
from ncclcheck.model.findings import Finding, Severity
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ranks import span
from ncclcheck.model.stacks import short
from ncclcheck.model.waits import End, Hop
from ncclcheck.model.watch import RankView

Places = dict[tuple[str, str], list[RankView]]

MISMATCH_FIX = (
    "every rank must call the same collectives in the same order: look for a rank-dependent branch or "
    "data-dependent loop around those call sites; TORCH_DISTRIBUTED_DEBUG=DETAIL names the first mismatch, "
    "and the Flight Recorder dump (ncclcheck logs) shows each rank's sequence"
)
STRAGGLER_FIX = (
    "the others wait for it: see what it is doing (Enter on the rank shows its stack); a slow dataloader, "
    "an uneven batch, a checkpoint or eval on one rank only, or an exception swallowed in a loop; if it is "
    "legitimately slow, raise the collective timeout. A rank blocked in work.wait() on an async handle shows "
    "no collective in its Python stack: ncclcheck watch --native shows c10d's wait under it"
)
STALLED_FIX = (
    "every rank is in the same collective and nothing moves: the code agrees, the transport does not; run "
    "`ncclcheck env` on every node and `ncclcheck logs` on NCCL_DEBUG=INFO logs (IB/NET errors, wrong interface, "
    "firewall between nodes); different tensor sizes or groups behind the same call also hang like this: "
    "TORCH_DISTRIBUTED_DEBUG=DETAIL checks them"
)
UNSURE_P2P_FIX = (
    "the stacks cannot tell the code from the transport here: check first that every recv has its send posted "
    "before both sides block (two ranks receiving first deadlock: even ranks send first, or post both directions "
    "in one batch_isend_irecv); TORCH_DISTRIBUTED_DEBUG=DETAIL and a Flight Recorder dump (ncclcheck logs) show "
    "each rank's ops and peers; then the transport: `ncclcheck env` on every node, `ncclcheck logs` on "
    "NCCL_DEBUG=INFO logs"
)
REMOTE_FIX = (
    "watch the node(s) holding those ranks (ncclcheck watch there); the one not in this collective, or not "
    "moving, is the one to look at"
)
UNREADABLE_FIX = "let py-spy read every rank (see the note); until then the rank without a stack cannot be judged"
NO_PROGRESS_FIX = (
    "see where the main threads wait: ncclcheck watch --native (C frames), or py-spy dump --native --pid PID; "
    "without stacks, run ncclcheck watch with py-spy and ptrace permitted"
)


def place_key(v: RankView) -> tuple[str, str]:
    """Where a rank waits, as far as telling ranks apart goes: point-to-point ops pair a send with a recv from
    other lines, and DDP's backward runs from wherever the loop calls it, so their lines are not compared."""
    op = v.collective or ""
    if op in P2P or op == "wait":  # a request's wait: a point-to-point op (or a collective's) whose peers are unread
        return "send/recv", ""
    return op, "" if op in ("backward", CUDA_SYNC) else (v.call_site or "")


def group(views: Sequence[RankView]) -> Places:
    """Ranks by where they wait, the largest group first."""
    places: Places = defaultdict(list)
    for v in sorted(views, key=lambda v: v.rank):
        places[place_key(v)].append(v)
    return dict(sorted(places.items(), key=lambda kv: (-len(kv[1]), kv[1][0].rank)))


def who(v: RankView, hosts: bool) -> str:
    """``rank 3``, or ``rank 3 on node-7`` when the job's ranks seen here span several hosts."""
    return f"rank {v.rank} on {v.sample.host}" if hosts and v.sample.host else f"rank {v.rank}"


def where(places: Places, lead: bool = True) -> str:
    """``rank 0-2 wait in all_reduce at train.py:88; rank 3 waits in barrier at train.py:90``; without ``lead``,
    the first group's ranks are left for the caller to say."""
    parts = [
        f"rank {span([v.rank for v in g])} {'wait' if len(g) > 1 else 'waits'} in {op}"
        + (f" at {short(site)}" if site else "")
        for (op, site), g in places.items()
    ]
    if not lead and len(places) == 1:
        return parts[0].split(" ", 2)[2]
    return "; ".join(parts) if lead else "wait: " + "; ".join(parts)


def ranks(*groups: Sequence[RankView]) -> tuple[int, ...]:
    return tuple(sorted({v.rank for g in groups for v in g}))


def straggler(busy: Sequence[RankView], places: Places, window_s: float, limit: float, hosts: bool = False) -> Finding:
    """Ranks outside any collective while others wait, each followed inside to where its wait ends (its threads, its
    children, the kernel: ``analysis.watch.local``). An error once one of them has stood at one place for ``limit``,
    or at one position (its functions, a loop's line moving) while it waits on something (not computing); while its
    stack still changes as it computes it is slow, maybe not stuck: a warning."""
    waiters = [v for g in places.values() for v in g]
    quiet = min(v.quiet_s for v in waiters)
    chain = [
        Hop(
            f"rank {span([v.rank for v in waiters])}",
            f"{where(places, lead=False)} for rank {span([v.rank for v in busy])} (no progress for {quiet:.0f} s)",
        )
    ]
    ends: list[End] = []
    fixes: list[End] = []
    stuck = False
    for v in sorted(busy, key=lambda v: v.rank):
        followed = follow(v)
        if followed is not None and (followed.end != "unknown" or len(followed.hops) > 1):
            first, *rest = followed.hops
            details = [f"for {v.held_s:.0f} s"] if v.held_s >= 1 else []
            if followed.end == "computing" and v.main_cpu_percent is not None:
                details.append(f"its main thread is busy: {v.main_cpu_percent:.0f}% CPU")
            lasting = f" ({'; '.join(details)})" if details else ""
            lead = Hop(
                who(v, hosts),
                f"is not in any collective: it {first.what}{lasting}",
                first.site,
                first.code,
                first.function,
            )
            chain += [lead, *rest]
            ends.append(followed.end)
            fixes.append(followed.fix_class)
            stuck = stuck or v.still_s >= limit or (v.held_s >= limit and followed.end != "computing")
            continue
        at = f" at {short(v.call_site)}" if v.call_site else ""
        least = "at least " if v.since_s >= window_s - 1e-6 else ""  # there before watching began
        if v.since_s >= 1:
            how = f"has been in {v.doing}{at} for {least}{v.since_s:.0f} s{cpu_note(v)}"
        else:
            how = f"is busy in {v.doing}{at} (its stack changes: slow, not stuck, as far as the stacks show)"
        chain.append(Hop(who(v, hosts), f"is not in any collective: it {how}"))
        stuck = stuck or v.still_s >= limit
    severity: Severity = "error" if stuck else "warning"
    end = ends[0] if len(set(ends)) == 1 and len(ends) == len(busy) else None
    fix = FIXES[fixes[0]] if len(set(fixes)) == 1 and len(fixes) == len(busy) else STRAGGLER_FIX
    return Finding(
        watch_ids.STRAGGLER,
        severity,
        sentence(chain),
        fix,
        ranks=ranks(busy, waiters),
        culprits=ranks(busy),
        chain=tuple(chain),
        end=end,
    )


def cpu_note(v: RankView) -> str:
    if v.main_cpu_percent is None:
        return ""
    if v.main_cpu_percent < 1:
        return " (its main thread is idle: blocked on I/O, a lock, a queue or a sleep)"
    return f" (its main thread is busy: {v.main_cpu_percent:.0f}% CPU)"


def mismatch(places: Places, world_size: int, remote: Sequence[int], hosts: bool = False) -> Finding:
    """Ranks waiting in different collectives. The ranks outside the largest group are blamed only when it
    holds more than half of the whole job: ranks not seen here, dead or busy count against it. Ranks in
    point-to-point ops (or a request's wait) are no side of that vote: nobody is blamed by it."""
    groups = list(places.values())
    total = max(sum(len(g) for g in groups), world_size)
    by_op: dict[str, list[RankView]] = defaultdict(list)
    for (op, _), g in places.items():  # the majority is by collective; lines only tell the sides apart
        by_op[op] += g
    odd: tuple[int, ...] = ()
    if "send/recv" in by_op:  # point-to-point ops are not a side of a collective's vote
        blame = (
            "point-to-point ops against a collective: the stacks cannot tell which side is wrong (under `ncclcheck "
            "run` its hook records every rank's point-to-point peers)"
        )
    elif CUDA_SYNC in by_op:  # nor is a CUDA synchronisation: which collective it waits on is on the GPU
        blame = (
            "ranks at a CUDA synchronisation beside ranks in a collective call: with NCCL those at the synchronisation "
            "wait on a collective queued before it, which the stacks do not name (the Flight Recorder does: it tells "
            "a mismatch from a skipped call), so nobody is named"
        )
    else:
        odd, blame = odd_ones([[v.rank for v in g] for g in by_op.values()], total)
    if odd and hosts:
        blame += " (" + ", ".join(who(v, hosts) for g in by_op.values() for v in g if v.rank in odd) + ")"
    if not odd:
        blame += ": compare the call sites"
    unseen = f" (rank {span(remote)} on other nodes not seen from here)" if remote else ""
    kind = "mismatched collectives: " if CUDA_SYNC not in by_op else ""  # which collective a sync waits on: unknown
    message = f"{where(places)} — {kind}{blame}{unseen}"
    return Finding(watch_ids.MISMATCH, "error", message, MISMATCH_FIX, ranks=ranks(*groups), culprits=odd)


def subgroups_stuck(places: Places) -> Finding:
    """Every rank of the job waits in a collective, none moves, and they wait in different ones, some on sub-groups:
    whatever the groups, each group is missing a member that stands in another call. Which one skipped cannot be
    told without the groups' members (run's control plane, a Flight Recorder dump), so nobody is named."""
    message = (
        f"{where(places)} — mismatched collectives: every rank of the job waits in a collective and none moves, in "
        "different ones, some on sub-groups: whatever their groups, each waits for a member that stands in another "
        "call; group membership is not in the stacks, so which rank skipped its call cannot be told"
    )
    involved = ranks(*places.values())
    return Finding(watch_ids.MISMATCH, "error", message, MISMATCH_FIX, ranks=involved, culprits=())


def odd_ones(sides: Sequence[Sequence[int]], total: int) -> tuple[tuple[int, ...], str]:
    """The ranks outside the largest side, and the words blaming them, only when that side holds more than half of
    ``total`` (the whole job: ranks not seen count against it); else nobody, and the words saying so."""
    top = max(sides, key=len)
    if len(top) * 2 <= total:
        return (), "no side holds a majority of the job, so the stacks cannot tell which side is wrong"
    odd = tuple(sorted(r for side in sides if side is not top for r in side))
    return odd, f"rank {span(odd)} {'is' if len(odd) == 1 else 'are'} the odd one{'s' if len(odd) > 1 else ''} out"


def stalled(waiting: Sequence[RankView], limit: float) -> Finding:
    if all(v.collective == CUDA_SYNC for v in waiting):
        return gpu_stalled(waiting, limit)
    sites = sorted({short(v.call_site) for v in waiting})
    op = waiting[0].collective if place_key(waiting[0])[0] != "send/recv" else "send/recv"
    lines = f" at {sites[0]}" if len(sites) == 1 else f" from different lines ({', '.join(sites)})"
    said = arguments_said(waiting)
    matched = said == MATCHED  # the arguments rule out the send whose recv is never posted
    p2p = (
        "; with send/recv, also a send whose matching recv is never posted" if op == "send/recv" and not matched else ""
    )
    message = (
        f"rank {span([w.rank for w in waiting])} all wait in {op}{lines} with no progress for "
        f"{min(w.quiet_s for w in waiting):.0f} s (at least {limit:g} s: --stall){p2p}{said}"
    )
    unsure = any(
        v.args and (v.args.op == "wait" or v.args.pending or (v.args.op in P2P and v.args.p2p is None)) for v in waiting
    )
    fix = UNSURE_P2P_FIX if unsure else STALLED_FIX
    return Finding(watch_ids.STALLED, "error", message, fix, ranks=ranks(waiting), culprits=())


GPU_STALL_FIX = (
    "find the collective that did not complete and the rank behind it: the Flight Recorder "
    "(TORCH_NCCL_TRACE_BUFFER_SIZE=2000, then `ncclcheck logs` over the dumps: the rank whose entries stop first, or "
    "that never launched one), NCCL RAS (echo VERBOSE STATUS | nc localhost 28028: a rank whose op count is behind), "
    "the GPUs (nvidia-smi: a kernel spinning in place reads about 100 % at low power), then NCCL_DEBUG=INFO logs"
)


def gpu_stalled(waiting: Sequence[RankView], limit: float) -> Finding:
    """Every rank's host waits for its GPU's queue and none moves: with NCCL, a hang inside a collective queued
    before the synchronisation. A rank that never launched it (its code took another path), the transport, or a
    kernel that never returned: the stacks cannot tell which, so nobody is named and the network is not blamed."""
    sites = sorted({short(v.call_site) for v in waiting if v.call_site})
    lines = f" at {sites[0]}" if len(sites) == 1 else f" at different lines ({', '.join(sites)})" if sites else ""
    message = (
        f"rank {span([w.rank for w in waiting])} all wait at a CUDA synchronisation{lines} with no progress for "
        f"{min(w.quiet_s for w in waiting):.0f} s (at least {limit:g} s: --stall): with NCCL, a collective queued "
        "before it has not completed: a rank that did not launch it (its code took another path), the transport, or "
        "a kernel that never returned; the stacks cannot tell which"
    )
    return Finding(watch_ids.STALLED, "error", message, GPU_STALL_FIX, ranks=ranks(waiting), culprits=())


MATCHED = "; every send has its matching recv posted: the ranks agree, the transport does not deliver"


def arguments_said(waiting: Sequence[RankView]) -> str:
    """What the arguments read add to a stall: the same on every rank, or which ranks' were not read."""
    unread = [v.rank for v in waiting if v.args is None]
    if unread:
        return (
            f"; the arguments of rank {span(unread)} were not read (py-spy --locals), so a root, peer or group "
            "mismatch is not ruled out"
        )
    handles = [v.rank for v in waiting if v.args and v.args.op == "wait"]
    if handles:
        return (
            f"; rank {span(handles)} {'waits' if len(handles) == 1 else 'wait'} on an async handle (work.wait() of an "
            "isend, irecv or batch_isend_irecv) whose peers are not in the stack, so a send/recv deadlock (each "
            "receiving first) is not ruled out"
        )
    held = [v.rank for v in waiting if v.args and v.args.pending]
    if held:
        return (
            f"; rank {span(held)} {'holds' if len(held) == 1 else 'hold'} an async handle (an isend or irecv posted "
            "before this call, in flight to a peer the stack does not name), so whether every op has its match "
            "cannot be told"
        )
    unknown = [v.rank for v in waiting if v.args and v.args.op in P2P and v.args.p2p is None]
    if unknown:
        return (
            f"; the peers of rank {span(unknown)} are not known (a sub-group's group_src/group_dst, or a batch: "
            "the stack does not name them), so a send/recv mismatch is not ruled out"
        )
    said = sorted({v.args.text() for v in waiting if v.args and not v.args.p2p})
    if not said:
        return MATCHED
    if len(said) > 1:  # sub-groups' own roots, or calls that are not one another's
        return f"; the arguments read show no mismatch ({', '.join(said)})"
    return f"; every rank passes the same arguments ({said[0]})"


def waiting_remote(waiting: Sequence[RankView], remote: Sequence[int]) -> Finding:
    message = (
        f"{where(group(waiting))} (every rank on this node) with no progress for {min(w.quiet_s for w in waiting):.0f} s; "
        f"the ranks they wait on are elsewhere: rank {span(remote)} run on other nodes, not seen from here — this "
        "view cannot tell a stuck rank there from a transport problem"
    )
    return Finding(watch_ids.WAITING_REMOTE, "warning", message, REMOTE_FIX, ranks=ranks(waiting), culprits=())


def unreadable(unknown: Sequence[RankView], places: Places) -> Finding:
    reasons = "; ".join(f"rank {v.rank}: {v.sample.stack_error or 'no stack'}" for v in unknown)
    message = (
        f"{where(places)} with no progress; the stack of rank {span([v.rank for v in unknown])} could not be read "
        f"({reasons}): it may be the rank they wait on"
    )
    waiters = [v for g in places.values() for v in g]
    return Finding(watch_ids.UNREADABLE, "warning", message, UNREADABLE_FIX, ranks=ranks(unknown, waiters), culprits=())


def no_progress(live: Sequence[RankView]) -> Finding:
    """Nothing runs: no rank's frames changed, no collective bytes, no CPU on any main thread."""
    seconds = min(v.idle_s for v in live)
    if any(v.known for v in live):
        at = "; ".join(
            f"rank {span([v.rank for v in g])} at {short(g[0].call_site) if g[0].call_site else g[0].doing}"
            for g in _by_site(live).values()
        )
        message = (
            f"no rank moved for {seconds:.0f} s: each stands at the same line ({at}) with its main thread idle and no "
            "collective bytes on its sockets"
        )
        if all(v.collective == "backward" for v in live):
            message += "; all in DDP's backward: a hang, or a long backward (torch.compile's first step, CPU offload)"
        elif not any(v.collective for v in live):
            message += "; nothing in a collective, so a lock, a queue, a store wait or a sleep"
    else:
        message = (
            f"no rank moved for {seconds:.0f} s: no CPU on any main thread, no collective bytes on any rank's "
            "sockets; without stacks ncclcheck cannot tell whether they wait in a collective or on something else"
        )
    return Finding(watch_ids.NO_PROGRESS, "warning", message, NO_PROGRESS_FIX, ranks=ranks(live), culprits=())


def _by_site(views: Sequence[RankView]) -> dict[str, list[RankView]]:
    out: dict[str, list[RankView]] = defaultdict(list)
    for v in sorted(views, key=lambda v: v.rank):
        out[v.call_site or v.doing].append(v)
    return out
