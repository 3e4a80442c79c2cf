"""Open what users hand us: files, directories (walked), ``-`` for stdin, FIFOs and ``<(cmd)``, ``.gz``; lines
streamed, bad bytes replaced.

Flight Recorder dumps among them are recognised by their first bytes and handed to ``collectors.flight``.
What cannot be read whole is said, never silent: a binary file (a core, a checkpoint) is named and
skipped, a truncated ``.gz`` is read as far as it decompresses, an unreadable file in a directory is
left out; each leaves a note (``Reading.notes``) and the rest is read.
"""

from __future__ import annotations

import codecs
import contextlib
import gzip
import io
import os
import re
import stat
import sys
import zlib
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

from ncclcheck.collectors.flight import sniff
from ncclcheck.model.run import RunDir

SKIP_SUFFIXES = (".pkl", ".pickle", ".json", ".png", ".jpg", ".so", ".pt", ".bin", ".tmp")
# ncclcheck's own files in a run dir that are not logs: the live watch agent's states (JSON lines whose stacks
# and notes say "Exception" where the job never raised one)
OWN_FILES = frozenset({RunDir.AGENT_LINES, *RunDir.HOOK_FILES})  # and run's hook (control/hook/)
# ... and what run kept of an incident beside a hang's record (collectors/incident.py): its captures, not the job's
# logs (dmesg's Xid lines may predate the job: they are the user's to read, never a verdict's)
OWN_FILES |= {"ras.txt", "xid.txt", "nvidia-smi-q.txt", "incident.json", "gpus.json", "ras.json"}
EARLY = re.compile(r"early-\d+")  # the early Flight Recorder copies run keeps in fr/early-<k>/
# What run fetched through the ranks' control plane on a hang (control/hang-*/), judged then into the hang record:
# left out of a run dir read whole; the Flight Recorders are read when that hang's folder is given itself.
OWN_PREFIXES = ("live_stacks_rank", "fr_rank_", "fr_early_rank_")  # the dumps' copies kept with each hang
LIVE_FR = ("live_fr_rank", "live_nccl_rank")


@dataclass(frozen=True)
class LogSource:
    """One readable input: its display name and where to open it."""

    name: str
    path: str
    kind: str = "log"  # or "flight": a Flight Recorder dump


class InputError(Exception):
    """An input path that does not exist or cannot be read; the message says which and why."""


class Reading:
    """What reading the inputs could not do whole: one line each, shown with the report; ``incomplete`` when a
    log was cut or unreadable (a verdict over it cannot be "pass"); ``empty``: the inputs read whole that held
    nothing but whitespace (an empty file, an empty stdin): nothing in them can be judged."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.incomplete = False
        self.empty: list[str] = []


BINARY_PEEK = 8192
GZIP_MAGIC = b"\x1f\x8b"


def gzipped(path: str) -> bool:
    """Whether a file starts as gzip does (read as text once decompressed)."""
    return _head(path, 2) == GZIP_MAGIC


# A byte-order mark names a text's encoding: Windows PowerShell 5 writes UTF-16 with `>` and Tee-Object. The longest
# first (UTF-32's little-endian mark starts as UTF-16's does).
MARKS = (
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
    (b"\xef\xbb\xbf", "utf-8-sig"),
)


def encoding_of(head: bytes) -> str:
    """The encoding a text's first bytes name by their byte-order mark; without one, UTF-16 when every other byte of
    them is NUL and none between (ASCII text written as UTF-16, little- or big-endian); else UTF-8."""
    marked = next((name for mark, name in MARKS if head.startswith(mark)), None)
    if marked is not None:
        return marked
    even, odd = head[0 : len(head) & ~1 : 2], head[1 : len(head) & ~1 : 2]
    if len(odd) >= 2 and not odd.strip(b"\0") and b"\0" not in even:
        return "utf-16-le"
    if len(even) >= 2 and not even.strip(b"\0") and b"\0" not in odd:
        return "utf-16-be"
    return "utf-8"


HEAD = 64  # the first bytes an encoding is told from


def wide(path: str) -> bool:
    """Whether a file is UTF-16 or UTF-32 text: read whole, never cut at its byte line ends."""
    return encoding_of(_head(path, HEAD)).startswith(("utf-16", "utf-32"))


def _head(path: str, count: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(count)
    except OSError:
        return b""


MAGIC = {b"\x7fELF": "an ELF binary or core dump", b"PK\x03\x04": "a zip archive (a torch checkpoint?)"}


def sources(paths: Sequence[str], reading: Reading | None = None) -> tuple[LogSource, ...]:
    """Expand directories (sorted, recursive) into their text log files; ``-`` is stdin; a FIFO or a process
    substitution (``<(kubectl logs ...)``) is read as a stream. Binary files are named in ``reading``."""
    reading = reading or Reading()
    found: list[LogSource] = []
    for path in paths:
        if path == "-":
            found.append(LogSource("<stdin>", "-"))
        elif os.path.isdir(path):
            found.extend(_walk(path, reading))
        elif _is_stream(path):
            found.append(LogSource(path, path))  # never peeked at: a pipe's bytes are read once
        elif os.path.isfile(path):
            found.extend(_file(path, reading))
        elif os.path.lexists(path):
            raise InputError(f"{path}: not a file, directory or pipe")
        else:
            raise InputError(f"{path}: no such file or directory")
    return tuple(found)


def _is_stream(path: str) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def _file(path: str, reading: Reading) -> list[LogSource]:
    if sniff(path):
        return [LogSource(path, path, "flight")]
    binary = _binary(path)
    if binary:
        reading.notes.append(f"{path}: {binary}, not a log: skipped")
        return []
    return [LogSource(path, path)]


def _binary(path: str) -> str | None:
    """What a file is when it is not text: its magic, or NUL bytes in its first 8 KiB (gzip is text to us)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(BINARY_PEEK)
    except OSError:
        return None  # said when it is read
    if head.startswith(GZIP_MAGIC):
        return None
    for magic, what in MAGIC.items():
        if head.startswith(magic):
            return what
    # NUL runs alone are a log a crash left padded (read it); NULs among other non-text bytes are binary data
    odd = sum(1 for b in head if (b < 32 and b not in (0, 9, 10, 13, 27)) or b == 127)
    return "a binary file" if b"\0" in head and odd * 20 > len(head) else None


