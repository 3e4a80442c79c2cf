"""The one line on top of ``watch``: what was found, what is still being watched and for how long, what the
evidence cannot decide, or ✓ — only when every rank has shown progress (a new place, a collective's bytes)."""

from __future__ import annotations

from collections.abc import Sequence

from ncclcheck.analysis.watch.findings import group
from ncclcheck.analysis.watch.shares import rank_shares
from ncclcheck.analysis.watch.slow import SLOW, enough, suspects, waiting_more
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ranks import span
from ncclcheck.model.stacks import short
from ncclcheck.model.watch import RankView, Verdict

DEAD = frozenset({"gone", "zombie", "missing", "stopped"})


def summarise(
    views: Sequence[RankView],
    samples: int,
    window_s: float,
    findings: Sequence[Finding],
    limit: float,
    stall_s: float,
    final: bool,
    recording: bool = False,
) -> Verdict:
    found = problem(findings)
    if found is not None:
        return found
    warnings = _kinds(findings, "warning")
    done = next((f for f in findings if f.id == watch_ids.FINISHED), None)
    if done:
        failed = " (some ranks failed: see the findings)" if done.severity == "warning" else ""
        return Verdict("finished", f"■ the job has finished on this node{failed}")
    if warnings:
        return Verdict("warning", f"! {warnings}: see the findings")
    if not views:
        return Verdict("pending", "… no rank of the job seen yet")
    if samples < 2:
        return Verdict("pending", "… watching: first sample")
    live = [v for v in views if v.sample.status not in DEAD]
    gone = next((f for f in findings if f.id == watch_ids.EXITED), None)
    note = f"{gone.message}; " if gone else ""
    still = [v for v in live if v.still_s > 0]
    if not still:
        if gone:
            return Verdict("pending", f"… {note}watching the others, which move")
        if any(v.moved_samples < 2 for v in live):  # progress twice in a row before a tick
            return Verdict("pending", "… watching: every rank moved at the last sample")
        seen = f"{window_s:.0f} s" if window_s >= 1 else "the first samples"
        if not any(v.known for v in views):
            return Verdict(
                "ok",
                f"✓ every rank moved (collective bytes on its sockets) in {seen}; no stacks: collectives not compared",
            )
        more = _waiting_more(live, findings)
        behind = "; ".join(said for said in (_behind(live, unlike=bool(more)), more) if said)
        if behind:  # a rank may hold the others back, not proven yet: never ✓ over it
            return Verdict("pending", f"… every rank is moving in {seen}; {behind}")
        balance = _balance(live, recording)
        if balance.startswith(TOO_SOON):  # whether a rank holds the others back is not known yet: never ✓ over it
            return Verdict("pending", f"… every rank is moving in {seen}{balance}")
        return Verdict("ok", f"✓ no problem seen in {seen}: every rank is moving{balance}")
    longest = max(v.still_s for v in still)
    if longest < limit:
        if final:
            return Verdict(
                "pending",
                f"… {note}not judged: {_what(still)} without progress, for less than the {limit:g} s it takes",
            )
        return Verdict(
            "pending", f"… {note}watching: {_what(still)} without progress; {limit - longest:.0f} s more before judging"
        )
    return Verdict("undecided", note + _undecided(still, live, limit, stall_s))


def problem(findings: Sequence[Finding]) -> Verdict | None:
    """The verdict when an error is found, whatever else the look shows: its kinds, in the findings' order."""
    errors = _kinds(findings, "error")
    return Verdict("problem", f"✗ {errors}: see the findings") if errors else None


def _kinds(findings: Sequence[Finding], severity: str) -> str:
    return ", ".join(dict.fromkeys(f.id for f in findings if f.severity == severity))


def _what(still: Sequence[RankView]) -> str:
    return "; ".join(
        f"rank {span([v.rank for v in g])} {_place(g[0], op, site)} for {max(v.still_s for v in g):.0f} s"
        for (op, site), g in group(still).items()
    )


