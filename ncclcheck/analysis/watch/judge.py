"""From a job's tracked views to what is wrong, and one verdict: pure functions over frozen data.

The evidence and how long it needs:
- Ranks blocked in *different* collectives (DDP's backward and point-to-point pairs aside), every rank of
  the job seen here, none moving at all (no new frame, no collective bytes on sockets that can be
  counted, no main-thread CPU) across a few quick samples: a mismatch, in about 2 s. Nobody is left to
  make progress, so waiting longer adds nothing.
- Everything else needs ``--stall`` seconds of standing still: a rank outside any collective while the
  others wait (a slow rank and a stuck one look alike for a while), everyone in the same collective
  (a long GPU queue looks like that too), ranks waiting on ranks that live on other nodes.
- A rank that stopped, or exited while others wait on it, is dead (an error); one that exited while the
  others run on is reported as exited; every rank exited is "finished", with exit codes where the kernel
  still has them.
- The arguments of the calls the ranks stand in (read by the sampler only then) speak before the stacks' vote:
  ranks in send/recv waiting on each other (waitfor), a root or group the ranks disagree on (disagree), a rank
  waiting on a sub-group (subgroup: never blamed by majority), DDP's backward against ranks that left the loop
  (uneven). ``stalled`` (the transport) is left for ranks whose arguments agree, or could not be read.
- Until a judgement is due the verdict says what is watched and for how much longer; where the evidence
  cannot decide (a busy main thread that never changes frame), it says so. Never ✓ without progress.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ncclcheck.analysis.watch import ends
from ncclcheck.analysis.watch import findings as make
from ncclcheck.analysis.watch.disagree import disagreements
from ncclcheck.analysis.watch.findings import group
from ncclcheck.analysis.watch.posted import unmatched
from ncclcheck.analysis.watch.shares import rank_shares
from ncclcheck.analysis.watch.slow import SLOW, enough, slowness
from ncclcheck.analysis.watch.subgroup import Members, subgroup_wait
from ncclcheck.analysis.watch.track import Tracked, advance, doing
from ncclcheck.analysis.watch.uneven import NOT_COLLECTIVES, uneven_inputs
from ncclcheck.analysis.watch.verdict import DEAD, summarise
from ncclcheck.analysis.watch.waitfor import p2p_deadlock
from ncclcheck.analysis.watch.world import INIT, world_waits
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.stacks import short
from ncclcheck.model.watch import Job, RankView, Snapshot, WatchState

__all__ = [
    "QUICK_S",
    "Judging",
    "decided",
    "doing",
    "hangs_in",
    "judge",
    "next_delay",
    "rejudge",
    "settling",
    "short",
    "stands",
    "track",
]

QUICK_S = 1.5  # the quick window: no movement at all for this long, over at least QUICK_SAMPLES intervals
QUICK_SAMPLES = 3
QUICK_INTERVAL_S = 0.3
ROUND_WAIT_FOR_S = 20.0
ROUND_WAIT_S = 0.5  # until the ranks' shares can first be compared: each round is read soon after it ends
EXITED = frozenset({"gone", "zombie", "missing"})
ORDER = ("error", "warning", "info")


@dataclass(frozen=True)
class Judging:
    """How long standing still must last before it counts: ``stall_s``; at the last look of ``--once``
    (``final``), a rank that stood still through the whole window counts too."""

    stall_s: float
    final: bool = False
    window_s: float | None = None  # the window --once was asked to watch (it may have seen less: a restart)
    groups: tuple[frozenset[int], ...] = ()  # the job's process groups where known (run's control plane)

    def threshold(self, window_s: float) -> float:
        if not self.final:
            return self.stall_s
        return min(self.stall_s, max(self.window_s if self.window_s is not None else window_s, QUICK_S))


def track(previous: WatchState | None, snapshot: Snapshot, judging: Judging, notes: tuple[str, ...] = ()) -> WatchState:
    """This sample's views (how long each rank has stood still), the findings and the verdict."""
    return _judged(advance(previous, snapshot), snapshot.job, judging, notes)


def rejudge(state: WatchState, judging: Judging) -> WatchState:
    """The same look judged again (``--once``'s last look: what stood still through the window counts)."""
    tracked = Tracked(state.time, state.window_s, state.samples, state.ranks, state.launcher_running, state.recording)
    return _judged(tracked, state.job, judging, state.notes)


