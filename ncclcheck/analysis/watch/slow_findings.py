"""The words of fail-slow's findings (``slow`` decides them): who holds whom back, in which collective and for how
much of the time, what the slow ranks do meanwhile (busy or idle, where), what the wait costs, a caveat where the
stacks cannot tell, and the fix; and the communication-bound note."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from ncclcheck.analysis.watch.pooled import Sums
from ncclcheck.analysis.watch.shares import rank_shares
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ranks import span
from ncclcheck.model.shares import Place, RankShare
from ncclcheck.model.stacks import short
from ncclcheck.model.watch import RankView

BUSY = 50.0  # main-thread CPU % (outside its waits) above which a rank computes rather than sleeps
STARVED = 20.0  # % of the time runnable without a CPU above which the message says another process takes it
SAMPLED = 64  # of thousands of other ranks, this many (evenly spread) tell their pooled share and where they wait


def even(ranks: list[int]) -> list[int]:
    """At most about ``SAMPLED`` of ``ranks``, evenly spread."""
    return ranks[:: max(len(ranks) // SAMPLED, 1)]


def slow_finding(
    views: Sequence[RankView],
    sums: Mapping[int, Sums],
    slow: list[int],
    others: list[int],
    waits: Mapping[int, float],
    samples: int,
    seconds: float,
    parts: int,
    hosts: bool,
) -> Finding:
    """``slow-rank`` or ``slow-node``: ``slow`` hold ``others`` back, each rank waiting ``waits`` of its ``samples``
    or more over the last ``seconds`` (the slowness seen in each of ``parts`` parts of them)."""
    shares = {s.rank: s for s in rank_shares(views)}
    typical = statistics.median(waits[r] for r in others)
    behind = statistics.mean(waits[r] for r in slow)
    faster = 1 / max(1 - (typical - behind), 0.05)
    waits_in = _top(shares, even(others), ("collective",))
    doing = _top(shares, slow, ("other", "data", "io", "p2p"))
    cpu = [c for r in slow if r in shares and (c := shares[r].cpu_percent) is not None]
    busy = _busy(shares, slow)
    node = _node(views, slow) if hosts else None
    who = f"node {node} ({_ranks(slow)})" if node else _ranks(slow)
    spends = _doing(
        doing, busy, cpu, "its ranks" if node else "it" if len(slow) == 1 else "they", _starved(shares, slow)
    )
    one = len(slow) == 1 or node is not None
    # DDP's backward holds the slow rank's own backward too: the difference in waiting is then a floor on the gain
    more = " or more" if waits_in is not None and waits_in.what == "backward" else ""
    message = (
        f"{who} {'holds' if one else 'hold'} the other{'s' if len(others) > 1 else ''} back: {_ranks(others)} "
        f"{'waits' if len(others) == 1 else 'wait'} for {'it' if one else 'them'}{_where(waits_in)} {typical:.0%} of "
        f"the time ({_ranks(slow)}: {behind:.0%}); {spends}; without the wait the job would run about {faster:.1f}× "
        f"faster{more}. Seen in each of {parts} parts of the last {seconds:.0f} s ({samples}+ samples a rank)"
        f"{_unseen(sums, slow, others, doing)}"
    )
    roles = tuple((r, "slow") for r in slow) + tuple((r, "waiting") for r in others)
    return Finding(
        watch_ids.SLOW_NODE if node else watch_ids.SLOW_RANK,
        "warning",
        message,
        _fix(node, slow, doing, busy),
        tuple(sorted(waits)),
        culprits=tuple(slow),
        roles=roles,
    )


def _unseen(sums: Mapping[int, Sums], slow: list[int], others: list[int], doing: Place | None) -> str:
    """The caveat where the slow ranks were never seen in a collective: which process groups a rank is in is in no
    stack, and one that works apart from the others (another role, its own group) looks the same, more so where
    none of the others is seen where it spends its time. Not with one other rank: its collectives wait for someone,
    and the slow ranks are all there is."""
    if len(others) == 1 or any(sums[r].waited for r in slow):
        return ""
    one = len(slow) == 1
    nor = ""
    if doing is not None and not any((doing.kind, doing.what, doing.site) in sums[r].places for r in even(others)):
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
    """Whether the slow ranks' main threads ran, or wanted to (runnable, waiting for a CPU that another process
    took), through the time they did not wait in a collective."""
    out = []
    for r in slow:
        s = shares.get(r)
        if s is None or s.cpu_percent is None:
            return None
        outside = 1 - s.wait
        wanted = s.cpu_percent + (s.cpu_wait_percent or 0.0)
        out.append(wanted / 100 / outside * 100 if outside > 0 else 0.0)
    return statistics.mean(out) >= BUSY if out else None


def _starved(shares: dict[int, RankShare], slow: list[int]) -> str:
    """Where the slow ranks waited for a CPU a good part of the time: how much (another process takes their cores)."""
    delays = [d for r in slow if r in shares and (d := shares[r].cpu_wait_percent) is not None]
    if not delays or statistics.mean(delays) < STARVED:
        return ""
    return f" and waited for a CPU {statistics.mean(delays):.0f} % of the time: something else runs on its cores"


def _doing(doing: Place | None, busy: bool | None, cpu: list[float], who: str, starved: str = "") -> str:
    """What the slow ranks do while the others wait: ``who`` is ``it`` (one rank), ``they`` or ``its ranks`` (a node)."""
    one = who == "it"
    its, threads = ("its", "its main thread") if one else ("their", "their main threads")
    if doing is None:
        return f"what {who} {'does' if one else 'do'} meanwhile was not sampled"
    used = f"{statistics.mean(cpu):.0f} %" if cpu else "unknown"
    state = {True: f"busy: {threads} used {used} CPU{starved}", False: f"idle: {threads} used {used} CPU"}
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


def comm_bound(views: Sequence[RankView], waits: Mapping[int, float], seconds: float) -> Finding:
    """``communication-bound``: every rank waits ``waits`` of its time in the collectives themselves."""
    shares = {s.rank: s for s in rank_shares(views)}
    ranks = sorted(waits)
    waits_in = _top(shares, ranks, ("collective",), skip="backward")
    where = _where(waits_in)
    low, high = min(waits.values()), max(waits.values())
    return Finding(
        watch_ids.COMMUNICATION_BOUND,
        "info",
        f"every rank waits{where} {low:.0%}–{high:.0%} of its time over the last {seconds:.0f} s and no rank is "
        "behind: the collectives themselves (their size, the network or transport) set the job's pace",
        "overlap communication with compute (DDP's bucket_cap_mb, FSDP prefetch), fewer or larger collectives, a "
        "faster transport; `ncclcheck smoke` measures what the collectives reach on this job's ranks",
        tuple(ranks),
    )
