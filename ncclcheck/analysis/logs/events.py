"""Each framed line read by its emitter's own grammar, before any rule: who wrote it, at what severity, and when.

A line's severity is first what its emitter's header declares (NCCL's level, glog's and c10d's I/W/E/F, Python
logging's LEVEL:name:), then raised by what the body states in an emitter's failure grammar (a traceback's last
line, a signal handler's banner, SLURM's and the kernel's error lines, torchrun's agent saying a worker failed,
NCCL's error trail). Alarm words ("ERROR", "Exception", ...) count only on a line no emitter declares: glog's
``I`` line that says "Error rate 0.1" is information, as its emitter says. A line read as an error that no rule
explains leaves the verdict open (``diagnose``'s safety net): a failure in words no rule knows is never passed
over.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ncclcheck.analysis.logs.rules import RULES
from ncclcheck.model.ids import flight as flight_ids
from ncclcheck.model.ids import logs as logs_ids
from ncclcheck.model.ids import run as run_ids
from ncclcheck.model.ids import smoke as smoke_ids
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.logs import Event, LogLine

ERROR, WARNING, INFO = "error", "warning", "info"
RANK = {INFO: 0, WARNING: 1, ERROR: 2}

# Headers that declare a severity. Each takes the header off, so the body's statements read from its start.
GLOG = re.compile(
    r"^\[?(?P<sev>[IWEF])(?P<date>\d{3,4}) (?P<time>\d\d:\d\d:\d\d(?:\.\d+)?)(?: +(?:\d+ +)?[\w./-]+:\d+\])?\s?"
)
C10D_OLD = re.compile(r"^\[(?P<sev>[IWEF]) [\w.]+\.(?:cpp|cc|h):\d+\]\s?")  # c10d before torch 2.4
PY_LOGGING = re.compile(r"^(?P<sev>CRITICAL|ERROR|WARNING|INFO|DEBUG):[\w.<>-]*:")
PY_WARNING = re.compile(r"^\S+\.py:\d+: (?:[A-Z]\w*)?Warning: ")  # warnings.warn's "file.py:12: UserWarning: ..."
RAY_CPP = re.compile(r"^(?P<sev>[IWEF]) \d+ \d+\] ")  # Ray's C++ logger, its "[2025-02-03 10:34:03,841" taken off
DMESG = re.compile(r"^\[\s*(?P<time>\d+\.\d+)\]\s?")  # the kernel's ring buffer: seconds since boot
# The kernel says no severity in dmesg's text: its GPU driver's and PCIe AER's own words do
KERNEL_ERROR = re.compile(
    r"NVRM: .*(?:\bXid\b|fallen off the bus|not responding|\bfailed\b|\berror\b)|AER: Uncorrected"
    r"|severity=Uncorrected",
    re.IGNORECASE,
)
# Context an error carries, not an error of its own: a traceback's header and frames, C++ frames and where the
# exception was raised, a signal handler's backtrace, an abseil stack frame, CUDA's standard advice after its error
# NCCL's active diagnostics' report (NCCL_RUN_DIAGNOSTICS=1, 2.31+), printed by rank 0 of each communicator
DIAG = re.compile(r"^\s*NCCL DIAG (?:\[(OK|INFO)\])?")
CONTEXT = re.compile(
    r"^(?:Traceback \(most recent call last\)|Exception raised from |frame #\d+: |==== backtrace|The above exception"
    r"|During handling of |\s+File \"|(?:\S+:\d+:)?\s*@\s+0x[0-9a-f]+ |CUDA kernel errors might be asynchronously reported"
    r"|For debugging consider passing CUDA_LAUNCH_BLOCKING|Compile with `TORCH_USE_CUDA_DSA`)"
)
KERNEL_WARNING = re.compile(r"AER: Corrected|severity=Corrected|no AER-aware driver")
DECLARED_ERROR = re.compile(r"\s*\[?[EF]\d{3,4} \d\d:\d\d|\s*\[[EF] [\w.]+\.(?:cpp|cc|h):\d+\]")  # its own E/F
LETTERS = {"I": INFO, "W": WARNING, "E": ERROR, "F": ERROR}
WORDS = {"CRITICAL": ERROR, "ERROR": ERROR, "WARNING": WARNING, "INFO": INFO, "DEBUG": INFO}

# A traceback's last line, a bare class too (".DistBackendError:": the rest of a name interleaving cut)
EXCEPTION_LINE = re.compile(r"^\.?(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)(?:: |:?$)")
# Statements of failure in an emitter's own words, whatever header (or none) is in front of them.
FAILED = re.compile(
    EXCEPTION_LINE.pattern
    + r"|^terminate called after throwing|^\s*what\(\): "  # a C++ exception that ended the process
    r"|^srun: error: |slurmstepd: error: |^srun: (?:Job step aborted|forcing job termination)"  # SLURM
    r"|Caught signal \d+ \(|\*\*\* Process received signal \*\*\*"  # UCX, Open MPI
    r"|^Fatal Python error: |\bSegmentation fault\b|\bBus error\b|\(core dumped\)"  # a native crash
    r"|NVRM: Xid\b|fallen off the bus|AER: Uncorrected"  # the kernel: a GPU or PCIe fault
    r"|\bNCCL WARN\b"  # NCCL's own severity behind a header it was not told to print (NCCL_DEBUG_FILE formats)
    r"|: ?Received \d+ death signal|failed \(exitcode: -?[1-9]|Worker group FAILED|FAILED with no error file"  # agent
    r"|^\s*exitcode\s*:\s*-?[1-9]\d*\s*(?:\(|$)|Signal \d+ \(SIG\w+\) received by PID"  # torchrun's table
    r"|^srun: Force Terminated|^Test (?:NCCL|CUDA) failure |Unhandled exception: "  # srun, nccl-tests, Ray's C++
    r"|noticed that process rank \d+ with PID \d+ on node \S+ exited on signal|^\s*Process name: \[\[\d+,\d+\],\d+\]"
    r"|Primary job +terminated normally, but \d+ process"  # Open MPI's report of a rank's end
    r"|\] exits with return code = -?[1-9]|Child process with PID \d+ terminated with code -?[1-9]"  # DeepSpeed, Lightning
    r"|\[[EF](?:\d{3,4} \d\d:\d\d:\d\d|\s[\w.]+\.(?:cpp|cc):\d+\])"  # c10d's error header glued behind a line
    r"|\b(?:hit|raised|caught|got|threw|encountered) an? (?:exception|error)\b"  # a program saying it failed
    r"|^(?:exit(?: code| status)?|exited with (?:exit )?(?:code|status)|command terminated with exit code) [1-9]\d*\.?$"
)
# NCCL's error trail: each call on the way up prints "file.cc:LINE -> CODE" at INFO; codes 1-6 are errors (7 is
# ncclInProgress, a non-blocking communicator still being set up)
TRAIL = re.compile(r"^[\w./-]+\.(?:cc|cu|cpp|h|c):\d+ -> [1-6](?:\s|$)")
ALARM_WORDS = ("ERROR", "Error", "FAILED", "FATAL", "Fatal error", "Exception", "terminate called")
ALARM = re.compile(r"\b(?:" + "|".join(ALARM_WORDS) + r")\b(?!-)")  # "Error-free" is no error
# A literal each FAILED/TRAIL match holds, for the gate (a chunk holding none is only counted): the glog/c10d
# header's file name ends so, and an exception class in ``Error``/``Exception``
LITERALS = (
    "Error",
    "Exception",
    ".cpp:",
    ".cc:",
    ".h:",
    ".c:",
    ".cu:",
    "terminate called",
    "what(): ",
    "srun: ",
    "slurmstepd: error",
    "Caught signal",
    "received signal",
    "backtrace (tid",
    "Fatal Python error",
    "Segmentation fault",
    "Bus error",
    "core dumped",
    "NVRM",
    "fallen off the bus",
    "AER: ",
    "NCCL WARN",
    "death signal",
    "exitcode",
    "FAILED",
    "received by PID",
    "Force Terminated",
    " failure ",
    "exception",
    "Uncorrected",
    "exit",
)


# ncclcheck's own report lines, in a log that captured its console (``ncclcheck run -- torchrun ... | tee job.log``):
# copies of what other lines said, never evidence of their own (views/run.py, logs.py, watch.py, smoke.py print them).
# A line counts only with one of ncclcheck's own finding ids (or verdict words) where its report puts one: a user's
# "error data-loader: ..." is not ours.
def _our_ids() -> str:
    found = {r.id for r in RULES}
    for module in (flight_ids, logs_ids, run_ids, smoke_ids, watch_ids):
        found |= {v for k, v in vars(module).items() if k.isupper() and isinstance(v, str) and ID.fullmatch(v)}
    return "|".join(sorted(map(re.escape, found), key=len, reverse=True))


ID = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
OURS = _our_ids()
OWN_STARTS: tuple[str, ...] = ("✗ ", "✓ ", "! ", "? ", "error ", "warning ", "info ", "  fix: ", "  record: ")
OWN_STARTS += ("exit code ", "evidence ", "ncclcheck ", "  kept ", "  set ", "  note ")
OWN = re.compile(
    rf"^(?:[✗✓!?] (?:root cause|hang|fail|pass|slow|{OURS})(?: \(ranks? [^)]*\))?[:,] "
    rf"|(?:error|warning|info) (?:{OURS})(?: \[ranks [^\]]*\])?: "
    r"|  (?:fix|record): |exit code \d+; report: |evidence \S+:\d+: |ncclcheck [a-z]+: |  (?:kept|set|note)  +\S)"
)


def own(text: str) -> bool:
    """Whether a line is one of ncclcheck's own report lines (``OWN``)."""
    return text.startswith(OWN_STARTS) and OWN.match(text) is not None


