"""Each rank's rounds added up, kept from one refresh to the next and updated by the rounds that came and went.

The viewer refreshes far more often than rounds arrive, and a new round changes a rank's minute of rounds by one
at each end: adding it and taking away the one that left the window keeps 4,096 ranks within a refresh. The sums
are held beside the very tuple of rounds they were made from, so they are never mistaken for another rank's or
another moment's; a tuple that does not continue the one held is added up afresh.
"""

from __future__ import annotations

from collections.abc import Sequence

from ncclcheck.model.shares import Tally
from ncclcheck.model.watch import RankView


class Sums:
    """A rank's rounds added up: samples by kind, waiting ones, seconds, main-thread CPU (places are added up only
    where asked: ``model.shares.merged``)."""

    __slots__ = (
        "_places",
        "_places_of",
        "cpu_missing",
        "cpu_s",
        "delay_missing",
        "delay_s",
        "kinds",
        "samples",
        "seconds",
        "tallies",
        "waited",
    )

    def __init__(self, tallies: tuple[Tally, ...]) -> None:
        self.tallies = tallies
        self.kinds: dict[str, int] = {}
        self._places: dict[tuple[str, str, str | None], int] = {}
        self._places_of: tuple[Tally, ...] | None = None
        self.samples = self.waited = self.cpu_missing = self.delay_missing = 0
        self.seconds = self.cpu_s = self.delay_s = 0.0
        for t in tallies:
            self.add(t, 1)

    def add(self, t: Tally, sign: int) -> None:
        self.samples += sign * t.samples
        self.waited += sign * t.waited
        self.seconds += sign * (t.end - t.start)
        cpu = t.main_cpu_s
        if cpu is None:
            self.cpu_missing += sign
        else:
            self.cpu_s += sign * cpu
        if t.run_delay_s is None:
            self.delay_missing += sign
        else:
            self.delay_s += sign * t.run_delay_s
        kinds = self.kinds
        for kind, n in t.kinds:
            kinds[kind] = kinds.get(kind, 0) + sign * n  # a kind that drops to 0 stays, at 0

    @property
    def places(self) -> dict[tuple[str, str, str | None], int]:
        """Its samples by place (kind, what, call site), added up when first asked for these rounds."""
        if self._places_of is not self.tallies:
            counts: dict[tuple[str, str, str | None], int] = {}
            for t in self.tallies:
                for p in t.places:
                    key = (p.kind, p.what, p.site)
                    counts[key] = counts.get(key, 0) + p.samples
            self._places, self._places_of = counts, self.tallies
        return self._places

    def follow(self, now: tuple[Tally, ...]) -> bool:
        """Move on to ``now`` where it continues the rounds held (some left at the front, some added at the back);
        False where it does not."""
        old = self.tallies
        if now is old:
            return True
        if not old or not now:
            return False
        last = next((i for i in range(len(now) - 1, -1, -1) if now[i] is old[-1]), None)
        if last is None or last + 1 > len(old) or now[0] is not old[len(old) - last - 1]:
            return False
        for t in old[: len(old) - last - 1]:
            self.add(t, -1)
        for t in now[last + 1 :]:
            self.add(t, 1)
        self.tallies = now
        return True


_held: dict[tuple[str, int], Sums] = {}


def pooled(views: Sequence[RankView], remember: bool = True) -> list[Sums | None]:
    """Each rank's rounds added up (None: no rounds), carried on from the last call's sums where they continue.
    ``remember=False``: a judgement of some ranks apart (a pipeline's rounds counted another way) leaves the sums
    held for the whole job's as they are."""
    global _held
    kept: dict[tuple[str, int], Sums] = {}
    out: list[Sums | None] = []
    for v in views:
        if not v.tallies:
            out.append(None)
            continue
        key = (v.sample.host, v.sample.rank)
        sums = _held.get(key) if key not in kept else None  # the same rank twice: the first one's sums stay its own
        if sums is None or not sums.follow(v.tallies):
            sums = Sums(v.tallies)
        kept[key] = sums
        out.append(sums)
    if remember:
        _held = kept
    return out
