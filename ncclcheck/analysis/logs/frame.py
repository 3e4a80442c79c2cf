"""Frame raw log lines: strip what launchers and terminals add, rejoin hard-wrapped lines, split NCCL's header."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

from ncclcheck.model.logs import LogLine

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|(?<![\w\]])\[0m\s?")
PREFIXES = (
    ("mpi", re.compile(r"^\[\d+,(?P<rank>\d+)\]<(?:stdout|stderr)>:\s?")),
    ("cloudwatch", re.compile(r"^\s*\|\s*\d{4}-\d\d-\d\dT[\d:.]+Z\s*\|\s*")),
    ("stamp", re.compile(r"^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s*(?:\|\s*)?")),
    ("torchrun", re.compile(r"^\[(?:default)?rank(?P<rank>\d+)\]:\s?")),
    ("ray", re.compile(r"^\((?:pid=\d+|[\w.-]+ pid=\d+(?:, ip=[\d.]+)?)\)\s")),
    ("launcher", re.compile(r"^\[[A-Za-z][\w|.-]*\]:\s?")),
    ("kubectl", re.compile(r"^\[pod/[^\]\s]+\] ")),
    ("lineno", re.compile(r"^\[\d+\]\s(?=\S)(?![\w./-]+:\d+ NCCL |NCCL )")),
    ("local", re.compile(r"^(?P<rank>\d+): (?=\S)")),
)
# Every prefix above starts with one of these: a line starting otherwise (a hostname) is skipped fast.
PREFIX_STARTS = frozenset("[(| \t0123456789")
# Prefixes that start with a letter, tried only on a line with ": " or " | " near its start:
#   pdsh/clush "node3: ", docker compose "trainer-1  | ", syslog/journald "Nov 21 10:00:01 node3 train[42]: ",
#   kubectl --prefix "[pod/trainer-0/pytorch] " (starts with "[": in PREFIXES below).
WORD_PREFIX = re.compile(
    r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [\w.-]+ [\w./-]+(?:\[\d+\])?: "
    r"|[\w.-]+\s+\| "
    r"|(?=[\w.-]*\d)(?=[a-z])[a-z\d][\w.-]*: (?=\S))"
)
HEADER = re.compile(
    r"^(?P<host>[^\s:\[\]]+):(?P<pid>\w+)(?::(?P<tid>\w+))? \[(?P<dev>\d+)\] "
    r"(?:(?P<src>[\w./-]+:\d+)(?: \([\w:~<>]+\))? )?NCCL (?P<lvl>INFO|WARN|TRACE|ABORT) ?(?P<msg>.*)$"
)
BARE_HEADER = re.compile(
    r"^(?:\[(?P<dev>\d+)\] )?(?:(?P<src>[\w./-]+:\d+) )?NCCL (?P<lvl>INFO|WARN|TRACE) (?P<msg>.*)$"
)
# A line that starts on its own: what a terminal's hard wrap never produces at column 0.
LINE_START = re.compile(
    r"^(?:\s|\[|\(|\||<|Traceback|File \"|[\w.-]+:\w+(?::\w+)? \[\d+\]|NCCL |[A-Z]\w*(?:Error|Exception|Warning)\b"
    r"|terminate called|frame #\d|Exception raised from|<omitting|[IWEF]\d{4} |\w[\w.]*\.(?:py|cc|cpp|h):\d+|torch\.|srun:|=+|\*+|-{3,}|\.\.\."
    r"|[A-Z][A-Za-z_]*:\s|(?:ERROR|FATAL|FAILED|WARN(?:ING)?|INFO|DEBUG)\b)"
)
# A terminal hard-wraps at its width: only a physical line exactly this long can continue on the next one
# (xterm/VT 80 and 132, common window and tmux/screen widths, kubectl's and CI consoles' 100-250).
WRAP_WIDTHS = frozenset({80, 100, 120, 128, 132, 140, 150, 160, 180, 200, 220, 240, 250, 256})
MAX_LINE = 64 * 1024  # a longer line is split here and read on: never dropped
# Lines at the top of a quiet chunk still framed: they may finish a line hard-wrapped at the chunk's edge.
QUIET_HEAD = 4
PIECE = 64 << 10


def strip_prefixes(text: str) -> tuple[str, int | None]:
    """Remove ANSI residue and launcher/timestamp prefixes (repeatedly); return the text and a rank if one said so."""
    if "\x1b" in text or "[0m" in text:
        text = ANSI.sub("", text)
    text = text.rstrip("\r\n").replace("\r", "")
    rank = None
    for _ in range(8):
        if text and text[0] not in PREFIX_STARTS and (": " in text[:80] or " | " in text[:80]):
            word = WORD_PREFIX.match(text)
            if word is not None:
                text = text[word.end() :]
                continue
        if not text or text[0] not in PREFIX_STARTS:
            return text, rank
        for name, pattern in PREFIXES:
            match = pattern.match(text)
            if match and match.end() > 0:
                if name in ("mpi", "torchrun") and rank is None:
                    rank = int(match.group("rank"))
                text = text[match.end() :]
                break
        else:
            return text, rank
    return text, rank


def frame(text: str, file: str, line: int) -> LogLine:
    """One physical or rejoined line as a LogLine."""
    body, rank = strip_prefixes(text[:MAX_LINE])
    match = HEADER.match(body)
    if match:
        src = f"{match.group('src')} " if match.group("src") else ""
        return LogLine(
            file, line, src + match.group("msg"), match.group("host"), match.group("pid"), int(match.group("dev")),
            match.group("lvl"), rank,
        )  # fmt: skip
    bare = BARE_HEADER.match(body.lstrip())
    if bare:
        dev = int(bare.group("dev")) if bare.group("dev") else None
        src = f"{bare.group('src')} " if bare.group("src") else ""
        return LogLine(file, line, src + bare.group("msg"), None, None, dev, bare.group("lvl"), rank)
    return LogLine(file, line, body, rank=rank)


def rejoin(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Glue terminal hard-wraps back: a line exactly a terminal's width followed by one that cannot start a
    line on its own. Anything else stays as it was: two log lines are never glued into one."""
    held: tuple[int, str] | None = None
    last_physical = 0
    for number, text in lines:
        text = text.rstrip("\r\n")
        wrapped = held is not None and last_physical in WRAP_WIDTHS and len(held[1]) + len(text) <= MAX_LINE
        stripped = strip_prefixes(text)[0] if wrapped else ""
        if held is not None and stripped and not LINE_START.match(stripped):
            held = (held[0], held[1] + stripped)
            last_physical = len(text)
            continue
        if held is not None:
            yield held
        held, last_physical = (number, text), len(text)
    if held is not None:
        yield held


