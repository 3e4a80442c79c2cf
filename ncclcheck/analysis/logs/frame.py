"""Frame raw log lines: prefixes off (``prefixes``), hard wraps rejoined (``rejoin``), NCCL's header split; and the
fast reader that hands a chunk's lines to a fold, skipping what cannot matter."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from ncclcheck.analysis.logs.prefixes import (
    MAX_LINE,
    PREFIXES,
    RANK_PREFIXES,
    WORD_PREFIX,
    WRAP_WIDTHS,
    Parts,
    frame,
    parts,
)
from ncclcheck.analysis.logs.rejoin import CRI, CUT_WIDTH, _cut_end, _partial, _Rejoin, _visible, rejoin
from ncclcheck.analysis.logs.remembered import Remembered
from ncclcheck.model.logs import LogLine

# Lines at the top of a quiet chunk still framed: they may finish a line hard-wrapped at the chunk's edge.
QUIET_HEAD = 4
PIECE = 64 << 10


def frame_all(lines: Iterable[str], file: str) -> Iterator[LogLine]:
    """Every logical line of a file, numbered from 1 by its first physical line; a line longer than
    MAX_LINE is read in MAX_LINE pieces, never cut off."""
    split = ((n, t[i : i + MAX_LINE]) for n, t in enumerate(lines, 1) for i in range(0, max(len(t), 1), MAX_LINE))
    for number, text in rejoin(split):
        if text.strip():
            yield frame(text, file, number)


def cut_after(line: str) -> bool:
    """Whether a file may be cut after this line and the rest read apart: nothing would be glued to it."""
    line = line.rstrip("\r\n")
    return len(_visible(line)) not in WRAP_WIDTHS and ((cri := _partial(line)) is None or cri[1] != "P")


class LineFold(Protocol):
    """Where ``fold_chunks`` puts lines (a LogFold, or a worker's Recorder): one way in, in three shapes. Every line
    is an ``add_line`` of its parts; the fast lane hands the two commonest shapes unparsed, so that a text many ranks
    print is parsed once (``add_nccl_line``: an NCCL header and message; ``add_prefixed_line``: a text behind
    torchrun's rank prefix); ``skip`` counts a quiet stretch no line of which can matter. Which one runs is decided
    here, by the line's shape, never by the sink."""

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
    ) -> None: ...

    # ``add_line`` of a line of the fast lane: its NCCL header as printed (``header`` parses it) and its message
    def add_nccl_line(self, file: str, number: int, head: str, msg: str, prefix_rank: int | None) -> None: ...

    # ``add_line`` of a line of the fast lane with no NCCL header: its text behind torchrun's prefix (``rest_parts``)
    def add_prefixed_line(self, file: str, number: int, rest: str, prefix_rank: int) -> None: ...

    def skip(self, count: int, ranks: frozenset[int] = frozenset()) -> None: ...


# The header of the commonest line of a large job's logs (after torchrun's rank prefix at most), one that
# ``strip_prefixes`` would leave alone (a host starting with a letter, no ANSI, no CR): the fast lane below.
# Its words and digits are ASCII's, spelt out: ``\w`` and ``\d`` are Unicode's and ask a table per character, a
# quarter of the fast lane's time; a host or pid in other letters or digits is framed as any other line.
_HEADER = (
    r"(?P<host>[A-Za-z_][A-Za-z0-9_.-]*):(?P<pid>[A-Za-z0-9_]+)(?::[A-Za-z0-9_]+)? \[(?P<dev>[0-9]+)\] "
    r"(?:NCCL |(?P<src>[A-Za-z0-9_./-]+:[0-9]+)(?: \([A-Za-z0-9_:~<>]+\))? NCCL )"
    r"(?P<lvl>INFO|WARN|TRACE|ABORT|ATTN) ?"  # commonest first
)
FAST_HEADER = re.compile(_HEADER)


def fold_chunks(chunks: Iterable[str], file: str, quiet: Callable[[str], bool], sink: LineFold) -> int:
    """Every logical line of chunks of whole lines into ``sink``, as ``frame_all`` frames them; a chunk ``quiet``
    says holds nothing of interest is only counted (``sink.skip``): a multi-GB log of training output costs a
    scan. Physical lines are numbered as ``wc -l`` counts them (only \\n ends a line); one longer than MAX_LINE
    is handed on in MAX_LINE pieces under its own number. A chunk may end inside a line (no newline for
    megabytes): the line's rest opens the next chunk, under the same number. Returns how many physical lines
    there were."""
    join = _Rejoin()

    def let_go(done: tuple[int, str] | None) -> None:
        if done is not None and done[1].strip():
            sink.add_line(file, done[0], *parts(done[1]))

    number, broken, quiet = 0, False, _whole(quiet)
    for chunk in chunks:
        if broken:  # the chunk before ended inside a line: this one goes on with it
            number -= 1
        for piece, is_quiet in _pieces(chunk, quiet):
            if is_quiet:
                number = _quiet(piece, number, join, let_go, sink)
            else:
                number = _busy(piece, number, file, join, let_go, sink)
        broken = not chunk.endswith("\n")
    for done in join.flush():
        let_go(done)
    return number


CRI_RECORD = re.compile(r"\r?\n" + CRI.pattern[1:])  # a CRI record's prefix, after the line end before it


def _whole(quiet: Callable[[str], bool]) -> Callable[[str], bool]:
    """``quiet`` of a text whose CRI records may be parts of a line (P): a literal the runtime cut in two counts."""

    def whole(text: str) -> bool:
        if not quiet(text):
            return False
        return _partial(text) is None or quiet(CRI_RECORD.sub("", text))  # a CRI log: its records glued

    return whole


# The fast lane: the lines framed by one match each, over a whole piece, anchored on the newline before each line
# (the regex engine then tries only where a newline is; the piece is read with one put before it). A line never
# glued to the line before (it starts a line) nor given the next (not a terminal's width): torchrun's rank
# prefix, if any, then an NCCL header (parsed by FAST_HEADER once per distinct header: a process prints
# thousands of lines under one) and the message; or the rank prefix and whatever follows it (framed once per
# distinct text by ``rest_parts``). The sink is handed both unparsed, so that it can remember more per header
# or text than their parts (``recording.Recorder``). FAST_CLEAN takes the message as ``.*``: the same lines in a piece that holds no
# CR and no ESC (checked once a piece), and faster.
_UNNAMED_HEADER = "(" + re.sub(r"\(\?P<\w+>", "(?:", _HEADER) + ")"
_FAST_NL = r"\n(?:\[(?:default)?rank([0-9]+)\]:[^\S\n]?(?:" + _UNNAMED_HEADER + "|)|" + _UNNAMED_HEADER + ")(MESSAGE)"
FAST_LINES = re.compile(_FAST_NL.replace("(MESSAGE)", r"([^\r\x1b\n]*)$"), re.M)
FAST_CLEAN = re.compile(_FAST_NL.replace("(MESSAGE)", "(.*)"))


def _header(head: str) -> tuple[str, str, int, str | None, str]:
    """An NCCL header as its host, pid, device, source location and level."""
    match = FAST_HEADER.fullmatch(head)
    assert match is not None  # FAST_LINES matched it
    host, pid, dev, src, level = match.group("host", "pid", "dev", "src", "lvl")
    return host, pid, int(dev), src, level


_headers = Remembered(_header)
_HEADERS = _headers.known


def header(head: str) -> tuple[str, str, int, str | None, str]:
    """An NCCL header of the fast lane (FAST_HEADER's text) as its host, pid, device, source location and level."""
    return _HEADERS.get(head) or _headers(head)


_WRAP_SPANS = frozenset(w + 1 for w in WRAP_WIDTHS)  # a match's span (the newline before it too) of such a line
_RANKS = {str(r): r for r in range(1 << 13)}  # int() of a rank prefix's number, a lookup (0 is int()'s anyway)


def _busy(
    piece: str, number: int, file: str, join: _Rejoin, let_go: Callable[[tuple[int, str] | None], None], sink: LineFold
) -> int:
    """The lines of a piece that may matter: the fast lane's handed to ``sink.add_nccl_line`` or ``sink.add_prefixed_line``
    unframed (the sink reads a header or a text behind torchrun's prefix once), the others framed."""
    lines = FAST_LINES if "\r" in piece or "\x1b" in piece else FAST_CLEAN
    text = "\n" + piece
    pos = 1  # where the text not yet framed starts
    add_prefixed_line, add_nccl_line, spans, ranks = sink.add_prefixed_line, sink.add_nccl_line, _WRAP_SPANS, _RANKS
    for fast in lines.finditer(text):
        start, end = fast.span()  # start: the newline before the line
        if start >= pos:
            number = _framed(text[pos : start + 1], number, join, let_go, file, sink)
        number += 1
        pos = end + 1
        prefix, head, bare, msg = fast.groups()  # the rank prefix's rank; bare: a header without the prefix
        head = head or bare
        width = end - start
        if (
            width in spans
            or width > MAX_LINE
            or (width > CUT_WIDTH and "(" in msg and _cut_end(msg))  # a paste cut inside parentheses: glued
            or (head and "[0m" in msg)
        ):
            line = text[start + 1 : end]  # may take the next line, or must be split: framed as any other
            for at in range(0, len(line), MAX_LINE):
                let_go(join.push(number, line[at : at + MAX_LINE]))
            continue
        if join.held is not None:  # a line of these two kinds is never a wrapped line's rest
            for done in join.flush():
                let_go(done)
        if head:
            add_nccl_line(file, number, head, msg, None if prefix is None else ranks.get(prefix) or int(prefix))
        else:  # behind the rank prefix, no NCCL header
            add_prefixed_line(file, number, msg, ranks.get(prefix) or int(prefix))
    if pos < len(text):
        number = _framed(text[pos:], number, join, let_go, file, sink)
    return number


def _framed(
    text: str,
    number: int,
    join: _Rejoin,
    let_go: Callable[[tuple[int, str] | None], None],
    file: str,
    sink: LineFold,
) -> int:
    """Lines framed one by one (prefixes, rejoining); one longer than MAX_LINE in pieces under its own number. A
    settled line (``_settled``) is handed to ``sink`` at once: the rejoiner would only hold it until the next."""
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    push, known, settled, add_line = join.push, _SETTLED, _settles, sink.add_line
    for number, line in enumerate(lines, number + 1):  # noqa: B020 - numbering goes on from the caller's
        said = known.get(line) or settled(line)
        if said and not join.parts:  # a CRI record's part held before it is let go first, as the rejoiner does
            if join.held is not None:  # the line held before may take this one
                let_go(push(number, line))
                if join.held is None or join.held[0] != number:
                    continue
                join.held = None
            if said is not _BLANK:
                add_line(file, number, *said)
            continue
        if len(line) <= MAX_LINE:
            let_go(push(number, line))
            continue
        for start in range(0, len(line), MAX_LINE):
            let_go(push(number, line[start : start + MAX_LINE]))
    return number


def _settled(line: str) -> Parts | tuple[()]:
    """The parts of a physical line that takes nothing after it (not a terminal's width long, no parenthesis a cut
    left open, no CRI record's part, no CR or colour code that changes its width), ``_BLANK`` for such a line of
    spaces (never read), ``()`` for any other line, which goes through the rejoiner. Pure: remembered per text."""
    if (
        len(line) > MAX_LINE
        or len(line) in WRAP_WIDTHS
        or "\r" in line
        or "\x1b" in line
        or "[0m" in line
        or (len(line) >= CUT_WIDTH and _cut_end(line))
        or _partial(line) is not None
    ):
        return ()
    return parts(line) if line.strip() else _BLANK


_BLANK: Parts = ("", None, None, None, None, None)  # a settled line of spaces: it only ends the line held before it


_settles = Remembered(_settled)
_SETTLED = _settles.known


def _quiet(
    piece: str, number: int, join: _Rejoin, let_go: Callable[[tuple[int, str] | None], None], sink: LineFold
) -> int:
    """A quiet piece: its first lines may finish a line hard-wrapped at the piece before; the rest is counted."""
    head = 0
    for _ in range(QUIET_HEAD):
        end = piece.find("\n", head)
        if end < 0 or end - head > MAX_LINE:
            break
        number += 1
        let_go(join.push(number, piece[head : end + 1]))
        head = end + 1
    for done in join.flush():  # a break: nothing rejoins across the skipped lines
        let_go(done)
    rest = piece[head:]
    count = rest.count("\n") + (0 if rest.endswith("\n") or not rest else 1)
    sink.skip(count - _blank(rest), ranks_in(piece, head, count))
    return number + count


BLANK = re.compile(r"\n[^\S\n]*(?=\n)")  # a line of nothing but whitespace, after the newline before it


def _blank(text: str) -> int:
    """How many lines of ``text`` hold nothing but whitespace: lines the fold never counts (``let_go``)."""
    if not text:
        return 0
    blank = len(BLANK.findall(text))  # each line after the first, ended by a newline (as fast as counting)
    first = text.find("\n")
    if not text[: first if first >= 0 else len(text)].strip():
        blank += 1
    last = text.rfind("\n") + 1
    if 0 < last < len(text) and not text[last:].strip():
        blank += 1
    return blank


# A line that starts with torchrun's or Open MPI's rank prefix (after a newline, so the regex engine looks only
# where a newline is: about 2 ms a MiB)
_RANK_PREFIX = r"\[(?:(?:default)?rank(\d+)\]:|\d+,(\d+)\]<(?:stdout|stderr)>:)"
RANK_LINE = re.compile(r"\n" + _RANK_PREFIX)


def _within_a_line(pattern: str) -> str:
    """A prefix's pattern that cannot run past the end of its line (``\\s`` outside a character class as
    ``[^\\S\\n]``), for a regex over many lines."""
    out, klass, i = [], False, 0
    while i < len(pattern):
        two = pattern[i : i + 2]
        if two == "\\s" and not klass:
            out.append("[^\\S\\n]")
        elif two[:1] == "\\":
            out.append(two)
        else:
            klass = (klass and two[:1] != "]") or (not klass and two[:1] == "[")
            out.append(two[:1])
            i += 1
            continue
        i += 2
    return "".join(out)


# ... or has one behind at most three prefixes that ``strip_prefixes`` takes off before it (pdsh's "host: ", srun's
# "N: ", a timestamp, kubectl's pod, docker compose's service), none of them a rank prefix itself
_LEAD = "|".join(
    [re.sub(r"\(\?P<\w+>", "(?:", p.pattern[1:]) for name, p in PREFIXES if name not in RANK_PREFIXES]
    + [WORD_PREFIX.pattern[1:]]
)
_NOT_RANK = r"(?!\[(?:default)?rank\d+\]:|\[\d+,\d+\]<(?:stdout|stderr)>:)"
RANK_BEHIND = re.compile(r"\n(?:" + _NOT_RANK + "(?:" + _within_a_line(_LEAD) + ")){0,3}" + _RANK_PREFIX)
RANK_SAID = ("[rank", "[defaultrank", "]<std")  # how each rank prefix starts or ends (one count each)


def ranks_in(piece: str, start: int, lines: int | None = None) -> frozenset[int]:
    """The ranks the launcher prefixes of skipped lines name: a rank that logs is present, whether its lines
    fall in a piece that is read or in one that is only counted (which ranks are present decides who is a
    suspect of a timeout, so it must not depend on where a chunk ends). A prefix behind others (pdsh's
    "host: [rank2]:") counts as ``strip_prefixes`` reads it; the slower regex that finds those runs only on a
    piece that holds more rank prefixes than lines starting with one (of its ``lines`` from ``start``, when
    known: a piece whose every line starts with one is not searched again)."""
    at = max(start - 1, 0)
    found = RANK_LINE.findall(piece, at)
    first = RANK_LINE.match("\n" + piece[:40]) if start == 0 else None
    starting = len(found) + (first is not None)
    if starting != lines and starting < sum(piece.count(s, at) for s in RANK_SAID):
        found = RANK_BEHIND.findall(piece, at)
        if start == 0:
            end = piece.find("\n")
            first = RANK_BEHIND.match("\n" + (piece if end < 0 else piece[:end]))
    ranks = {int(a or b) for a, b in set(found)}  # distinct first
    if first is not None:
        ranks.add(int(first.group(1) or first.group(2)))
    return frozenset(ranks)


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
