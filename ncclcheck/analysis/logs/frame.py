"""Frame raw log lines: strip what launchers and terminals add, rejoin hard-wrapped lines, split NCCL's header."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from ncclcheck.analysis.logs.remembered import Remembered
from ncclcheck.model.logs import LogLine

# A terminal's escape sequence; or the residue of a colour code whose ESC a paste lost: dropped ("[36m(pid=1)[0m ")
# or shown as a space (" [36m(pid=1) [0m "): the space before a code is its ESC, a space after it is the text's.
# Never a code glued to a word or a bracket before it ("x[0m"): that is not a paste's residue.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|^ ?\[[0-9;]*[0-9]m\s?|(?<= )\[[0-9;]*[0-9]m\s?|(?<![\w\]\s])\[[0-9;]*[0-9]m")
PREFIXES = (
    ("mpi", re.compile(r"^\[\d+,(?P<rank>\d+)\]<(?:stdout|stderr)>:\s?")),
    ("cloudwatch", re.compile(r"^\s*\|\s*\d{4}-\d\d-\d\dT[\d:.]+Z\s*\|\s*")),
    # Kubernetes' CRI log file (/var/log/pods, what kubelet and log shippers read): stamp, stream, and F for a
    # line's last part or P for a part of a line the runtime cut (``_Rejoin`` joins them)
    ("cri", re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d) (?:stdout|stderr) [FP] ")),
    ("stamp", re.compile(r"^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s*(?:\|\s*)?")),
    ("torchrun", re.compile(r"^\[(?:default)?rank(?P<rank>\d+)\]:\s?")),
    ("ray", re.compile(r"^\((?:pid=\d+|[\w.-]+ pid=\d+(?:, ip=[\d.]+)?)\)\s")),
    ("launcher", re.compile(r"^\[[A-Za-z][\w|.-]*\]:\s?")),
    ("kubectl", re.compile(r"^\[pod/[^\]\s]+\] ")),
    ("lineno", re.compile(r"^\[\d+\]\s(?=\S)(?![\w./-]+:\d+ NCCL |NCCL )")),
    ("local", re.compile(r"^(?P<rank>\d+): (?=\S)")),
    ("address", re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}:(?: |$)")),  # pdsh/clush -w by address: "10.0.0.3: "
)
# Every prefix above starts with one of these: a line starting otherwise (a hostname) is skipped fast.
PREFIX_STARTS = frozenset("[(| \t0123456789")
# Prefixes that start with a letter, tried only on a line with ": " or " | " near its start:
#   pdsh/clush "node3: " (the line as it was behind it, indented or empty), docker compose "trainer-1  | ",
#   syslog/journald "Nov 21 10:00:01 node3 train[42]: " (journalctl -o short-precise: "10:00:01.123456"; -o short-iso:
#   the stamp is taken off first, "node3 train[42]: " is left),
#   kubectl --prefix "[pod/trainer-0/pytorch] " (starts with "[": in PREFIXES below).
#   stern "trainer-0 pytorch " (pod and container, namespace first with -A: lowercase Kubernetes names, the pod's
#   with a digit or dash), taken off only before what starts a log line of ours (a rank prefix, an NCCL header,
#   a glog stamp, a traceback, an exception).
WORD_PREFIX = re.compile(
    r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)? [\w.-]+ [\w./-]+(?:\[\d+\])?: "
    r"|[\w.-]+ [\w./-]+\[\d+\]: "
    r"|[\w.-]+\s+\| "
    r"|(?=[\w.-]*\d)(?=[a-z])[a-z\d][a-z\d_.-]*:(?: |$)"
    r"|(?=[a-z0-9.-]*[-\d]|[a-z0-9.-]+ [a-z0-9.-]*[-\d])(?:[a-z0-9][a-z0-9.-]* ){2,3}(?=\[(?:default)?rank\d+\]:|[\w.-]+:\w+(?::\w+)? \[\d+\] |\[?[IWEF]\d{4} "
    r"|Traceback |NCCL (?:INFO|WARN) |(?:[\w.]+\.)?\w*(?:Error|Exception): ))"
)
HEADER = re.compile(
    r"^(?P<host>[^\s:\[\]]+):(?P<pid>\w+)(?::(?P<tid>\w+))? \[(?P<dev>\d+)\] "
    r"(?:(?P<src>[\w./-]+:\d+)(?: \([\w:~<>]+\))? )?NCCL (?P<lvl>INFO|WARN|TRACE|ABORT) ?(?P<msg>.*)$"
)
BARE_HEADER = re.compile(
    r"^(?:\[(?P<dev>\d+)\] )?(?:(?P<src>[\w./-]+:\d+) )?NCCL (?P<lvl>INFO|WARN|TRACE) (?P<msg>.*)$"
)
# A line that starts on its own: what a terminal's hard wrap never leaves at column 0. A wrap cuts anywhere, before a
# space, a bracket or a parenthesis too: only a header, an emitter's mark or a word a line opens with counts (read
# with the line's prefixes taken off). NCCL's header, with or without the host's, and its version line:
NCCL_START = r"[\w.-]+:\w+(?::\w+)? \[\d+\]|(?:\[\d+\] (?:[\w./-]+:\d+ )?)?NCCL (?:INFO|WARN|TRACE|ABORT|version)\b"
LINE_START = re.compile(
    rf"^(?:{NCCL_START}|Traceback|File \"|[A-Z]\w*(?:Error|Exception|Warning)\b|terminate called|frame #\d"
    r"|Exception raised from|<omitting|\[?[IWEF]\d{4} |\[[A-Za-z_]|\[\d+\]:|\[ *\d+\.\d+\]"
    r"|(?:/[\w./-]+|[\w.-]+)\.(?:py|cc|cpp|cu|h):\d+:|torch\.|srun:|slurmstepd:|(?:error|warning|fatal):"
    r"|={3,}|\*{3}|-{3,}|\.\.\.|[A-Z][A-Za-z_]*:\s|(?:ERROR|FATAL|FAILED|WARN(?:ING)?|INFO|DEBUG)\b)"
)
# The rest of an exception's class name a wrap cut ("torch.distributed.DistBackend" / "Error: ..."): glued after a
# lowercase letter although a line may start so.
CLASS_REST = re.compile(r"^(?:Error|Exception|Warning)\b")
# NCCL's header without its host's part: a line's start, or the rest of one a wrap cut inside the source file's
# name ("...[0] tra" / "nsport/p2p.cc:238 NCCL WARN"): a line's start only after a cut between two words.
NCCL_SOURCE = re.compile(r"^[\w./-]+:\d+ NCCL (?:INFO|WARN|TRACE|ABORT)\b")
NCCL_LINE = re.compile(rf"^(?:{NCCL_START})")
# A terminal hard-wraps at its width: only a physical line exactly this long can continue on the next one
# (xterm/VT 80 and 132, common window and tmux/screen widths, kubectl's and CI consoles' 100-250).
WRAP_WIDTHS = frozenset({80, 100, 120, 128, 132, 140, 150, 160, 180, 200, 220, 240, 250, 256})
MAX_LINE = 64 * 1024  # a longer line is split here and read on: never dropped
# Lines at the top of a quiet chunk still framed: they may finish a line hard-wrapped at the chunk's edge.
QUIET_HEAD = 4
PIECE = 64 << 10


# PREFIXES as one pattern, tried in their order (the first that matches wins, as in a loop over them): one
# match per prefix removed, not one per prefix tried. Each rank group is renamed for its prefix.
ANY_PREFIX = re.compile(
    "|".join(f"(?P<{name}>{p.pattern[1:].replace('(?P<rank>', f'(?P<{name}_rank>')})" for name, p in PREFIXES)
)
RANK_PREFIXES = ("mpi", "torchrun")


def strip_prefixes(text: str, rounds: int = 8) -> tuple[str, int | None]:
    """Remove ANSI residue and launcher/timestamp prefixes (up to ``rounds``); return the text and a rank if one
    said so."""
    if "\x1b" in text or "[0m" in text:
        text = ANSI.sub("", text)
    text = text.rstrip("\r\n").replace("\r", "")
    rank = None
    for _ in range(rounds):
        if not text:
            return text, rank
        if text[0] not in PREFIX_STARTS:
            head = text[:80]
            if ": " in head or " | " in head or head.count(" ") >= 2:
                word = WORD_PREFIX.match(text)
                if word is not None:
                    text = text[word.end() :]
                    continue
            return text, rank
        match = ANY_PREFIX.match(text)
        if match is None or match.end() == 0:
            return text, rank
        name = match.lastgroup
        if name in RANK_PREFIXES and rank is None:
            rank = int(match.group(f"{name}_rank"))
        text = text[match.end() :]
    return text, rank


def frame(text: str, file: str, line: int) -> LogLine:
    """One physical or rejoined line as a LogLine."""
    return LogLine(file, line, *parts(text))


Parts = tuple[str, str | None, str | None, int | None, str | None, int | None]


def parts(text: str) -> Parts:
    """A line's text, host, pid, device, NCCL level and the rank a prefix named (``frame`` without a LogLine).
    Behind torchrun's rank prefix, the rest is framed once per distinct text: every rank prints the same
    traceback, warning and NCCL message."""
    if text[:1] == "[" and (outer := TORCHRUN_PREFIX.match(text)) is not None:
        inner = rest_parts(text[outer.end() : MAX_LINE])
        return inner[0], inner[1], inner[2], inner[3], inner[4], int(outer.group(1))
    return _WHOLE.get(text) or _wholes(text)


def _parts(text: str, rounds: int) -> Parts:
    body, rank = strip_prefixes(text[:MAX_LINE], rounds)
    if "NCCL " not in body:
        return body, None, None, None, None, rank
    match = HEADER.match(body)
    if match:
        host, pid, dev, src, level, msg = match.group("host", "pid", "dev", "src", "lvl", "msg")
        return (f"{src} {msg}" if src else msg), host, pid, int(dev), level, rank
    bare = BARE_HEADER.match(body.lstrip())
    if bare:
        dev, src, level, msg = bare.group("dev", "src", "lvl", "msg")
        return (f"{src} {msg}" if src else msg), None, None, (int(dev) if dev else None), level, rank
    return body, None, None, None, None, rank


def rest_parts(rest: str) -> Parts:
    """``parts`` of the text behind torchrun's rank prefix (one round of prefixes of 8 is taken), remembered."""
    return _RESTS.get(rest) or _rests(rest)


