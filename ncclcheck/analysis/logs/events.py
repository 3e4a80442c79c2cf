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
from dataclasses import dataclass

ERROR, WARNING, INFO = "error", "warning", "info"
RANK = {INFO: 0, WARNING: 1, ERROR: 2}

# Headers that declare a severity. Each takes the header off, so the body's statements read from its start.
GLOG = re.compile(
    r"^\[?(?P<sev>[IWEF])(?P<date>\d{3,4}) (?P<time>\d\d:\d\d:\d\d(?:\.\d+)?)(?: +(?:\d+ +)?[\w./-]+:\d+\])?\s?"
)
C10D_OLD = re.compile(r"^\[(?P<sev>[IWEF]) [\w.]+\.(?:cpp|cc|h):\d+\]\s?")  # c10d before torch 2.4
PY_LOGGING = re.compile(r"^(?P<sev>CRITICAL|ERROR|WARNING|INFO|DEBUG):[\w.<>-]*:")
PY_WARNING = re.compile(r"^\S+\.py:\d+: (?:[A-Z]\w*)?Warning: ")  # warnings.warn's "file.py:12: UserWarning: ..."
LETTERS = {"I": INFO, "W": WARNING, "E": ERROR, "F": ERROR}
WORDS = {"CRITICAL": ERROR, "ERROR": ERROR, "WARNING": WARNING, "INFO": INFO, "DEBUG": INFO}

# Statements of failure in an emitter's own words, whatever header (or none) is in front of them.
FAILED = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)(?:: |:?$)"  # a traceback's last line, a bare class too
    r"|^terminate called after throwing|^\s*what\(\): "  # a C++ exception that ended the process
    r"|^srun: error: |slurmstepd: error: |^srun: (?:Job step aborted|forcing job termination)"  # SLURM
    r"|Caught signal \d+ \(|\*\*\* Process received signal \*\*\*|^==== backtrace \(tid:"  # UCX, Open MPI
    r"|^Fatal Python error: |\bSegmentation fault\b|\bBus error\b|\(core dumped\)"  # a native crash
    r"|NVRM: Xid\b|fallen off the bus|AER: Uncorrected"  # the kernel: a GPU or PCIe fault
    r"|\bNCCL WARN\b"  # NCCL's own severity behind a header it was not told to print (NCCL_DEBUG_FILE formats)
    r"|: ?Received \d+ death signal|failed \(exitcode: -?[1-9]|Worker group FAILED|FAILED with no error file"  # agent
    r"|^\s*exitcode\s*:\s*-?[1-9]\d*\s*(?:\(|$)"  # a row of torchrun's failure table
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
)


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
    if level is not None:
        severity = ERROR if level in ("WARN", "ABORT") or TRAIL.match(text) else INFO
        return Reading("nccl", severity, None, text)
    body = text.strip()
    declared = _declared(body)
    if declared is not None:
        emitter, severity, time, rest = declared
        if severity != ERROR and FAILED.search(rest):
            severity = ERROR
        return Reading(emitter, severity, time, rest)
    if FAILED.search(body):
        return Reading(_stated_by(body), ERROR, None, body)
    return Reading("text", ERROR if ALARM.search(body) else INFO, None, body)


def _declared(body: str) -> tuple[str, str, str | None, str] | None:
    first = body[:1]
    if first in "IWEF[" and (m := GLOG.match(body)) is not None:
        return "glog", LETTERS[m["sev"]], f"{m['date']} {m['time']}", body[m.end() :]
    if first == "[" and (m := C10D_OLD.match(body)) is not None:
        return "c10d", LETTERS[m["sev"]], None, body[m.end() :]
    if first in "CEWID" and (m := PY_LOGGING.match(body)) is not None:
        return "python-logging", WORDS[m["sev"]], None, body[m.end() :]
    if "Warning: " in body and (m := PY_WARNING.match(body)) is not None:
        return "python-warnings", WARNING, None, body
    return None


STATED = (
    ("slurm", ("srun:", "slurmstepd:")),
    ("kernel", ("NVRM", "fallen off the bus", "AER:")),
    ("signal-handler", ("Caught signal", "Process received signal", "==== backtrace")),
    ("faulthandler", ("Fatal Python error",)),
    ("torchelastic", ("death signal", "exitcode", "Worker group", "no error file")),
    ("nccl", ("NCCL WARN",)),
    ("c++", ("terminate called", "what():")),
    ("shell", ("Segmentation fault", "Bus error", "core dumped")),
)


def _stated_by(body: str) -> str:
    """Which emitter a failure statement without a header comes from (a traceback's last line if none)."""
    return next((name for name, marks in STATED if any(m in body for m in marks)), "python")
