"""The verdict over the logs' findings: which error is the root cause, with Flight Recorder dumps and live hangs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from ncclcheck.analysis.logs.exit_rules import LIGHTNING_KILLS_ALL
from ncclcheck.analysis.logs.failure_tables import ECHO_SIGNALS, first_failed
from ncclcheck.analysis.logs.gpu_rules import GPU_FAULT_IDS
from ncclcheck.analysis.logs.rules import SECONDARY_IDS, TASK_ENDED
from ncclcheck.analysis.logs.stamps import Instant
from ncclcheck.analysis.rank_exits import killed
from ncclcheck.model.findings import WAITED, Evidence, Finding, by_severity
from ncclcheck.model.flight import FlightReport
from ncclcheck.model.ids import flight as flight_ids
from ncclcheck.model.ids import logs as logs_ids
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.logs import ChildFailure
from ncclcheck.model.run import HangRecord
from ncclcheck.model.stack_dumps import Stood

WRAPPERS = frozenset(
    {
        logs_ids.NCCL_SYSTEM_ERROR,
        logs_ids.CHILD_FAILED,
        logs_ids.PYTHON_EXCEPTION,
        logs_ids.LAUNCHER_TERMINATED,
        logs_ids.LAUNCHER_RANK_ENDED,
    }
)
SYMPTOMS = frozenset({logs_ids.COLLECTIVE_TIMEOUT, logs_ids.WATCHDOG_STUCK, logs_ids.COLLECTIVE_MISMATCH})
# a rank's own death that names the rank: what the timeouts and peers' errors beside it waited on (crashes.py, and
# Open MPI's report of a rank killed by a signal)
DEATHS = frozenset({logs_ids.NATIVE_CRASH, logs_ids.THREAD_DIED, logs_ids.MPI_RANK_KILLED})
# a report that names the ranks at fault: the rank printing it only waited (torch's desync report, monitored_barrier)
NAMING = frozenset({logs_ids.DESYNC_REPORT, logs_ids.MONITORED_BARRIER_FAILED})


# what stack dumps say: one instant of the ranks, which a hang seen live over many samples, or an error that starts a
# failure of its own, outweighs
STACK_IDS = frozenset(
    {
        logs_ids.STACKS_STRAGGLER,
        logs_ids.STACKS_WAITING,
        logs_ids.STACKS_ONE,
        logs_ids.STACKS_NOT_RANKS,
        logs_ids.STACKS_UNREADABLE,
    }
)


def hard_errors(findings: Iterable[Finding]) -> list[Finding]:
    """The errors that start a failure of their own: not a symptom (a timeout), a wrapper (torchrun's table, an
    exception's echo), a rule's secondary error (a peer that closed the connection) or a stack dump's instant."""
    hidden = SYMPTOMS | WRAPPERS | SECONDARY_IDS | STACK_IDS
    every = list(findings)
    if any(f.id in DISAGREEING for f in every):  # the dumps say how the ranks disagree: more than "they disagree"
        hidden |= SAY_THEY_DISAGREE
    return [f for f in every if f.severity == "error" and f.id not in hidden]


# the dumps' findings that name how the ranks' calls disagree, and the errors in the logs that only say they do (NCCL's
# socket got a message of another size than it expected; the ranks' timeouts name different sizes)
DISAGREEING = frozenset(
    {
        flight_ids.FR_OP_MISMATCH,
        flight_ids.FR_SIZE_MISMATCH,
        flight_ids.FR_DTYPE_MISMATCH,
        flight_ids.FR_P2P_UNMATCHED,
        flight_ids.FR_NOT_JOINED,
    }
)
SAY_THEY_DISAGREE = frozenset({logs_ids.SOCKET_MESSAGE_TRUNCATED, logs_ids.COLLECTIVE_SIZE_MISMATCH})


def with_flight(report: LogReport, flight: FlightReport) -> LogReport:
    """Add what the Flight Recorder dumps say; a hardware or transport error in the logs stays the root cause, but an
    error that only says the ranks disagree gives way to the dumps' account of how they do (which call, where)."""
    hard = hard_errors(report.findings + flight.findings)
    recorded = [f for f in flight.findings if f.severity == "error"]
    cause = (hard or recorded)[0] if hard or recorded else report.root_cause
    findings = by_severity(report.findings + flight.findings)
    return dataclasses.replace(report, findings=findings, root_cause=cause, flight=flight)


def with_stacks(report: LogReport, stacks: tuple[Stood, ...], findings: tuple[Finding, ...]) -> LogReport:
    """Add what the stack dumps in the logs say: a process they single out is the root cause over the echoes of a
    hang (timeouts, torchrun's table); an error that starts a failure of its own stays the cause."""
    if not stacks and not findings:
        return report
    hard = hard_errors(report.findings)
    named = [f for f in findings if f.severity == "error"]
    cause = hard[0] if hard else named[0] if named else report.root_cause
    merged = by_severity(report.findings + findings)
    refused = any(
        f.id == logs_ids.STACKS_UNREADABLE for f in findings
    )  # stacks there but unreadable: never a pass over them
    incomplete = report.incomplete or refused
    return dataclasses.replace(report, findings=merged, root_cause=cause, stacks=stacks, incomplete=incomplete)


OURS = (
    "ncclcheck run ended the job after recording the hang (--on-hang exit): it sent the launcher SIGTERM, and the "
    "launcher shut its workers down; this ended the job, the hang above is why"
)


def ended_by_us(findings: tuple[Finding, ...]) -> tuple[Finding, ...]:
    """The findings of a job ``ncclcheck run`` ended itself (``--on-hang exit``, told by its hang record): the
    launcher's "got signal 15", "received death signal" say it was ended from outside, which it was not: one info
    finding says who did."""
    ours = [f for f in findings if f.id == logs_ids.LAUNCHER_TERMINATED]
    if not ours:
        return findings
    said = Finding(logs_ids.ENDED_BY_NCCLCHECK, "info", OURS, ranks=tuple(sorted({r for f in ours for r in f.ranks})))
    return (*(f for f in findings if f.id != logs_ids.LAUNCHER_TERMINATED), said)


def with_hangs(report: LogReport, hangs: Sequence[HangRecord]) -> LogReport:
    """Add the hangs ``ncclcheck run`` caught live (and, where one ended the job, say that ncclcheck did): the first one that names culprits (else the first) is the root
    cause over the echoes a hang leaves in the logs (timeouts, torchrun's failure table); a hardware or transport
    error stays the cause."""
    seen = [
        Finding(
            logs_ids.HANG_RECORDED,
            "error",
            f"hang seen live{f' on {h.host}' if h.host else ''}: {h.message}",
            "the hang record holds every local rank's stack: " + h.path,
            ranks=h.ranks,
            culprits=h.culprits,
        )
        for h in hangs
    ]
    if not seen:
        return report
    if any(h.ended_job for h in hangs):
        report = dataclasses.replace(report, findings=ended_by_us(report.findings))
    hard = hard_errors(report.findings)
    # a node whose ranks only waited on ranks elsewhere names nobody; the node that saw the culprit does
    cause = hard[0] if hard else next((f for f in seen if f.culprits), seen[0])
    return dataclasses.replace(report, findings=by_severity(tuple(seen) + report.findings), root_cause=cause)


Times = Mapping[tuple[str, int], Instant]
"""When lines were written, by their stamps (file, line number: ``stamps.instant``)."""


def with_times(report: LogReport, times: Times) -> LogReport:
    """The root cause again, with the stamps of the error lines that different files hold to order them."""
    if not times:
        return report
    cause = root_cause(report.findings, report.failures, times)
    return report if cause is report.root_cause else dataclasses.replace(report, root_cause=cause)


def root_cause(
    findings: Iterable[Finding], failures: Iterable[ChildFailure] = (), times: Times | None = None
) -> Finding | None:
    """The first primary error in log order; else the first error of any kind.

    A rank killed by a crash signal (torchrun's summary) comes before the Python errors of the
    others: they are what its death caused. Errors in different files are ordered by their lines' stamps
    (``times``), where those tell them apart.
    """
    errors = [f for f in findings if f.severity == "error"]
    every = [f for f in errors if f.id not in SECONDARY_IDS and f.id not in WRAPPERS]
    wrappers = [f for f in errors if f.id in WRAPPERS]
    if killed(tuple(failures)):
        wrappers.sort(key=lambda f: f.id != logs_ids.CHILD_FAILED)
    primary, wrappers = _after_the_first(tuple(failures), every, wrappers, errors)
    primary, wrappers = _before_the_first_end(primary, wrappers, errors)
    primary, wrappers = _peers_lost(primary, wrappers, errors, first_failed(tuple(failures)))
    primary = _killed_by_the_launcher(primary, errors)
    if any(f.id == logs_ids.COLLECTIVE_SIZE_MISMATCH for f in primary):  # what the ranks' timeouts came from
        primary.sort(key=lambda f: f.id in (logs_ids.COLLECTIVE_TIMEOUT, logs_ids.WATCHDOG_STUCK))
    if any(f.id in DISAGREEING for f in primary):  # how the ranks disagree, before the errors that say they do
        primary.sort(key=lambda f: f.id in SAY_THEY_DISAGREE)
    primary = _the_suspects_own(primary)
    primary = _by_the_clock(primary, times or {})
    # a report that names the rank at fault (torch's desync debugger) explains the timeouts next to it; so does a
    # rank's crash or dead thread
    named = [f for f in primary if f.id in NAMING and f.culprits]
    named = _the_named_own(named, primary) + named
    named += [f for f in primary if f.id in DEATHS and f.culprits]
    # a GPU that failed (an Xid, ECC, a sticky CUDA fault, its PCIe link) is where the failure started, wherever its
    # lines fall among the other ranks' timeouts and errors
    faulted = [f for f in every if f.id in GPU_FAULT_IDS]
    chosen = faulted or named or primary or wrappers or errors
    return chosen[0] if chosen else None


def _after_the_first(
    failures: tuple[ChildFailure, ...], primary: list[Finding], wrappers: list[Finding], errors: list[Finding]
) -> tuple[list[Finding], list[Finding]]:
    """What torchrun's tables say of the order of the failures, where they can say it. The rank that failed first, of
    its own (an exit code or a crash signal, not its agent's SIGTERM), started it:
    - an error of a rank that failed strictly later (by the tables' times) is what it caused (a peer's IB retries
      exceeded 37 s after the first rank's out-of-memory);
    - the exception the first rank's code raised (python-exception: no rule explains it as an echo) comes before an
      error of a rank its agent then stopped when the same log printed it after the exception (a connection refused
      by the rank that had died), and before the wrappers of ranks whose own lines say a peer went away.
    A rank stopped by its agent is not cleared on that alone: a rank whose thread died is stopped while the rank that
    waited for it fails first (its timeout); its death stays the cause."""
    first = first_failed(failures)
    if first is None or first.signal in ECHO_SIGNALS:
        return primary, wrappers
    later = {f.rank for f in failures if f.rank != first.rank and f.time and first.time and f.time > first.time}
    stopped = {f.rank for f in failures if f.rank != first.rank and f.signal in ECHO_SIGNALS}
    kept = [f for f in primary if not (f.ranks and set(f.ranks) <= later)]
    own = [f for f in wrappers if f.id == logs_ids.PYTHON_EXCEPTION and first.rank in f.ranks]
    if not own:
        return kept, wrappers
    raised = own[0].evidence[0] if own[0].evidence else None
    kept = [f for f in kept if not (f.ranks and set(f.ranks) <= stopped and _after(f, raised))]
    echoes = {r for f in errors if f.id in PEER_LOST for r in f.ranks}
    others = [f for f in wrappers if f not in own and f.id != logs_ids.CHILD_FAILED]
    if all(f.ranks and set(f.ranks) <= echoes for f in others):
        wrappers = own + [f for f in wrappers if f not in own]
    return kept, wrappers


def _the_named_own(named: list[Finding], primary: list[Finding]) -> list[Finding]:
    """The errors of their own of the ranks a report names as the ones at fault (monitored_barrier's "Rank 3 failed
    to pass", the desync report's lagging ranks): rank 3's out-of-memory is why it never came, the report its echo."""
    culprits = {r for f in named for r in f.culprits}
    return [
        f
        for f in primary
        if f not in named
        and f.ranks
        and set(f.ranks) <= culprits
        and f.id not in NAMING | PEER_LOST
        and f.id not in WAITED
    ]


def _the_suspects_own(primary: list[Finding]) -> list[Finding]:
    """A timeout whose reporters waited on suspects (the ranks that did not report it), when a suspect's own error is
    in the logs (rank 1's out-of-memory beside rank 0's timeout, each in its pod's log): that error is what they
    waited on, whichever file was read first."""
    waited = [f for f in primary if f.id in (logs_ids.COLLECTIVE_TIMEOUT, logs_ids.GLOO_TIMEOUT) and f.culprits]
    if not waited or primary[0] not in waited:
        return primary
    suspects = set(waited[0].culprits)
    own = [f for f in primary if f not in waited and f.ranks and set(f.ranks) <= suspects]
    return own + [f for f in primary if f not in own] if own else primary


def _killed_by_the_launcher(primary: list[Finding], errors: list[Finding]) -> list[Finding]:
    """A kill reported after a launcher said it kills every process (Lightning's "Forcefully terminating all other
    processes", which SIGKILLs its own main process too: the shell's "Killed" after it) is that launcher's doing, not a
    cause; the line itself (a child killed with code -9) stays one."""
    ends = [e for f in errors for e in f.evidence if LIGHTNING_KILLS_ALL in e.text]
    if not ends:
        return primary

    def after(e: Evidence) -> bool:
        return any(e.file == end.file and e.line > end.line for end in ends)

    return [f for f in primary if not (f.id == logs_ids.PROCESS_KILLED and f.evidence and all(map(after, f.evidence)))]


def _peers_lost(
    primary: list[Finding], wrappers: list[Finding], errors: list[Finding], first: ChildFailure | None = None
) -> tuple[list[Finding], list[Finding]]:
    """The exception a rank raised of its own comes before the errors of ranks whose own lines say their peer went
    away (``PEER_LOST``: "remote process exited", "Connection closed by peer"), when every primary error is on such
    ranks: rank 1's KeyError, then rank 0's IB retries exceeded toward rank 1 and its "remote process exiting
    prematurely", in one console or one log per rank (an exception with no rank, in a log where no peer went away).
    So does torchrun's report of the rank that failed first of its own (``first``: an exit code or a crash signal,
    not its agent's SIGTERM) when its lines are not among them: rank 1's ``sys.exit(3)`` left no traceback, and rank
    0's NCCL error says its peer went away.
    An error on a rank that says nothing of a lost peer keeps its place, and so do a death or a report that names a
    rank."""
    echoes = {r for f in errors if f.id in PEER_LOST for r in f.ranks}
    if not echoes:
        return primary, wrappers
    lost = {e.file for f in errors if f.id in PEER_LOST for e in f.evidence}  # logs where a peer went away
    # a lost peer said on a line of no known rank may be the first rank's own: then its exit is no cause of its own
    unranked = any(not f.ranks for f in errors if f.id in PEER_LOST)
    own_exit = first.rank if first is not None and first.signal not in ECHO_SIGNALS and not unranked else None

    def raised(f: Finding) -> bool:  # a rank not among them raised it (one log per rank: a log where none did)
        away = bool(f.evidence) and all(e.file not in lost for e in f.evidence)
        if f.id == logs_ids.CHILD_FAILED:
            return own_exit is not None and set(f.ranks) == {own_exit} and own_exit not in echoes
        return f.id == logs_ids.PYTHON_EXCEPTION and bool(set(f.ranks) - echoes or (not f.ranks and away))

    own = [f for f in wrappers if raised(f)]
    if not own:
        return primary, wrappers

    def echoed(f: Finding) -> bool:
        return bool(f.ranks) and set(f.ranks) <= echoes and f.id not in DEATHS | NAMING and f.id not in PEER_LOST

    if not all(echoed(f) or f.id in PEER_LOST for f in primary):
        return primary, wrappers
    return [f for f in primary if not echoed(f)], own + [f for f in wrappers if f not in own]


CLOCK_MARGIN_S = 1.0  # two nodes' clocks (NTP) agree within this: errors closer than it are not ordered by them


def _by_the_clock(primary: list[Finding], times: Times) -> list[Finding]:
    """Errors that different files hold (a log per rank or per node, read in the order given) ordered by when their
    lines were written: one whose first stamped line is earlier than the first error's by more than the clocks'
    margin, in another file, comes first (a rank's out-of-memory 37 s before its peer's IB retries ran out). Only
    stamps alike in what they say of their zone are compared; an error without one is left where it is."""

    def first(f: Finding) -> Instant | None:
        stamped = [times[(e.file, e.line)] for e in f.evidence if (e.file, e.line) in times]
        return min(stamped) if stamped else None

    lead = first(primary[0]) if len(primary) > 1 and times else None
    if lead is None:
        return primary
    files = {e.file for e in primary[0].evidence}
    earlier = [
        (at.seconds, i)
        for i, f in enumerate(primary[1:], 1)
        if (at := first(f)) is not None
        and at.zoned == lead.zoned
        and at.seconds < lead.seconds - CLOCK_MARGIN_S
        and not files & {e.file for e in f.evidence}
    ]
    if not earlier:
        return primary
    _, i = min(earlier)
    return [primary[i], *primary[:i], *primary[i + 1 :]]


OWN_ENDS = ("Exited with exit code", "Segmentation fault", "Bus error", "Aborted")  # not srun's Killed, Terminated


def _before_the_first_end(
    primary: list[Finding], wrappers: list[Finding], errors: list[Finding]
) -> tuple[list[Finding], list[Finding]]:
    """What srun's reports of its tasks' ends (``slurm-task-ended``, printed as each task ends, into the output the
    tasks print to) say of the order of the failures. The first task that ended of its own (an exit code, a crash
    signal; not the Killed or Terminated srun sends the others) had failed by that line. Where an error of the same
    output came before it (task 0's exception), an error printed only after it is what that end caused (task 1
    timing out on the store task 0 held), not the cause; errors before it keep their order."""
    ended = next((f for f in errors if f.id == logs_ids.SLURM_TASK_ENDED), None)
    if ended is None or not ended.evidence:
        return primary, wrappers
    first = ended.evidence[0]  # the first end srun reported, in the order the logs were read
    match = TASK_ENDED.pattern.search(first.text)
    if match is None or not match.group("how").startswith(OWN_ENDS):
        return primary, wrappers

    def before(f: Finding) -> bool:
        return any(e.file == first.file and e.line < first.line for e in f.evidence)

    causes = [f for f in primary + wrappers if before(f) and f.id != logs_ids.CHILD_FAILED]
    if not causes:
        return primary, wrappers
    kept = [
        f for f in primary if not (f.evidence and all(e.file == first.file and e.line > first.line for e in f.evidence))
    ]
    return kept, [f for f in wrappers if before(f)] + [f for f in wrappers if not before(f)]


PEER_LOST = frozenset({logs_ids.PEER_CRASHED, logs_ids.PEER_CLOSED})  # a rank's own line: its peer went away


def _after(finding: Finding, raised: Evidence | None) -> bool:
    """Whether every line of a finding comes after the exception's, in the same log (one console: printed later)."""
    return (
        raised is not None
        and bool(finding.evidence)
        and all(e.file == raised.file and e.line > raised.line for e in finding.evidence)
    )
