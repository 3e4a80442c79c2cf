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
- the same in each of ``PARTS`` equal slices of the span, with the others stepping in each (some samples outside the
  collective): one slow step, a checkpoint or a log flush fills one or two slices, not all; a compile or a stall
  keeps the others in one long wait, which is no step at all;
- the slow ranks not waiting themselves: in send/recv (a pipeline stage waits on its peer) or in a collective none
  of the others is ever seen in (their own group's: another role). Which groups a rank is in is in no stack: slow
  ranks never seen in any collective are named with that caveat.

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
from ncclcheck.analysis.watch.shares import rank_shares
from ncclcheck.model.findings import Finding
from ncclcheck.model.ranks import span
from ncclcheck.model.shares import Place, RankShare, Tally
from ncclcheck.model.stacks import short
from ncclcheck.model.watch import RankView

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
    held = [(v, s) for v, s in zip(views, pooled(views)) if s is not None]
    sums = {v.sample.rank: s for v, s in held}
    counts = {v.sample.rank: _counts(v.tallies, s, start, end) for v, s in held}
    order = sorted(counts, key=lambda r: (counts[r].share, r))
    slow, others = _split(order, counts)
    slow = sorted(slow)
    if slow and _clear(slow, others, counts, _parts(views, slow, others, start, end)) and not _away(sums, slow, others):
        return (_slow_finding(views, sums, slow, others, counts, end - start, hosts),)
    if min(c.share for c in counts.values()) < COMM_BOUND:
        return ()
    # in the collectives themselves: DDP's backward holds its own compute too, and a rank well below the rest may
    # be one held back by a rank not yet proven
    explicit = {v.sample.rank: _explicit(v.tallies, s, counts[v.sample.rank], start, end) for v, s in held}
    shares = [c.share for c in explicit.values()]
    if min(shares) < COMM_BOUND or max(shares) - min(shares) > 2 * GAP or _behind(explicit):
        return ()
    parts = _parts(views, [], order, start, end)
    if all(0 < _pool(p.values()).share <= STEPPING for p in parts):
        return (_comm_bound(views, explicit, end - start),)
    return ()


def _counts(tallies: tuple[Tally, ...], sums: Sums, start: float, end: float) -> _Counts:
    """A rank's samples over the span every rank covers: its sums less its rounds outside (a rank that restarted,
    or a node whose agent began later, covers less: the others' earlier rounds are no part of the comparison)."""
    low, high = _inside(tallies, start, end)
    if low == 0 and high == len(tallies) - 1:  # the usual case, and 4,096 ranks' worth of it each round
        return _Counts(sums.waited, sums.samples)
    outside = tallies[:low] + tallies[high + 1 :]
    return _Counts(sums.waited - sum(t.waited for t in outside), sums.samples - sum(t.samples for t in outside))


def _explicit(tallies: tuple[Tally, ...], sums: Sums, counts: _Counts, start: float, end: float) -> _Counts:
    """A rank's samples over the span in collectives other than DDP's backward."""
    low, high = _inside(tallies, start, end)
    outside = [((p.kind, p.what, p.site), p.samples) for t in tallies[:low] + tallies[high + 1 :] for p in t.places]
    backward = _backward(sums.places.items()) - _backward(outside)
    return _Counts(counts.waited - backward, counts.samples)


def _backward(places: Iterable[tuple[tuple[str, str, str | None], int]]) -> int:
    return sum(n for (kind, what, _), n in places if kind == "collective" and what == "backward")


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
        low, high = _inside(v.tallies, start, end)
        if high - low + 1 < PARTS:
            return None
    return start, end


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
    step = max(len(others) // SAMPLED, 1)
    wanted = set(slow) | set(others[::step])
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
    in the others' collective says nothing of whether they wait for it)."""
    joined = {(what, site) for r in others for (kind, what, site) in sums[r].places if kind == "collective"}
    for r in slow:
        s = sums[r]
        apart = sum(
            n for (kind, what, site), n in s.places.items() if kind == "collective" and (what, site) not in joined
        )
        if s.kinds.get("p2p", 0) + apart >= GAP / 2 * s.samples:
            return True
    return False


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


def _slow_finding(
    views: Sequence[RankView],
    sums: dict[int, Sums],
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
    waits_in = _top(shares, others, ("collective",))
    doing = _top(shares, slow, ("other", "data", "io", "p2p"))
    cpu = [c for r in slow if r in shares and (c := shares[r].cpu_percent) is not None]
    busy = _busy(shares, slow)
    node = _node(views, slow) if hosts else None
    who = f"node {node} ({_ranks(slow)})" if node else _ranks(slow)
    spends = _doing(doing, busy, cpu, "its ranks" if node else "it" if len(slow) == 1 else "they")
    samples = min(counts[r].samples for r in counts)
    one = len(slow) == 1 or node is not None
    # DDP's backward holds the slow rank's own backward too: the difference in waiting is then a floor on the gain
    more = " or more" if waits_in is not None and waits_in.what == "backward" else ""
    message = (
        f"{who} {'holds' if one else 'hold'} the other{'s' if len(others) > 1 else ''} back: {_ranks(others)} "
        f"{'waits' if len(others) == 1 else 'wait'} for {'it' if one else 'them'}{_where(waits_in)} {typical:.0%} of "
        f"the time ({_ranks(slow)}: {behind:.0%}); {spends}; without the wait the job would run about {faster:.1f}× "
        f"faster{more}. Seen in each of {PARTS} parts of the last {seconds:.0f} s ({samples}+ samples a rank)"
        f"{_unseen(sums, slow, others, doing)}"
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


def _unseen(sums: dict[int, Sums], slow: list[int], others: list[int], doing: Place | None) -> str:
    """The caveat where the slow ranks were never seen in a collective: which process groups a rank is in is in no
    stack, and one that works apart from the others (another role, its own group) looks the same, more so where
    none of the others is seen where it spends its time. Not with one other rank: its collectives wait for someone,
    and the slow ranks are all there is."""
    if len(others) == 1 or any(sums[r].waited for r in slow):
        return ""
    one = len(slow) == 1
    nor = ""
    if doing is not None and not any((doing.kind, doing.what, doing.site) in sums[r].places for r in others):
        what = {"data": "a DataLoader", "other": f"{doing.what}()"}.get(doing.kind, doing.what)
        nor = f" (nor the others in {what}" + (f" at {short(doing.site)})" if doing.site else ")")
    return (
        f"; {_ranks(slow)} {'was' if one else 'were'} never seen in a collective{nor}: if "
        f"{'it works' if one else 'they work'} apart from the others (another role, or another process group), the "
        "others wait for something else"
    )


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {span(ranks)}"


def _where(place: Place | None) -> str:
    if place is None:
        return ""
    what = "DDP's backward" if place.kind == "collective" and place.what == "backward" else place.what
    return f" in {what}" + (f" at {short(place.site)}" if place.site else "")


def _top(shares: dict[int, RankShare], ranks: list[int], kinds: tuple[str, ...], skip: str = "") -> Place | None:
    merged: dict[tuple[str, str, str | None], int] = {}
    for r in ranks:
        for p in shares[r].places if r in shares else ():
            if p.kind in kinds and p.what != skip:
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


def _doing(doing: Place | None, busy: bool | None, cpu: list[float], who: str) -> str:
    """What the slow ranks do while the others wait: ``who`` is ``it`` (one rank), ``they`` or ``its ranks`` (a node)."""
    one = who == "it"
    its, threads = ("its", "its main thread") if one else ("their", "their main threads")
    if doing is None:
        return f"what {who} {'does' if one else 'do'} meanwhile was not sampled"
    used = f"{statistics.mean(cpu):.0f} %" if cpu else "unknown"
    state = {True: f"busy: {threads} used {used} CPU", False: f"idle: {threads} used {used} CPU"}
    how = state.get(busy, f"{its} CPU time is unknown") if busy is not None else f"{its} CPU time is unknown"
    at = f" at {short(doing.site)}" if doing.site else ""
    kind = {
        "data": f"waiting for {its} DataLoader{at}",
        "io": f"in {doing.what}{at} (saving or loading)",
        "p2p": f"in {doing.what}{at}",
    }.get(doing.kind, f"in {doing.what}(){at}")
    return f"{who} {'spends' if one else 'spend'} that time {kind} ({how})"


def _fix(node: str | None, slow: list[int], doing: Place | None, busy: bool | None) -> str:
    who = _ranks(slow)
    one = len(slow) == 1
    its = "its" if one else "their"
    if node:
        return (
            f"every rank of node {node} is slow: look at the node rather than the code: its CPU and GPU clocks and "
            "throttling (nvidia-smi -q -d PERFORMANCE,CLOCK), a competing process (top), its memory and network"
        )
    if doing is not None and doing.kind == "data":
        return (
            f"{who} {'waits' if one else 'wait'} for {its} input: more DataLoader workers (num_workers, "
            "persistent_workers, pin_memory), faster storage for "
            f"{'its shard' if one else 'their shards'}, or items that cost the same on every rank"
        )
    if doing is not None and doing.kind == "io":
        return (
            f"{who} {'saves or loads' if one else 'save or load'} on the step path: move it off (asynchronous "
            "checkpointing) or spread it evenly"
        )
    if busy is False:
        return (
            f"{who} {'sleeps or blocks' if one else 'sleep or block'} outside any collective (a lock, a queue, a file, "
            f"a sleep): see {'its call site' if one else 'their call sites'}, and compare "
            f"{'it' if one else 'them'} with a typical rank's in `ncclcheck watch`"
        )
    return (
        f"see what {who} {'computes' if one else 'compute'} that the others do not (more work on "
        f"{'its shard' if one else 'their shards'}, uneven sequence lengths), or what slows {its} "
        f"{'device' if one else 'devices'}: a throttled or shared GPU/CPU (nvidia-smi -q -d PERFORMANCE,CLOCK; top "
        f"for a competing process); `ncclcheck watch` compares {its} call sites with a typical rank's"
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
    waits_in = _top(shares, ranks, ("collective",), skip="backward")
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
