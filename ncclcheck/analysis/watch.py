"""From a job's tracked views to what is wrong, and one verdict: pure functions over frozen data.

The evidence and how long it needs:
- Ranks blocked in *different* collectives, every rank of the job seen here, none moving at all (no
  new frame, no socket bytes, no main-thread CPU) across a few quick samples: a mismatch, in about 2 s.
  Nobody is left to make progress, so waiting longer adds nothing.
- Everything else needs ``--stall`` seconds of standing still: a rank outside any collective while the
  others wait (a slow rank and a stuck one look alike for a while), everyone in the same collective
  (a long GPU queue looks like that too), ranks waiting on ranks that live on other nodes.
- A rank that exited or stopped is an error once others wait on it, a warning before; every rank
  exited is "finished", with exit codes where the kernel still has them.
- Until a judgement is due, the verdict says what is being watched and for how much longer, never ✓.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ncclcheck.analysis.ranks import span
from ncclcheck.analysis.watch_track import Tracked, advance, doing
from ncclcheck.model.watch import Job, RankView, Snapshot, Verdict, WatchFinding, WatchState

__all__ = ["QUICK_S", "Judging", "decided", "doing", "judge", "next_delay", "rejudge", "short", "track"]

QUICK_S = 1.5  # the quick window: no movement at all for this long, over at least QUICK_SAMPLES intervals
QUICK_SAMPLES = 3
EXITED = frozenset({"gone", "zombie", "missing"})
DEAD = EXITED | {"stopped"}
MISMATCH_FIX = (
    "every rank must call the same collectives in the same order: look for a rank-dependent branch or "
    "data-dependent loop around those call sites; TORCH_DISTRIBUTED_DEBUG=DETAIL names the first mismatch, "
    "and the Flight Recorder dump (ncclcheck logs) shows each rank's sequence"
)
STRAGGLER_FIX = (
    "the others wait for it: see what it is doing (Enter on the rank shows its stack); a slow dataloader, "
    "an uneven batch, a checkpoint or eval on one rank only, or an exception swallowed in a loop; if it is "
    "legitimately slow, raise the collective timeout"
)
STALLED_FIX = (
    "every rank is in the same collective and nothing moves: the code agrees, the transport does not; run "
    "`ncclcheck env` on every node and `ncclcheck logs` on NCCL_DEBUG=INFO logs (IB/NET errors, wrong interface, "
    "firewall between nodes)"
)
DEAD_FIX = (
    "a stopped rank: resume it (kill -CONT) or find who stopped it; an exited rank: read its log "
    "(ncclcheck logs) for why it died (OOM killer: dmesg); the others cannot finish without it"
)
REMOTE_FIX = (
    "watch the node(s) holding those ranks (ncclcheck watch there); the one not in this collective, or not "
    "moving, is the one to look at"
)
UNREADABLE_FIX = "let py-spy read every rank (see the note); until then the rank without a stack cannot be judged"
NO_PROGRESS_FIX = "read the stacks: run ncclcheck watch without --no-stacks, with py-spy and ptrace permitted"


@dataclass(frozen=True)
class Judging:
    """How long standing still must last before it counts: ``stall_s``; at the last look of ``--once``
    (``final``), a rank that stood still through the whole window counts too."""

    stall_s: float
    final: bool = False

    def threshold(self, window_s: float) -> float:
        return min(self.stall_s, max(window_s, QUICK_S)) if self.final else self.stall_s


def track(previous: WatchState | None, snapshot: Snapshot, judging: Judging, notes: tuple[str, ...] = ()) -> WatchState:
    """This sample's views (how long each rank has stood still), the findings and the verdict."""
    tracked = advance(previous, snapshot)
    findings = judge(tracked, snapshot.job, judging)
    verdict = summarise(tracked, snapshot.job, findings, judging)
    return WatchState(tracked.time, snapshot.job, tracked.views, findings, verdict, tracked.window_s,
                      tracked.samples, notes)  # fmt: skip


@dataclass(frozen=True)
class _Sides:
    """The ranks of one look, sorted by what they show."""

    exited: list[RankView]
    stopped: list[RankView]
    live: list[RankView]
    waiting: list[RankView]  # in a collective, quiet for the threshold
    blocked: list[RankView]  # in a collective, no movement at all through the quick window
    busy: list[RankView]  # stack read: not in any collective
    unknown: list[RankView]  # no stack
    moving: list[RankView]  # in a collective, not quiet long enough
    remote: tuple[int, ...]