def _judged(tracked: Tracked, job: Job, judging: Judging, notes: tuple[str, ...]) -> WatchState:
    findings = judge(tracked, job, judging)
    limit = judging.threshold(tracked.window_s)
    verdict = summarise(
        tracked.views,
        tracked.samples,
        tracked.window_s,
        findings,
        limit,
        judging.stall_s,
        judging.final,
        tracked.recording,
    )
    return WatchState(
        tracked.time,
        job,
        tracked.views,
        findings,
        verdict,
        tracked.window_s,
        tracked.samples,
        notes,
        tracked.launcher_running,
        shares=rank_shares(tracked.views),
        recording=tracked.recording,
    )


@dataclass(frozen=True)
class _Sides:
    """The ranks of one look, sorted by what they show."""

    exited: list[RankView]
    stopped: list[RankView]  # stopped at two samples in a row; under ptrace, longer than a sampler holds one
    pausing: list[RankView]  # stopped at this sample only, or held by a tracer for a moment (py-spy dump)
    live: list[RankView]
    waiting: list[RankView]  # in a collective, quiet for the threshold
    blocked: list[RankView]  # in a c10d collective, no movement at all through the quick window
    busy: list[RankView]  # stack read: not in any collective
    unknown: list[RankView]  # no stack
    moving: list[RankView]  # in a collective, not quiet long enough
    remote: tuple[int, ...]


def _sides(views: Sequence[RankView], job: Job, limit: float) -> _Sides:
    live = [v for v in views if v.sample.status not in DEAD]
    return _Sides(
        exited=[v for v in views if v.sample.status in EXITED],
        stopped=[v for v in views if ends.held(v, limit)],
        pausing=[v for v in views if v.sample.status == "stopped" and not ends.held(v, limit)],
        live=live,
        waiting=[v for v in live if v.collective and v.quiet_s >= limit],
        blocked=[v for v in live if _blocked(v)],
        busy=[v for v in live if v.known and not v.collective],
        unknown=[v for v in live if not v.known],
        moving=[v for v in live if v.collective and v.quiet_s < limit],
        remote=job.remote(),
    )


def _blocked(v: RankView) -> bool:
    """Blocked for the quick answer: in a c10d collective (not DDP's backward, where autograd's threads work
    while the main thread waits; a request's wait only where run's record names its peers), with socket counters
    readable, and nothing moving at all."""
    known = v.collective not in NOT_COLLECTIVES or (v.collective == "wait" and _peers_known(v))
    return known and v.sample.net_bytes is not None and v.idle_s >= QUICK_S and v.idle_samples >= QUICK_SAMPLES


def _peers_known(v: RankView) -> bool:
    """A request's wait whose ops are all known (run's record): what it waits for is as exact as a collective's."""
    return v.args is not None and bool(v.args.p2p) and not v.args.pending and v.sample.p2p is not None


