"""A part of a log folded on its own (in another process), then replayed into the one LogFold in file order.

The costly work (framing every line, reading each text, the NCCL view) is done by the part's ``Recorder``;
what depends on the lines before (torchrun's summary block, a Flight Recorder stack, the call site a
mismatch names, which finding came first) is left to the replay, which sees only the lines that say
something: runs of plain lines come back as a count and the ranks that wrote them. Replaying the parts
in order gives the report one pass over the whole would give (tests/unit/sources/test_logs_parts.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ncclcheck.analysis.logs.diagnose import At, LogFold, quiet
from ncclcheck.analysis.logs.frame import fold_chunks, header
from ncclcheck.analysis.logs.line_facts import FACTS, LineFacts, facts, facts_of
from ncclcheck.analysis.logs.nccl import Accumulator, Keyed, Op, RankFold, only_connection, read_line, steps_of
from ncclcheck.analysis.logs.prefixes import rest_parts
from ncclcheck.analysis.logs.remembered import Remembered

# The events of a part, as plain tuples (a NamedTuple pickles as its class and costs the parent, which unpickles
# every part, three times as much), told apart by their length and last item:
Line = At
"""A line that says something, as ``LogFold.add_line`` gets it (its number counted within the part)."""
Run = tuple[int, frozenset[int], bool]
"""Plain lines in a row: how many, the ranks that wrote them, and whether one of them names none."""
Skipped = tuple[int, frozenset[int], None]
"""A quiet stretch: lines counted, not read, and the ranks their prefixes name (``LogFold.skip``)."""


def _message(text: str) -> tuple[tuple[Op, ...], LineFacts, Keyed | None]:
    """An NCCL message's steps (none when it only adds a connection), what it says, and that connection."""
    steps = steps_of(text)
    conn = only_connection(steps)
    return (() if conn else steps), facts_of(text), conn


# An NCCL message's steps for its source's NCCL view and what it says, read once per distinct message: one lookup
# a line of the fast lane.
_messages = Remembered(_message)
_MESSAGES = _messages.known
_rest_messages = Remembered(lambda rest: ((parts := rest_parts(rest)), facts_of(parts[0])))  # ... and a rest's parts
_REST_MESSAGES = _rest_messages.known
MAX_HEADS = 20_000  # the headers a part's Recorder remembers (forgotten all at once when full)


@dataclass(frozen=True)
class Recording:
    """One part: its events in order, its sources' NCCL views, and how many physical lines it held."""

    events: tuple[Line | Run | Skipped, ...]
    nccl: RankFold
    lines: int