def _sides(views: Sequence[RankView], job: Job, limit: float) -> _Sides:
    live = [v for v in views if v.sample.status not in DEAD]
    return _Sides(
        exited=[v for v in views if v.sample.status in EXITED],
        stopped=[v for v in views if v.sample.status == "stopped"],
        live=live,
        waiting=[v for v in live if v.collective and v.quiet_s >= limit],
        blocked=[v for v in live if v.collective and _blocked(v)],
        busy=[v for v in live if v.known and not v.collective],
        unknown=[v for v in live if not v.known],
        moving=[v for v in live if v.collective and v.quiet_s < limit],
        remote=job.remote(),
    )


def _blocked(v: RankView) -> bool:
    return v.idle_s >= QUICK_S and v.idle_samples >= QUICK_SAMPLES


def judge(tracked: Tracked, job: Job, judging: Judging) -> tuple[WatchFinding, ...]:
    """Findings over one look (errors first)."""
    if tracked.samples < 2:
        return ()
    limit = judging.threshold(tracked.window_s)
    s = _sides(tracked.views, job, limit)
    if tracked.views and not s.live and not s.stopped:
        return (_finished(s.exited),)
    out = []
    dead = s.exited + s.stopped
    if dead:
        out.append(_dead(dead, _unique(s.waiting + s.blocked), bool(s.live)))
    places = _group(s.waiting)
    quick = _group(s.blocked)
    everyone_blocked = not s.remote and not dead and len(s.blocked) == len(s.live) > 1
    if s.busy and s.waiting:
        out.append(_straggler(s.busy, places, tracked.window_s))
    if len(places) > 1 and not s.moving:
        out.append(_mismatch(places, s.remote))
    elif everyone_blocked and len(quick) > 1:
        out.append(_mismatch(quick, ()))
    elif len(places) == 1 and s.waiting and not s.busy and not dead and not s.moving and not s.unknown:
        out.append(_remote(s.waiting, s.remote, limit) if s.remote else _stalled(s.waiting, limit))
    if s.unknown and s.waiting and not s.busy and not dead:
        out.append(_unreadable(s.unknown, places))
    if s.live and not any(v.known for v in s.live) and all(v.idle_s >= limit for v in s.live):
        out.append(_no_progress(s.live, limit))
    order = ("error", "warning", "info")
    return tuple(sorted(out, key=lambda f: order.index(f.severity)))


def _unique(views: Sequence[RankView]) -> list[RankView]:
    return list({v.rank: v for v in views}.values())


def _group(views: Sequence[RankView]) -> dict[tuple[str, str], list[RankView]]:
    """Ranks by where they wait (collective and call site), the largest group first."""
    places: dict[tuple[str, str], list[RankView]] = defaultdict(list)
    for v in sorted(views, key=lambda v: v.rank):
        places[(v.collective or "", v.call_site or "")].append(v)
    return dict(sorted(places.items(), key=lambda kv: (-len(kv[1]), kv[1][0].rank)))


def short(site: str | None) -> str:
    """``train.py:88`` from ``/home/u/train.py:88 (step)``."""
    if not site:
        return "an unknown place"
    where = site.split(" (")[0]
    return os.path.basename(where)


def _where(places: dict[tuple[str, str], list[RankView]]) -> str:
    return "; ".join(
        f"rank {span([v.rank for v in group])} {'wait' if len(group) > 1 else 'waits'} in {op} at {short(site)}"
        for (op, site), group in places.items()
    )


def _ranks(*groups: Sequence[RankView]) -> tuple[int, ...]:
    return tuple(sorted({v.rank for group in groups for v in group}))


def _finished(exited: Sequence[RankView]) -> WatchFinding:
    codes = {v.rank: v.sample.exit_code for v in exited}
    failed = sorted(r for r, c in codes.items() if c not in (None, 0))
    known = [r for r, c in codes.items() if c is not None]
    if failed:
        how = "; ".join(f"rank {r} {_exit(codes[r])}" for r in failed)
        message = f"every rank of the job on this node has exited: {how}"
    elif known:
        unknown = sorted(set(codes) - set(known))
        rest = f"; rank {span(unknown)}: exit code not known (already reaped by its launcher)" if unknown else ""
        message = f"every rank of the job on this node has exited: rank {span(known)} with exit code 0{rest}"
    else:
        message = (
            "every rank of the job on this node has exited (exit codes not known here: their launcher reaped them;"
            " its output says how they ended)"
        )
    fix = "read the failed ranks' logs (ncclcheck logs)" if failed else ""
    return WatchFinding("finished", "warning" if failed else "info", _ranks(exited), tuple(failed), message, fix)


def _exit(code: int | None) -> str:
    if code is None:
        return "exited (exit code not known)"
    return f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"


