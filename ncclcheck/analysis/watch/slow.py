"""Fail-slow: the rank (or node) the others wait for, from where each rank's time went over the window.

The evidence is each rank's main thread sampled at a fixed rate (``collectors.recorder``): the share of its samples
inside a collective. Ranks that wait for a slow one spend the difference in the next collective; the slow one
arrives last and hardly waits. So the slow ranks are the few (at most half) whose share of waiting sits clearly
below the others', and the finding needs all of:

- every rank's rounds over a common span of at least ``PARTS`` rounds;
- a clear gap: the others' median share at least ``GAP`` above the slow ranks', and no rank between;
- each slow rank below the others' pooled share beyond chance (a two-proportion z-test, its threshold raised with
  the number of ranks, so that the lowest of 4,096 balanced ranks is not named by luck);
- the same in each of ``PARTS`` equal slices of the span, with the others stepping in each (some samples outside the
  collective): one slow step, a checkpoint or a log flush fills one or two slices, not all; a compile or a stall
  keeps the others in one long wait, which is no step at all.

Every rank waiting much, none behind, is ``communication-bound`` (info). A balanced job whose steps vary together
moves every rank's share together: no gap, no finding.
"""

from __future__ import annotations

import math
import operator
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ncclcheck.analysis.watch.pooled import pooled
from ncclcheck.analysis.watch.shares import rank_shares
from ncclcheck.model.findings import Finding
from ncclcheck.model.ranks import span
from ncclcheck.model.shares import Place, RankShare, Tally
from ncclcheck.model.stacks import short
from ncclcheck.model.watch import RankView

SLOW = frozenset({"slow-rank", "slow-node"})  # the warnings that a rank or node holds the job back
PARTS = 4  # slices of the span the slowness must hold in (and the fewest rounds a rank needs)
GAP = 0.10  # the least difference in waiting share worth naming: about 1.1x
PART_Z = 2.0
STEPPING = 0.97  # the others waiting more than this share of a slice: one long wait (a compile, a stall), not steps
COMM_BOUND = 0.5  # every rank waiting at least this share, none behind: the collectives set the pace
SAMPLED = 64  # other ranks whose slices are counted (evenly spread): enough to know their pooled share
BUSY = 50.0  # main-thread CPU % (outside its waits) above which a rank computes rather than sleeps


@dataclass(frozen=True)
class _Counts:
    waited: int
    samples: int

    @property
    def share(self) -> float:
        return self.waited / self.samples if self.samples else 0.0


def slowness(views: Sequence[RankView], hosts: bool) -> tuple[Finding, ...]:
    """``slow-rank`` or ``slow-node`` (a warning), or ``communication-bound`` (info), or nothing. The last answer is
    kept while every rank holds the same rounds (the same tuples): the viewer refreshes many times between two."""
    global _last
    held = tuple([v.tallies for v in views])
    who = tuple([(v.sample.rank, v.sample.host) for v in views])
    if _last is not None:
        before, same_who, same_hosts, found = _last
        if same_hosts == hosts and same_who == who and all(map(operator.is_, before, held)):
            return found
    found = _slowness(views, hosts)
    _last = (held, who, hosts, found)
    return found


_last: tuple[tuple[tuple[Tally, ...], ...], tuple[tuple[int, str], ...], bool, tuple[Finding, ...]] | None = None


def _slowness(views: Sequence[RankView], hosts: bool) -> tuple[Finding, ...]:
    found = _span(views)
    if found is None:
        return ()
    start, end = found
    counts = {v.sample.rank: _Counts(s.waited, s.samples) for v, s in zip(views, pooled(views)) if s is not None}
    order = sorted(counts, key=lambda r: (counts[r].share, r))
    slow, others = _split(order, counts)
    slow = sorted(slow)
    if slow and _clear(slow, others, counts, _parts(views, slow, others, start, end)):
        return (_slow_finding(views, slow, others, counts, end - start, hosts),)
    shares = [c.share for c in counts.values()]
    parts = _parts(views, [], order, start, end)
    stepping = all(0 < _pool(p.values()).share <= STEPPING for p in parts)
    if min(shares) >= COMM_BOUND and max(shares) - min(shares) <= 2 * GAP and stepping:
        return (_comm_bound(views, counts, end - start),)
    return ()


def enough(views: Sequence[RankView]) -> bool:
    """Whether the rounds so far are enough to judge the shares."""
    return _span(views) is not None


