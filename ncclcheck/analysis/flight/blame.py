"""Who is to blame for a collective some ranks never joined, across process groups. Pure.

A rank missing from a collective that others wait in is either in no collective at all (it is the one to look at),
or waits itself in another group's collective. There it may wait for a third rank (follow the chain to its end),
or for one of the ranks waiting on it: a cycle, two ranks that issued two groups' collectives in different orders.
A cycle is broken by program order, where the ring buffer shows it: a rank that entered it after fewer collectives in
its other groups (since the previous collective of that group) than every earlier time skipped one (rank 3 goes to
the world barrier without its pair's all_reduce: one all_reduce in its pair between barriers until now, none this
time), when most ranks there kept to their own counts. Ranks legitimately differ (pipeline stages, even of the same
size, issue different numbers of collectives), so a rank is compared only with its own earlier steps; where its
buffer holds none (the first step), or nobody fell short of their own, the cycle is a tie: nobody is named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ncclcheck.model.flight import FrDump, FrEntry


@dataclass(frozen=True)
class Stuck:
    """A collective some ranks entered and wait in while others of its group never issued it."""

    pg: str
    desc: str
    seq: int
    present: tuple[tuple[int, FrEntry], ...]  # (rank, its entry), the ranks that issued it
    behind: tuple[int, ...]  # the ranks of the group that never issued it


@dataclass(frozen=True)
class Blame:
    """For one stuck collective: the ranks to blame, and what each missing rank waits in instead (if anything)."""

    culprits: tuple[int, ...]
    waits: tuple[tuple[int, FrEntry], ...]  # (missing rank, the collective it waits in)
    skipped: tuple[tuple[int, int, int], ...]  # (rank, ops elsewhere before its wait, its least before): a skip seen
    explained: bool  # every missing rank waits elsewhere for someone else: the blame lies further down the chain
    unseen: tuple[int, ...] = ()  # ranks without a dump in a group a missing rank waits in: the chain ends unseen


def pending(dump: FrDump) -> FrEntry | None:
    """The rank's oldest op (collective or p2p) not completed: where it waits (None: in none)."""
    waiting = [e for e in dump.entries if e.state != "completed"]
    return min(waiting, key=lambda e: e.record_id) if waiting else None


def blame(
    stuck: Sequence[Stuck],
    by_rank: Mapping[int, FrDump],
    unseen: Mapping[str, tuple[int, ...]] | None = None,
    waits_on: Mapping[int, tuple[int, ...]] | None = None,
) -> list[Blame]:
    """One Blame per stuck collective, in the same order; ``unseen``: per group name, its ranks without a dump;
    ``waits_on``: a rank waiting in a p2p op its peer never matched, and that peer."""
    index = {(s.pg, s.seq): s for s in stuck}
    waits = {r: e for r, d in by_rank.items() if (e := pending(d)) is not None}
    skips = {(s.pg, s.seq): _skips(s, by_rank) for s in stuck}
    unseen = unseen or {}
    out = []
    for s in stuck:
        roots, explained = _roots(s, index, waits, skips, frozenset({(s.pg, s.seq)}), unseen, waits_on or {})
        waiting = tuple((b, waits[b]) for b in s.behind if b in waits)
        colls = [e for _, e in waiting if not e.is_p2p]
        seen = tuple(t for key in {(e.pg, e.seq) for e in colls} for t in skips.get(key, ()))
        blind = tuple(sorted({r for e in colls if (e.pg, e.seq) not in index for r in unseen.get(e.pg, ())}))
        out.append(Blame(tuple(sorted(set(roots))), waiting, seen, explained and bool(roots), blind))
    return out


def _roots(
    s: Stuck,
    index: Mapping[tuple[str, int], Stuck],
    waits: Mapping[int, FrEntry],
    skips: Mapping[tuple[str, int], tuple[tuple[int, int, int], ...]],
    seen: frozenset[tuple[str, int]],
    unseen: Mapping[str, tuple[int, ...]],
    waits_on: Mapping[int, tuple[int, ...]],
) -> tuple[list[int], bool]:
    """The ranks at the end of the wait chain from ``s``, and whether none of ``s``'s own missing ranks is one."""
    roots: list[int] = []
    explained = True
    for b in s.behind:
        e = waits.get(b)
        if e is not None and e.is_p2p:  # it waits for its peer: the one that never posted the match, if known
            roots += waits_on.get(b, ())
            explained = explained and b in waits_on
            continue
        key = (e.pg, e.seq) if e is not None else None
        there = index.get(key) if key is not None else None
        if e is not None and there is None and unseen.get(e.pg):
            explained = False  # it waits for ranks that sent no dump: nobody can be named from here
        elif there is None or key is None or b in {t[0] for t in skips.get(key, ())}:
            roots.append(b)  # in no collective, or in one that waits for nobody, or it skipped ours to get there
            explained = False
        elif key not in seen:
            roots += _roots(there, index, waits, skips, seen | {key}, unseen, waits_on)[0]
    return roots, explained


def _skips(s: Stuck, by_rank: Mapping[int, FrDump]) -> tuple[tuple[int, int, int], ...]:
    """Ranks that entered ``s`` after fewer collectives in their other groups than every earlier time their buffer
    shows, while most ranks there kept to their own counts (none where a rank's buffer holds no earlier stretch)."""
    now: dict[int, int] = {}
    least: dict[int, int] = {}
    for r, e in s.present:
        n = _elsewhere(by_rank[r], e)
        earlier = [
            c for x in by_rank[r].entries if _before_in_group(x, e) and (c := _elsewhere(by_rank[r], x)) is not None
        ]
        if n is None or not earlier:
            return ()
        now[r], least[r] = n, min(earlier)
    if len(now) < 2 or sum(1 for r in now if now[r] >= least[r]) * 2 <= len(now):
        return ()  # most ranks there changed their count: not a skip
    return tuple((r, now[r], least[r]) for r in sorted(now) if now[r] < least[r])


def _before_in_group(x: FrEntry, entry: FrEntry) -> bool:
    return not x.is_p2p and x.pg == entry.pg and 1 <= x.seq < entry.seq


def _elsewhere(dump: FrDump, entry: FrEntry) -> int | None:
    """Collectives the rank issued in other groups between its previous collective of this group and this one
    (None when the ring buffer no longer holds that stretch)."""
    mine = [e for e in dump.entries if not e.is_p2p]
    before = [e for e in mine if e.pg == entry.pg and e.seq == entry.seq - 1]
    if before:
        start = before[0].record_id
    elif entry.seq == 1 and min((e.record_id for e in mine), default=-1) == 0:
        start = -1  # the first of its group, and the buffer holds everything since the start
    else:
        return None
    return sum(1 for e in mine if e.pg != entry.pg and start < e.record_id < entry.record_id)