class Recorder:
    """A ``fold_chunks`` sink that keeps what a LogFold needs from a part, in order."""

    def __init__(self, nccl: RankFold | None = None) -> None:
        self.nccl = RankFold() if nccl is None else nccl
        self.events: list[Line | Run | Skipped] = []
        self._count = 0
        self._ranks: set[int] = set()
        self._anonymous = False
        # one object for equal texts and rank sets: pickle sends a repeated object as a reference, and the parent
        # unpickles (and hashes) each once
        self._texts: dict[str, str] = {}
        self._sets: dict[frozenset[int], frozenset[int]] = {}
        # each NCCL header (as printed) of the fast lane: its source's accumulator, source location and level
        self._heads: dict[str, tuple[Accumulator, str | None, str]] = {}

    def add_nccl_line(self, file: str, number: int, head: str, msg: str, prefix_rank: int | None) -> None:
        known = self._heads.get(head)
        if known is None:
            known = self._head(file, number, head, prefix_rank)
        acc, src, level = known
        text = f"{src} {msg}" if src else msg
        steps, said, conn = _MESSAGES.get(text) or _messages(text)
        if conn is not None:  # read_line's step, without the call
            acc.connections.setdefault(*conn)
        elif steps:
            read_line(acc, text, steps, number)
        if level in said.quiet:  # says nothing: counted in the run going on (most lines of a large job's logs)
            self._count += 1
            rank = prefix_rank if prefix_rank is not None else said.text_rank
            if rank is None:
                self._anonymous = True
            else:
                self._ranks.add(rank)
        else:
            self._said(file, number, text, acc.host, acc.pid, acc.dev, level, prefix_rank)

    def add_prefixed_line(self, file: str, number: int, rest: str, prefix_rank: int) -> None:
        (text, host, pid, dev, level, _), said = _REST_MESSAGES.get(rest) or _rest_messages(rest)
        if level is not None:
            self.nccl.add_line(file, number, text, host, pid, dev, prefix_rank)
        if level in said.quiet:
            self._count += 1
            self._ranks.add(prefix_rank)
        else:
            self._said(file, number, text, host, pid, dev, level, prefix_rank)

    def _head(self, file: str, number: int, head: str, prefix_rank: int | None) -> tuple[Accumulator, str | None, str]:
        host, pid, dev, src, level = header(head)
        if len(self._heads) >= MAX_HEADS:
            self._heads.clear()
        known = self._heads[head] = (self.nccl.source(file, number, host, pid, dev, prefix_rank), src, level)
        return known

    def add_line(
        self,
        file: str,
        number: int,
        text: str,
        host: str | None,
        pid: str | None,
        dev: int | None,
        level: str | None,
        prefix_rank: int | None,
    ) -> None:
        if level is not None:
            self.nccl.add_line(file, number, text, host, pid, dev, prefix_rank)
        said = FACTS.get(text) or facts(text)
        if level in said.quiet:  # says nothing: counted in the run going on
            self._count += 1
            rank = prefix_rank if prefix_rank is not None else said.text_rank
            if rank is None:
                self._anonymous = True
            else:
                self._ranks.add(rank)
        else:
            self._said(file, number, text, host, pid, dev, level, prefix_rank)

    def _said(
        self,
        file: str,
        number: int,
        text: str,
        host: str | None,
        pid: str | None,
        dev: int | None,
        level: str | None,
        prefix_rank: int | None,
    ) -> None:
        """A line that says something: recorded as it is, after the run of plain lines before it."""
        if self._count:
            self._close_run()
        self.events.append((file, number, self._texts.setdefault(text, text), host, pid, dev, level, prefix_rank))

    def skip(self, count: int, ranks: frozenset[int] = frozenset()) -> None:
        self._close_run()
        self.events.append((count, ranks, None))

    def _close_run(self) -> None:
        if self._count:
            ranks = frozenset(self._ranks)
            self.events.append((self._count, self._sets.setdefault(ranks, ranks), self._anonymous))
            self._count, self._ranks, self._anonymous = 0, set(), False

    def hand_over(self, fold: LogFold, last: bool = False) -> None:
        """Replay the events so far into ``fold`` (whose NCCL view this Recorder's is) and forget them; a run of
        plain lines still going on is kept, unless this is the ``last`` hand-over."""
        if last:
            self._close_run()
        _replay(fold, self.events, 0)
        self.events.clear()
        self._texts.clear()
        self._sets.clear()

    def result(self, lines: int) -> Recording:
        self._close_run()
        return Recording(tuple(self.events), self.nccl, lines)


def replay(fold: LogFold, part: Recording, offset: int) -> None:
    """Fold a recorded part into ``fold``, its lines numbered after ``offset`` lines of the same file."""
    _replay(fold, part.events, offset)
    fold.nccl.merge(part.nccl, offset)


def _replay(fold: LogFold, events: Iterable[Line | Run | Skipped], offset: int) -> None:
    add_line, skip, run = fold.add_line, fold.skip, fold.run
    for event in events:
        if len(event) == 8:
            file, number, text, host, pid, dev, level, rank = event
            add_line(file, number + offset, text, host, pid, dev, level, rank, False)  # nccl=False: merged apart
        elif event[2] is None:
            skip(event[0], event[1])
        else:
            run(event[0], event[1], event[2])


def fold_stream(chunks: Iterable[str], file: str, fold: LogFold) -> int:
    """``fold_chunks`` of one source into ``fold`` in this process, through a Recorder that shares its NCCL view
    and hands its events over after every chunk (the Recorder reads the fast lane's lines faster than a
    LogFold; memory stays that of one chunk's events). Returns how many physical lines there were."""
    recorder = Recorder(fold.nccl)

    def handed_over() -> Iterator[str]:
        for chunk in chunks:
            yield chunk  # fold_chunks asks for the next one when every line of this one is in the Recorder
            recorder.hand_over(fold)

    lines = fold_chunks(handed_over(), file, quiet, recorder)
    recorder.hand_over(fold, last=True)
    return lines
