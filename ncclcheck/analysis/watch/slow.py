"""Fail-slow: the rank (or node) the others wait for, from where each rank's time went over the window.

The evidence is each rank's main thread sampled at a fixed rate (``collectors.recorder``): the share of its samples
inside a collective. Ranks that wait for a slow one spend the difference in the next collective; the slow one
arrives last and hardly waits. So the slow ranks are the few (at most half) whose share of waiting sits clearly
below the others', and the finding needs all of:

- every rank's rounds over a common span of at least ``PARTS`` rounds; the shares are compared over that span only
  (a rank that restarted, or a node whose agent began later, covers less of the window than the others);
- a clear gap: the others' median share at least ``GAP`` above the slow ranks', and no rank between: only the last
  to arrive holds the others back, and a rank that waits surely more than it waits for it too (it joins the others);
  one that may, not beyond chance, leaves the answer undecided;
- each slow rank below the others' pooled share beyond chance (a two-proportion z-test, its threshold raised with
  the number of ranks, so that the lowest of 4,096 balanced ranks is not named by luck);
- the others waiting alike: one of them far above the rest (beyond ``GAP`` and chance) waits for someone they do
  not, a member of its own process group where the groups do not synchronise with each other (two tensor-parallel
  pairs, one slow rank: its partner waits, the other pair for nobody), and the few do not hold back them all;
- the same in each of ``PARTS`` equal slices of the span, with the others stepping in each (some samples outside the
  collective): one slow step, a checkpoint or a log flush fills one or two slices, not all; a compile or a stall
  keeps the others in one long wait, which is no step at all;
- the slow ranks not waiting themselves: in send/recv (a pipeline stage waits on its peer) or in a collective none
  of the others is ever seen in (their own group's: another role); nor waiting in collectives yet never seen in the
  one the others wait in most. Which groups a rank is in is in no stack: slow ranks never seen in any collective
  are named with that caveat.

Where this names nobody, ``slow_groups`` compares the members of each known process group with each other, and
the stages of a pipeline by their waits in send/recv.

Every rank waiting much in the collectives themselves (DDP's backward holds its own compute too), none below the
others beyond chance, is ``communication-bound`` (info). A balanced job whose steps vary together moves every
rank's share together: no gap, no finding.
"""

from __future__ import annotations

import math
import operator
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ncclcheck.analysis.watch.pooled import Sums, pooled
from ncclcheck.analysis.watch.slow_findings import comm_bound, even, slow_finding
from ncclcheck.analysis.watch.slow_groups import SLOW as SLOW  # the warnings that a rank or node holds the job back
from ncclcheck.analysis.watch.slow_groups import Groups, Judged, along_pipeline, pipelined, within_groups
from ncclcheck.model.findings import Finding
from ncclcheck.model.shares import Tally
from ncclcheck.model.watch import RankView

PARTS = 4  # slices of the span the slowness must hold in (and the fewest rounds a rank needs)
GAP = 0.10  # the least difference in waiting share worth naming: about 1.1x
PART_Z = 2.0
STEPPING = 0.97  # the others waiting more than this share of a slice: one long wait (a compile, a stall), not steps
COMM_BOUND = 0.5  # every rank waiting at least this share, none behind: the collectives set the pace


@dataclass(frozen=True)
class _Counts:
    waited: int
    samples: int

    @property
    def share(self) -> float:
        return self.waited / self.samples if self.samples else 0.0


def slowness(views: Sequence[RankView], hosts: bool, groups: Groups = ()) -> tuple[Finding, ...]:
    """``slow-rank`` or ``slow-node`` (a warning), or ``communication-bound`` (info), or nothing; where the job-wide
    comparison names nobody, a slow rank within one of ``groups`` (the job's process groups, where known) or a slow
    pipeline stage (``slow_groups``). The last answer is kept while every rank holds the same rounds (the same
    tuples): the viewer refreshes many times between two."""
    return _judged(views, hosts, groups)[0]


def suspects(views: Sequence[RankView], hosts: bool, groups: Groups = ()) -> tuple[tuple[int, float], ...]:
    """Where no rank is named: the ranks that wait below the others' median beyond chance (each with its share of
    waiting), which may hold them back although the window has not proven it; and the median itself last, as
    rank -1. Empty where nothing sits below."""
    return _judged(views, hosts, groups)[1]


def _judged(views: Sequence[RankView], hosts: bool, groups: Groups) -> Judged:
    global _last
    held = tuple([v.tallies for v in views])
    who = tuple([(v.sample.rank, v.sample.host) for v in views])
    if _last is not None:
        before, same_who, same_hosts, same_groups, found = _last
        same = same_hosts == hosts and same_groups == groups and same_who == who
        if same and all(map(operator.is_, before, held)):
            return found
    found = _slowness(views, hosts)
    if not any(f.id in SLOW for f in found[0]):
        found = _elsewhere(views, groups, found)
    _last = (held, who, hosts, groups, found)
    return found