def _span(views: Sequence[RankView]) -> tuple[float, float] | None:
    """The span every rank's rounds cover; None while it holds fewer than ``PARTS`` rounds of some rank."""
    if len(views) < 2 or any(not v.tallies for v in views):
        return None
    start = max([v.tallies[0].start for v in views])
    end = min([v.tallies[-1].end for v in views])
    for v in views:
        ts = v.tallies
        low, high = 0, len(ts) - 1
        while low < len(ts) and ts[low].mid < start:
            low += 1
        while high >= 0 and ts[high].mid > end:
            high -= 1
        if high - low + 1 < PARTS:
            return None
    return start, end


def _parts(
    views: Sequence[RankView], slow: list[int], others: list[int], start: float, end: float
) -> list[dict[int, _Counts]]:
    """Each rank's waiting samples and samples in each of ``PARTS`` parts of the span: its rounds in the span cut
    into ``PARTS`` runs one after the other (rounds of ranks on different nodes start at different moments: a cut
    by the clock could leave one rank's part empty), for the slow ranks and an even sample of ``SAMPLED`` others
    (their pooled share is as well known from those: thousands of samples a part)."""
    wanted = set(slow) | set(_even(others))
    parts: list[dict[int, _Counts]] = [{} for _ in range(PARTS)]
    for v in views:
        if v.sample.rank not in wanted:
            continue
        ts = [t for t in v.tallies if start <= t.mid <= end]
        for i in range(PARTS):
            run = ts[i * len(ts) // PARTS : (i + 1) * len(ts) // PARTS]
            parts[i][v.sample.rank] = _Counts(sum(t.waited for t in run), sum(t.samples for t in run))
    return parts


def _even(ranks: list[int]) -> list[int]:
    """At most about ``SAMPLED`` of ``ranks``, evenly spread."""
    return ranks[:: max(len(ranks) // SAMPLED, 1)]


def _split(order: list[int], counts: dict[int, _Counts]) -> tuple[list[int], list[int]]:
    """The few ranks below the widest gap in waiting share (at most half of them), and the rest."""
    best, cut = 0.0, 0
    for k in range(1, len(order) // 2 + 1):
        gap = counts[order[k]].share - counts[order[k - 1]].share
        if gap > best:
            best, cut = gap, k
    return order[:cut], order[cut:]


def _clear(slow: list[int], others: list[int], counts: dict[int, _Counts], parts: list[dict[int, _Counts]]) -> bool:
    typical = statistics.median(counts[r].share for r in others)
    highest = max(counts[r].share for r in slow)
    if typical - highest < GAP or min(counts[r].share for r in others) - highest < GAP / 2:
        return False
    pool = _pool(counts[r] for r in others)
    needed = max(4.0, math.sqrt(2 * math.log(len(counts))) + 1.5)  # chance alone, over every rank
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


def _slow_finding(
    views: Sequence[RankView],
    slow: list[int],
    others: list[int],
    counts: dict[int, _Counts],
    seconds: float,
    hosts: bool,
) -> Finding:
    shares = {s.rank: s for s in rank_shares(views)}
    typical = statistics.median(counts[r].share for r in others)
    behind = statistics.mean(counts[r].share for r in slow)
    faster = 1 / max(1 - (typical - behind), 0.05)
    waits_in = _top(shares, _even(others), ("collective",))
    doing = _top(shares, slow, ("other", "data", "io", "p2p"))
    cpu = [c for r in slow if r in shares and (c := shares[r].cpu_percent) is not None]
    busy = _busy(shares, slow)
    node = _node(views, slow) if hosts else None
    who = f"node {node} ({_ranks(slow)})" if node else _ranks(slow)
    where = _where(waits_in)
    spends = _doing(doing, busy, cpu)
    samples = min(counts[r].samples for r in counts)
    one = len(slow) == 1 or node is not None
    message = (
        f"{who} {'holds' if one else 'hold'} the others back: {_ranks(others)} wait for {'it' if one else 'them'}"
        f"{where} {typical:.0%} of the time ({_ranks(slow)}: {behind:.0%}); {spends}; without the wait the job "
        f"would run about {faster:.1f}× faster. Seen in each of {PARTS} parts of the last {seconds:.0f} s "
        f"({samples}+ samples a rank)"
    )
    roles = tuple((r, "slow") for r in slow) + tuple((r, "waiting") for r in others)
    return Finding(
        "slow-node" if node else "slow-rank",
        "warning",
        message,
        _fix(node, slow, doing, busy),
        tuple(sorted(counts)),
        culprits=tuple(slow),
        roles=roles,
    )


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {span(ranks)}"


def _where(place: Place | None) -> str:
    if place is None:
        return ""
    return f" in {place.what}" + (f" at {short(place.site)}" if place.site else "")


def _top(shares: dict[int, RankShare], ranks: list[int], kinds: tuple[str, ...]) -> Place | None:
    merged: dict[tuple[str, str, str | None], int] = {}
    for r in ranks:
        for p in shares[r].places if r in shares else ():
            if p.kind in kinds:
                merged[(p.kind, p.what, p.site)] = merged.get((p.kind, p.what, p.site), 0) + p.samples
    if not merged:
        return None
    (kind, what, site), n = max(merged.items(), key=lambda item: item[1])
    return Place(kind, what, site, n)


def _busy(shares: dict[int, RankShare], slow: list[int]) -> bool | None:
    """Whether the slow ranks' main threads ran through the time they did not wait (CPU over that time)."""
    out = []
    for r in slow:
        s = shares.get(r)
        if s is None or s.cpu_percent is None:
            return None
        outside = 1 - s.wait
        out.append(s.cpu_percent / 100 / outside * 100 if outside > 0 else 0.0)
    return statistics.mean(out) >= BUSY if out else None


def _doing(doing: Place | None, busy: bool | None, cpu: list[float]) -> str:
    if doing is None:
        return "what they do meanwhile was not sampled"
    used = f"{statistics.mean(cpu):.0f} %" if cpu else "unknown"
    state = {True: f"busy: its main thread used {used} CPU", False: f"idle: its main thread used {used} CPU"}
    how = state.get(busy, "its CPU time is unknown") if busy is not None else "its CPU time is unknown"
    at = f" at {short(doing.site)}" if doing.site else ""
    kind = {
        "data": f"waiting for its DataLoader{at}",
        "io": f"in {doing.what}{at} (saving or loading)",
        "p2p": f"in {doing.what}{at}",
    }.get(doing.kind, f"in {doing.what}(){at}")
    return f"it spends that time {kind} ({how})"


def _fix(node: str | None, slow: list[int], doing: Place | None, busy: bool | None) -> str:
    who = _ranks(slow)
    if node:
        return (
            f"every rank of node {node} is slow: look at the node rather than the code: its CPU and GPU clocks and "
            "throttling (nvidia-smi -q -d PERFORMANCE,CLOCK), a competing process (top), its memory and network"
        )
    if doing is not None and doing.kind == "data":
        return (
            f"{who} waits for its input: more DataLoader workers (num_workers, persistent_workers, pin_memory), "
            "faster storage for its shard, or items that cost the same on every rank"
        )
    if doing is not None and doing.kind == "io":
        return f"{who} saves or loads on the step path: move it off (asynchronous checkpointing) or spread it evenly"
    if busy is False:
        return (
            f"{who} sleeps or blocks outside any collective (a lock, a queue, a file, a sleep): see its call site, "
            "and compare it with a typical rank's in `ncclcheck watch`"
        )
    return (
        f"see what {who} computes that the others do not (more work on its shard, uneven sequence lengths), or "
        "what slows its device: a throttled or shared GPU/CPU (nvidia-smi -q -d PERFORMANCE,CLOCK; top for a "
        "competing process); `ncclcheck watch` compares its call sites with a typical rank's"
    )


def _node(views: Sequence[RankView], slow: list[int]) -> str | None:
    """The node whose ranks are all slow (and only them), where that node runs at least two ranks."""
    hosts = {v.sample.host for v in views if v.rank in slow}
    if len(hosts) != 1:
        return None
    host = hosts.pop()
    mine = {v.rank for v in views if v.sample.host == host}
    return host if mine == set(slow) and len(mine) >= 2 else None


def _comm_bound(views: Sequence[RankView], counts: dict[int, _Counts], seconds: float) -> Finding:
    shares = {s.rank: s for s in rank_shares(views)}
    ranks = sorted(counts)
    waits_in = _top(shares, _even(ranks), ("collective",))
    where = _where(waits_in)
    low, high = min(c.share for c in counts.values()), max(c.share for c in counts.values())
    return Finding(
        "communication-bound",
        "info",
        f"every rank waits{where} {low:.0%}–{high:.0%} of its time over the last {seconds:.0f} s and no rank is "
        "behind: the collectives themselves (their size, the network or transport) set the job's pace",
        "overlap communication with compute (DDP's bucket_cap_mb, FSDP prefetch), fewer or larger collectives, a "
        "faster transport; `ncclcheck smoke` measures what the collectives reach on this job's ranks",
        tuple(ranks),
    )
