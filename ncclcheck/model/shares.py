"""Where each rank spends its time: its main thread's stacks sampled many times a second over short rounds
(``py-spy record``), and what one round's samples come to.

A ``Round`` is what the collector read: the main thread's distinct stacks and how often each was seen, over
``start``..``end`` (epoch seconds: rounds of ranks on different nodes are compared by time), and the main
thread's CPU seconds meanwhile. A ``Tally`` is a round reduced to what the analysis and the agents' lines need:
the samples by kind (``collective``: waiting in a collective or DDP's backward; ``p2p``: in send/recv; ``data``:
in a DataLoader; ``io``: saving or loading; ``other``: anything else, busy or asleep as the CPU time tells) and
by place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ncclcheck.model.stacks import Frame

KINDS = ("collective", "p2p", "data", "io", "other")
WINDOW_S = 60.0  # the rounds a rank's shares are taken over: the last minute


@dataclass(frozen=True)
class Round:
    """One rank's main thread over one round of ``py-spy record``, or why it could not be read."""

    pid: int
    start: float
    end: float
    stacks: tuple[tuple[tuple[Frame, ...], int], ...]  # each distinct stack (innermost first), how often seen
    main_cpu_s: float | None = None  # the main thread's CPU seconds over the round; None: unreadable
    error: str | None = None
    run_delay_s: float | None = None  # seconds it was runnable but waited for a CPU (another process on its cores)

    @property
    def samples(self) -> int:
        return sum(n for _, n in self.stacks)


class Place(NamedTuple):
    """Where some of a round's samples were: their kind, the collective or function, and the call site. (A named
    tuple, immutable like the rest of the model: thousands are made at each round of a 4,096-rank job.)"""

    kind: str
    what: str
    site: str | None
    samples: int


class Tally(NamedTuple):
    """One round of one rank, counted: ``places`` most seen first (a few per kind). (A named tuple: a viewer of 4,096
    ranks holds a minute of them, about 120,000; being a subclass of tuple, each is still walked at every full
    collection of the garbage collector, so the places and counts they share are held once: ``tally_from_row``.)"""

    start: float
    end: float
    samples: int
    kinds: tuple[tuple[str, int], ...]
    places: tuple[Place, ...]
    main_cpu_s: float | None = None
    run_delay_s: float | None = None  # runnable but waiting for a CPU: busy, on cores something else takes

    @property
    def waited(self) -> int:
        """The samples in a collective."""
        for k, n in self.kinds:
            if k == "collective":
                return n
        return 0

    @property
    def mid(self) -> float:
        return (self.start + self.end) / 2

    def count(self, kind: str) -> int:
        for k, n in self.kinds:
            if k == kind:
                return n
        return 0


class RankShare(NamedTuple):
    """A rank over the window: the share of its samples of each kind, its main thread's CPU, and how far its
    share of waiting in collectives sits from the others' (``deviation``: its share minus the others' median).
    Its places (most seen first) are added up from its rounds when asked (``top`` where given): most refreshes
    of a 4,096-rank view never ask. (A named tuple: one is made per rank at each round of a 4,096-rank view.)"""

    rank: int
    host: str
    samples: int
    rounds: int
    seconds: float
    shares: tuple[tuple[str, float], ...]
    top: tuple[Place, ...]
    cpu_percent: float | None
    deviation: float
    tallies: tuple[Tally, ...] = ()
    cpu_wait_percent: float | None = None  # of the window, runnable but waiting for a CPU

    def share(self, kind: str) -> float:
        return next((s for k, s in self.shares if k == kind), 0.0)

    @property
    def wait(self) -> float:
        """The share of its time spent waiting in a collective."""
        return self.share("collective")

    @property
    def places(self) -> tuple[Place, ...]:
        return self.top or merged(self.tallies)


def merged(tallies: Sequence[Tally]) -> tuple[Place, ...]:
    """The places of several rounds added up, most seen first."""
    counts: dict[tuple[str, str, str | None], int] = {}
    for t in tallies:
        for p in t.places:
            key = (p.kind, p.what, p.site)
            counts[key] = counts.get(key, 0) + p.samples
    return tuple(Place(*k, n) for k, n in sorted(counts.items(), key=lambda item: -item[1]))


def tally_to_json(t: Tally) -> dict[str, Any]:
    """A round counted, as the agents' lines of schema /1 carried it (read back by ``tally_from_json``)."""
    return {
        "start": round(t.start, 3),
        "end": round(t.end, 3),
        "samples": t.samples,
        "kinds": dict(t.kinds),
        "places": [[p.kind, p.what, p.site, p.samples] for p in t.places],
        "cpu_s": None if t.main_cpu_s is None else round(t.main_cpu_s, 3),
        "delay_s": None if t.run_delay_s is None else round(t.run_delay_s, 3),
    }


def tally_from_json(data: object) -> Tally | None:
    """A round from an agent's line of schema /1; None where it cannot be read, or its numbers cannot be a round's (a count below
    zero or above its samples, a time that is not a number, an end before its start): one such round would make a
    rank's shares impossible."""
    if not isinstance(data, dict):
        return None
    try:
        kinds = data.get("kinds") or {}
        cpu = data.get("cpu_s")
        t = Tally(
            float(data["start"]),
            float(data["end"]),
            int(data["samples"]),
            tuple((str(k), int(kinds[k])) for k in KINDS if k in kinds),
            tuple(Place(str(p[0]), str(p[1]), None if p[2] is None else str(p[2]), int(p[3])) for p in data["places"]),
            None if cpu is None else float(cpu),
            None if data.get("delay_s") is None else float(data["delay_s"]),
        )
    except (KeyError, TypeError, ValueError, IndexError, OverflowError):
        return None
    return t if _possible(t) else None