def frame_all(lines: Iterable[str], file: str) -> Iterator[LogLine]:
    """Every logical line of a file, numbered from 1 by its first physical line; a line longer than
    MAX_LINE is read in MAX_LINE pieces, never cut off."""
    split = ((n, t[i : i + MAX_LINE]) for n, t in enumerate(lines, 1) for i in range(0, max(len(t), 1), MAX_LINE))
    for number, text in rejoin(split):
        if text.strip():
            yield frame(text, file, number)


def frame_chunks(
    chunks: Iterable[str], file: str, quiet: Callable[[str], bool], skipped: Callable[[int], None]
) -> Iterator[LogLine]:
    """Like ``frame_all`` over chunks of whole lines, but a chunk ``quiet`` says holds nothing of interest is
    only counted (``skipped`` gets its non-blank line count): a multi-GB log of training output costs a scan."""
    return (frame(text, file, number) for number, text in rejoin(_physical(chunks, quiet, skipped)) if text.strip())


def _physical(
    chunks: Iterable[str], quiet: Callable[[str], bool], skipped: Callable[[int], None]
) -> Iterator[tuple[int, str]]:
    """Physical lines, numbered as ``wc -l`` counts them (only \\n ends a line); one longer than MAX_LINE is
    handed on in MAX_LINE pieces under its own number. A chunk may end inside a line (no newline for
    megabytes): the line's rest opens the next chunk and is numbered as its own line."""
    number = 0
    for chunk in chunks:
        for piece, is_quiet in _pieces(chunk, quiet):
            if not is_quiet:
                for text in piece.split("\n")[: -1 if piece.endswith("\n") else None]:
                    number += 1
                    for start in range(0, max(len(text), 1), MAX_LINE):
                        yield number, text[start : start + MAX_LINE]
                continue
            head = 0
            for _ in range(QUIET_HEAD):
                end = piece.find("\n", head)
                if end < 0 or end - head > MAX_LINE:
                    break
                number += 1
                yield number, piece[head : end + 1]
                head = end + 1
            rest = piece[head:]
            count = rest.count("\n") + (0 if rest.endswith("\n") or not rest else 1)
            skipped(count - rest.count("\n\n"))
            number += count
            yield number, ""  # a break: nothing rejoins across the skipped lines


def _pieces(chunk: str, quiet: Callable[[str], bool]) -> Iterator[tuple[str, bool]]:
    """A chunk and whether it is quiet; a busy one in pieces of about PIECE characters, each judged again, so
    a few NCCL lines do not cost parsing the megabytes of training output around them."""
    if quiet(chunk):
        yield chunk, True
        return
    if len(chunk) <= PIECE:
        yield chunk, False
        return
    start = 0
    while start < len(chunk):
        end = chunk.find("\n", start + PIECE)
        end = len(chunk) if end < 0 else end + 1
        piece = chunk[start:end]
        yield piece, quiet(piece)
        start = end