def judge(tracked: Tracked, job: Job, judging: Judging, members: Members | None = None) -> tuple[Finding, ...]:
    """Findings over one look (errors first). ``members``: evidence from outside the stacks (a Flight Recorder
    dump, ``ncclcheck run``'s control plane) of the sub-group each waiting rank waits in: it names the culprit
    of a ``subgroup-wait``."""
    if tracked.samples < 2:
        return ()
    limit = judging.threshold(tracked.window_s)
    s = _sides(tracked.views, job, limit)
    if tracked.views and len(s.exited) == len(tracked.views):
        return (ends.finished(s.exited, tracked.launcher_running),)
    if s.pausing:  # a rank held a moment (a sampler, a SIGSTOP seen once): where it stands is not known, and a
        return ()  # verdict made without it (every other rank in the collective: "stalled") would blame the transport
    hosts = len({v.sample.host for v in tracked.views}) > 1  # several nodes' ranks: name each culprit's host
    world = world_waits(tracked.views, job, lambda v: v.quiet_s >= limit or _blocked(v), limit, hosts)
    if world:  # start-up or group creation: the ranks not there are the culprits, whatever the others' vote
        return tuple(sorted(world, key=lambda f: ORDER.index(f.severity)))
    waiters = list({v.rank: v for v in s.waiting + s.blocked}.values())
    settled = not s.remote and not s.exited and not s.stopped and not s.pausing
    everyone_blocked = settled and len(s.blocked) == len(s.live) > 1
    # before --stall, only when every rank is blocked: a slow step leaves a few ranks standing in a collective a while
    judged = list({v.rank: v for v in s.waiting + (s.blocked if everyone_blocked else [])}.values())
    code = _code(s, judged, job, hosts, members)
    out = _lost(s, waiters, limit, hosts)
    if any(f.id == watch_ids.UNEVEN_INPUTS for f in code) and not s.stopped:  # ranks that left the loop, not died
        out = [f for f in out if f.id != watch_ids.DEAD]
    dead = bool(s.stopped) or bool(waiters and s.exited)
    places, quick = group(s.waiting), group(s.blocked)
    all_waited = not s.moving and len(s.waiting) == len(s.live) > 1
    ops = {op for op, _ in places}
    if s.busy and s.waiting:
        out.append(make.straggler(s.busy, places, tracked.window_s, limit, hosts))
    if code:  # the arguments (or DDP's backward) say what the stacks' vote cannot
        out.extend(code)
    elif len(ops | {op for op, _ in quick}) > 1 and any(v.args and v.args.group == "other" for v in waiters):
        # a sub-group's collective beside the world's is no mismatch: a straggler, or subgroup-wait, says it
        if s.remote and len(s.waiting) == len(s.live) and not dead:  # or the sub-group's members elsewhere
            out.append(make.waiting_remote(s.waiting, s.remote))
        elif not s.remote and not dead and not s.busy and not s.unknown and (everyone_blocked or all_waited):
            out.append(make.subgroups_stuck(group(waiters)))  # every rank waits, none moves: nobody can go on
    # init_process_group beside a collective is no mismatch: a rank in a collective is past init (world_waits)
    elif len(ops) > 1 and not s.moving and INIT not in ops:
        out.append(make.mismatch(places, job.world_size, s.remote, hosts))
    elif everyone_blocked and len(quick_ops := {op for op, _ in quick}) > 1 and INIT not in quick_ops:
        out.append(make.mismatch(quick, job.world_size, (), hosts))
    elif len(ops) == 1 and ops != {"backward"} and len(s.waiting) == len(s.live) > (0 if s.remote else 1) and not dead:
        # all in DDP's backward is left undecided: a long backward (torch.compile's first step) looks the same
        out.append(make.waiting_remote(s.waiting, s.remote) if s.remote else make.stalled(s.waiting, limit))
    if s.unknown and s.waiting and not s.busy and not dead:
        out.append(make.unreadable(s.unknown, places))
    explained = [f for f in out if f.severity != "info"]
    if s.live and not explained and all(v.idle_s >= limit for v in s.live):  # only when nothing else explains it
        out.append(make.no_progress(s.live))
    if not out and not s.exited and not s.stopped and not s.unknown and not s.remote:
        known = set(members.values()) if members else set()  # the sub-groups known: waited in, or answered
        groups = tuple(sorted(known | set(judging.groups), key=sorted))
        out.extend(slowness(s.live, hosts, groups))  # a job that runs, every rank of it seen: does one hold back?
    return tuple(sorted(out, key=lambda f: ORDER.index(f.severity)))


def _code(s: _Sides, waiters: list[RankView], job: Job, hosts: bool, members: Members | None) -> list[Finding]:
    """What the ranks standing still tell about the code through their calls' arguments: a point-to-point
    deadlock, a rank waiting on a sub-group, DDP's uneven inputs, a root or group mismatch."""
    clean = [v for v in s.exited if v.sample.exit_code in (0, None)]
    judged = {v.rank for v in waiters}
    arriving = [v for v in s.moving if v.rank not in judged]  # blocked ranks judged in the quick window are not
    deadlock = p2p_deadlock(waiters, job.world_size, hosts)
    found = [
        deadlock if deadlock is not None else unmatched(waiters, s.live),
        # only where every other rank is seen waiting: else a straggler, a rank just arriving (maybe the missing
        # member), one elsewhere or a dead one explains it
        subgroup_wait(waiters, members)
        if not (s.busy or s.unknown or arriving or s.remote or s.exited or s.stopped)
        else None,
        uneven_inputs(waiters, clean),
    ]
    return [f for f in found if f is not None] + disagreements(waiters, job.world_size)


def _lost(s: _Sides, waiters: list[RankView], limit: float, hosts: bool) -> list[Finding]:
    """Stopped ranks, and exited ones others wait on, are dead; exited ones nobody waits on, just exited (a
    warning when the ones left have not moved since: they may wait on them outside a collective)."""
    if waiters and (s.exited or s.stopped):
        return [ends.dead(s.exited + s.stopped, waiters, hosts)]
    out = [ends.dead(s.stopped, (), hosts)] if s.stopped else []
    if s.exited:
        stuck = [v for v in s.live if v.still_s >= limit] if s.live else []
        out.append(ends.exited(s.exited, stuck if len(stuck) == len(s.live) else (), hosts))
    return out


