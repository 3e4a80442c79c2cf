"""Glue back what a terminal, a container runtime or a paste cut: lines exactly a terminal's width and their rest,
Kubernetes CRI records' parts, a cut inside parentheses, a glog header left alone. Two log lines are never glued."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from ncclcheck.analysis.logs.prefixes import (
    ANSI,
    CLASS_REST,
    LINE_START,
    MAX_LINE,
    NCCL_LINE,
    NCCL_SOURCE,
    PREFIXES,
    WRAP_WIDTHS,
    strip_prefixes,
)

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


# A progress bar's end (tqdm's, and Lightning's, which is tqdm's: "| 450/1000 [01:23<01:42, 5.37it/s, loss=2.31]",
# "450it [01:23, 5.37it/s]"): a bar is drawn to the terminal's width, so it is often exactly that wide, and it is
# whole by construction: the line after it is never its rest
PROGRESS_END = re.compile(r"\d[\w.]*(?:/\d[\w.]*)? \[\d[\d:]*(?:<[\d:?]*)?, [^\[\]]*\]\s*$")
PROGRESS_TAIL = 200  # the most of a line's end a bar's counters, times and postfix take


# tmux's copy-mode position ("[451/1919]", with a search's "(3 results)" or "(timed out)" before it in tmux up to 3.3,
# after it since): drawn over the top line's right end, it is glued into a paste copied from the screen
_TMUX_SEARCH = r"\((?:\d+\+? results|timed out)\)"
TMUX_POSITION = re.compile(rf"(?:{_TMUX_SEARCH} )?\[\d+/\d+\](?: {_TMUX_SEARCH})?$")


def _without_position(text: str, at: int) -> str:
    """A line whose right end tmux drew its position over: the position off, and the pane's padding before it."""
    kept = text[:at]
    return kept.rstrip(" ") if kept.endswith(" ") else kept


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
        if width in WRAP_WIDTHS and text.endswith(("]", ")")) and (drawn := TMUX_POSITION.search(text)) is not None:
            text = _without_position(text, drawn.start())
            width = width if text[-1:] not in ("", " ") else len(text)  # the text reached the edge: maybe wrapped
        if (
            held is not None
            and (self.last in WRAP_WIDTHS or _cut_in_parentheses(held[1], text))
            and len(held[1]) + len(text) <= MAX_LINE
            and (_rest(held[1], text) or (self.last in WRAP_WIDTHS and _after_a_bare_header(held[1], text)))
            and PROGRESS_END.search(held[1][-PROGRESS_TAIL:]) is None
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


CUT_WIDTH = 80  # a paste is cut at some width: a shorter line with an open parenthesis is a line of its own


def _cut_end(line: str) -> bool:
    """Whether a line ends inside a word and leaves a parenthesis open: a cut, if the next line closes it."""
    return (line[-1:].isalnum() or line[-1:] in "/._-") and "(" in line and line.count("(") > line.count(")")


def _cut_in_parentheses(held: str, text: str) -> bool:
    """A paste cut mid-token inside parentheses, at any width ("...WorkNCCL(S" / "eqNum=1522789, ...) ran for"): the
    line opens more than it closes, ends inside a word, and the next one starts inside one and closes it."""
    if len(held) < CUT_WIDTH or not (_cut_end(held) and (text[:1].isalnum() or text[:1] in "/._-")):
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
