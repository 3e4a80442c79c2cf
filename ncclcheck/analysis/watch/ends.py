"""How ranks ended, worded: every rank of the job gone (``finished``), some gone while the others run on
(``exited``), stopped or gone while the others wait on them (``dead``); and which rank began the end.

A rank torchrun ended with SIGTERM after another failed (or when it was told to stop) is never the one to blame.
Where the ranks' ends were timed (a pidfd each, ``RankSample.ended``), the first to end is the cause: a failure of
its own; a clean exit followed by the others' failures is told as it is, an early leaver or a job that finished a
moment before one rank failed, which only the logs tell apart.
"""

from __future__ import annotations

from collections.abc import Sequence

from ncclcheck.analysis.watch.findings import group, ranks, where, who
from ncclcheck.model.findings import Finding, Severity
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ranks import span
from ncclcheck.model.watch import RankView

DEAD_FIX = (
    "a stopped rank: resume it (kill -CONT) or find who stopped it; an exited rank: read its log "
    "(ncclcheck logs) for why it died (OOM killer: dmesg); the others cannot finish without it"
)


def exit_words(code: int | None) -> str:
    if code is None:
        return "exited (exit code not known)"
    return f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"


def finished(exited: Sequence[RankView], launcher_running: bool | None) -> Finding:
    codes = {v.rank: v.sample.exit_code for v in exited}
    failed = sorted(r for r, c in codes.items() if c not in (None, 0))
    known = [r for r, c in codes.items() if c is not None]
    first, order = first_to_fail(exited)
    if failed:
        message = "every rank of the job on this node has exited: " + "; ".join(
            f"rank {r} {exit_words(codes[r])}" for r in failed
        )
    elif known:
        unknown = sorted(set(codes) - set(known))
        rest = f"; rank {span(unknown)}: exit code not known (already reaped by its launcher)" if unknown else ""
        message = f"every rank of the job on this node has exited: rank {span(known)} with exit code 0{rest}"
    else:
        message = (
            "every rank of the job on this node has exited (exit codes not known here: their launcher reaped them;"
            " its output says how they ended)"
        )
    message += order
    if launcher_running:
        message += "; its launcher still runs: it may restart them (elastic) or be about to exit"
    fix = "read the failed ranks' logs (ncclcheck logs)" if failed or first else ""
    severity: Severity = "warning" if failed or first else "info"
    return Finding(watch_ids.FINISHED, severity, message, fix, ranks=ranks(exited), culprits=first)


ENDED_BY_LAUNCHER = -15  # SIGTERM: what torchrun sends every rank left once one fails, or when it is told to stop
# ends that can follow from another rank's: an error exit (gloo's "connection closed by peer"), SIGABRT (NCCL's abort
# after a peer failed), SIGTERM; a rank killed by another signal (SIGKILL: the OOM killer, SIGSEGV) failed of its own
FOLLOWS = (ENDED_BY_LAUNCHER, -6)


def first_to_fail(gone: Sequence[RankView]) -> tuple[tuple[int, ...], str]:
    """The rank(s) that began the end, and the words saying so. A rank killed by SIGTERM is what its launcher does to
    every rank left once one fails (or when it is itself told to stop): never the culprit. Where the ranks' ends were
    timed (``ended``), the first to end is the cause: a failure, or a clean exit while the others still ran and then
    failed (it left early); without times, the ranks that failed other than by SIGTERM."""
    timed = sorted((v for v in gone if v.sample.ended is not None), key=lambda v: v.sample.ended or 0.0)
    terms = [v.rank for v in gone if v.sample.exit_code == ENDED_BY_LAUNCHER]
    ended = (
        f"; rank {span(terms)} {'was' if len(terms) == 1 else 'were'} ended by SIGTERM (its launcher ends the "
        "ranks left once one fails): not to blame"
        if terms and len(terms) < len(gone)
        else ""
    )
    if len(timed) == len(gone) and len(gone) > 1:
        head = timed[0]
        code = head.sample.exit_code
        later = [v for v in timed[1:] if v.sample.exit_code not in (None, 0)]
        if code == ENDED_BY_LAUNCHER:
            return (), f"; every rank was ended by SIGTERM, rank {head.rank} first: by its launcher or from outside"
        if code == 0 and later:  # it left early, or finished a moment before a rank failed of its own: not told
            gap = (later[0].sample.ended or 0.0) - (head.sample.ended or 0.0)
            return (), (
                f"; rank {head.rank} exited first, with code 0, and rank {span([v.rank for v in later])} failed "
                f"{gap:.2f} s later: if rank {head.rank} left the loop early, the others failed for want of it; if "
                "every rank had finished, the failure is their own (their logs tell which: `ncclcheck logs`, or "
                f"`ncclcheck run` from the start){ended}"
            )
        if code not in (None, 0):
            return (head.rank,), f"; rank {head.rank} ended first ({exit_words(code)}){ended}"
        return (), ""
    failed = tuple(sorted(v.rank for v in gone if v.sample.exit_code not in (None, 0, ENDED_BY_LAUNCHER)))
    own = [v.rank for v in gone if (v.sample.exit_code or 0) < 0 and v.sample.exit_code not in FOLLOWS]
    before = [v.rank for v in gone if v.sample.exit_code in (None, 0) and v.sample.ended is None]
    if failed and before and not own:  # one that left (cleanly, or unseen) at a time not known may be why others failed
        return (), (
            f"; rank {span(before)} had ended too, at a time not known here (before watching, or reaped unseen): "
            f"rank {span(list(failed))} may have failed for want of it (torchrun's output, and `ncclcheck run` from the "
            "start, time each end)"
        )
    return failed, ended if failed else ""


