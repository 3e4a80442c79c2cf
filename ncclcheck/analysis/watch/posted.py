"""Point-to-point ops whose match is never posted, from what ``ncclcheck run``'s hook recorded of every rank (its
ops in flight, their peers, tags and lines, and how many it posted per peer): a wrong peer, a wrong tag, one
receive (or send) too many. A cycle of ops waiting on one another is ``waitfor``'s; what is left here are ops no
rank will ever match.

- A send to X unmatched while another rank waits to receive from its sender: the sender's destination is wrong
  (it sends to X where the other expects it). The same the other way round for a receive from the wrong source.
- A send and a receive between the same two ranks, pending, with different tags: the tags differ (both named: the
  record cannot tell which tag is wrong).
- A receive from X unmatched, X having sent fewer messages than the receiver posted receives from it, with an
  earlier receive from X still pending (an ``irecv`` never waited on took the message): one receive too many; and
  the other way round. Counts alone, without such a request, cannot tell which side is wrong.
- Otherwise an unmatched op whose peer stands in something else: the two wait on each other (named, nobody blamed).
Only where every rank an op names is seen standing still with its record read: a peer still computing may post
its op yet (a straggler, not this).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ncclcheck.analysis.watch.chains import FIXES, sentence
from ncclcheck.analysis.watch.waitfor import TAG_FIX
from ncclcheck.model.args import PostedOp, PostedOps
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ranks import span
from ncclcheck.model.stacks import short
from ncclcheck.model.waits import Hop
from ncclcheck.model.watch import RankView

PEER_FIX = (
    "a point-to-point op names a peer that never posts its match: check how the code computes each op's peer "
    "(a pipeline's next and previous stage, rank ± 1 at the ends, a group rank passed where a global rank is "
    "expected: dst/src are global ranks, group_dst/group_src ranks of the group)"
)
COUNT_FIX = (
    "each message has exactly one receive: every irecv/isend must be waited on (or its request kept and waited "
    "later), and both sides must post the same number of ops per peer; a request dropped unwaited can take the "
    "message a later receive waits for"
)


@dataclass(frozen=True)
class _Op:
    rank: int
    op: PostedOp


def unmatched(waiters: Sequence[RankView], views: Sequence[RankView]) -> Finding | None:
    """The finding for point-to-point ops that no rank will match, or None."""
    known = {v.rank: v.sample.p2p for v in views if v.sample.p2p is not None}
    still = {v.rank: v for v in waiters}
    lonely: list[_Op] = []
    tags: list[tuple[_Op, _Op]] = []
    for rank, ops in known.items():
        if rank not in still:
            continue
        for op in sorted(ops.pending(), key=lambda o: -o.seq):  # the op it waits in now first
            if op.peer is None:
                continue  # from any source: any send to it would do
            theirs = known.get(op.peer)
            if theirs is None or op.peer not in still:
                return None  # its peer is not seen standing still with its record: it may post the match yet
            match = [q for q in theirs.pending() if q.op != op.op and q.peer in (rank, None) and q.group == op.group]
            if not match:
                lonely.append(_Op(rank, op))
            elif not any(q.tag == op.tag for q in match) and op.op == "send":
                tags.append((_Op(rank, op), _Op(op.peer, match[0])))
    if tags:
        return _tags(tags, still)
    if not lonely:
        return None
    return _wrong_peer(lonely, still) or _counts(lonely, known, still) or _each_other(lonely, still)


def _words(o: _Op) -> str:
    side = f"to rank {o.op.peer}" if o.op.op == "send" else f"from rank {o.op.peer}"
    tag = f" (tag {o.op.tag})" if o.op.tag else ""
    return f"{'sends' if o.op.op == 'send' else 'waits to receive'} {side}{tag} ({o.op.call})"


def _hop(o: _Op, extra: str = "") -> Hop:
    return Hop(f"rank {o.rank}", _words(o) + extra, o.op.site)


def _elsewhere(rank: int, still: Mapping[int, RankView]) -> str:
    v = still.get(rank)
    if v is None or not v.collective:
        return ""
    at = f" at {short(v.call_site)}" if v.call_site else ""
    return f" (it waits in {v.collective}{at})"


def _finding(kind: str, hops: list[Hop], ranks: set[int], culprits: tuple[int, ...], fix: str, tail: str) -> Finding:
    return Finding(
        kind,
        "error",
        sentence(hops) + tail,
        fix,
        ranks=tuple(sorted(ranks)),
        culprits=culprits,
        chain=tuple(hops),
        end="deadlock",
    )


def _tags(pairs: list[tuple[_Op, _Op]], still: Mapping[int, RankView]) -> Finding:
    send, recv = pairs[0]
    hops = [_hop(recv), _hop(send)]
    tail = (
        f" — the tags differ ({send.op.tag} against {recv.op.tag}): neither op completes; the network is not the cause"
    )
    ranks = {send.rank, recv.rank}
    return _finding(watch_ids.P2P_TAG_MISMATCH, hops, ranks, tuple(sorted(ranks)), TAG_FIX, tail)


def _wrong_peer(lonely: list[_Op], still: Mapping[int, RankView]) -> Finding | None:
    """A rank whose op goes to X while another rank waits for that same rank's op in the matching direction."""
    for o in lonely:
        want = "recv" if o.op.op == "send" else "send"
        other = next((w for w in lonely if w.op.op == want and w.op.peer == o.rank and w.rank != o.op.peer), None)
        if other is None:
            continue
        target = o.op.peer
        nothing = f", and rank {target} posts no {'receive from' if want == 'recv' else 'send to'} rank {o.rank}"
        hops = [_hop(other), _hop(o, nothing + _elsewhere(target or 0, still))]
        direction = "destination" if o.op.op == "send" else "source"
        tail = (
            f" — rank {o.rank}'s {direction} is wrong: it names rank {target} where rank {other.rank} expects it; "
            "a bug in the code, not the network"
        )
        ranks = {o.rank, other.rank, target or 0}
        return _finding(watch_ids.P2P_WRONG_PEER, hops, ranks, (o.rank,), PEER_FIX, tail)
    return None