TORCHRUN_PREFIX = dict(PREFIXES)["torchrun"]
_rests = Remembered(lambda rest: _parts(rest, 7))  # a text behind torchrun's prefix: one round of 8 is taken
_RESTS = _rests.known
_wholes = Remembered(lambda text: _parts(text, 8))  # a whole line's (another launcher's prefix, or none)
_WHOLE = _wholes.known


LINENO = dict(PREFIXES)["lineno"]
CRI = dict(PREFIXES)["cri"]


def _visible(text: str) -> str:
    """A physical line as a terminal shows it: no colour codes."""
    return ANSI.sub("", text) if "\x1b" in text or "[0m" in text else text


def _partial(text: str) -> tuple[str, str, int] | None:
    """A Kubernetes CRI record's stream, tag (P: a part, F: the last part) and where its text starts."""
    if text[:2].isdigit() and text[4:5] == "-" and (cri := CRI.match(text)) is not None:
        end = cri.end()
        return text[end - 9 : end - 3].strip(), text[end - 2], end
    return None


class _Rejoin:
    """Glue back what a terminal or a container runtime cut: a line exactly a terminal's width followed by one that
    cannot start a line on its own (no prefix, no header, not indented), and the parts (P) of a CRI record with the
    next record of the same stream. Anything else stays as it was: two log lines are never glued into one."""

    def __init__(self) -> None:
        self.held: tuple[int, str] | None = None
        self.last = 0  # the width of the held line's last physical line
        self.parts: dict[str, tuple[int, str]] = {}  # a stream's CRI parts so far (its first line's number)

    def push(self, number: int, text: str) -> tuple[int, str] | None:
        """Take the next physical line; give back the line it completes, if any."""
        text = text.rstrip("\r\n")
        if text[:2].isdigit() and (cri := _partial(text)) is not None:
            stream, tag, at = cri
            if stream in self.parts:
                number, first = self.parts.pop(stream)
                text = first + text[at:]
            if tag == "P":
                self.parts[stream] = (number, text)
                return None
        held = self.held
        width = len(text) if "\x1b" not in text and "[0m" not in text else len(_visible(text))
        if (
            held is not None
            and (self.last in WRAP_WIDTHS or _cut_in_parentheses(held[1], text))
            and len(held[1]) + len(text) <= MAX_LINE
            and (_rest(held[1], text) or (self.last in WRAP_WIDTHS and _after_a_bare_header(held[1], text)))
        ):
            self.held, self.last = (held[0], held[1] + text), width
            return None
        self.held, self.last = (number, text), width
        return held

    def flush(self) -> list[tuple[int, str]]:
        """What is held: the line that may go on, and parts of CRI records whose last part never came."""
        held = [self.held] if self.held is not None else []
        self.held, parts, self.parts = None, list(self.parts.values()), {}
        return sorted(held + parts)


