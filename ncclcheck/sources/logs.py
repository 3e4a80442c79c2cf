"""The logs source: log files and Flight Recorder dumps collected and judged into one report, the one entry
``ncclcheck logs`` and ``ncclcheck run`` share. Large inputs are read in worker processes (log_parts)."""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Iterator

from ncclcheck.analysis.flight import match as flight
from ncclcheck.analysis.logs.diagnose import LogFold
from ncclcheck.analysis.logs.events import RANK, stream
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.analysis.logs.recording import fold_stream, replay
from ncclcheck.analysis.logs.stack_dumps import read as read_stacks
from ncclcheck.analysis.logs.stack_verdict import judge
from ncclcheck.analysis.logs.stamps import instant
from ncclcheck.analysis.logs.verdict import Times, with_flight, with_stacks, with_times
from ncclcheck.collectors.control_plane import with_groups
from ncclcheck.collectors.flight import load
from ncclcheck.collectors.logfiles import LogSource, Reading, chunks, lines_at
from ncclcheck.model.flight import FrDump, Unreadable
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.logs import Event
from ncclcheck.model.stack_dumps import StackDump
from ncclcheck.sources.log_parts import done_in_order, plan

STACK_TEXT = 16 << 20  # the most of one source's text kept for its stack dumps (a paste is far smaller)
WHOLE_TEXT = 4 << 20  # a source up to this size is read whole for its dumps; a bigger one around their marks
BEFORE, AFTER = 32 << 10, 256 << 10  # the stretch around a mark: what comes before a header (a listing) and after
MAX_MARKS = 2000
# what a file must hold for its stack dumps to be read: a py-spy thread header, a faulthandler or gdb frame, a listing
STACK_MARKERS = ("(idle)", "(active", "(gil)", "most recent call first", "Failed to suspend process")
# ... or, for pastes with no header at all, one py-spy frame line (``    main_loop (ray/_private/worker.py:935)``)
FRAME_LINE = re.compile(r"^[ \t]+[\w.<>]+ \([\w./<>-]+\.py:\d+\)[ \t]*$", re.MULTILINE)
# torch's C++ exception ("Exception raised from checkTimeout at ...cpp:567 (most recent call first):") says what
# faulthandler's headers say, but heads C++ frames ("frame #0: ..."), never a Python dump: in a big log it marks no
# stretch to read (a log of rank errors holds one per rank: their stretches were the whole log, read as a paste)
CPP_FRAMES = "Exception raised from "


def diagnose(found: tuple[LogSource, ...], reading: Reading | None = None, cores: int | None = None) -> LogReport:
    """The logs and Flight Recorder dumps among ``found``, folded into one report (also `ncclcheck run`'s);
    what could not be read whole is in the report's notes. Large inputs are read on ``cores`` cores (all
    this process may use, by default): the report is the same."""
    reading = reading or Reading()
    fold = LogFold()
    parts = plan(found, cores)
    kept: dict[int, list[str]] = {}  # the text of each source read here, for the stack dumps in it
    lines = 0  # every line read, as ``wc -l`` counts them (blank ones too): what the report says it read
    with done_in_order([p for i in sorted(parts) for p in parts[i]], cores) as done:
        for i, source in enumerate(found):
            if source.kind != "log":
                continue
            if i not in parts:
                kept[i] = []
                lines += fold_stream(_keeping(chunks(source, reading=reading), kept[i]), source.name, fold)
                continue
            offset = 0
            for part in itertools.islice(done, len(parts[i])):
                replay(fold, part.recording, offset)
                offset += part.recording.lines
                reading.notes.extend(part.notes)
                reading.incomplete = reading.incomplete or part.incomplete
            lines += offset
    report = dataclasses.replace(
        fold.result(),
        lines=lines,
        notes=tuple(reading.notes),
        incomplete=reading.incomplete,
        empty=tuple(reading.empty),
        nothing_read=read_nothing(found, reading),
    )
    report = with_times(report, _times(report, found))
    stacks = [dump for i, text in kept.items() for dump in _stacks("".join(text), found[i].name)]
    if stacks:
        report = with_stacks(report, *judge(stacks))
    dumps = [d if isinstance(d := load(s.path), Unreadable) else with_groups(d) for s in found if s.kind == "flight"]
    if dumps:
        read = [d for d in dumps if isinstance(d, FrDump)]
        report = with_flight(report, flight.analyse(read, [d for d in dumps if isinstance(d, Unreadable)]))
    return report