def _elsewhere(views: Sequence[RankView], groups: Groups, job: Judged) -> Judged:
    """Where the job-wide comparison names nobody: a slow rank within a known process group, else a slow pipeline
    stage; the job's own answer where neither is named (its suspects first)."""
    behind = job[1]
    if groups:
        named, maybe = within_groups(views, groups, apart)
        if named:
            return named, ()
        behind = behind or maybe
    if pipelined((s.kinds.get("p2p", 0), s.samples) for s in pooled(views) if s is not None):
        named, maybe = along_pipeline(views, apart)
        if named:
            return named, ()
        behind = behind or maybe
    return job[0], behind


_last: tuple[tuple[tuple[Tally, ...], ...], tuple[tuple[int, str], ...], bool, Groups, Judged] | None = None


def apart(views: Sequence[RankView]) -> Judged:
    """The same judgement over ``views`` counted apart from the whole job's (another way of counting their rounds,
    or some of its ranks): the sums held for the job's own judgement are left as they are."""
    return _slowness(views, False, remember=False)


def _slowness(views: Sequence[RankView], hosts: bool, remember: bool = True) -> Judged:
    found = _span(views)
    if found is None:
        return (), ()
    start, end, outside = found
    held = [(v.sample.rank, s, out) for v, s, out in zip(views, pooled(views, remember), outside) if s is not None]
    sums = {r: s for r, s, _ in held}
    counts = {r: _counts(s, out) for r, s, out in held}
    order = sorted(counts, key=lambda r: (counts[r].share, r))
    slow, others = _split(order, counts)
    slow = sorted(slow)
    if (
        slow
        and _alike(others, counts)
        and _clear(slow, others, counts, _parts(views, slow, others, start, end))
        and not _away(sums, slow, others)
    ):
        samples = min(c.samples for c in counts.values())
        waits = {r: c.share for r, c in counts.items()}
        return (slow_finding(views, sums, slow, others, waits, samples, end - start, PARTS, hosts),), ()
    behind = _suspects(counts)
    if behind or min(c.share for c in counts.values()) < COMM_BOUND:
        return (), behind
    # in the collectives themselves: DDP's backward holds its own compute too, and a rank well below the rest may
    # be one held back by a rank not yet proven
    explicit = {r: _explicit(s, out, counts[r]) for r, s, out in held}
    waits = {r: c.share for r, c in explicit.items()}
    if min(waits.values()) < COMM_BOUND or max(waits.values()) - min(waits.values()) > 2 * GAP or _behind(explicit):
        return (), ()
    parts = _parts(views, [], order, start, end)
    if all(0 < _pool(p.values()).share <= STEPPING for p in parts):
        return (comm_bound(views, waits, end - start),), ()
    return (), ()


def _counts(sums: Sums, outside: tuple[Tally, ...]) -> _Counts:
    """A rank's samples over the span every rank covers: its sums less its rounds outside (a rank that restarted,
    or a node whose agent began later, covers less: the others' earlier rounds are no part of the comparison)."""
    if not outside:  # the usual case, and 4,096 ranks' worth of it each round
        return _Counts(sums.waited, sums.samples)
    return _Counts(sums.waited - sum(t.waited for t in outside), sums.samples - sum(t.samples for t in outside))


def _explicit(sums: Sums, outside: tuple[Tally, ...], counts: _Counts) -> _Counts:
    """A rank's samples over the span in collectives other than DDP's backward."""
    out = [((p.kind, p.what, p.site), p.samples) for t in outside for p in t.places]
    return _Counts(counts.waited - _backward(sums.places.items()) + _backward(out), counts.samples)


def _backward(places: Iterable[tuple[tuple[str, str, str | None], int]]) -> int:
    return sum(n for (kind, what, _), n in places if kind == "collective" and what == "backward")


def enough(views: Sequence[RankView]) -> bool:
    """Whether the rounds so far are enough to judge the shares."""
    return _span(views) is not None


def _span(views: Sequence[RankView]) -> tuple[float, float, list[tuple[Tally, ...]]] | None:
    """The span every rank's rounds cover, and each rank's rounds outside it; None while it holds fewer than
    ``PARTS`` rounds of some rank."""
    if len(views) < 2 or any(not v.tallies for v in views):
        return None
    start = max([v.tallies[0].start for v in views])
    end = min([v.tallies[-1].end for v in views])
    outside = []
    for v in views:
        ts = v.tallies
        low, high = _inside(ts, start, end)
        if high - low + 1 < PARTS:
            return None
        outside.append(ts[:low] + ts[high + 1 :] if low or high < len(ts) - 1 else ())
    return start, end, outside


