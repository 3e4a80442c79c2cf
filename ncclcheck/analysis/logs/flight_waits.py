"""Who is to blame for a collective some ranks never joined, across process groups. Pure.

A rank missing from a collective that others wait in is either in no collective at all (it is the one to look at),
or waits itself in another group's collective. There it may wait for a third rank (follow the chain to its end),
or for one of the ranks waiting on it: a cycle, two ranks that issued two groups' collectives in different orders.
A cycle is broken by program order: every rank in a collective issued about the same number of collectives in its
other groups since the previous collective of that group; a rank that entered it after fewer than the majority
did skipped one (rank 3 goes to the world barrier without its pair's all_reduce: ranks 0 and 1 each did one
all_reduce in their pair since the last barrier, rank 3 none). Without such a majority the cycle is a tie.
"""

from __future__ import annotations

from collections import Counter
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
    skipped: tuple[tuple[int, int, int], ...]  # (rank, ops elsewhere before its wait, the majority's): a skip seen
    explained: bool  # every missing rank waits elsewhere for someone else: the blame lies further down the chain
    unseen: tuple[int, ...] = ()  # ranks without a dump in a group a missing rank waits in: the chain ends unseen


def pending(dump: FrDump) -> FrEntry | None:
    """The rank's oldest collective not completed: where it waits (None: in no collective)."""
    waiting = [e for e in dump.entries if not e.is_p2p and e.state != "completed"]
    return min(waiting, key=lambda e: e.record_id) if waiting else None


def blame(
    stuck: Sequence[Stuck], by_rank: Mapping[int, FrDump], unseen: Mapping[str, tuple[int, ...]] | None = None
) -> list[Blame]:
    """One Blame per stuck collective, in the same order; ``unseen``: per group name, its ranks without a dump."""
    index = {(s.pg, s.seq): s for s in stuck}
    waits = {r: e for r, d in by_rank.items() if (e := pending(d)) is not None}
    skips = {(s.pg, s.seq): _skips(s, by_rank) for s in stuck}
    unseen = unseen or {}
    out = []
    for s in stuck:
        roots, explained = _roots(s, index, waits, skips, frozenset({(s.pg, s.seq)}), unseen)
        waiting = tuple((b, waits[b]) for b in s.behind if b in waits)
        seen = tuple(t for key in {(e.pg, e.seq) for _, e in waiting} for t in skips.get(key, ()))
        blind = tuple(sorted({r for _, e in waiting if (e.pg, e.seq) not in index for r in unseen.get(e.pg, ())}))
        out.append(Blame(tuple(sorted(set(roots))), waiting, seen, explained and bool(roots), blind))
    return out


def _roots(
    s: Stuck,
    index: Mapping[tuple[str, int], Stuck],
    waits: Mapping[int, FrEntry],
    skips: Mapping[tuple[str, int], tuple[tuple[int, int, int], ...]],
    seen: frozenset[tuple[str, int]],
    unseen: Mapping[str, tuple[int, ...]],
) -> tuple[list[int], bool]:
    """The ranks at the end of the wait chain from ``s``, and whether none of ``s``'s own missing ranks is one."""
    roots: list[int] = []
    explained = True
    for b in s.behind:
        e = waits.get(b)
        key = (e.pg, e.seq) if e is not None else None
        there = index.get(key) if key is not None else None
        if e is not None and there is None and unseen.get(e.pg):
            explained = False  # it waits for ranks that sent no dump: nobody can be named from here
        elif there is None or key is None or b in {r for r, _, _ in skips.get(key, ())}:
            roots.append(b)  # in no collective, or in one that waits for nobody, or it skipped ours to get there
            explained = False
        elif key not in seen:
            roots += _roots(there, index, waits, skips, seen | {key}, unseen)[0]
    return roots, explained


def _skips(s: Stuck, by_rank: Mapping[int, FrDump]) -> tuple[tuple[int, int, int], ...]:
    """Ranks that entered ``s`` after fewer collectives in their other groups than a strict majority of its ranks."""
    counts = {r: n for r, e in s.present if (n := _elsewhere(by_rank[r], e)) is not None}
    if len(counts) < 2:
        return ()
    usual, held = Counter(counts.values()).most_common(1)[0]
    if held * 2 <= len(counts):
        return ()
    return tuple((r, n, usual) for r, n in sorted(counts.items()) if n < usual)


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