def _counts(lonely: list[_Op], known: Mapping[int, PostedOps], still: Mapping[int, RankView]) -> Finding | None:
    """A rank that posted more ops towards a peer than the peer posted back: one too many."""
    for o in lonely:
        if o.op.peer is None:
            continue
        want = "send" if o.op.op == "recv" else "recv"
        mine = known[o.rank].count(o.op.op, o.op.peer)
        theirs = known[o.op.peer].count(want, o.rank) + (known[o.op.peer].count(want, None) if want == "recv" else 0)
        if mine <= theirs:
            continue
        earlier = [
            p
            for p in known[o.rank].ops
            if p.op == o.op.op and p.peer == o.op.peer and p.seq < o.op.seq and p.state == "pending"
        ]
        if not earlier:
            continue  # more ops one side than the other, but which side is wrong the counts alone cannot tell
        e = earlier[-1]
        took = f"; its earlier {e.call} at {short(e.site)} (never waited on) took the message" if e.site else ""
        noun = "receive" if o.op.op == "recv" else "send"
        mine_words = f"{noun}s from" if noun == "receive" else f"{noun}s to"
        back = "sent it" if noun == "receive" else "received from it"
        hops = [
            _hop(o, f": it posted {mine} {mine_words} rank {o.op.peer}, and rank {o.op.peer} {back} {theirs}{took}")
        ]
        peer = still.get(o.op.peer)
        there = f"; rank {o.op.peer} waits in {peer.collective}" if peer is not None and peer.collective else ""
        tail = f" — one {noun} too many on rank {o.rank}{there}"
        return _finding(watch_ids.P2P_UNMATCHED, hops, {o.rank, o.op.peer}, (o.rank,), COUNT_FIX, tail)
    return None


def _each_other(lonely: list[_Op], still: Mapping[int, RankView]) -> Finding:
    o = lonely[0]
    target = o.op.peer if o.op.peer is not None else o.rank
    hops = [_hop(o, f"; rank {target} never posts the match{_elsewhere(target, still)}")]
    tail = (
        f" — rank {span([o.rank, target])} wait on each other; the record cannot tell which side is wrong (an op "
        "missing on one, or one too many on the other)"
    )
    return _finding(watch_ids.P2P_UNMATCHED, hops, {o.rank, target}, (), PEER_FIX + "; " + FIXES["deadlock"], tail)