def _inside(ts: tuple[Tally, ...], start: float, end: float) -> tuple[int, int]:
    """The first and last of a rank's rounds whose middle lies in ``start``..``end``."""
    low, high = 0, len(ts) - 1
    while low < len(ts) and ts[low].mid < start:
        low += 1
    while high >= 0 and ts[high].mid > end:
        high -= 1
    return low, high


def _parts(
    views: Sequence[RankView], slow: list[int], others: list[int], start: float, end: float
) -> list[dict[int, _Counts]]:
    """Each rank's waiting samples and samples in each of ``PARTS`` parts of the span: its rounds in the span cut
    into ``PARTS`` runs one after the other (rounds of ranks on different nodes start at different moments: a cut
    by the clock could leave one rank's part empty), for the slow ranks and an even sample of ``SAMPLED`` others
    (their pooled share is as well known from those: thousands of samples a part)."""
    wanted = set(slow) | set(even(others))
    parts: list[dict[int, _Counts]] = [{} for _ in range(PARTS)]
    for v in views:
        if v.sample.rank not in wanted:
            continue
        ts = [t for t in v.tallies if start <= t.mid <= end]
        for i in range(PARTS):
            run = ts[i * len(ts) // PARTS : (i + 1) * len(ts) // PARTS]
            parts[i][v.sample.rank] = _Counts(sum(t.waited for t in run), sum(t.samples for t in run))
    return parts


def _split(order: list[int], counts: dict[int, _Counts]) -> tuple[list[int], list[int]]:
    """The few ranks below the widest gap in waiting share (at most half of them), and the rest; none where a rank
    may sit between them. Only the last to arrive holds the others back: of the few, one that waits more than the
    others of them beyond chance waits for them, and joins the rest; one that may (a difference a part's test
    would take, not beyond chance), or a lowest of the rest that sits below the rest as if waiting less than they
    do but not surely more than the few, leaves it undecided."""
    best, cut = 0.0, 0
    for k in range(1, len(order) // 2 + 1):
        gap = counts[order[k]].share - counts[order[k - 1]].share
        if gap > best:
            best, cut = gap, k
    needed = _needed(len(order))
    while cut > 1 and _above(counts[order[cut - 1]], _pool(counts[r] for r in order[: cut - 1])) >= needed:
        cut -= 1
    if not cut:
        return [], order
    slow, others = order[:cut], order[cut:]
    if cut > 1 and _above(counts[slow[-1]], _pool(counts[r] for r in slow[:-1])) >= _lowest(cut):
        return [], order
    between = counts[others[0]]
    below_rest = len(others) > 1 and _above(_pool(counts[r] for r in others[1:]), between) >= _lowest(len(others))
    if below_rest and _above(between, _pool(counts[r] for r in slow)) < needed:
        return [], order
    return slow, others


def _alike(others: list[int], counts: dict[int, _Counts]) -> bool:
    """Whether the others wait alike: none of them above the median of them by ``GAP``, beyond chance for the
    highest of this many. The few hold back the others only where the others wait for the same few; one that
    waits far more than the rest waits for someone they do not (a member of its own process group, the groups not
    synchronised with each other), and the rest, waiting less, for nobody it does: the job-wide comparison names
    nobody then (the groups, where known, are compared each with itself)."""
    if len(others) < 2:
        return True
    shares = [counts[r].share for r in others]
    if max(shares) - statistics.median(shares) < GAP:  # the usual case, and 4,096 ranks' worth of it each round
        return True
    return not _apart_from_median({r: counts[r] for r in others}, GAP, above=True)[0]


def _above(high: _Counts, low: _Counts) -> float:
    """How far ``high`` waits above ``low`` in standard errors; 0 where the difference is below a part's."""
    return _z(low, high) if high.share - low.share >= GAP / 2 else 0.0


def _needed(ranks: int) -> float:
    """The z a rank's difference needs to be beyond chance over every rank (the lowest of 4,096 balanced ones is
    about 3.5 below the rest)."""
    return max(4.0, math.sqrt(2 * math.log(ranks)) + 1.5)


def _lowest(ranks: int) -> float:
    """The z beyond which the lowest (or highest) of ``ranks`` balanced ones is seldom found by chance."""
    return max(PART_Z, math.sqrt(2 * math.log(ranks)) + 0.5)


def _away(sums: dict[int, Sums], slow: list[int], others: list[int]) -> bool:
    """Whether a slow rank waits itself (``GAP``/2 of its time or more): in send/recv, on a peer (a pipeline
    stage), or in a collective none of the others is ever seen in (its own group's: another role, whose low share
    in the others' collective says nothing of whether they wait for it); or waits that much in collectives, yet
    never in the one the others wait in most (they wait in a group it is seen no part of)."""
    seen: dict[tuple[str, str | None], int] = {}
    for r in even(others):  # of thousands of others, an even sample tells where they wait
        for (kind, what, site), n in sums[r].places.items():
            if kind == "collective":
                seen[(what, site)] = seen.get((what, site), 0) + n
    most = max(seen, key=lambda place: seen[place]) if seen else None
    for r in slow:
        s = sums[r]
        mine = {(what, site): n for (kind, what, site), n in s.places.items() if kind == "collective"}
        apart = sum(n for place, n in mine.items() if place not in seen)
        if s.kinds.get("p2p", 0) + apart >= GAP / 2 * s.samples:
            return True
        if most is not None and most not in mine and s.waited >= GAP / 2 * s.samples:
            return True
    return False


def waiting_more(views: Sequence[RankView]) -> tuple[tuple[int, float], ...]:
    """The ranks that wait above the others' median by ``GAP`` or more, beyond chance for the highest of this many,
    with their shares, and the median last (as rank -1); empty where none does. Such a rank waits for one that the
    job-wide comparison cannot name: a member of its own process group (one that no other group waits for), the
    groups' members not known here. Three ranks or more (of two, the other is named by the comparison)."""
    found = _span(views) if len(views) > 2 else None
    if found is None:
        return ()
    _, _, outside = found
    held = [(v.sample.rank, s, out) for v, s, out in zip(views, pooled(views, False), outside) if s is not None]
    counts = {r: _counts(s, out) for r, s, out in held}
    if len(counts) < 3:
        return ()
    more, typical = _apart_from_median(counts, GAP, above=True)
    return (*more, (-1, typical)) if more and len(more) <= len(counts) // 2 else ()


def _suspects(counts: dict[int, _Counts]) -> tuple[tuple[int, float], ...]:
    """The ranks below the others' median by a part's difference, beyond chance for the lowest of this many, with
    their shares; the median last (as rank -1). Empty where none is."""
    found, typical = _apart_from_median(counts, GAP / 2, above=False)
    return (*found, (-1, typical)) if found else ()


def _apart_from_median(counts: dict[int, _Counts], gap: float, above: bool) -> tuple[list[tuple[int, float]], float]:
    """The ranks ``gap`` or more below (or ``above``) the median share of waiting, beyond chance for the lowest (or
    highest) of this many against the rest, with their shares; and the median."""
    typical = statistics.median(c.share for c in counts.values())
    every = _pool(counts.values())
    needed = _lowest(len(counts))
    found = []
    for r, c in sorted(counts.items()):
        rest = _Counts(every.waited - c.waited, every.samples - c.samples)
        diff, z = (c.share - typical, _z(rest, c)) if above else (typical - c.share, _z(c, rest))
        if diff >= gap and z >= needed:
            found.append((r, c.share))
    return found, typical


def _behind(counts: dict[int, _Counts]) -> bool:
    """Whether some rank waits below the typical by a difference worth a part's test, beyond what chance gives
    the lowest of this many: it may be held back (or behind) although its slowness is not proven yet."""
    typical = statistics.median(c.share for c in counts.values())
    every = _pool(counts.values())
    needed = _lowest(len(counts))
    for c in counts.values():
        rest = _Counts(every.waited - c.waited, every.samples - c.samples)
        if typical - c.share >= GAP / 2 and _z(c, rest) >= needed:
            return True
    return False


def _clear(slow: list[int], others: list[int], counts: dict[int, _Counts], parts: list[dict[int, _Counts]]) -> bool:
    typical = statistics.median(counts[r].share for r in others)
    highest = max(counts[r].share for r in slow)
    if typical - highest < GAP or min(counts[r].share for r in others) - highest < GAP / 2:
        return False
    pool = _pool(counts[r] for r in others)
    needed = _needed(len(counts))
    if any(_z(counts[r], pool) < needed for r in slow):
        return False
    for part in parts:
        low, high = _pool(part[r] for r in slow), _pool(c for r, c in part.items() if r not in slow)
        if not low.samples or not high.samples or high.share > STEPPING:
            return False
        if high.share - low.share < GAP / 2 or _z(low, high) < PART_Z:
            return False
    return True


def _pool(counts: Iterable[_Counts]) -> _Counts:
    every = list(counts)
    return _Counts(sum(c.waited for c in every), sum(c.samples for c in every))


def _z(low: _Counts, high: _Counts) -> float:
    """How far ``high``'s share sits above ``low``'s, in standard errors (a two-proportion z)."""
    if not low.samples or not high.samples:
        return 0.0
    p = (low.waited + high.waited) / (low.samples + high.samples)
    se = math.sqrt(p * (1 - p) * (1 / low.samples + 1 / high.samples))
    diff = high.share - low.share
    if se == 0:
        return math.inf if diff > 0 else 0.0
    return diff / se