PlaceKey = tuple[str, str, str | None]  # a place without its count: kind, what, call site
ROW_HEAD = 3 + len(KINDS) + 2  # start, end, samples, a count per kind, cpu_s, delay_s; then place index, count pairs


def tally_row(t: Tally, table: dict[PlaceKey, int]) -> list[Any]:
    """A round counted as the agent line (schema /2 and /3) carries it: plain numbers, its places as (index into the
    rank's place table, count) pairs. ``table``: each place's index, a new place added at the end."""
    kinds = dict(t.kinds)
    row: list[Any] = [round(t.start, 3), round(t.end, 3), t.samples, *(kinds.get(k, 0) for k in KINDS)]
    row += [_rounded(t.main_cpu_s), _rounded(t.run_delay_s)]
    for p in t.places:
        row += [table.setdefault((p.kind, p.what, p.site), len(table)), p.samples]
    return row


def tally_from_row(row: object, table: Sequence[PlaceKey]) -> Tally | None:
    """A round from an agent line's row (``tally_row``); None where it cannot be read or cannot be a round's, or
    names a place the rank's table does not hold (a table never received). (Checked on the row's numbers: 4,096
    ranks' rows arrive together.)"""
    if not isinstance(row, list) or len(row) < ROW_HEAD or (len(row) - ROW_HEAD) % 2:
        return None
    try:
        start, end, samples = float(row[0]), float(row[1]), int(row[2])
        kinds = [int(n) for n in row[3 : 3 + len(KINDS)]]
        at = [int(n) for n in row[ROW_HEAD + 1 :: 2]]
        places = _shared(tuple([_place(table[_index(i)], n) for i, n in zip(row[ROW_HEAD::2], at)]))
        cpu, delay = row[ROW_HEAD - 2], row[ROW_HEAD - 1]
        cpu_s, delay_s = None if cpu is None else float(cpu), None if delay is None else float(delay)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    counts = kinds + at
    if not (start <= end and math.isfinite(start) and math.isfinite(end) and 0 <= sum(kinds) <= samples):
        return None
    if (counts and (min(counts) < 0 or max(counts) > samples)) or not (cpu_s is None or 0 <= cpu_s < math.inf):
        return None
    return Tally(
        start, end, samples, _shared(tuple([(k, n) for k, n in zip(KINDS, kinds) if n])), places, cpu_s, delay_s
    )


# A viewer of 4,096 ranks holds a minute of their rounds (about 120,000): the places and counts they share are held
# once. A named tuple is never left out of the garbage collector's walks (only a plain tuple is), so 250,000 places
# of their own made each full collection walk them all, a third of a refresh's CPU.
_PLACES: dict[tuple[PlaceKey, int], Place] = {}
_TUPLES: dict[tuple[Any, ...], tuple[Any, ...]] = {}
SHARED_MAX = 65_536  # values held before the memo is begun afresh (the places of a job are few; their counts too)


def _place(key: PlaceKey, samples: int) -> Place:
    """The one Place of this key and count."""
    place = _PLACES.get((key, samples))
    if place is None:
        if len(_PLACES) >= SHARED_MAX:
            _PLACES.clear()
        place = _PLACES[(key, samples)] = Place(*key, samples)
    return place


def _shared(value: tuple[Any, ...]) -> Any:
    """The one copy of an equal tuple held before (``value`` where none is)."""
    held = _TUPLES.get(value)
    if held is None:
        if len(_TUPLES) >= SHARED_MAX:
            _TUPLES.clear()
        held = _TUPLES[value] = value
    return held


def _index(value: object) -> int:
    """A place's index into the table (a negative one would count from the end: not one)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise IndexError(value)
    return value


def places_from_json(data: object) -> tuple[PlaceKey, ...] | None:
    """A rank's place table from an agent line; None where it cannot be read."""
    if not isinstance(data, list) or not all(isinstance(p, list) and len(p) == 3 for p in data):
        return None
    return tuple((str(p[0]), str(p[1]), None if p[2] is None else str(p[2])) for p in data)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _possible(t: Tally) -> bool:
    counts = [n for _, n in t.kinds] + [p.samples for p in t.places]
    cpu = t.main_cpu_s
    return (
        math.isfinite(t.start)
        and math.isfinite(t.end)
        and t.start <= t.end
        and t.samples >= 0
        and all(0 <= n <= t.samples for n in counts)
        and sum(n for _, n in t.kinds) <= t.samples
        and (cpu is None or (math.isfinite(cpu) and cpu >= 0))
    )


def window(tallies: Sequence[Tally], new: Sequence[Tally]) -> tuple[Tally, ...]:
    """A rank's rounds of the last ``WINDOW_S``, the new ones added (a round already held is not added twice).
    Rounds come in order: the usual case (each newer than the last held) costs a look at each end."""
    last = tallies[-1].end if tallies else float("-inf")
    if len(new) == 1 and new[0].samples and new[0].end > last and isinstance(tallies, tuple):  # a round per line
        every, oldest, drop = (*tallies, new[0]), new[0].end - WINDOW_S, 0
        while every[drop].end < oldest:
            drop += 1
        return every[drop:]
    fresh = [t for t in new if t.samples]
    if all(t.end > last for t in fresh) and all(a.end < b.end for a, b in zip(fresh, fresh[1:])):
        every = (*tallies, *fresh)
    else:
        held = {t.end for t in tallies}
        every = tuple(sorted((*tallies, *(t for t in fresh if t.end not in held)), key=lambda t: t.end))
    if not every:
        return ()
    oldest, drop = every[-1].end - WINDOW_S, 0
    while every[drop].end < oldest:
        drop += 1
    return every[drop:] if drop or not isinstance(tallies, tuple) or fresh else tallies
