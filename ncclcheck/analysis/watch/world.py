"""Start-up and group creation are collectives of the whole world: ``init_process_group`` waits until every rank of
the world it was given has checked in, and ``new_group`` (with ``TORCH_DIST_INIT_BARRIER=1``, or for its members'
connections) until every rank has made the same call. The ranks inside one wait for the ranks not there; those are
the culprits, whatever their number: a rank that never reached the call (where it waits instead, followed to its
end), one that exited, one that was never started (a world larger than the launcher's), one waiting in a collective
the ranks inside the call will never join (the code's order: a deadlock).

Ranks that all made the call but with different groups (the same group name, other ``ranks``) created their groups
in a different order: ``group-order``, the odd side named where a strict majority shows it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from ncclcheck.analysis.stacks import WORLD_CALLS
from ncclcheck.analysis.watch.chains import FIXES, sentence, waiting
from ncclcheck.analysis.watch.ends import exit_words, held
from ncclcheck.analysis.watch.findings import odd_ones
from ncclcheck.analysis.watch.local import Followed, follow
from ncclcheck.model.findings import Finding, Severity
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ranks import span
from ncclcheck.model.stacks import short
from ncclcheck.model.waits import End, Hop
from ncclcheck.model.watch import Job, RankView

STARTUP_FIX = (
    "every rank of the world must reach init_process_group, with the same world size: see where the rank named "
    "waits instead (a file, a download, a barrier of its own before init), or why it is not running; "
)
GROUP_FIX = (
    "every rank of the world must call new_group (and new_subgroups, init_device_mesh) in the same order with the "
    "same ranks, members or not (or pass use_local_synchronization=True, then only the members call it); "
)
ORDER_FIX = (
    "create the process groups in the same order on every rank: group names come from a counter, so a rank that "
    "creates [0, 2] first gives it the name the others gave [0, 1]; build them in one loop every rank runs"
)
DEAD = frozenset({"gone", "zombie", "missing"})
INIT = "init_process_group"  # the world call of start-up (the others make groups)


def world_waits(
    views: Sequence[RankView], job: Job, ready: Callable[[RankView], bool], limit: float, hosts: bool = False
) -> list[Finding]:
    """``startup``, ``group-creation`` and ``group-order`` findings over ranks standing in a world call. ``ready``:
    whether a rank inside one has stood still long enough to be judged (quietly for ``--stall``, or blocked through
    the quick window when what it waits on is certain)."""
    live = [v for v in views if v.sample.status not in DEAD]
    inside: dict[str, list[RankView]] = defaultdict(list)
    for v in live:
        if v.collective in WORLD_CALLS:
            inside[v.collective].append(v)
    out = []
    for op, ranks in inside.items():
        order = _order(op, ranks, job) if all(ready(v) for v in ranks) else None
        if order is not None:
            out.append(order)
            continue
        found = _missing(op, ranks, views, job, ready, limit, hosts)
        if found is not None:
            out.append(found)
    return out


def expected(op: str, ranks: Sequence[RankView], job: Job) -> tuple[int, ...] | None:
    """The ranks the call waits for: init_process_group the world it was given (the job's where not read); a group
    creation the world in a store-based barrier, else the group's members. None: not known (its arguments were not
    read), and nobody is named."""
    if op == INIT:
        sizes = [v.args.world_size for v in ranks if v.args is not None and v.args.world_size is not None]
        return tuple(range(max(sizes) if sizes else job.world_size))
    found: set[int] = set()
    for v in ranks:
        a = v.args
        if a is None or (a.world_size is None and a.ranks is None):
            return None
        if a.world_size is not None and (a.ranks is None or a.world_size != len(a.ranks)):
            found |= set(range(a.world_size))
        else:
            found |= set(a.ranks or ())
    return tuple(sorted(found))


def _missing(
    op: str,
    ranks: Sequence[RankView],
    views: Sequence[RankView],
    job: Job,
    ready: Callable[[RankView], bool],
    limit: float,
    hosts: bool,
) -> Finding | None:
    wanted = expected(op, ranks, job)
    if wanted is None:
        return None
    world = max(wanted, default=-1) + 1
    there = {v.rank for v in ranks}
    if op == INIT:  # a rank in any other c10d call has a process group: it is past init, not awaited
        there |= {v.rank for v in views if v.collective and v.collective != op and v.sample.status not in DEAD}
    by_rank = {v.rank: v for v in views}
    remote = set(job.remote())
    culprits: dict[int, tuple[list[Hop], End, bool]] = {}  # rank -> (hops, end, certain)
    unseen: list[int] = []
    for r in wanted:
        if r in there:
            continue
        v = by_rank.get(r)
        if v is None and r in remote:
            unseen.append(r)
        elif v is None or v.sample.status in ("missing", "gone", "zombie"):
            culprits[r] = _absent(r, v, op, job, world)
        elif v.sample.status == "stopped" and not held(v, limit):
            return None  # a sampler (py-spy dump) holds it this moment: where it stands is not known
        elif v.sample.status == "stopped":
            culprits[r] = (
                [Hop(f"rank {r}", f"is stopped (SIGSTOP or a debugger) before reaching {op}")],
                "child",
                True,
            )
        elif v.collective and not ready(v):
            return None  # it has just come to a call (or moves on in it): where it stands is not settled yet
        else:
            culprits[r] = _elsewhere(v, op, ranks)
    if not culprits:
        return None
    certain = all(c[2] for c in culprits.values())
    waiters = [v for v in ranks if ready(v)] if certain else [v for v in ranks if v.quiet_s >= limit]
    if len(waiters) < len(ranks):
        return None
    hops = [waiting(ranks, op, list(culprits))]
    for _, (more, _, _) in sorted(culprits.items()):
        hops += more
    ends = {end for _, end, _ in culprits.values()}
    end: End = ends.pop() if len(ends) == 1 else "deadlock" if "deadlock" in ends else "unknown"
    kind = watch_ids.STARTUP if op == INIT else watch_ids.GROUP_CREATION
    unseen_words = (
        f"; rank {span(unseen)} {'runs' if len(unseen) == 1 else 'run'} on other nodes, not seen from here"
        if unseen
        else ""
    )
    message = sentence(hops) + unseen_words
    standing = all(
        by_rank[r].held_s >= limit for r in culprits if r in by_rank and by_rank[r].sample.status not in DEAD
    )
    severity: Severity = "error" if certain or standing else "warning"
    fix = (STARTUP_FIX if kind == watch_ids.STARTUP else GROUP_FIX) + FIXES[end]
    roles = tuple(sorted([(v.rank, f"waiting in {op}") for v in ranks] + [(r, f"not in {op}") for r in culprits]))
    involved = tuple(sorted(there | set(culprits)))
    return Finding(
        kind,
        severity,
        message,
        fix,
        ranks=involved,
        culprits=tuple(sorted(culprits)),
        roles=roles,
        chain=tuple(hops),
        end=end,
    )


def _absent(r: int, v: RankView | None, op: str, job: Job, world: int) -> tuple[list[Hop], End, bool]:
    """A rank of the world with no live process: never started (beyond the launcher's world), or gone."""
    if v is None and r >= job.world_size:
        what = (
            f"was never started: the launcher runs {job.world_size} rank(s) (WORLD_SIZE={job.world_size}) but "
            f"{op} was asked for a world of {world}"
        )
        return [Hop(f"rank {r}", what)], "absent", True
    if v is None or v.sample.status == "missing":
        return [Hop(f"rank {r}", "has no process on this node: it never started, or has exited")], "absent", True
    return [Hop(f"rank {r}", f"{exit_words(v.sample.exit_code)} before reaching {op}")], "exited", True


def _elsewhere(v: RankView, op: str, inside: Sequence[RankView]) -> tuple[list[Hop], End, bool]:
    """A live rank that is not in the call: where it waits instead."""
    them = span([w.rank for w in inside])
    at = f" at {short(v.call_site)}" if v.call_site else ""
    if v.collective in WORLD_CALLS:
        return [Hop(f"rank {v.rank}", f"waits in {v.collective}{at} instead: the calls differ")], "deadlock", True
    if v.collective:
        what = (
            f"never called {op}: it waits in {v.collective}{at}, for rank {them}, which wait inside {op}: "
            "neither side can go on"
        )
        return [Hop(f"rank {v.rank}", what)], "deadlock", True
    followed: Followed | None = follow(v)
    if followed is None or not followed.hops:
        site = v.call_site.split(" (")[0] if v.call_site else None
        return [Hop(f"rank {v.rank}", f"has not reached {op}: it is in {v.doing}", site)], "unknown", False
    first, *rest = followed.hops
    lead = Hop(first.who, f"has not reached {op}: it {first.what}", first.site, first.code, first.function)
    return [lead, *rest], followed.end, False


def _order(op: str, ranks: Sequence[RankView], job: Job) -> Finding | None:
    """Every rank of the world in group creation for the same group name (the same place in the order of groups
    created), with different members."""
    if op == INIT or len(ranks) < job.world_size:
        return None
    names = {v.args.group_name if v.args is not None else None for v in ranks}
    if len(names) != 1 or None in names:
        return None
    sides: Mapping[tuple[int, ...], list[int]] = _sides(ranks)
    if len(sides) < 2 or sum(len(rs) for rs in sides.values()) < len(ranks):
        return None
    name = names.pop()
    odd, blame = odd_ones(list(sides.values()), job.world_size)
    said = "; ".join(f"rank {span(rs)} with ranks {list(members)}" for members, rs in sides.items())
    group = f"process group {name}" if name else "the same process group"
    sites = sorted({short(v.call_site) for v in ranks if v.call_site})
    message = (
        f"rank {span([v.rank for v in ranks])} wait in {op} at {', '.join(sites)} creating {group} with different "
        f"ranks: {said} — the groups are created in a different order on different ranks: {blame}"
    )
    roles = tuple(sorted((r, f"{op} of {list(m)}") for m, rs in sides.items() for r in rs))
    return Finding(
        watch_ids.GROUP_ORDER,
        "error",
        message,
        ORDER_FIX,
        ranks=tuple(sorted(v.rank for v in ranks)),
        culprits=odd,
        roles=roles,
        end="deadlock",
    )


def _sides(ranks: Sequence[RankView]) -> dict[tuple[int, ...], list[int]]:
    out: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for v in sorted(ranks, key=lambda v: v.rank):
        if v.args is not None and v.args.ranks is not None:
            out[v.args.ranks].append(v.rank)
    return dict(out)