def _place(v: RankView, op: str, site: str) -> str:
    if op:
        return f"in {op}"
    if not v.known:
        return f"(no stack, {v.sample.status})"
    return f"in {v.doing}" + (f" at {short(site)}" if site else "")


def _undecided(still: Sequence[RankView], live: Sequence[RankView], limit: float, stall_s: float) -> str:
    """Standing still long enough, yet no finding: say why the evidence cannot decide."""
    long = [v for v in still if v.still_s >= limit]
    moving = [v for v in live if v not in still]
    if moving:
        return (
            f"? {_what(long)} without progress while rank {span([v.rank for v in moving])} move on: waiting on a "
            "subgroup or a slow peer, not a hang of the whole job as far as this node sees"
        )
    busy = [v for v in long if v.idle_s < limit]  # their main threads used CPU meanwhile
    unseen = any(v.sample.net_bytes is None for v in long)
    why = "their sockets cannot be counted from here and " if unseen else ""
    who = f"the main thread of rank {span([v.rank for v in busy])} used CPU" if busy else "some used CPU meanwhile"
    return (
        f"? cannot tell: {_what(long)} without a new frame or collective bytes, but {why}{who}: a long computation, "
        "or a wait on the GPU (an NCCL hang spins the main thread in a CUDA synchronisation) look the same from the "
        "stacks; --native shows where it spins, and a Flight Recorder dump (ncclcheck logs) which collective NCCL "
        "waits in"
    )


def _behind(live: Sequence[RankView], unlike: bool = False) -> str:
    """Ranks that wait less than the others beyond chance, not (yet) named: what the verdict says of them;
    ``unlike``: some of the others wait far more than the rest (for someone else), so that the comparison cannot
    name them, however long it runs."""
    found = suspects(live, len({v.sample.host for v in live}) > 1) if len(live) > 1 else ()
    if not found:
        return ""
    ranks, typical = [r for r, _ in found[:-1]], found[-1][1]
    shares = ", ".join(f"{w:.0%}" for _, w in found[:-1])
    return (
        f"rank {span(ranks)} {'waits' if len(ranks) == 1 else 'wait'} less than the others ({shares} of the time, "
        f"against {typical:.0%}): {'it' if len(ranks) == 1 else 'they'} may hold them back, "
        + (
            "not proven: the others do not wait alike"
            if unlike
            else "not proven over the window yet (it must hold in each part of it)"
        )
    )


def _waiting_more(live: Sequence[RankView], findings: Sequence[Finding]) -> str:
    """Ranks that wait more than the others beyond chance while nobody is named: what the verdict says of them
    (never a ✓: someone holds them back, whom the evidence here cannot tell)."""
    if any(f.id in SLOW for f in findings):
        return ""
    found = waiting_more(live)
    if not found:
        return ""
    ranks, typical = [r for r, _ in found[:-1]], found[-1][1]
    shares = ", ".join(f"{w:.0%}" for _, w in found[:-1])
    one = len(ranks) == 1
    return (
        f"rank {span(ranks)} {'waits' if one else 'wait'} more than the others ({shares} of the time, against "
        f"{typical:.0%}): a rank {'it waits' if one else 'they wait'} for holds {'it' if one else 'them'} back, which "
        "no other rank waits for alike (a member of its own process group, or a while: a compile, a checkpoint), not "
        "named: not proven over the window yet"
    )


TOO_SOON = "; too soon to tell"


def _balance(live: Sequence[RankView], recording: bool) -> str:
    """What the rounds of sampled stacks say of a job that moves: that no rank holds the others back, or that it is
    too soon to tell."""
    if len(live) < 2 or not (recording or any(v.tallies for v in live)):
        return ""
    if not enough(live):
        return TOO_SOON + " whether one holds the others back (about 10 s of samples are needed)"
    waits = [s.wait for s in rank_shares(live)]
    return f" and none holds the others back (each waits {min(waits):.0%}–{max(waits):.0%} of its time in collectives)"