def _dead(dead: Sequence[RankView], waiters: Sequence[RankView], others_alive: bool) -> WatchFinding:
    parts = []
    for v in sorted(dead, key=lambda v: v.rank):
        s = v.sample
        what = {
            "stopped": f"is stopped (SIGSTOP or a debugger; `kill -CONT {s.pid}` resumes it)",
            "zombie": f"{_exit(s.exit_code)} (zombie pid {s.pid}, not yet reaped by its launcher)",
            "gone": f"has exited (pid {s.pid} is gone)",
            "missing": "has no process on this node (it exited, or never started)",
        }[s.status]
        parts.append(f"rank {v.rank} {what}")
    if waiters:
        tail = f" while {_where(_group(waiters))}"
    elif others_alive:
        tail = " — the other ranks do not wait on it (yet)"
    else:
        tail = ""
    severity = "error" if waiters else "warning"
    return WatchFinding("dead", severity, _ranks(dead, waiters), _ranks(dead), "; ".join(parts) + tail, DEAD_FIX)


def _straggler(
    busy: Sequence[RankView], places: dict[tuple[str, str], list[RankView]], window_s: float
) -> WatchFinding:
    parts = []
    for v in sorted(busy, key=lambda v: v.rank):
        at = f" at {short(v.call_site)}" if v.call_site else ""
        least = "at least " if v.since_s >= window_s - 1e-6 else ""  # there before watching began
        how = (
            f"has been in {v.doing}{at} for {least}{v.since_s:.0f} s" if v.since_s >= 1 else f"is busy in {v.doing}{at}"
        )
        parts.append(f"rank {v.rank} is not in any collective: it {how}{_cpu_note(v)}")
    waiters = [v for group in places.values() for v in group]
    message = "; ".join(parts) + f" — {_where(places)} (no progress for {min(v.quiet_s for v in waiters):.0f} s)"
    return WatchFinding("straggler", "error", _ranks(busy, waiters), _ranks(busy), message, STRAGGLER_FIX)


def _cpu_note(v: RankView) -> str:
    if v.main_cpu_percent is None:
        return ""
    if v.main_cpu_percent < 1:
        return " (its main thread is idle: blocked on I/O, a lock, a queue or a sleep)"
    return f" (its main thread is busy: {v.main_cpu_percent:.0f}% CPU)"


def _mismatch(places: dict[tuple[str, str], list[RankView]], remote: Sequence[int]) -> WatchFinding:
    groups = list(places.values())
    involved = sum(len(g) for g in groups)
    ops = {op for op, _ in places}
    kind = "mismatched collectives" if len(ops) > 1 else "the same collective from different call sites"
    if len(groups[0]) * 2 > involved:  # a clear majority: the rest are the odd ones out
        odd = _ranks(*groups[1:])
        blame = f"rank {span(odd)} {'is' if len(odd) == 1 else 'are'} the odd one{'s' if len(odd) > 1 else ''} out"
    else:
        odd = ()
        blame = "no side holds a majority, so the stacks cannot tell which side is wrong: compare both call sites"
    unseen = f" (rank {span(remote)} on other nodes not seen from here)" if remote else ""
    message = f"{_where(places)} — {kind}: {blame}{unseen}"
    return WatchFinding("mismatch", "error", _ranks(*groups), odd, message, MISMATCH_FIX)


def _stalled(waiting: Sequence[RankView], limit: float) -> WatchFinding:
    v = waiting[0]
    message = (
        f"rank {span([w.rank for w in waiting])} all wait in {v.collective} at {short(v.call_site)} "
        f"with no progress for {min(w.quiet_s for w in waiting):.0f} s (at least {limit:g} s: --stall)"
    )
    return WatchFinding("stalled", "error", _ranks(waiting), (), message, STALLED_FIX)


def _remote(waiting: Sequence[RankView], remote: Sequence[int], limit: float) -> WatchFinding:
    v = waiting[0]
    message = (
        f"rank {span([w.rank for w in waiting])} (every rank on this node) wait in {v.collective} at "
        f"{short(v.call_site)} with no progress for {min(w.quiet_s for w in waiting):.0f} s; the ranks they wait "
        f"on are elsewhere: rank {span(remote)} run on other nodes, not seen from here — this view cannot tell "
        "a stuck rank there from a transport problem"
    )
    return WatchFinding("waiting-remote", "warning", _ranks(waiting), (), message, REMOTE_FIX)


