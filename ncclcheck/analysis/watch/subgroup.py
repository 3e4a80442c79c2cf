"""A rank waiting in a sub-group's collective while others wait in the world's: the rank to blame is a member of
that sub-group who moved on without joining it, never the waiting rank (however few share its place).

The stacks say only whether a call's group is the default one; which ranks a sub-group holds is not in any stack.
Evidence from elsewhere (a Flight Recorder dump, ``ncclcheck run``'s control plane) can name the members: pass it
as ``members`` and the members who did not join are named as the culprits. Without it, a rank alone in its
sub-group's call is the one sure sign that a member is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ncclcheck.analysis.watch.track import path
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ranks import span
from ncclcheck.model.stacks import short
from ncclcheck.model.watch import RankView

Members = Mapping[int, frozenset[int]]  # a waiting rank -> the ranks of the sub-group it waits in

SUBGROUP_FIX = (
    "find which member of the waiting rank's sub-group skipped this collective: the group's ranks are where the "
    "code creates it (dist.new_group(ranks=...), new_subgroups); a Flight Recorder dump (TORCH_FR_BUFFER_SIZE, "
    "read with ncclcheck logs) or ncclcheck run's control plane shows each rank's last collective on each group; "
    "TORCH_DISTRIBUTED_DEBUG=DETAIL names the mismatch with its group. Look for a rank-dependent branch that "
    "skips the sub-group's collective"
)


def subgroup_wait(waiters: Sequence[RankView], members: Members | None = None) -> Finding | None:
    """The ``subgroup-wait`` finding, or None when no rank waits on a sub-group that misses a member while others
    wait elsewhere. Without ``members``, only a rank alone in its sub-group's call is known to miss one: two or
    more there may be the whole sub-group (then a stalled transport looks the same)."""
    sub = [v for v in waiters if v.args is not None and v.args.group == "other"]
    places = {(v.collective, path(v)) for v in sub}
    elsewhere = [v for v in waiters if v not in sub and (v.collective, path(v)) not in places]
    there = {v.rank for v in waiters if (v.collective, path(v)) in places}  # in it, its locals read or not
    known = members or {}

    def missing(v: RankView) -> bool:  # a member of its sub-group is not in the call (known, or it stands alone)
        if v.rank in known:
            return not known[v.rank] <= there
        return sum((w.collective, path(w)) == (v.collective, path(v)) for w in waiters) == 1

    sub = [v for v in sub if missing(v)]
    if not sub or not elsewhere:
        return None
    culprits = _culprits(sub, there, known)
    wrong = _wrong_group(sub, elsewhere) if not culprits else {}
    culprits = culprits or tuple(sorted(wrong))
    waiting = "; ".join(
        f"rank {v.rank} waits in {v.collective} on a sub-group" + (f" at {short(v.call_site)}" if v.call_site else "")
        for v in sorted(sub, key=lambda v: v.rank)
    )
    others = ", ".join(sorted({f"{v.collective} at {short(v.call_site)}" for v in elsewhere}))
    them = span([v.rank for v in elsewhere])
    who = (
        "; ".join(wrong.values())
        if wrong
        else f"rank {span(list(culprits))} of its sub-group did not join it"
        if culprits
        else f"group membership is not in the stacks, so they cannot tell which of rank {them} it is"
    )
    message = (
        f"{waiting}, while rank {them} wait in {others} — rank {span([v.rank for v in sub])} is waiting, not to "
        f"blame: a member of its sub-group moved on without joining that collective; {who}"
    )
    roles = tuple(
        sorted(
            [(v.rank, "waiting (sub-group)") for v in sub]
            + [(v.rank, f"waits in {v.collective} (one of them skipped the sub-group's)") for v in elsewhere]
        )
    )
    ranks = tuple(sorted(v.rank for v in [*sub, *elsewhere]))
    return Finding(watch_ids.SUBGROUP_WAIT, "error", message, SUBGROUP_FIX, ranks=ranks, culprits=culprits, roles=roles)


def _wrong_group(sub: Sequence[RankView], elsewhere: Sequence[RankView]) -> dict[int, str]:
    """Ranks that ran a waiting rank's very line with a group they are not members of, one that does not hold the
    waiting rank either (``ncclcheck run``'s record of the calls c10d returned from at once): they chose the wrong
    group, and never joined the waiting rank's. A non-member running the line with the waiting rank's own group
    (holding it) is only not in that group: not named."""
    out: dict[int, str] = {}
    for v in sub:
        line = v.call_site.split(" (")[0] if v.call_site else None
        for w in elsewhere:
            for x in w.sample.p2p.skipped if w.sample.p2p is not None else ():
                if x.call == v.collective and x.site == line and x.ranks is not None and v.rank not in x.ranks:
                    out[w.rank] = (
                        f"rank {w.rank} ran that line ({short(line)}) with the process group of rank "
                        f"{span(list(x.ranks))}, which it is not a member of: c10d returned at once (a warning in its "
                        f"log) and it went on without joining the group rank {v.rank} waits in"
                    )
    return out


def _culprits(sub: Sequence[RankView], there: set[int], members: Members) -> tuple[int, ...]:
    """The members of each waiting rank's sub-group that are not waiting in that sub-group's collective."""
    return tuple(sorted({r for v in sub for r in members.get(v.rank, frozenset()) if r not in there}))