# The catalogue's benign lines (rules of severity info): alarming words, a known harmless meaning
BENIGN = tuple(r for r in RULES if r.severity == INFO)


@dataclass(frozen=True)
class Reading:
    """A line's emitter, its severity, the time its header gives (as printed), and its body behind the header."""

    emitter: str
    severity: str
    time: str | None
    body: str


def read(text: str, level: str | None = None) -> Reading:
    """``text`` (a framed line: launcher prefixes and NCCL's header taken off; ``level`` NCCL's, None outside NCCL's
    lines) by its emitter's grammar."""
    if level is None and own(text):
        return Reading("ncclcheck", INFO, None, text)
    if any(r.literal in text and r.pattern.search(text) for r in BENIGN) and not DECLARED_ERROR.match(text):
        return Reading("nccl" if level is not None else "text", INFO, None, text)
    if level is not None:
        # ATTN (NCCL 2.32): "noteworthy, not an error", between WARN and INFO
        severity = ERROR if level in ("WARN", "ABORT") or TRAIL.match(text) else WARNING if level == "ATTN" else INFO
        return Reading("nccl", severity, None, text)
    if (diag := DIAG.match(text)) is not None:  # NCCL's own diagnostics (2.31): [INFO] a check that did not pass
        return Reading("nccl", WARNING if diag.group(1) == "INFO" else INFO, None, text)
    if CONTEXT.match(text) is not None:
        return Reading("context", INFO, None, text)
    body = text.strip()
    declared = _declared(body)
    if declared is not None:
        emitter, severity, time, rest = declared
        if CONTEXT.match(rest) is not None:
            return Reading("context", INFO, time, rest)
        if severity != ERROR and FAILED.search(rest):
            severity = ERROR
        return Reading(emitter, severity, time, rest)
    if FAILED.search(body):
        return Reading(_stated_by(body), ERROR, None, body)
    return Reading("text", ERROR if ALARM.search(body) else INFO, None, body)


