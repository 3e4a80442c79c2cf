"""Ranks in the same collective that disagree on its arguments: its root (``src``/``dst``/``group_src``/
``group_dst``), or whether it runs on the default group. The transport then waits forever on a rank that was
never going to send or receive; it is the code, not the network.

The same collective: the same op on the default group (its roots are global ranks, comparable whatever line
calls it), or the same op through the same user frames (a sub-group's roots compared as ranks in that group; a
shared helper's line called from two places is two calls, and a rank there on a sub-group is subgroup-wait's).
The side to blame is named only when it is a strict majority of the job; a tie says it cannot tell which side
is wrong.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from ncclcheck.analysis.stacks import P2P
from ncclcheck.analysis.watch.findings import odd_ones
from ncclcheck.analysis.watch.track import path
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ranks import span
from ncclcheck.model.stacks import short
from ncclcheck.model.watch import RankView

ROOT_FIX = (
    "every rank must pass the same root to the same collective: a src/dst computed from the rank itself (dst=rank) "
    "or from rank-local data is the usual cause; src/dst are ranks of the world, group_src/group_dst ranks of the "
    "group; TORCH_DISTRIBUTED_DEBUG=DETAIL checks the arguments of each collective"
)
GROUP_FIX = (
    "every rank must call a collective on the same group: a group chosen per rank (`group=groups[rank // 2]` "
    "called from a line every rank runs) sends the ranks into different process groups; call it on each group only "
    "from that group's members, and only ranks in the group should call it"
)


def disagreements(waiters: Sequence[RankView], world_size: int) -> list[Finding]:
    """``root-mismatch`` and ``group-mismatch`` findings over the ranks standing still with arguments read."""
    out = []
    for views in _same_collective(waiters, lambda v: "default" if _group(v) == "default" else path(v)):
        values = {v.rank: root for v in views if (root := _root(v))}
        if len(set(values.values())) > 1:
            out.append(_finding(watch_ids.ROOT_MISMATCH, "the root", views, values, world_size, ROOT_FIX))
    for views in _same_collective(waiters, path):
        groups = {v.rank: f"{g} group" for v in views if (g := _group(v))}
        if len(set(groups.values())) > 1:
            out.append(_finding(watch_ids.GROUP_MISMATCH, "the group", views, groups, world_size, GROUP_FIX))
    return out


def _root(v: RankView) -> str | None:
    """The root to compare: on the default group as given; on a sub-group (or a group not known) only as a rank in
    the group: a global src/dst differs from one sub-group to the next at the same line by design (Megatron
    broadcasts from its group's first rank: src=0 in [0,1], src=2 in [2,3])."""
    return v.args.root(in_group=v.args.group != "default") if v.args else None


def _group(v: RankView) -> str | None:
    return v.args.group if v.args else None


def _same_collective(waiters: Sequence[RankView], key: Callable[[RankView], object]) -> list[list[RankView]]:
    """Ranks by (op, key), point-to-point ops left out (their peers differ by design), each group of 2 or more."""
    out: dict[tuple[str, object], list[RankView]] = defaultdict(list)
    for v in sorted(waiters, key=lambda v: v.rank):
        if v.args is not None and v.args.op not in P2P:
            out[(v.args.op, key(v))].append(v)
    return [views for views in out.values() if len(views) > 1]


def _finding(
    kind: str, what: str, views: Sequence[RankView], values: dict[int, str], world_size: int, fix: str
) -> Finding:
    op = views[0].args.op if views[0].args else "?"
    sides: dict[str, list[int]] = defaultdict(list)
    for rank, value in sorted(values.items()):
        sides[value].append(rank)
    said = "; ".join(f"rank {span(ranks)} with {value}" for value, ranks in sides.items())
    sites = sorted({short(v.call_site) for v in views})
    odd, blame = odd_ones(list(sides.values()), max(len(views), world_size))
    message = (
        f"rank {span([v.rank for v in views])} wait in {op} at {', '.join(sites)} but disagree on {what}: {said} — "
        f"the same collective with different arguments never completes: {blame}"
    )
    others = [r for r, value in values.items() if value == "other group"]
    if kind == watch_ids.GROUP_MISMATCH and others:  # a stack shows only whether the group is the default one
        message += (
            f" (unless rank {span(others)} passes group=dist.group.WORLD explicitly, which a stack cannot tell from "
            "another group: then the groups agree and the wait is elsewhere)"
        )
    ranks = tuple(v.rank for v in views)
    return Finding(kind, "error", message, fix, ranks=ranks, culprits=odd, roles=tuple(sorted(values.items())))