def _walk(root: str, reading: Reading) -> list[LogSource]:
    out = []
    for directory, dirs, files in os.walk(root):
        fr = os.path.basename(directory) == RunDir.FR  # a run dir's: its early dumps' copies are not read twice
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not (fr and EARLY.fullmatch(d)))
        for name in sorted(files):
            full = os.path.join(directory, name)
            if name.startswith((".", *OWN_PREFIXES)) or name in OWN_FILES:
                continue
            if name.startswith(LIVE_FR) and os.path.abspath(directory) != os.path.abspath(root):
                continue
            if name.endswith(SKIP_SUFFIXES) and not sniff(full):
                continue
            if not os.access(full, os.R_OK):
                reading.notes.append(f"{full}: not readable by this user ({os.getuid()}): left out")
                reading.incomplete = True
                continue
            out.extend(_file(full, reading) if not _is_stream(full) else [])
    return out


CHUNK = 4 << 20
MAX_LINE = 64 * 1024  # the longest read of one line: a file without newlines never fills memory
AGAIN_MAX = 64 << 20  # the largest file read a second time for a few of its lines (``lines_at``)


def chunks(source: LogSource, size: int = CHUNK, reading: Reading | None = None) -> Iterator[str]:
    """The text of a source in pieces of about ``size`` characters, each ending at a line end (or at MAX_LINE).

    A source that breaks off (a truncated .gz, a file cut while read) keeps what was read, and says so:
    the piece the error interrupted is read again in small steps, up to the cut.
    """
    done = 0
    said = False  # whether a piece held more than whitespace (and NUL padding)
    try:
        with _opened(source, reading) as text:
            while block := text.read(size):
                block += text.readline(MAX_LINE)
                done += len(block)
                said = said or _has_text(block)
                yield block
        if not said and reading is not None:
            reading.empty.append(source.name)
            reading.notes.append(f"{source.name}: empty (nothing but whitespace): nothing in it to judge")
        return
    except _Missing:
        return
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        why = str(exc) or type(exc).__name__
    if source.path != "-":  # a pipe cannot be read again
        yield from _up_to_the_cut(source, done)
    if reading is not None:
        reading.incomplete = True
        reading.notes.append(f"{source.name}: cut short ({why}); what was there before the cut was read")


BLANK = " \t\r\n\f\v\0"  # what a file holds that says nothing: whitespace, and the NULs a crash pads a log with


def _has_text(piece: str) -> bool:
    """Whether a piece holds anything but whitespace and NULs."""
    return not piece.isspace() and bool(piece.strip(BLANK))


def _up_to_the_cut(source: LogSource, skip: int) -> Iterator[str]:
    """What follows the first ``skip`` characters, read in small steps up to where it breaks off, yielded at
    line ends as ``chunks`` yields (a line longer than MAX_LINE in MAX_LINE pieces)."""
    text = _text(source)
    pending = ""
    with text:
        try:
            while skip > 0 and (gone := text.read(min(skip, CHUNK))):
                skip -= len(gone)
            while block := text.read(SMALL):
                pending += block
                cut = pending.rfind("\n") + 1 or (len(pending) if len(pending) >= MAX_LINE else 0)
                if cut:
                    yield pending[:cut]
                    pending = pending[cut:]
        except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
            pass
    if pending:
        yield pending


