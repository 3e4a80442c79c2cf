"""Open what users hand us: files, directories (walked), ``-`` for stdin, ``.gz``; lines streamed, bad bytes replaced.

Flight Recorder dumps among them are recognised by their first bytes and handed to ``collectors.flight``.
"""

from __future__ import annotations

import gzip
import io
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ncclcheck.collectors.flight import sniff

SKIP_SUFFIXES = (".pkl", ".pickle", ".json", ".png", ".jpg", ".so", ".pt", ".bin", ".tmp")


@dataclass(frozen=True)
class LogSource:
    """One readable input: its display name and where to open it."""

    name: str
    path: str
    kind: str = "log"  # or "flight": a Flight Recorder dump


class InputError(Exception):
    """An input path that does not exist or cannot be read; the message says which and why."""


def sources(paths: Sequence[str]) -> tuple[LogSource, ...]:
    """Expand directories (sorted, recursive) into their text log files; ``-`` is stdin."""
    found: list[LogSource] = []
    for path in paths:
        if path == "-":
            found.append(LogSource("<stdin>", "-"))
        elif os.path.isdir(path):
            found.extend(_walk(path))
        elif os.path.isfile(path):
            found.append(LogSource(path, path, "flight" if sniff(path) else "log"))
        else:
            raise InputError(f"{path}: no such file or directory")
    return tuple(found)


def _walk(root: str) -> list[LogSource]:
    out = []
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(directory, name)
            if not name.startswith(".") and sniff(full):
                out.append(LogSource(full, full, "flight"))
            elif not (name.endswith(SKIP_SUFFIXES) or name.startswith(".")):
                out.append(LogSource(full, full))
    return out


CHUNK = 4 << 20
MAX_LINE = 64 * 1024  # the longest read of one line: a file without newlines never fills memory


def chunks(source: LogSource, size: int = CHUNK) -> Iterator[str]:
    """The text of a source in pieces of about ``size`` characters, each ending at a line end."""
    with _text(source) as text:
        try:
            while block := text.read(size):
                yield block + text.readline(MAX_LINE)
        except (OSError, EOFError, gzip.BadGzipFile):
            return  # a truncated .gz: keep what was read


def lines(source: LogSource) -> Iterator[str]:
    """The lines of a source, decoded leniently (a bad byte becomes U+FFFD, never an exception)."""
    with _text(source) as text:
        try:
            while line := text.readline(MAX_LINE):
                yield line
        except (OSError, EOFError, gzip.BadGzipFile):
            return


def _text(source: LogSource) -> io.TextIOWrapper:
    if source.path == "-":
        stdin = sys.stdin.buffer
        peek = getattr(stdin, "peek", lambda _n: b"")
        stream = gzip.GzipFile(fileobj=stdin) if peek(2)[:2] == b"\x1f\x8b" else stdin
        return io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="")
    try:
        with open(source.path, "rb") as probe:
            gz = probe.read(2) == b"\x1f\x8b"
        raw = gzip.open(source.path, "rb") if gz else open(source.path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise InputError(f"{source.path}: {exc.strerror or exc}") from exc
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")
