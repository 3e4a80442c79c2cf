"""``run``'s slow episodes, folded look by look from the watch states: pure.

A look that names ``slow-rank`` or ``slow-node`` opens an episode, or extends the open one while it names the same
culprits; other culprits close it and open a new one. A look without it closes the open episode only once
``CLOSE_LOOKS`` looks in a row and ``CLOSE_S`` seconds have gone by without it: the finding asks for the slowness
in each of four slices of the window, so one slice that holds a checkpoint or a noisy round can drop one look of
a rank that is still slow, and one dropped look must not split an episode in two. The seconds matter as much as
the count: looks come every 0.3 s while the waiting ranks have just begun to stand still in a collective, which a
slow rank makes them do on every step. A hang (an error finding) closes the open episode at once: the hang is the
story from then on. ``communication-bound`` is a note, not an episode: nobody holds anyone back, the job is built
that way, so there is nobody to name and nothing to record beyond its words.
"""

from __future__ import annotations

import dataclasses
import re

from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.run import PaceNote, SlowEpisode, SlowSoFar
from ncclcheck.model.watch import WatchState

SLOW = (watch_ids.SLOW_RANK, watch_ids.SLOW_NODE)
PACE = watch_ids.COMMUNICATION_BOUND
CLOSE_LOOKS = 2  # looks in a row without the finding ...
CLOSE_S = 10.0  # ... and seconds since it was last named, before the episode is closed
FASTER = re.compile(r"about (\d+(?:\.\d+)?)× faster")  # analysis.watch.slow's words for what the wait costs


def after_look(seen: SlowSoFar, state: WatchState, now: float, path: str) -> SlowSoFar:
    """The episodes after one look at ``now`` (epoch seconds); ``path``: where a new episode would be recorded."""
    findings = state.findings
    note = _note(seen.note, findings, now)
    if any(f.severity == "error" for f in findings):
        return ended(dataclasses.replace(seen, note=note))
    found = next((f for f in findings if f.id in SLOW), None)
    current = seen.open
    if found is None:
        if current is None:
            return dataclasses.replace(seen, note=note)
        missed = dataclasses.replace(current, missed=current.missed + 1)
        if missed.missed >= CLOSE_LOOKS and now - current.end >= CLOSE_S:
            return SlowSoFar((*seen.closed, _closed(missed)), None, note)
        return SlowSoFar(seen.closed, missed, note)
    if current is not None and current.culprits == found.culprits:
        same = dataclasses.replace(
            current,
            end=now,
            kind=found.id,
            message=found.message,
            fix=found.fix,
            looks=current.looks + 1,
            factor=factor(found.message) or current.factor,
            missed=0,
        )
        return SlowSoFar(seen.closed, same, note)
    closed = (*seen.closed, _closed(current)) if current is not None else seen.closed
    floor = closed[-1].end if closed else 0.0  # episodes never overlap
    start = min(max(evidence_since(state, now), floor), now)
    new = SlowEpisode(path, start, now, found.id, found.culprits, found.message, 1, found.fix, factor(found.message))
    return SlowSoFar(closed, new, note)


def ended(seen: SlowSoFar) -> SlowSoFar:
    """The open episode closed now: the job is over, a hang took over, or the user ended it."""
    if seen.open is None:
        return seen
    return SlowSoFar((*seen.closed, _closed(seen.open)), None, seen.note)


def evidence_since(state: WatchState, now: float) -> float:
    """Where the rounds the findings were judged on begin: the latest first round of any rank (their common span,
    which analysis.watch.slow cuts into slices); ``now`` without rounds."""
    return max((v.tallies[0].start for v in state.ranks if v.tallies), default=now)


def factor(message: str) -> float | None:
    """How much faster the job would run without the wait, as a slow finding's message says it."""
    found = FASTER.search(message)
    return float(found.group(1)) if found else None


def _closed(episode: SlowEpisode) -> SlowEpisode:
    return dataclasses.replace(episode, missed=0)


def _note(note: PaceNote | None, findings: tuple[Finding, ...], now: float) -> PaceNote | None:
    found = next((f for f in findings if f.id == PACE), None)
    if found is None:
        return note
    if note is None:
        return PaceNote(now, now, 1, found.message, found.fix)
    return PaceNote(note.first, now, note.looks + 1, found.message, found.fix)