def _rest(held: str, text: str) -> bool:
    """Whether a physical line after one a terminal's width long (``held``) is its rest: no prefix (a launcher
    prefixes each line it is handed; the wrap's rest has none), no header; indented by one space at most (a cut
    before a space; an indented line is one of its own, unless NCCL's old header: " [0] NCCL INFO")."""
    visible = _visible(text).replace("\r", "")
    stripped = strip_prefixes(text)[0]
    if len(stripped) < len(visible):  # a prefix, unless the line number of a "[N] " log, before no header
        number = LINENO.match(visible)
        if number is None or visible[number.end() :] != stripped or LINE_START.match(stripped):
            return False
        stripped = visible
    body = stripped.lstrip(" ")
    if not body or body[0] == "\t" or len(stripped) - len(body) > 1:
        return False
    if body is not stripped:
        return NCCL_LINE.match(body) is None
    last = _visible(held)[-1:]
    if LINE_START.match(body):  # but the rest of an exception's name a wrap cut: "torch.distributed.DistBackend"
        return last.islower() and CLASS_REST.match(body) is not None
    return NCCL_SOURCE.match(body) is None or (last.isalnum() and body[0].isalnum())


# glog's and c10d's header with nothing behind it: never a whole line, its message was wrapped onto the next one
BARE_GLOG = re.compile(
    r"\[?[IWEF]\d{3,4} \d\d:\d\d:\d\d(?:\.\d+)? +(?:\d+ +)?[\w./-]+:\d+\] ?$|\[[IWEF] [\w.]+:\d+\] ?$"
)