def _unreadable(unknown: Sequence[RankView], places: dict[tuple[str, str], list[RankView]]) -> WatchFinding:
    reasons = "; ".join(f"rank {v.rank}: {v.sample.stack_error or 'no stack'}" for v in unknown)
    message = (
        f"{_where(places)} with no progress; the stack of rank {span([v.rank for v in unknown])} could not be read "
        f"({reasons}): it may be the rank they wait on"
    )
    waiters = [v for group in places.values() for v in group]
    return WatchFinding("unreadable", "warning", _ranks(unknown, waiters), (), message, UNREADABLE_FIX)


def _no_progress(live: Sequence[RankView], limit: float) -> WatchFinding:
    message = (
        f"no rank moved for {min(v.idle_s for v in live):.0f} s: no CPU on any main thread, no bytes on any rank's "
        "sockets; without stacks ncclcheck cannot tell whether they wait in a collective or on something else"
    )
    return WatchFinding("no-progress", "warning", _ranks(live), (), message, NO_PROGRESS_FIX)


def summarise(tracked: Tracked, job: Job, findings: Sequence[WatchFinding], judging: Judging) -> Verdict:
    """The one line on top: what was found, or what is still being watched and for how long, or ✓."""
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        return Verdict("problem", f"✗ {', '.join(dict.fromkeys(f.kind for f in errors))}: see the findings")
    finished = next((f for f in findings if f.kind == "finished"), None)
    if finished:
        failed = " (some ranks failed: see the findings)" if finished.severity == "warning" else ""
        return Verdict("finished", f"■ the job has finished on this node{failed}")
    warnings = [f for f in findings if f.severity == "warning"]
    if warnings:
        return Verdict("warning", f"! {', '.join(dict.fromkeys(f.kind for f in warnings))}: see the findings")
    pending = _pending(tracked, job, judging)
    if pending:
        return Verdict("pending", pending)
    seen = f"{tracked.window_s:.0f} s" if tracked.window_s >= 1 else "the first samples"
    if not any(v.known for v in tracked.views):
        return Verdict(
            "ok", f"✓ every rank moved (main-thread CPU or sockets) in {seen}; no stacks: collectives not compared"
        )
    return Verdict("ok", f"✓ no problem seen in {seen}: every rank is moving")


def _pending(tracked: Tracked, job: Job, judging: Judging) -> str | None:
    """What stands still but is not judged yet, and for how much longer; None when nothing does."""
    if tracked.samples < 2:
        return "… watching: first sample"
    limit = judging.threshold(tracked.window_s)
    live = [v for v in tracked.views if v.sample.status not in DEAD]
    still = [v for v in live if (v.collective and v.quiet_s > 0) or (not v.known and v.idle_s > 0)]
    if not still:
        return None
    longest = max(v.quiet_s if v.collective else v.idle_s for v in still)
    left = max(limit - longest, 0.0)
    what = "; ".join(
        f"rank {span([v.rank for v in group])} in {op or 'an unknown place'} for {max(v.quiet_s for v in group):.0f} s"
        for (op, _), group in _group(still).items()
    )
    if judging.final:
        return (
            f"… not judged: stood still, but not long enough to call it a hang ({what}; --stall {judging.stall_s:g} s)"
        )
    return f"… watching: {what} without progress; {left:.0f} s more before judging"


QUICK_INTERVAL_S = 0.3


def rejudge(state: WatchState, judging: Judging) -> WatchState:
    """The same look judged again (``--once``'s last look: what stood still through the window counts)."""
    tracked = Tracked(state.time, state.window_s, state.samples, state.ranks)
    findings = judge(tracked, state.job, judging)
    verdict = summarise(tracked, state.job, findings, judging)
    return WatchState(state.time, state.job, state.ranks, findings, verdict, state.window_s, state.samples,
                      state.notes)  # fmt: skip


def decided(state: WatchState) -> bool:
    """Whether waiting longer cannot change the answer: a problem or the end is found, a warning was judged,
    or every rank has moved through the quick windows."""
    if state.verdict.status in ("problem", "finished"):
        return True
    if state.verdict.status == "warning":  # judged after --stall; only a dead rank nobody waits on yet may change
        return all(f.kind != "dead" for f in state.findings)
    return state.verdict.status == "ok" and state.window_s >= 2 * QUICK_S


def next_delay(state: WatchState | None, interval_s: float) -> float:
    """Seconds to the next sample: quick ones at the start and while a rank has just begun to stand still in
    a collective (a mismatch needs a few samples close together), else ``interval_s``."""
    if state is None or state.window_s < 2 * QUICK_S:
        return min(QUICK_INTERVAL_S, interval_s)
    live = [v for v in state.ranks if v.sample.status not in DEAD]
    if any(v.collective and 0 < v.quiet_s < 2 * QUICK_S for v in live):
        return min(QUICK_INTERVAL_S, interval_s)
    return interval_s