def _declared(body: str) -> tuple[str, str, str | None, str] | None:
    first = body[:1]
    if first == "[" and (m := DMESG.match(body)) is not None:
        rest = body[m.end() :]
        return "kernel", _kernel(rest), m["time"], rest
    if "NVRM" in body[:40]:  # a kernel line without dmesg's stamp (journalctl -k, a continuation)
        return "kernel", _kernel(body), None, body
    if first in "IWEF" and (m := RAY_CPP.match(body)) is not None:
        return "ray", LETTERS[m["sev"]], None, body[m.end() :]
    if first in "IWEF[" and (m := GLOG.match(body)) is not None:
        return "glog", LETTERS[m["sev"]], f"{m['date']} {m['time']}", body[m.end() :]
    if first == "[" and (m := C10D_OLD.match(body)) is not None:
        return "c10d", LETTERS[m["sev"]], None, body[m.end() :]
    if first in "CEWID" and (m := PY_LOGGING.match(body)) is not None:
        return "python-logging", WORDS[m["sev"]], None, body[m.end() :]
    if "Warning: " in body and (m := PY_WARNING.match(body)) is not None:
        return "python-warnings", WARNING, None, body
    return None


def _kernel(body: str) -> str:
    return ERROR if KERNEL_ERROR.search(body) else WARNING if KERNEL_WARNING.search(body) else INFO


STATED = (
    ("slurm", ("srun:", "slurmstepd:")),
    ("kernel", ("NVRM", "fallen off the bus", "AER:")),
    ("signal-handler", ("Caught signal", "Process received signal", "==== backtrace")),
    ("faulthandler", ("Fatal Python error",)),
    ("torchelastic", ("death signal", "exitcode", "Worker group", "no error file", "received by PID")),
    ("nccl", ("NCCL WARN",)),
    ("c++", ("terminate called", "what():")),
    ("launcher", ("noticed that process rank", "Process name: [[", "Primary job ", "exits with return code")),
    ("launcher", ("Child process with PID",)),  # Open MPI's mpirun, DeepSpeed's and Lightning's launchers
    ("shell", ("Segmentation fault", "Bus error", "core dumped", "exit")),
    ("nccl-tests", ("Test NCCL failure", "Test CUDA failure")),
)