def _after_a_bare_header(held: str, text: str) -> bool:
    """A line cut right after its glog/c10d header ("[E321 ... ProcessGroupNCCL.cpp:1664] ") goes on with the next
    one, whatever it starts with ("[PG 1 Rank 0] Exception ..."), unless that one has a prefix or a header itself."""
    body = strip_prefixes(held)[0]
    if BARE_GLOG.search(body) is None or BARE_GLOG.match(body) is None:
        return False
    visible = _visible(text).replace("\r", "")
    return bool(visible) and strip_prefixes(text)[0] == visible and NCCL_LINE.match(visible) is None


def _cut_in_parentheses(held: str, text: str) -> bool:
    """A paste cut mid-token inside parentheses, at any width ("...WorkNCCL(S" / "eqNum=1522789, ...) ran for"): the
    line opens more than it closes, ends inside a word, and the next one starts inside one and closes it."""
    if not (held[-1:].isalnum() or held[-1:] in "/._-") or not (text[:1].isalnum() or text[:1] in "/._-"):
        return False
    if held.count("(") <= held.count(")"):
        return False
    depth = 0
    for char in text:
        depth += (char == "(") - (char == ")")
        if depth < 0:
            return True
    return False


def rejoin(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Logical lines from numbered physical ones (see ``_Rejoin``)."""
    join = _Rejoin()
    for number, text in lines:
        if (done := join.push(number, text)) is not None:
            yield done
    yield from join.flush()


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
    """Where ``fold_chunks`` puts lines: a LogFold."""

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
_HEADER = (
    r"(?P<host>[A-Za-z_][\w.-]*):(?P<pid>\w+)(?::\w+)? \[(?P<dev>\d+)\] "
    r"(?:NCCL |(?P<src>[\w./-]+:\d+)(?: \([\w:~<>]+\))? NCCL )(?P<lvl>INFO|WARN|TRACE|ABORT) ?"  # commonest first
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
_FAST_NL = r"\n(?:\[(?:default)?rank(\d+)\]:[^\S\n]?(?:" + _UNNAMED_HEADER + "|)|" + _UNNAMED_HEADER + ")(MESSAGE)"
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
    pos, add_prefixed_line, add_nccl_line = (
        1,
        sink.add_prefixed_line,
        sink.add_nccl_line,
    )  # pos: where the text not yet framed starts
    spans, ranks = _WRAP_SPANS, _RANKS
    for fast in lines.finditer(text):
        start, end = fast.span()  # start: the newline before the line
        if start >= pos:
            number = _framed(text[pos : start + 1], number, join, let_go)
        number += 1
        pos = end + 1
        prefix, head, bare, msg = fast.groups()  # the rank prefix's rank; bare: a header without the prefix
        head = head or bare
        if (
            end - start in spans
            or end - start > MAX_LINE
            or (head and "[0m" in msg)
            or (not head and msg[-1:].isalnum() and "(" in msg and msg.count("(") > msg.count(")"))  # cut in (...)
        ):
            line = text[start + 1 : end]  # may take the next line, or must be split: framed as any other
            for at in range(0, len(line), MAX_LINE):
                let_go(join.push(number, line[at : at + MAX_LINE]))
            continue
        if join.held is not None:  # a line of these two kinds is never a wrapped line's rest
            for done in join.flush():
                let_go(done)
        rank = None if prefix is None else ranks.get(prefix) or int(prefix)
        if head:
            add_nccl_line(file, number, head, msg, rank)
        else:  # behind the rank prefix, no NCCL header
            add_prefixed_line(file, number, msg, rank)  # type: ignore[arg-type]  # the prefix's rank
    if pos < len(text):
        number = _framed(text[pos:], number, join, let_go)
    return number


def _framed(text: str, number: int, join: _Rejoin, let_go: Callable[[tuple[int, str] | None], None]) -> int:
    """Lines framed one by one (prefixes, rejoining); one longer than MAX_LINE in pieces under its own number."""
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    push = join.push
    for number, line in enumerate(lines, number + 1):  # noqa: B020 - numbering goes on from the caller's
        if len(line) <= MAX_LINE:
            let_go(push(number, line))
            continue
        for start in range(0, len(line), MAX_LINE):
            let_go(push(number, line[start : start + MAX_LINE]))
    return number


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
