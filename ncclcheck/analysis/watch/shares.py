"""What a rank's sampled stacks say of its time: each stack's kind and place, a round counted (``Tally``), and a
rank's shares over the window (``RankShare``): pure functions over the rounds ``collectors.recorder`` read."""

from __future__ import annotations

import bisect
import operator
from collections.abc import Sequence

from ncclcheck.analysis.stacks import P2P, call_site, collective, user_frame
from ncclcheck.analysis.watch.pooled import pooled
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
    return Tally(found.start, found.end, found.samples, counted, tuple(kept), found.main_cpu_s, found.run_delay_s)


def rank_shares(views: Sequence[RankView]) -> tuple[RankShare, ...]:
    """Each rank's shares over its rounds, with how far its waiting sits from the other ranks' median. The last
    answer is kept while every rank holds the same rounds (the viewer refreshes many times between two)."""
    global _last, _by_rank
    held = tuple([v.tallies for v in views])
    who = tuple([(v.sample.rank, v.sample.host) for v in views])
    if _last is not None and _last[1] == who and all(map(operator.is_, _last[0], held)):
        return _last[2]
    # the same ranks with the same rounds in another order (the job's views, then its live ranks): the
    # same shares, a deviation being from the median of the same ranks; each rank's own, in this order
    population = dict(zip(who, held))
    if _by_rank is not None and len(population) == len(who) and population == _by_rank[0]:
        known = _by_rank[1]
        _last = (held, who, tuple([known[k] for k in who if k in known]))
        return _last[2]
    counted = [(v, s) for v, s in zip(views, pooled(views)) if s is not None and s.samples]
    ordered = sorted([s.waited / s.samples for _, s in counted])
    n, out = len(ordered) - 1, []
    for v, s in counted:
        total = s.samples
        wait = s.waited / total
        deviation = wait - _median_without(ordered, bisect.bisect_left(ordered, wait)) if n > 0 else 0.0
        used = None if s.cpu_missing or s.seconds <= 0 else min(s.cpu_s / s.seconds * 100, 100.0)
        delayed = None if s.delay_missing or s.seconds <= 0 else min(s.delay_s / s.seconds * 100, 100.0)
        kinds = s.kinds
        shares = tuple([(k, kinds[k] / total) for k in KINDS if kinds.get(k)])
        out.append(
            RankShare(
                v.sample.rank,
                v.sample.host,
                total,
                len(v.tallies),
                s.seconds,
                shares,
                (),
                used,
                deviation,
                v.tallies,
                delayed,
            )
        )
    _last = (held, who, tuple(out))
    if len(population) == len(who):  # a rank seen twice is no population to answer another order from
        _by_rank = (population, {(x.rank, x.host): x for x in out})
    return _last[2]


_last: tuple[tuple[tuple[Tally, ...], ...], tuple[tuple[int, str], ...], tuple[RankShare, ...]] | None = None
_by_rank: tuple[dict[tuple[int, str], tuple[Tally, ...]], dict[tuple[int, str], RankShare]] | None = None


def _median_without(ordered: list[float], i: int) -> float:
    """The median of ``ordered`` (sorted, two values or more) with its ``i``-th value left out."""
    n = len(ordered) - 1
    h = n // 2
    if n % 2:
        return ordered[h] if h < i else ordered[h + 1]
    low = ordered[h - 1] if h - 1 < i else ordered[h]
    high = ordered[h] if h < i else ordered[h + 1]
    return (low + high) / 2
