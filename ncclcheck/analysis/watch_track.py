"""From one sample to the next: where each rank is, and how long it has stood there by three clocks.

A rank *moves* when its place changes (its main thread's Python frames or its process state), when
bytes cross its TCP sockets (the collectives' traffic; the store's is left out), or when its main
thread uses CPU. What other threads write (a logging thread, tqdm, a metrics exporter) moves none of
these, so a hung rank with a chatty thread still stands still.

Main-thread CPU counts as movement only outside a collective: a rank that waits in an NCCL barrier or
a CUDA synchronisation spins its main thread at 100 % without going anywhere. Where socket counters
cannot be read, main-thread CPU is the only sign of a collective's progress left, and counts there too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ncclcheck.analysis.stacks import call_site, collective
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


def doing(sample: RankSample) -> tuple[str | None, str | None, str]:
    """The collective a rank is in (DDP's backward counts: its all-reduce runs there), its call site, a label."""
    found = collective(sample.stack)
    if found is None and any(f.function in BACKWARD and "torch/autograd" in f.filename for f in sample.stack):
        found = "backward"
    site = call_site(sample.stack)
    if found:
        return found, site, found
    if sample.stack:
        python = [f for f in sample.stack if not f.native] or list(sample.stack)
        inner = next((f for f in python if "/torch/" not in f.filename), python[0])
        return None, site, inner.function
    return None, site, sample.status


def advance(previous: WatchState | None, snapshot: Snapshot) -> Tracked:
    """This sample's views, each rank's clocks carried on from the previous state."""
    if previous is None or previous.job.ranks != snapshot.job.ranks:
        views = tuple(_first(s) for s in snapshot.samples)
        return Tracked(snapshot.time, 0.0, 1, views)
    before = {v.rank: v for v in previous.ranks}
    elapsed = max(snapshot.time - previous.time, 0.0)
    views = tuple(_view(s, before.get(s.rank), elapsed) for s in snapshot.samples)
    return Tracked(snapshot.time, previous.window_s + elapsed, previous.samples + 1, views)


def _first(sample: RankSample) -> RankView:
    found, site, label = doing(sample)
    return RankView(sample, found, site, label, 0.0, 0.0, 0.0, 0, None, False)


def _view(sample: RankSample, before: RankView | None, elapsed: float) -> RankView:
    if before is None:
        return _first(sample)
    prior = before.sample
    if sample.stack == prior.stack and sample.status == prior.status:  # the common case: read it once
        found, site, label, same_place = before.collective, before.call_site, before.doing, True
    else:
        found, site, label = doing(sample)
        same_place = _place(prior) == _place(sample)
    net_known = sample.net_bytes is not None and prior.net_bytes is not None
    net_moved = net_known and sample.net_bytes != prior.net_bytes
    cpu = _cpu(prior, sample)
    cpu_moved = cpu is not None and cpu >= TICK_S
    quiet = same_place and not net_moved and (net_known or not cpu_moved)
    idle = quiet and not cpu_moved
    moved = not same_place or net_moved or (cpu_moved and (found is None or not net_known))
    return RankView(
        sample, found, site, label,
        since_s=before.since_s + elapsed if same_place else 0.0,
        quiet_s=before.quiet_s + elapsed if quiet else 0.0,
        idle_s=before.idle_s + elapsed if idle else 0.0,
        idle_samples=before.idle_samples + 1 if idle else 0,
        main_cpu_percent=None if cpu is None or elapsed <= 0 else min(cpu / elapsed * 100, 100.0),
        progressing=moved,
    )  # fmt: skip


def _cpu(prior: RankSample, sample: RankSample) -> float | None:
    if prior.main_cpu_s is None or sample.main_cpu_s is None:
        return None
    return max(sample.main_cpu_s - prior.main_cpu_s, 0.0)


def _place(sample: RankSample) -> tuple[object, ...]:
    """Where a rank is: its Python frames and process state.

    Native frames (``--native``) are left out: a thread parked in a wait loop wakes and sleeps in
    different C frames from one sample to the next without moving at all.
    """
    return tuple(f for f in sample.stack if not f.native), sample.status
