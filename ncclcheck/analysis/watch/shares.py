"""What a rank's sampled stacks say of its time: each stack's kind and place, a round counted (``Tally``), and a
rank's shares over the window (``RankShare``): pure functions over the rounds ``collectors.recorder`` read."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ncclcheck.analysis.stacks import P2P, call_site, collective, user_frame
from ncclcheck.model.shares import KINDS, Place, RankShare, Round, Tally
from ncclcheck.model.stacks import Frame
from ncclcheck.model.watch import RankView

PLACES = 3  # places kept per kind in a round
DATA = "/torch/utils/data/"
IO = ("/torch/serialization.py", "/torch/distributed/checkpoint/", "/shutil.py")
BACKWARD = ("_engine_run_backward", "backward")


def classify(frames: Sequence[Frame]) -> tuple[str, str, str | None]:
    """A stack's kind (``KINDS``), what it is in (the collective, DataLoader, the I/O call or the user's function)
    and the user's call site."""
    site = call_site(frames)
    op = collective(frames)
    if op is not None:
        return ("p2p" if op in P2P else "collective"), op, site
    if any(f.function in BACKWARD and "torch/autograd" in f.filename for f in frames):
        return "collective", "backward", site  # DDP's gradient all-reduce is waited for there
    if any(DATA in f.filename for f in frames):
        return "data", "DataLoader", site
    io = next((f for f in frames if any(part in f.filename for part in IO)), None)
    if io is not None:
        return "io", io.function, site
    mine = user_frame(frames)
    python = [f for f in frames if not f.native] or list(frames)
    what = (mine or python[0]).function if python else "?"
    return "other", what, site


def tally(found: Round) -> Tally:
    """One round counted by kind and by place."""
    kinds: dict[str, int] = {}
    places: dict[tuple[str, str, str | None], int] = {}
    for frames, n in found.stacks:
        key = classify(frames)
        kinds[key[0]] = kinds.get(key[0], 0) + n
        places[key] = places.get(key, 0) + n
    kept: list[Place] = []
    for kind in KINDS:
        mine = sorted(((k, n) for k, n in places.items() if k[0] == kind), key=lambda item: -item[1])
        kept += [Place(k[0], k[1], k[2], n) for k, n in mine[:PLACES]]
    counted = tuple((k, kinds[k]) for k in KINDS if k in kinds)
    return Tally(found.start, found.end, found.samples, counted, tuple(kept), found.main_cpu_s)


def rank_shares(views: Sequence[RankView]) -> tuple[RankShare, ...]:
    """Each rank's shares over its rounds, with how far its waiting sits from the other ranks' median."""
    counted = [(v, _pooled(v.tallies)) for v in views if v.tallies]
    waits = {v.rank: kinds.get("collective", 0) / total for v, (kinds, total) in counted if total}
    out = []
    for v, (kinds, total) in counted:
        if not total:
            continue
        others = [w for r, w in waits.items() if r != v.rank]
        seconds = sum(t.end - t.start for t in v.tallies)
        cpu = [t.main_cpu_s for t in v.tallies]
        used = None if None in cpu or seconds <= 0 else min(sum(c or 0.0 for c in cpu) / seconds * 100, 100.0)
        out.append(
            RankShare(
                v.rank,
                v.sample.host,
                total,
                len(v.tallies),
                seconds,
                tuple((k, kinds[k] / total) for k in KINDS if k in kinds),
                _places(v.tallies),
                used,
                waits[v.rank] - statistics.median(others) if others else 0.0,
            )
        )
    return tuple(out)


def _pooled(tallies: Sequence[Tally]) -> tuple[dict[str, int], int]:
    kinds: dict[str, int] = {}
    for t in tallies:
        for k, n in t.kinds:
            kinds[k] = kinds.get(k, 0) + n
    return kinds, sum(kinds.values())


def _places(tallies: Sequence[Tally]) -> tuple[Place, ...]:
    """A rank's places over its rounds, most seen first."""
    merged: dict[tuple[str, str, str | None], int] = {}
    for t in tallies:
        for p in t.places:
            merged[(p.kind, p.what, p.site)] = merged.get((p.kind, p.what, p.site), 0) + p.samples
    return tuple(Place(k[0], k[1], k[2], n) for k, n in sorted(merged.items(), key=lambda item: -item[1]))