def exited(gone: Sequence[RankView], stuck: Sequence[RankView] = (), hosts: bool = False) -> Finding:
    """Ranks that exited while the others do not wait on them in a collective: the job finishing, or not yet
    noticed; ``stuck``: the ranks left, when none of them has moved since (they may wait on it elsewhere:
    NCCL's host thread spins in a CUDA sync for a collective the exited rank never joins)."""
    parts = [f"{who(v, hosts)} {exit_words(v.sample.exit_code)}" for v in sorted(gone, key=lambda v: v.rank)]
    failed = tuple(v.rank for v in gone if v.sample.exit_code not in (None, 0, ENDED_BY_LAUNCHER))
    if stuck:
        tail = (
            f" — rank {span([v.rank for v in stuck])} {'has' if len(stuck) == 1 else 'have'} not moved for "
            f"{min(v.still_s for v in stuck):.0f} s since: {'it' if len(stuck) == 1 else 'they'} may wait on it"
        )
    else:
        tail = " — the other ranks run on and do not wait on it (yet)"
    severity: Severity = "warning" if failed or stuck else "info"
    return Finding(
        watch_ids.EXITED,
        severity,
        "; ".join(parts) + tail,
        DEAD_FIX if failed or stuck else "",
        ranks=ranks(gone, stuck),
        culprits=failed,
    )


TRACED_S = 30.0  # py-spy's dump (--native too) holds a rank under ptrace a few seconds; a debugger holds it on


def held(v: RankView, limit: float) -> bool:
    """Whether a stopped rank counts as stopped: seen so at two samples in a row (SIGSTOP), or, held under ptrace,
    for longer than a sampler ever holds one (``TRACED_S``, or the stall if longer): a ``py-spy dump`` of a rank
    while ncclcheck watches stops it for a moment, and that says nothing of the job."""
    if v.sample.status != "stopped" or v.since_s <= 0:
        return False
    return v.sample.tracer is None or v.since_s >= max(limit, TRACED_S)


def dead(lost: Sequence[RankView], waiters: Sequence[RankView], hosts: bool = False) -> Finding:
    """Stopped ranks, and exited ranks the others wait on."""
    parts = []
    for v in sorted(lost, key=lambda v: v.rank):
        s = v.sample
        what = {
            "stopped": f"is stopped (SIGSTOP, or held by a debugger; `kill -CONT {s.pid}` resumes it)",
            "zombie": f"{exit_words(s.exit_code)} (zombie pid {s.pid}, not yet reaped by its launcher)",
            "gone": f"has exited (pid {s.pid} is gone)",
            "missing": "has no process on its node (it exited, or never started)",
        }[s.status]
        if s.status == "stopped" and s.tracer is not None:
            what = (
                f"is held stopped by {s.tracer} for {v.since_s:.0f} s (a debugger at a breakpoint, or a sampler that"
                " did not let go: detach it and the rank runs on)"
            )
        parts.append(f"{who(v, hosts)} {what}")
    tail = f" while {where(group(waiters))}" if waiters else " — the other ranks do not wait on it (yet)"
    severity: Severity = "error" if waiters else "warning"
    return Finding(
        watch_ids.DEAD, severity, "; ".join(parts) + tail, DEAD_FIX, ranks=ranks(lost, waiters), culprits=ranks(lost)
    )
