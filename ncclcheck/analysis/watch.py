"""From a job's samples to what is wrong: mismatched collectives, stragglers, dead ranks, a stalled job.

Pure functions over frozen snapshots. A rank makes *progress* when its stack or its socket I/O
changed since the previous sample; ``since_s`` is how long it has shown neither. A healthy job
(stacks or I/O moving) never gets a finding however long it is watched.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence

from ncclcheck.analysis.ranks import span
from ncclcheck.analysis.stacks import call_site, collective
from ncclcheck.model.watch import RankSample, RankView, Snapshot, WatchFinding, WatchState

DEAD = frozenset({"gone", "zombie", "stopped", "missing"})
BACKWARD = ("_engine_run_backward", "backward")
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
    "firewall between nodes); check the ranks on other nodes"
)


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


def track(previous: WatchState | None, snapshot: Snapshot, stall_s: float) -> WatchState:
    """This sample's views (how long each rank has stood still) and the findings."""
    before = {v.rank: v for v in previous.ranks} if previous else {}
    elapsed = snapshot.time - previous.time if previous else 0.0
    views = tuple(_view(s, before.get(s.rank), elapsed) for s in snapshot.samples)
    return WatchState(snapshot.time, snapshot.job, views, analyse(views, stall_s))


def _view(sample: RankSample, before: RankView | None, elapsed: float) -> RankView:
    found, site, label = doing(sample)
    prior = before.sample if before else None
    still = prior is not None and _place(prior) == _place(sample)
    since = before.since_s + elapsed if still and before else 0.0
    return RankView(sample, found, site, label, since, prior is not None and not still)


def _place(sample: RankSample) -> tuple[object, ...]:
    """What must not change for a rank to be standing still: its Python frames, status and I/O.

    Native frames (``--native``) are left out: a thread parked in a wait loop wakes and sleeps in
    different C frames from one sample to the next without moving at all.
    """
    return tuple(f for f in sample.stack if not f.native), sample.status, sample.io_chars


def analyse(views: Sequence[RankView], stall_s: float) -> tuple[WatchFinding, ...]:
    """Findings over one refresh; ``stall_s``: how long ranks must stand still before it counts."""
    dead = [v for v in views if v.sample.status in DEAD]
    live = [v for v in views if v.sample.status not in DEAD and v.sample.status != "remote"]
    waiting = [v for v in live if v.collective and v.since_s >= stall_s]
    out = []
    if dead:
        out.append(_dead(dead, waiting))
    if not waiting:
        return tuple(out)
    busy = [v for v in live if not v.collective]
    places = _group(waiting)
    moving = [v for v in live if v.collective and v.since_s < stall_s]
    if busy:
        out.append(_straggler(busy, places))
    if len(places) > 1 and not moving:
        out.append(_mismatch(places))
    elif len(places) == 1 and not busy and not dead and not moving and len(waiting) > 1:
        out.append(_stalled(waiting))
    return tuple(out)


def _group(views: Sequence[RankView]) -> dict[tuple[str, str], list[RankView]]:
    places: dict[tuple[str, str], list[RankView]] = defaultdict(list)
    for v in sorted(views, key=lambda v: v.rank):
        places[(v.collective or "", v.call_site or "")].append(v)
    return dict(sorted(places.items(), key=lambda kv: -len(kv[1])))


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


def _dead(dead: Sequence[RankView], waiting: Sequence[RankView]) -> WatchFinding:
    parts = []
    for v in dead:
        s = v.sample
        what = {
            "stopped": f"is stopped (SIGSTOP or a debugger; `kill -CONT {s.pid}` resumes it)",
            "zombie": f"has exited (zombie pid {s.pid}, not yet reaped by its launcher)",
            "gone": f"has exited (pid {s.pid} is gone)",
            "missing": "has no process on this node (it exited, or never started)",
        }[s.status]
        parts.append(f"rank {v.rank} {what}")
    others = f" while {_where(_group(waiting))}" if waiting else ""
    fix = (
        "a stopped rank: resume it (kill -CONT) or find who stopped it; an exited rank: read its log "
        "(ncclcheck logs) for why it died (OOM killer: dmesg); the others cannot finish without it"
    )
    return WatchFinding("dead", tuple(v.rank for v in dead), "; ".join(parts) + others, fix)


def _straggler(busy: Sequence[RankView], places: dict[tuple[str, str], list[RankView]]) -> WatchFinding:
    parts = []
    for v in busy:
        at = f" at {short(v.call_site)}" if v.call_site else ""
        how = f"has been in {v.doing}{at} for {v.since_s:.0f} s" if v.since_s >= 1 else f"is busy in {v.doing}{at}"
        parts.append(f"rank {v.rank} is not in any collective: it {how}")
    message = "; ".join(parts) + f" — {_where(places)}"
    return WatchFinding("straggler", tuple(v.rank for v in busy), message, STRAGGLER_FIX)


def _mismatch(places: dict[tuple[str, str], list[RankView]]) -> WatchFinding:
    _, *rest = places.items()  # the largest group is the reference
    odd = tuple(sorted(v.rank for _, group in rest for v in group))
    ops = {op for op, _ in places}
    kind = "mismatched collectives" if len(ops) > 1 else "the same collective from different call sites"
    return WatchFinding("mismatch", odd, f"{_where(places)} — {kind}", MISMATCH_FIX)


def _stalled(waiting: Sequence[RankView]) -> WatchFinding:
    v = waiting[0]
    longest = min(w.since_s for w in waiting)
    message = (
        f"rank {span([w.rank for w in waiting])} all wait in {v.collective} at {short(v.call_site)} "
        f"with no progress for {longest:.0f} s"
    )
    return WatchFinding("stalled", tuple(w.rank for w in waiting), message, STALLED_FIX)