# a slow job, a job ended, a rank gone while the others run on (a "dead" follows once they wait on it), a rank's
# control plane silent: none of them is ranks standing still past --stall
NOT_HANGS = frozenset(
    {
        watch_ids.SLOW_RANK,
        watch_ids.SLOW_NODE,
        watch_ids.COMMUNICATION_BOUND,
        watch_ids.FINISHED,
        watch_ids.EXITED,
        watch_ids.CONTROL_SILENT,
    }
)


def hangs_in(findings: Sequence[Finding]) -> tuple[Finding, ...]:
    """The findings that say ranks stand still (errors and warnings: a straggler whose line still moves, a start-up
    wait on a rank that may yet come), not that a job runs slowly or has ended; errors first."""
    found = [f for f in findings if f.severity in ("error", "warning") and f.id not in NOT_HANGS]
    if any(f.id == watch_ids.EXITED for f in found) and not any(f.id != watch_ids.EXITED for f in found):
        found = [f for f in found if f.id != watch_ids.EXITED or (f.severity == "warning" and "not moved" in f.message)]
    return tuple(sorted(found, key=lambda f: ORDER.index(f.severity)))


def decided(state: WatchState) -> bool:
    """Whether waiting longer cannot change the answer: a problem found, the job over (its launcher gone too:
    an elastic launcher restarts ranks), a warning judged after --stall, or every rank moving for a while."""
    status = state.verdict.status
    if status == "problem":
        return True
    if status == "finished":
        return not state.launcher_running
    if status == "warning":  # judged after --stall; only a dead rank nobody waits on yet may still change
        return all(f.id != watch_ids.DEAD for f in state.findings)
    live = [v for v in state.ranks if v.sample.status not in DEAD]
    # while rounds of samples come, ✓ waits for enough of them to tell whether a rank holds the others back
    compared = not state.recording or len(live) < 2 or enough(live)
    return status == "ok" and state.window_s >= 2 * QUICK_S and compared


def settling(state: WatchState, stall_s: float) -> bool:
    """Whether the ranks' own answer may still come: a live rank in a collective not yet still for ``stall_s`` (a
    straggler or a stall is judged only then), or one whose stack is not read yet. A warning about the nodes (a
    launcher gone) comes at once and must not end a look that would name a culprit a moment later."""
    live = [v for v in state.ranks if v.sample.status not in DEAD]
    return any(not v.known or (v.collective and v.quiet_s < stall_s) for v in live)


def stands(state: WatchState, stall_s: float) -> bool:
    """Whether a decided look is the answer as it stands. A warning: every warning a slow rank or node (judged over
    its own window already), or nothing the ranks show still ``settling``. A stopped rank (dead, an error at once):
    unless a live rank is outside any collective while others have only begun to wait in one, for the others may
    wait on it too: --stall tells whether it is a straggler as well, which naming the stopped rank alone would leave
    unsaid. A rank that exited is the answer at once: its launcher ends the others a moment later (torchrun does),
    and the look would then see only the job's end."""
    findings = {f.id for f in state.findings}
    if state.verdict.status == "problem":
        if watch_ids.DEAD not in findings or watch_ids.STRAGGLER in findings:
            return True
        if not any(v.sample.status == "stopped" for v in state.ranks):
            return True
        live = [v for v in state.ranks if v.sample.status not in DEAD]
        return not any(v.known and not v.collective for v in live) or not settling(state, stall_s)
    return all(f.id in SLOW for f in state.findings if f.severity == "warning") or not settling(state, stall_s)


def next_delay(state: WatchState | None, interval_s: float) -> float:
    """Seconds to the next sample: quick ones at the start and while a rank has just begun to stand still in
    a collective (a mismatch needs a few samples close together), else ``interval_s``."""
    if state is None or state.window_s < 2 * QUICK_S:
        return min(QUICK_INTERVAL_S, interval_s)
    live = [v for v in state.ranks if v.sample.status not in DEAD]
    if any(v.collective and 0 < v.quiet_s < 2 * QUICK_S for v in live):
        return min(QUICK_INTERVAL_S, interval_s)
    # the first comparison of the ranks' shares comes soon (at most ROUND_WAIT_FOR_S: a rank py-spy cannot record)
    if state.recording and len(live) > 1 and state.window_s < ROUND_WAIT_FOR_S and not enough(live):
        return min(ROUND_WAIT_S, interval_s)
    return interval_s
