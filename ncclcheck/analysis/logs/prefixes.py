"""A physical line's parts: what launchers, collectors and terminals put in front of it (taken off, a rank kept where
a prefix names one), and NCCL's header split from its message. Pure; each distinct text is read once."""

from __future__ import annotations

import re

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
    ("ray", re.compile(r"^\((?:pid=\d+|[\w.-]+ pid=\d+(?:, ip=[\d.]+)?|raylet(?:, ip=[\d.]+)?)\)\s?")),
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
    r"|Traceback |NCCL (?:INFO|WARN|ATTN) |(?:[\w.]+\.)?\w*(?:Error|Exception): ))"
)
HEADER = re.compile(
    r"^(?P<host>[^\s:\[\]]+):(?P<pid>\w+)(?::(?P<tid>\w+))? \[(?P<dev>\d+)\] "
    r"(?:(?P<src>[\w./-]+:\d+)(?: \([\w:~<>]+\))? )?NCCL (?P<lvl>INFO|WARN|TRACE|ABORT|ATTN) ?(?P<msg>.*)$"
)
BARE_HEADER = re.compile(
    r"^(?:\[(?P<dev>\d+)\] )?(?:(?P<src>[\w./-]+:\d+)(?: \([\w:~<>]+\))? )?NCCL (?P<lvl>INFO|WARN|TRACE|ATTN) (?P<msg>.*)$"
)
# NCCL's header whose level word the line's end cut (a log or a paste cut off mid-word: "... NCCL WA"), read at the
# level the word begins; "A" alone may be ABORT or ATTN: read as ABORT, an error no verdict may pass over.
CUT_HEADER = re.compile(
    r"^(?:(?P<host>[^\s:\[\]]+):(?P<pid>\w+)(?::\w+)? )?(?:\[(?P<dev>\d+)\] )?(?:[\w./-]+:\d+(?: \([\w:~<>]+\))? )?"
    r"(?P<text>NCCL (?P<lvl>WA?R?|AB?O?R?|ATT?))$"
)
CUT_LEVELS = {"W": "WARN", "A": "ABORT"}  # by the word's first letters: "AT" and "ATT" are ATTN's
# A line that starts on its own: what a terminal's hard wrap never leaves at column 0. A wrap cuts anywhere, before a
# space, a bracket or a parenthesis too: only a header, an emitter's mark or a word a line opens with counts (read
# with the line's prefixes taken off). NCCL's header, with or without the host's, and its version line:
NCCL_START = (
    r"[\w.-]+:\w+(?::\w+)? \[\d+\]|(?:\[\d+\] (?:[\w./-]+:\d+ )?)?NCCL (?:INFO|WARN|TRACE|ABORT|ATTN|version)\b"
)
LINE_START = re.compile(
    rf"^(?:{NCCL_START}|Traceback|File \"|[A-Z]\w*(?:Error|Exception|Warning)\b|terminate called|frame #\d"
    r"|Exception raised from|<omitting|\[?[IWEF]\d{4} |\[[A-Za-z_]|\[\d+\]:|\[ *\d+\.\d+\]"
    r"|(?:/[\w./-]+|[\w.-]+)\.(?:py|cc|cpp|cu|h):\d+:|torch\.|srun:|slurmstepd:|(?:error|warning|fatal):"
    r"|={3,}|\*{3}|-{3,}|\.\.\.|[A-Z][A-Za-z_]*:\s|(?:ERROR|FATAL|FAILED|WARN(?:ING)?|INFO|DEBUG)\b"
    # a crash's and an error's own opening words (faulthandler, the shell, CUDA, NCCL's result, torch's message)
    r"|Fatal Python error|Current thread 0x|Thread 0x|Segmentation fault|Bus error|Aborted|CUDA error|nccl\w*Error:"
    r"|Last error:|Extension modules:)"
)
# The rest of an exception's class name a wrap cut ("torch.distributed.DistBackend" / "Error: ..."): glued after a
# lowercase letter although a line may start so.
CLASS_REST = re.compile(r"^(?:Error|Exception|Warning)\b")
# NCCL's header without its host's part: a line's start, or the rest of one a wrap cut inside the source file's
# name ("...[0] tra" / "nsport/p2p.cc:238 NCCL WARN"): a line's start only after a cut between two words.
NCCL_SOURCE = re.compile(r"^[\w./-]+:\d+ NCCL (?:INFO|WARN|TRACE|ABORT|ATTN)\b")
NCCL_LINE = re.compile(rf"^(?:{NCCL_START})")
# A terminal hard-wraps at its width: only a physical line exactly this long can continue on the next one
# (xterm/VT 80 and 132, common window and tmux/screen widths, kubectl's and CI consoles' 100-250).
WRAP_WIDTHS = frozenset({80, 100, 120, 128, 132, 140, 150, 160, 180, 200, 220, 240, 250, 256})
MAX_LINE = 64 * 1024  # a longer line is split here and read on: never dropped


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
    cut = CUT_HEADER.match(body.lstrip())
    if cut:
        host, pid, dev, word = cut.group("host", "pid", "dev", "lvl")
        level = "ATTN" if word.startswith("AT") else CUT_LEVELS[word[0]]
        return cut.group("text"), host, pid, (int(dev) if dev else None), level, rank
    return body, None, None, None, None, rank


def rest_parts(rest: str) -> Parts:
    """``parts`` of the text behind torchrun's rank prefix (one round of prefixes of 8 is taken), remembered."""
    return _RESTS.get(rest) or _rests(rest)


TORCHRUN_PREFIX = dict(PREFIXES)["torchrun"]
_rests = Remembered(lambda rest: _parts(rest, 7))  # a text behind torchrun's prefix: one round of 8 is taken
_RESTS = _rests.known
_wholes = Remembered(lambda text: _parts(text, 8))  # a whole line's (another launcher's prefix, or none)
_WHOLE = _wholes.known
