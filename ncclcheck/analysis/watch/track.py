"""From one sample to the next: where each rank is, and how long it has stood there by four clocks.

A rank *progresses* when its place changes (its main thread's Python frames or its process state) or
when a collective's bytes cross its TCP sockets (the store's and heartbeat-sized chatter are left out
by the sampler). What other threads write (a logging thread, tqdm, a metrics exporter) moves none of
these, so a hung rank with a chatty thread still stands still.

Main-thread CPU is never proof of progress: a rank that waits in an NCCL barrier or a CUDA
synchronisation spins its main thread at 100 % without going anywhere. It is reported (a busy rank
outside a collective computes, or spins), and where socket counters cannot be read it keeps a
collective's ``quiet_s`` from growing, so that no finding rests on the missing counters.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ncclcheck.analysis.stacks import CUDA_SYNC, call_path, call_site, collective, cuda_sync, user_frame
from ncclcheck.analysis.stacks import P2P as P2P_CALLS
from ncclcheck.analysis.watch.arguments import parse
from ncclcheck.analysis.watch.shares import tally
from ncclcheck.model.args import CallArgs
from ncclcheck.model.shares import window
from ncclcheck.model.stacks import Frame, mine
from ncclcheck.model.watch import RankSample, RankView, Snapshot, WatchState

BACKWARD = ("_engine_run_backward", "backward")
TICK_S = 0.005  # half a clock tick: less main-thread CPU than this is no CPU at all


@dataclass(frozen=True)
class Tracked:
    """The views of one sample, before findings: what ``analysis.watch.judge`` reads."""

    time: float
    window_s: float
    samples: int
    views: tuple[RankView, ...]
    launcher_running: bool | None = None
    recording: bool = False


def doing(sample: RankSample) -> tuple[str | None, str | None, str]:
    """The collective a rank is in (DDP's backward counts: its all-reduce runs there; so does a CUDA synchronisation:
    with NCCL, collectives are queued on the GPU and the host waits there for them), its call site, a label."""
    found = collective(sample.stack)
    if found is None and any(f.function in BACKWARD and "torch/autograd" in f.filename for f in sample.stack):
        found = "backward"
    if found is None and cuda_sync(sample.stack):
        found = CUDA_SYNC
    site = call_site(sample.stack)
    if found:
        return found, site, found
    if sample.stack:  # the user's own function, the one whose line the call site gives
        mine = user_frame(sample.stack)
        python = [f for f in sample.stack if not f.native] or list(sample.stack)
        return None, site, (mine or python[0]).function
    return None, site, sample.status


def path(v: RankView) -> tuple[str | None, ...]:
    """The user's frames a rank calls its collective through (those of its place where this dump failed; its call
    site alone where no frames are known): two ranks at one helper's line called from different lines are in
    different calls."""
    frames = v.sample.stack or (v.place[0] if v.place and isinstance(v.place[0], tuple) else ())
    return call_path([f for f in frames if isinstance(f, Frame)]) or (v.call_site,)


def advance(previous: WatchState | None, snapshot: Snapshot) -> Tracked:
    """This sample's views, each rank's clocks carried on from the previous state."""
    if previous is None or previous.job.ranks != snapshot.job.ranks:
        views = tuple(_counted(_first(s), None) for s in snapshot.samples)
        return Tracked(snapshot.time, 0.0, 1, views, snapshot.launcher_running, snapshot.recording)
    before = {v.rank: v for v in previous.ranks}
    elapsed = max(snapshot.time - previous.time, 0.0)
    views = tuple(_counted(_view(s, before.get(s.rank), elapsed), before.get(s.rank)) for s in snapshot.samples)
    return Tracked(
        snapshot.time,
        previous.window_s + elapsed,
        previous.samples + 1,
        views,
        snapshot.launcher_running,
        snapshot.recording,
    )


def _counted(view: RankView, before: RankView | None) -> RankView:
    """The view with its rounds of the last minute: those it had, and the ones finished since (a new process under
    the same rank number starts afresh)."""
    kept = before.tallies if before is not None and before.sample.pid == view.sample.pid else ()
    if not view.sample.rounds:
        return replace(view, tallies=kept) if kept else view
    return replace(view, tallies=window(kept, [tally(r) for r in view.sample.rounds if r.error is None]))


def _first(sample: RankSample) -> RankView:
    found, site, label = doing(sample)
    args = with_posted(parse(sample.locals) if sample.locals else None, sample)
    found, label = _waiting(found, label, args)
    return RankView(sample, found, site, label, 0.0, 0.0, 0.0, 0.0, 0, None, False, 0, _place(sample), args)


def _waiting(found: str | None, label: str, args: CallArgs | None) -> tuple[str | None, str]:
    """A rank asleep in ``work.wait()`` (told by its locals: the stack shows only the user's frame) waits in a
    collective: ``wait``, as with --native's C frames."""
    if found is None and args is not None and args.op == "wait":
        return "wait", "wait"
    return found, label


def _view(sample: RankSample, before: RankView | None, elapsed: float) -> RankView:
    if before is None:
        return _first(sample)
    prior = before.sample
    if sample.exit_code is None and prior.exit_code is not None and sample.status in ("gone", "zombie"):
        sample = replace(sample, exit_code=prior.exit_code)  # seen as a zombie, then reaped: the code stays known
    unread = not sample.stack and sample.stack_error is not None and _state(sample) == before.place[-1]
    if unread or (sample.stack == prior.stack and _state(sample) == _state(prior)):
        # the same frames, or a dump that failed this time (a timeout on a loaded node): no new place
        found, site, label, same_place, place = before.collective, before.call_site, before.doing, True, before.place
    else:
        found, site, label = doing(sample)
        place = _place(sample)
        same_place = place == before.place
    net_known = sample.net_bytes is not None and prior.net_bytes is not None
    net_moved = net_known and sample.net_bytes != prior.net_bytes
    cpu = _cpu(prior, sample)
    cpu_moved = cpu is not None and cpu >= TICK_S
    still = same_place and not net_moved
    quiet = still and (net_known or not cpu_moved)
    idle = still and not cpu_moved
    args = _args(sample, before if same_place and not net_moved else None)  # bytes moved: maybe the next call
    found, label = _waiting(found, label, args)
    return RankView(
        sample,
        found,
        site,
        label,
        since_s=before.since_s + elapsed if same_place else 0.0,
        still_s=before.still_s + elapsed if still else 0.0,
        quiet_s=before.quiet_s + elapsed if quiet else 0.0,
        idle_s=before.idle_s + elapsed if idle else 0.0,
        idle_samples=before.idle_samples + 1 if idle else 0,
        main_cpu_percent=None if cpu is None or elapsed <= 0 else min(cpu / elapsed * 100, 100.0),
        progressing=not still,
        moved_samples=0 if still else before.moved_samples + 1,
        place=place,
        args=args,
        held_s=before.held_s + elapsed if same_place or _position(place) == _position(before.place) else 0.0,
    )


def _position(place: tuple[object, ...]) -> tuple[object, ...]:
    """A place without its lines: the user's functions (file and name) the main thread is in, and the state."""
    frames = place[0] if place and isinstance(place[0], tuple) else ()
    mine_only = tuple((f.filename, f.function) for f in frames if isinstance(f, Frame) and mine(f))
    return mine_only, place[-1] if place else None


def _args(sample: RankSample, before: RankView | None) -> CallArgs | None:
    """The arguments read at this place: from this sample's locals, else those read earlier while it stood there;
    with what run's hook says the rank has in flight."""
    if sample.locals:
        return with_posted(parse(sample.locals), sample)
    return with_posted(before.args if before is not None else None, sample)


def with_posted(args: CallArgs | None, sample: RankSample) -> CallArgs | None:
    """The call's point-to-point ops as ``ncclcheck run``'s hook recorded them (``sample.p2p``): the peers of a
    ``work.wait()`` and of a batch, which no stack shows, and whether anything posted earlier is still in flight.
    A main thread asleep at a line that calls ``.wait()``, with ops pending, waits on them."""
    ops = sample.p2p
    if ops is None:
        return args
    pending = tuple(o.as_p2p() for o in ops.pending())
    if args is None:
        frame = user_frame(sample.stack)
        code = sample.deep.code_at(frame.filename, frame.line) if sample.deep and frame else None
        waits = code is not None and any(c.endswith(".wait") for c in code.calls)
        return CallArgs("wait", p2p=pending) if pending and waits and not collective(sample.stack) else None
    if args.op == "wait" or args.pending or (args.op in P2P_CALLS and args.p2p is None):
        return replace(args, p2p=pending or args.p2p, pending=False)
    return args


def _cpu(prior: RankSample, sample: RankSample) -> float | None:
    if prior.main_cpu_s is None or sample.main_cpu_s is None:
        return None
    return max(sample.main_cpu_s - prior.main_cpu_s, 0.0)


def _place(sample: RankSample) -> tuple[object, ...]:
    """Where a rank is: its Python frames and process state.

    Native frames (``--native``) are left out: a thread parked in a wait loop wakes and sleeps in
    different C frames from one sample to the next without moving at all.
    """
    return tuple(f for f in sample.stack if not f.native), _state(sample)


def _state(sample: RankSample) -> str:
    """Running and sleeping are one state here: a thread that polls flips between them without going anywhere."""
    return sample.status if sample.status in ("stopped", "zombie", "gone", "missing") else "alive"