def _times(report: LogReport, found: tuple[LogSource, ...]) -> Times:
    """The stamps of the error lines, read again from their files, where errors are in more than one file (one log
    per rank or node: nothing else orders them); none otherwise, at no cost."""
    errors = [f for f in report.findings if f.severity == "error" and f.evidence]
    if len({f.evidence[0].file for f in errors}) < 2:
        return {}
    wanted: dict[str, set[int]] = {}
    for f in errors:
        for e in f.evidence:
            wanted.setdefault(e.file, set()).add(e.line)
    named = {s.name: s for s in found if s.kind == "log"}
    times = {}
    for name, numbers in wanted.items():
        if name in named:
            for number, raw in lines_at(named[name], numbers).items():
                if (at := instant(raw)) is not None:
                    times[(name, number)] = at
    return times


def read_nothing(found: tuple[LogSource, ...], reading: Reading) -> bool:
    """Whether every input was a log that held nothing but whitespace (a Flight Recorder dump is something)."""
    return bool(found) and all(s.kind == "log" for s in found) and len(reading.empty) >= len(found)


def _keeping(pieces: Iterator[str], kept: list[str]) -> Iterator[str]:
    """The pieces passed on, and kept (up to STACK_TEXT characters) for the stack dumps they may hold."""
    size = 0
    for piece in pieces:
        if size < STACK_TEXT:
            kept.append(piece)
            size += len(piece)
        yield piece


def _stacks(text: str, name: str) -> list[StackDump]:
    """The stack dumps in a source's text (a file read in parts by workers is a log, not a paste: not looked at). A
    paste is read whole; in a big log, only the stretches around each dump's marks (a log of hours holds a dump or
    two): reading costs what the dumps do, not what the log does."""
    if len(text) <= WHOLE_TEXT:
        if not any(marker in text for marker in STACK_MARKERS) and FRAME_LINE.search(text) is None:
            return []
        dump = read_stacks(text.splitlines(), name)
        return [dump] if dump is not None else []
    out = []
    for start, end in _windows(text):
        first = text.count("\n", 0, start) + 1
        dump = read_stacks(text[start:end].splitlines(), name, first)
        if dump is not None:
            out.append(dump)
    return out


def _windows(text: str) -> list[tuple[int, int]]:
    """Line-aligned stretches of ``text`` around each mark of a dump, merged where they meet."""
    hits: list[int] = []
    for marker in STACK_MARKERS:
        at = text.find(marker)
        while at != -1 and len(hits) < MAX_MARKS:
            if text.find(CPP_FRAMES, text.rfind("\n", 0, at) + 1, at) == -1:
                hits.append(at)
            at = text.find(marker, at + len(marker))
    spans: list[tuple[int, int]] = []
    for at in sorted(hits):
        start = text.rfind("\n", 0, max(0, at - BEFORE)) + 1
        end = text.find("\n", min(len(text), at + AFTER))
        end = len(text) if end == -1 else end + 1
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return spans


def events(found: tuple[LogSource, ...], reading: Reading, least: str) -> Iterator[Event]:
    """Every line of the logs among ``found`` as its emitter's event, in file order, those at least ``least``
    severe ("all": every one): what the verdict is made from, one line at a time (streamed: memory stays flat)."""
    floor = RANK.get(least, 0)
    for source in found:
        if source.kind != "log":
            continue
        for event in stream(frame_all(_lines(chunks(source, reading=reading)), source.name)):
            if RANK[event.severity] >= floor:
                yield event


def _lines(pieces: Iterator[str]) -> Iterator[str]:
    """Physical lines (split at newlines only, as ``wc -l`` counts them) of pieces that each end at a line's end."""
    for piece in pieces:
        lines = piece.split("\n")
        if piece.endswith("\n"):
            lines.pop()
        yield from lines
