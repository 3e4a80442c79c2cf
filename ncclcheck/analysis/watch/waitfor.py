"""Who waits on whom in point-to-point ops: ranks none of which can go on, whatever the network does, are a
deadlock in the code.

A ``recv`` from rank P waits on P, a ``send`` to P waits on P, unless P stands in the matching op towards it
(then the pair waits on the transport, not on each other). A batch (batch_isend_irecv, coalesced ops) waits
until all its ops are done: it is stuck when any one of them is. A ``recv`` from any source waits on every other
rank: one send from any of them frees it. A rank holding an async handle (an isend posted before its recv) may
already have sent what its peer waits for: it is left out, so no deadlock rests on it. The deadlocked ranks are the largest set in which every rank waits on
one of them; a rank that waits on someone outside it (a rank in a collective, busy, not seen) may still be freed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ncclcheck.model.args import P2P
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ranks import span
from ncclcheck.model.stacks import short
from ncclcheck.model.watch import RankView

TAG_FIX = "a send and its receive must pass the same tag (and the same group): make both sides compute it alike"
DEADLOCK_FIX = (
    "order the point-to-point ops so that one side sends while the other receives: even ranks send first and odd "
    "ranks receive first, or post both directions at once with dist.batch_isend_irecv([P2POp(isend, ...), "
    "P2POp(irecv, ...)]) (or isend/irecv, then wait on both)"
)


def unmatched(rank: int, ops: Mapping[int, tuple[P2P, ...]]) -> tuple[P2P, ...]:
    """The ops of ``rank`` that no other rank stands in the matching op for."""
    out = []
    for p in ops[rank]:
        if p.peer is None:  # from any source: any send to this rank matches it
            matched = any(
                q.op == "send" and q.peer == rank and p.matches(q) for r, qs in ops.items() if r != rank for q in qs
            )
        elif p.op == "send":
            matched = any(q.op == "recv" and q.peer in (rank, None) and p.matches(q) for q in ops.get(p.peer, ()))
        else:
            matched = any(q.op == "send" and q.peer == rank and p.matches(q) for q in ops.get(p.peer, ()))
        if not matched:
            out.append(p)
    return tuple(out)


def deadlocked(ops: Mapping[int, tuple[P2P, ...]], world: Sequence[int]) -> dict[int, P2P]:
    """Each deadlocked rank and the op it is stuck on (its peer deadlocked too); empty when there is none.

    ``ops``: what each rank standing still in point-to-point ops waits in; ``world``: every rank of the job."""
    needs = {r: unmatched(r, ops) for r in ops}
    stuck = {r for r, n in needs.items() if n}

    def blocks(p: P2P, me: int) -> bool:
        return p.peer in stuck if p.peer is not None else all(r in stuck for r in world if r != me)

    changed = True
    while changed:  # the largest set in which each rank waits on one of the set
        freed = {r for r in stuck if not any(blocks(p, r) for p in needs[r])}
        stuck -= freed
        changed = bool(freed)
    return {r: next(p for p in needs[r] if blocks(p, r)) for r in sorted(stuck)}


def p2p_deadlock(waiters: Sequence[RankView], world_size: int, hosts: bool = False) -> Finding | None:
    """The ``p2p-deadlock`` finding over the ranks standing still, from the P2P arguments read; None: no deadlock."""
    views = {v.rank: v for v in waiters if v.args is not None and v.args.p2p and not v.args.pending}
    ops = {r: v.args.p2p for r, v in views.items() if v.args is not None and v.args.p2p}
    stuck = deadlocked(ops, range(world_size))
    if not stuck:
        return _nobody_sends(waiters, world_size)
    tags = _tags(stuck, ops, views)
    if tags is not None:
        return tags
    parts = []
    for rank, op in stuck.items():
        v = views[rank]
        peer = "any rank" if op.peer is None else f"rank {op.peer}"
        at = f" at {short(v.call_site)}" if v.call_site else ""
        where = f" on {v.sample.host}" if hosts and v.sample.host else ""
        parts.append(f"rank {rank}{where} waits in {op.op} {'to' if op.op == 'send' else 'from'} {peer}{at}")
    rings = _cycles(stuck)
    cycle = f" in {'a cycle' if len(rings) == 1 else 'cycles'} {', '.join(f'({r})' for r in rings)}" if rings else ""
    message = (
        "; ".join(parts) + f" — a deadlock in the code: rank {span(list(stuck))} wait on one another{cycle} and "
        "none posts the op its peer needs; the network is not the cause"
    )
    ranks = tuple(stuck)
    roles = tuple(
        (r, f"waits in {op.op} on {'any rank' if op.peer is None else f'rank {op.peer}'}") for r, op in stuck.items()
    )
    return Finding(watch_ids.P2P_DEADLOCK, "error", message, DEADLOCK_FIX, ranks=ranks, culprits=ranks, roles=roles)


def _tags(
    stuck: Mapping[int, P2P], ops: Mapping[int, tuple[P2P, ...]], views: Mapping[int, RankView]
) -> Finding | None:
    """A send and a receive between two deadlocked ranks that face each other but pass different tags: the tags."""
    for rank, op in stuck.items():
        if op.op != "send" or op.peer is None:
            continue
        facing = next((q for q in ops.get(op.peer, ()) if q.op == "recv" and q.peer in (rank, None)), None)
        if facing is None or facing.tag is None or op.tag is None or facing.tag == op.tag:
            continue
        sender, receiver = views[rank], views[op.peer]
        message = (
            f"rank {rank} waits in send to rank {op.peer} with tag {op.tag} at {short(sender.call_site)}; rank "
            f"{op.peer} waits in recv from rank {rank} with tag {facing.tag} at {short(receiver.call_site)} — the tags "
            "differ: neither op completes; a bug in the code, not the network"
        )
        pair = tuple(sorted((rank, op.peer)))
        return Finding(watch_ids.P2P_TAG_MISMATCH, "error", message, TAG_FIX, ranks=pair, culprits=pair)
    return None


def _nobody_sends(waiters: Sequence[RankView], world_size: int) -> Finding | None:
    """Every rank of the job blocked in ``recv``: nobody is left to send, whoever each waits on (a sub-group's
    ``group_src`` names no global rank). Only where every rank's locals were read and none holds an async handle:
    an isend posted before the recv may be what its peer waits for."""
    recvs = sorted((v for v in waiters if v.collective == "recv"), key=lambda v: v.rank)
    if world_size < 2 or len(recvs) != world_size or any(v.args is None or v.args.pending for v in recvs):
        return None
    parts = "; ".join(
        f"rank {v.rank} waits in {_recv(v)}" + (f" at {short(v.call_site)}" if v.call_site else "") for v in recvs
    )
    message = (
        f"{parts} — a deadlock in the code: every rank of the job waits to receive and none sends; the network is "
        "not the cause"
    )
    ranks = tuple(v.rank for v in recvs)
    roles = tuple((v.rank, f"waits in {_recv(v)}") for v in recvs)
    return Finding(watch_ids.P2P_DEADLOCK, "error", message, DEADLOCK_FIX, ranks=ranks, culprits=ranks, roles=roles)


def _recv(v: RankView) -> str:
    return v.args.text() if v.args else "recv"


def _cycles(stuck: Mapping[int, P2P]) -> list[str]:
    """``0 → 1 → 0`` for each cycle of specific peers, from its smallest rank; none where an any-source recv
    breaks the chain."""
    out: list[str] = []
    seen: set[int] = set()
    for start in sorted(stuck):
        path: list[int] = []
        rank: int | None = start
        while rank is not None and rank in stuck and rank not in seen and rank not in path:
            path.append(rank)
            rank = stuck[rank].peer
        if rank is not None and rank in path:
            out.append(" → ".join(str(r) for r in [*path[path.index(rank) :], rank]))
        seen.update(path)
    return out