def _stated_by(body: str) -> str:
    """Which emitter a failure statement without a header comes from (a traceback's last line if none)."""
    if EXCEPTION_LINE.match(body):
        return "python"
    return next((name for name, marks in STATED if any(m in body for m in marks)), "python")


# What starts a record of its own, so it cannot continue an exception's message or a kernel message
RECORD_START = re.compile(
    r"^(?:Traceback \(|File \"|frame #\d+:|Exception raised from |The above exception |During handling of "
    r"|\[\d+\]:$|={3,}|-{3,}|Root Cause |Failures:|[\w./-]+ FAILED$)"
)
# torch's NCCL error goes on after its "…Error: NCCL error in: …" line: NCCL's result, "Last error:" and that error
TORCH_DETAIL = re.compile(r"^(?:nccl[A-Z]\w*: |Last error:$)")
MESSAGE_LINES = 6  # an exception's message goes on for at most this many lines (torch's NCCL error takes four)
NVRM_MORE = re.compile(r"^\s+NVRM: ")  # a kernel message's continuation: indented, no stamp of its own
AER_DEVICE = re.compile(r"^(?P<dev>\S+ [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d+): ")


def stream(lines: Iterable[LogLine]) -> Iterator[Event]:
    """Each line as an event, in order, read with the block it belongs to: the lines of an exception's message
    after its ``Type: message`` line (torch's "Last error:" and what follows) are that error's; a kernel message's
    indented continuation lines and an AER report's detail lines share their record's severity."""
    message: int | bool | None = False  # the prefix rank of an exception whose message may go on (False: none)
    went_on = 0  # lines its message has gone on for
    last_error = False  # the line before was torch's "Last error:": the next one is NCCL's last error
    held: list[Event] = []  # a kernel message waiting for its continuation lines
    aer: tuple[str, str] | None = None  # the device of the AER report being read, and its severity
    for line in lines:
        reading = read(line.text, line.level)
        severity, text = reading.severity, line.text
        if held and not NVRM_MORE.match(text):
            yield from _flush(held)
            held = []
        if message is not False and not (
            line.rank == message
            and went_on < MESSAGE_LINES
            and _continues(line, reading)
            and (last_error or TORCH_DETAIL.match(line.text) is not None)
        ):
            message = False
        last_error = message is not False and line.text.strip() == "Last error:"
        if message is not False and severity != ERROR and reading.emitter != "context":
            severity, went_on = ERROR, went_on + 1
        elif reading.emitter == "python" and severity == ERROR and ": " in reading.body:
            message, went_on = line.rank, 0
        if reading.emitter == "kernel":
            aer, severity = _aer(aer, reading.body, severity)
        event = Event(line.file, line.line, reading.emitter, severity, line.rank, line.host, reading.time, text)
        if reading.emitter == "kernel" and "NVRM:" in text:
            held.append(event)
            continue
        yield event
    yield from _flush(held)


def _continues(line: LogLine, reading: Reading) -> bool:
    """Whether a line can be the rest of an exception's message: not indented, not a record of its own."""
    text = line.text
    return (
        line.level is None
        and bool(text.strip())
        and not text[:1].isspace()
        and reading.emitter in ("text", "python", "context")
        and RECORD_START.match(text) is None
    )


def _aer(aer: tuple[str, str] | None, body: str, severity: str) -> tuple[tuple[str, str] | None, str]:
    """An AER report's head ("AER: Uncorrected (Fatal) error received") and its device's detail lines after it."""
    device = AER_DEVICE.match(body)
    if device is None:
        return None, severity
    if "AER: " in body:
        return (device["dev"], severity), severity
    if aer is None or aer[0] != device["dev"]:
        return None, severity
    if body[device.end() :][:1].isspace():  # the report's indented details: status, mask, the error's name
        return aer, max(severity, aer[1], key=RANK.__getitem__)
    return aer, severity


def _flush(held: list[Event]) -> Iterator[Event]:
    """A kernel message's lines, each with the message's severity."""
    worst = max((e.severity for e in held), key=RANK.__getitem__, default=INFO)
    for e in held:
        yield Event(e.file, e.line, e.emitter, worst, e.rank, e.host, e.time, e.text)
