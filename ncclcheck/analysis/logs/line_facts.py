"""What a framed line's text says on its own, whatever its rank, file or place: the rules it matches (each finding's
message filled from the line), a watchdog timeout's fields, the global rank its text names, a user's call site, a
Flight Recorder frame, torchrun's table, and whether its emitter reads it as an error. Pure, remembered per text (a
message many ranks print is read once)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ncclcheck.analysis.logs import crashes, events
from ncclcheck.analysis.logs.remembered import Remembered
from ncclcheck.analysis.logs.rules import RULES, Rule
from ncclcheck.model.ids import logs as logs_ids
from ncclcheck.probes._sysfs import parse_int

# A message's {name} that its line did not give, said in words ("the line does not name the peer").
UNKNOWN_NOUNS = {
    "why": "reason",
    "what": "error",
    "n": "count",
    "who": "ranks",
    "addr": "address",
    "err": "error",
    "where": "HCA and port",
}
ANY_LITERAL = re.compile("|".join(sorted({re.escape(r.literal) for r in RULES})))
# Summaries of an error reported elsewhere: the root cause only when nothing more specific is in the logs.
# What a log says when ranks stop agreeing; a Flight Recorder dump says which rank and which call, so it wins.
EXCEPTION = Rule(
    logs_ids.PYTHON_EXCEPTION,
    "error",
    "Error",
    re.compile(
        r"^(?:Traceback.*)?(?!nccl)(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)): (?P<what>.{1,300})"
    ),
    "{type}: {what}",
    "the first traceback of the first failing rank is the bug; other ranks' errors are echoes of it",
)
# What torchrun prints once per launch (torch/distributed/run.py's OMP_NUM_THREADS notice with several workers a node,
# launcher/api.py's launch configs at INFO), never at a restart of its workers
LAUNCHED = ("Setting OMP_NUM_THREADS environment variable for each process", "Starting elastic_operator with launch")
# Context an error carries, not an error of its own: a traceback's header, C++ frames, torchrun's banner.
NOT_ALARM = re.compile(
    r"^Traceback \(most recent call last\)|ChildFailedError|^\[?\s*(?:Root Cause|Failures:)|^Exception raised from "
    r"|^frame #\d+:|^[\w./-]+ FAILED$|Stack trace of the failed collective:"
)
UNRECOGNISED = Rule(
    logs_ids.UNRECOGNISED_ERROR,
    "warning",
    "",
    re.compile(r"^(?P<line>.{1,240})"),
    "a line ncclcheck has no rule for says it is an error: {line}",
    "read it and the lines around it (the evidence gives file and line); no known cause explains it, so the"
    " verdict stays open: it may be the cause",
)
TEXT_RANK = re.compile(
    r"\[(?:PG (?:ID )?\S+ (?:PG GUID \S+ )?(?:\([^)\]]*\) )?)?Rank (\d+)\]|^\[(\d+)\] is setting up NCCL"
)
WATCHDOG = re.compile(
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?:, NumelIn=(?P<nin>\d+), NumelOut=(?P<nout>\d+))?"
    r", Timeout\(ms\)=(?P<tmo>\d+)\)(?: ran for (?P<ran>\d+) milliseconds)?"
)
# torch's process-group prefix: its id, guid and name (torch >= 2.4; "[PG 1 Rank 6]" in 2.3); the rank is the
# rank within that group, the job's global rank only in the default group (id 0, "default_pg")
PG_WORK = re.compile(r"(?:detected by watchdog at work(?: sequence id)?|Timeout at NCCL work): (\d+)")
PG = re.compile(
    r"\[PG (?:ID )?(\S+?)(?: PG GUID [^\s(\]]+)?(?: ?\((?P<desc>[^)\]]*)\))? Rank (?P<rank>\d+)\]"
)  # torch 2.4 also printed "[PG 0 (default_pg) Rank 1]"
# A traceback's frame in the user's code (not torch's, not a library's): a call site a mismatch can name.
TRACEBACK_FRAME = re.compile(r'^File "[^"]+", line \d+, in \S+$')  # a traceback's frame (faulthandler's has no comma)
USER_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')
LIBRARY = ("site-packages", "dist-packages", "/torch/", "<frozen")
# The Flight Recorder's stack of the failed collective, printed after "Stack trace of the failed collective:"
FR_FRAME = re.compile(r"^#\d+ (?P<fn>\S+) from (?P<file>[^\s:]+):(?P<line>\d+)")
FR_SITE = Rule(
    "failed-collective-site",
    "info",
    "",
    re.compile(r"^#\d+ (?P<fn>\S+) from (?P<file>[^\s:]+):(?P<line>\d+)"),
    "the failed collective was called from {file}:{line} ({fn}) (torch's Flight Recorder stack)",
    "that call site is where this rank waited: compare it with the other ranks' (a rank elsewhere is the suspect)",
)
ENTRY = re.compile(r"\[\d+\]:")  # an entry of torchrun's summary
CHILD = re.compile(
    r"rank\s*:\s*(\d+)(?: \(local_rank: (\d+)\))?|host\s*:\s*(\S+)|exitcode\s*:\s*(-?\d+)(?: \(pid: (\d+)\))?"
    r"|Signal \d+ \((SIG\w+)\)"
    r"|^\s*time\s*:\s*(\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d)"
)


@dataclass(frozen=True)
class RuleMatch:
    """One rule's reading of a line: the finding's message and the ranks the message names as the cause."""

    rule: Rule
    message: str
    named: tuple[int, ...] = ()


def _said(rule: Rule, match: re.Match[str]) -> RuleMatch:
    groups = _ordered_pair({k: v for k, v in match.groupdict().items() if v})
    return RuleMatch(
        rule, format_message(rule.message, groups), tuple(int(r) for r in re.findall(r"\d+", groups.get("who", "")))
    )


LEVELS = (None, "INFO", "WARN", "TRACE", "ABORT")  # a line's NCCL level (frame.HEADER's), None outside NCCL's lines


@dataclass(frozen=True)
class LineFacts:
    """What a line's text says on its own, whatever its rank, file or place: pure, so remembered per text (a
    message many ranks print, or one printed at every retry, is read once)."""

    said: tuple[RuleMatch, ...]  # the rules it matches, in catalogue order, or the generic exception
    watchdog: bool  # names a WorkNCCL: a watchdog timeout line, read as a Timeout
    timeout: tuple[str | None, int, str, int | None, int | None, int | None, int | None, int | None, str | None] | None
    text_rank: int | None  # a rank the text itself names ("[Rank 3]")
    site: str | None  # a traceback frame in the user's code
    fr_start: bool  # opens a Flight Recorder stack
    fr_frame: (
        tuple[bool, RuleMatch] | None
    )  # a Flight Recorder stack frame: whether in the user's code, and its finding
    torchrun: bool  # opens torchrun's failure summary
    summary: bool  # would change the summary block it is in (an entry's start, its end, a field of the entry)
    alarm: bool  # read as an error by its emitter's grammar (events.read) outside NCCL's lines: the net reads it
    trail: bool  # NCCL's error trail ("file.cc:12 -> 2"): an error at any NCCL level
    unrecognised: RuleMatch | None  # the safety net's finding, if the line is not mere context
    time: str | None  # the time its emitter's header gives, as printed
    thrown: bool  # opens a traceback or a C++ exception's frames: an error was raised, its line here or not
    pg_work: (
        tuple[int, str, str | None, int] | None
    )  # the work (seq) a group's watchdog line names: seq, pg, desc, rank
    crash: str | None = None  # a line of a crash's block, a dead thread's, torchrun's agent's (``crashes.kind_of``)
    launch: bool = False  # torchrun's start banner: a launch of the job (``restarts.several_runs``)
    # the levels (None: not an NCCL line) at which the line says nothing for the fold but its rank and NCCL
    # view (``LogFold.run`` takes such lines by count): nothing above, and no alarm the safety net would answer
    quiet: frozenset[str | None] = field(init=False)
    # it matches rules and is nothing else above: what the fold does with it is only those findings' (``LogFold``)
    hits_only: bool = field(init=False)

    def alarmed(self, level: str | None) -> bool:
        """Whether the line is read as an error (``events.read`` of the line at this NCCL level)."""
        if level is None:
            return self.alarm
        return level in ("WARN", "ABORT")  # NCCL's error trail at INFO is read by the NCCL view (``trail``)

    def __post_init__(self) -> None:
        busy = (
            self.thrown
            or self.pg_work
            or self.said
            or self.watchdog
            or self.site
            or self.fr_start
            or self.fr_frame
            or self.torchrun
            or self.summary
            or self.crash
            or self.launch
        )
        levels = () if busy else LEVELS
        quiet = (v for v in levels if self.unrecognised is None or not self.alarmed(v))
        object.__setattr__(self, "quiet", frozenset(quiet))
        others = self.thrown or self.pg_work or self.watchdog or self.site or self.fr_start or self.fr_frame
        hits_only = bool(self.said) and not (others or self.torchrun or self.summary or self.crash or self.launch)
        object.__setattr__(self, "hits_only", hits_only)


def facts_of(text: str) -> LineFacts:
    """What a line's text says (``facts`` remembers it per text); ncclcheck's own report lines say nothing."""
    if events.own(text):
        return NOTHING
    said = [
        _said(rule, match)
        for rule in (RULES if ANY_LITERAL.search(text) else ())
        if rule.literal in text and (match := rule.pattern.search(text)) is not None
    ]
    exception = not said and ("Error: " in text or "Exception: " in text) and "ChildFailedError" not in text
    if exception and (match := EXCEPTION.pattern.match(text)) is not None:
        said.append(_said(EXCEPTION, match))
    watchdog = "WorkNCCL(" in text
    pg_work = None  # torch >= 2.4 says the group of a timeout on its own line: "[PG ID 2 ...] ... at work: 91885"
    if "[PG " in text and (work := PG_WORK.search(text)) is not None and (pg := PG.search(text)) is not None:
        pg_work = (int(work.group(1)), pg.group(1), pg["desc"], int(pg["rank"]))
    timeout = None
    if watchdog and (m := WATCHDOG.search(text)) is not None:
        pg = PG.search(text)
        timeout = (
            pg.group(1) if pg else None,
            int(m.group("seq")),
            m.group("op"),
            parse_int(m.group("nin")),
            parse_int(m.group("nout")),
            parse_int(m.group("tmo")),
            parse_int(m.group("ran")),
            int(pg["rank"]) if pg else None,
            pg["desc"] if pg else None,
        )
    site = None
    if 'File "' in text and (frame := USER_FRAME.match(text)) and not any(x in frame["file"] for x in LIBRARY):
        site = f"{frame['file'].rsplit('/', 1)[-1]}:{frame['line']} ({frame['fn']})"
    stripped = text.strip()
    fr = FR_FRAME.match(stripped)
    fr_frame = (not any(x in fr["file"] for x in LIBRARY), _said(FR_SITE, fr)) if fr else None
    reading = events.read(text)
    unrecognised = None
    if not NOT_ALARM.search(stripped) and (match := UNRECOGNISED.pattern.match(stripped)) is not None:
        unrecognised = _said(UNRECOGNISED, match)
    return LineFacts(
        tuple(said),
        watchdog,
        timeout,
        _text_rank(text),
        site,
        "Stack trace of the failed collective:" in text,
        fr_frame,
        stripped.startswith("Failures:") or "Root Cause (first observed failure)" in stripped,
        bool(ENTRY.fullmatch(stripped) or stripped.startswith(("===", "---")) or CHILD.search(text)),
        reading.severity == events.ERROR,
        events.TRAIL.match(text) is not None,
        unrecognised,
        reading.time,
        stripped.startswith(("Traceback (most recent call last)", "Exception raised from "))
        or (stripped.startswith('File "') and TRACEBACK_FRAME.match(stripped) is not None),
        pg_work,
        crashes.kind_of(stripped),
        launch=any(mark in text for mark in LAUNCHED),
    )


NOTHING = LineFacts((), False, None, None, None, False, None, False, False, False, False, None, None, False, None)
facts = Remembered(facts_of)  # what a text says, read once per distinct text
FACTS = facts.known


def _ordered_pair(groups: dict[str, str]) -> dict[str, str]:
    """Each side of a mismatch reports it ("A runs X, but B runs Y", then "B runs Y, but A runs X"): one order."""
    a, b = groups.get("a", ""), groups.get("b", "")
    if "opa" not in groups or not (a.isdigit() and b.isdigit() and int(a) > int(b)):
        return groups
    return {**groups, "a": b, "b": a, "opa": groups.get("opb", ""), "opb": groups.get("opa", "")}


def _text_rank(text: str) -> int | None:
    """The global rank a line's text names: torch's "[Rank 3]", or the rank of its default process group's prefix
    (a sub-group's "[PG ID 2 ... Rank 0]" is rank 0 of that group, not of the job)."""
    pg = PG.search(text) if "[PG " in text else None
    if pg is not None and pg.group(1) != "0" and pg["desc"] != "default_pg":
        return None
    m = TEXT_RANK.search(text)
    if not m:
        return None
    return int(m.group(1) or m.group(2))


def format_message(template: str, groups: dict[str, str]) -> str:
    """The message with each {name} filled; a pattern whose alternatives cannot share a group name says name2,
    name3 (Python's re allows a name once): the one that matched fills {name}. What the line does not give is
    said in words, never as a bare "?": "(peer {peer})" or "({peer})" becomes "(the line does not name the peer)"."""
    values = {k: v.strip() for k, v in groups.items() if v.strip()}
    for name in re.findall(r"{(\w+)}", template):
        if name in values:
            continue
        given = next((values[k] for k in (f"{name}2", f"{name}3") if k in values), None)
        if given is not None:
            values[name] = given
            continue
        noun = UNKNOWN_NOUNS.get(name, name)
        template = re.sub(rf"\((?:\w+ )?{{{name}}}\)", f"(the line does not name the {noun})", template)
        values[name] = f"(no {noun} in the line)"
    return template.format(**values)