SMALL = 4096


class _Missing(Exception):
    """The source could not be opened; ``reading`` holds why."""


@contextlib.contextmanager
def _opened(source: LogSource, reading: Reading | None) -> Iterator[io.TextIOWrapper]:
    try:
        text = _text(source)
    except InputError as exc:
        if reading is None:
            raise
        reading.incomplete = True
        reading.notes.append(f"{exc}: left out")
        raise _Missing from exc
    with text:
        yield text


def lines(source: LogSource) -> Iterator[str]:
    """The lines of a source, decoded leniently (a bad byte becomes U+FFFD, never an exception)."""
    with _text(source) as text:
        try:
            while line := text.readline(MAX_LINE):
                yield line
        except (OSError, EOFError, gzip.BadGzipFile):
            return


def lines_at(source: LogSource, numbers: Collection[int]) -> dict[int, str]:
    """The physical lines of a file at these numbers (counted as ``wc -l`` counts them, as the reader numbers them),
    as written: prefixes on. Nothing for a stream (it cannot be read again), a file bigger than ``AGAIN_MAX``, or one
    that cannot be read now."""
    if source.path == "-" or not numbers:
        return {}
    try:
        if os.path.getsize(source.path) > AGAIN_MAX:
            return {}
        wanted, last, found, number = set(numbers), max(numbers), {}, 1
        for piece in lines(source):
            if number in wanted and number not in found:
                found[number] = piece.rstrip("\r\n")
            if piece.endswith("\n"):
                number += 1
                if number > last:
                    break
    except (InputError, OSError):
        return {}
    return found


def _text(source: LogSource) -> io.TextIOWrapper:
    if source.path == "-":
        stdin = sys.stdin.buffer
        peek = getattr(stdin, "peek", lambda _n: b"")
        stream = gzip.GzipFile(fileobj=stdin) if peek(2)[:2] == GZIP_MAGIC else stdin
        return io.TextIOWrapper(stream, encoding=_marked(stream), errors="replace", newline="")
    try:
        raw = open(source.path, "rb")  # noqa: SIM115 - opened once: a pipe's bytes can be read only once
    except OSError as exc:
        raise InputError(f"{source.path}: {exc.strerror or exc}") from exc
    body = gzip.GzipFile(fileobj=raw) if raw.peek(2)[:2] == GZIP_MAGIC else raw
    return io.TextIOWrapper(body, encoding=_marked(body), errors="replace", newline="")


def _marked(stream: object) -> str:
    """The encoding a stream's byte-order mark names (``encoding_of``), peeked at, nothing consumed."""
    peek = getattr(stream, "peek", None)
    return encoding_of(peek(HEAD)[:HEAD]) if peek is not None else "utf-8"


def spans(path: str, size: int, cut_after: Callable[[str], bool]) -> list[tuple[int, int]]:
    """A regular, uncompressed file as byte ranges of about ``size``, each ending at a line end where
    ``cut_after`` (given the line that ends there) allows a cut; one range if no such line is near."""
    total = os.path.getsize(path)
    found: list[tuple[int, int]] = []
    start = 0
    with open(path, "rb") as handle:
        while total - start > size + size // 2:
            cut = _cut(handle, start + size, cut_after)
            if cut is None:
                break
            found.append((start, cut))
            start = cut
    found.append((start, total))
    return found


CUT_WINDOW = 1 << 20  # where a cut is looked for, after the range's nominal end
CUT_LINE = 4096  # a line ending a range is shorter than this (so it was read whole)


def _cut(handle: io.BufferedReader, at: int, cut_after: Callable[[str], bool]) -> int | None:
    handle.seek(at)
    window = handle.read(CUT_WINDOW)
    end = window.find(b"\n")  # the line it ends began before ``at``: the cut is after a later one
    while end >= 0:
        start, end = end + 1, window.find(b"\n", end + 1)
        if end < 0:
            return None
        line = window[start:end]
        if len(line) < CUT_LINE and cut_after(line.decode("utf-8", errors="replace")):
            return at + end + 1
    return None


def span_chunks(source: LogSource, start: int, end: int, reading: Reading, size: int = CHUNK) -> Iterator[str]:
    """``chunks`` of bytes ``start``..``end`` of a regular uncompressed file (``spans`` cut it at line ends)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        with open(source.path, "rb") as handle:
            handle.seek(start)
            left = end - start
            while left > 0:
                block = handle.read(min(size, left))
                if not block:
                    break
                left -= len(block)
                if not block.endswith(b"\n") and left > 0:
                    more = handle.readline(min(MAX_LINE, left))
                    block += more
                    left -= len(more)
                yield decoder.decode(block, final=left <= 0)
    except OSError as exc:
        reading.incomplete = True
        reading.notes.append(f"{source.name}: {exc.strerror or exc}: read up to there")
