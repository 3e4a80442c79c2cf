"""torchrun's failure tables read across agents: which rank failed first, by the tables' own clocks.

Each agent prints its own table, and each table's "Root Cause (first observed failure)" is the earliest of
*its* workers' failures in whole seconds, ties going to its lowest rank. Across several tables (one per node,
or several runs' in one file) the first failure is the earliest by time; in the same second a crash signal
comes before an exit code, and an agent's SIGTERM (it stops the rest) after both. Two tables' failures in the
same second cannot be ordered from the tables: the message says so instead of picking one.
"""

from __future__ import annotations

from collections.abc import Sequence

from ncclcheck.analysis.rank_exits import CRASH_SIGNALS, hint, how, killed
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import logs as logs_ids
from ncclcheck.model.logs import ChildFailure
from ncclcheck.model.ranks import span

ECHO_SIGNALS = frozenset({"SIGTERM", "SIGHUP", "SIGINT"})  # the agent (or the scheduler) stopping the rest


def child_findings(failures: tuple[ChildFailure, ...], echoes: frozenset[int] = frozenset()) -> list[Finding]:
    """torchrun's failure tables as one finding naming the rank that failed first; where that rank's own error only
    says a peer closed its connection (``echoes``), it showed the failure and did not start it."""
    if not failures:
        return []
    timed = _timed(failures)
    first = _first(failures)
    tied = _tied(failures, first) if timed else []
    if first.rank in echoes or (tied and any(f.rank in echoes for f in tied)):
        return [_echo_first(failures, first, echoes, tied)]
    others = sorted({f.rank for f in failures} - {first.rank})
    also = f"; rank(s) {span(others)} failed too" if others else ""
    where = f" on {first.host}" if first.host else ""
    fix = hint(first.signal) or FIX
    if tied:
        names = ", ".join(f"rank {f.rank}{f' on {f.host}' if f.host else ''} ({how(f)})" for f in (first, *tied))
        message = (
            f"torchrun: {names} failed in the same second ({_clock(first)}), each first in its agent's table:"
            " the tables give whole seconds, so which failed first cannot be told from them; each rank's own"
            " lines (its first error, with its time) say"
        )
        ranks = tuple(sorted({first.rank, *(f.rank for f in tied)}))
        return [Finding(logs_ids.CHILD_FAILED, "error", message, fix, ranks)]
    if timed:
        also += _sigkill(first)
        message = f"torchrun: rank {first.rank}{where} failed first ({how(first)}, at {_clock(first)}){also}"
        return [Finding(logs_ids.CHILD_FAILED, "error", message + _across(failures, first), fix, (first.rank,))]
    reported = _reported(failures)
    if first is reported:
        message = f"torchrun: rank {first.rank}{where} failed first ({how(first)}){also}"
    else:
        message = (
            f"torchrun: rank {first.rank}{where} was killed ({how(first)}){also}; torchrun's"
            f' "first observed failure" names rank {reported.rank} ({how(reported)}), an echo of it'
        )
    message += _sigkill(first)
    return [Finding(logs_ids.CHILD_FAILED, "error", message, fix, (first.rank,))]


def distinct_tables(failures: Sequence[ChildFailure]) -> list[ChildFailure]:
    """The failures with each table that repeats an earlier one entry for entry left out: one agent's table in two
    files (the console a tee kept and the launcher's log) is one table, not two agents agreeing."""
    tables: dict[int, list[ChildFailure]] = {}
    for f in failures:
        tables.setdefault(f.table, []).append(f)
    seen: set[frozenset[tuple[object, ...]]] = set()
    kept: list[ChildFailure] = []
    for entries in tables.values():
        key = frozenset(
            (f.rank, f.local_rank, f.host, f.exitcode, f.signal, f.root_cause, f.time, f.pid) for f in entries
        )
        if key not in seen:
            seen.add(key)
            kept += entries
    return kept


def first_failed(failures: Sequence[ChildFailure]) -> ChildFailure | None:
    """The rank that failed first (None when there are no tables, or two tables' failures cannot be ordered)."""
    if not failures:
        return None
    first = _first(failures)
    return None if _timed(failures) and _tied(failures, first) else first


def _first(failures: Sequence[ChildFailure]) -> ChildFailure:
    """By the tables' times across several agents' tables, else a rank a crash signal killed, else the table's own
    "first observed failure"."""
    return _earliest(failures) if _timed(failures) else killed(failures) or _reported(failures)


def _timed(failures: Sequence[ChildFailure]) -> bool:
    return len({f.table for f in failures}) > 1 and all(f.time for f in failures)


def _echo_first(
    failures: Sequence[ChildFailure], first: ChildFailure, echoes: frozenset[int], tied: Sequence[ChildFailure] = ()
) -> Finding:
    """The first failure (or one of the tables' tied first failures) is a rank whose error says a peer closed the
    connection: it showed the failure, it did not start it. A rank that failed of its own (not an echo, not stopped
    by its agent) in the same second, or first in another table the times cannot order, is the likelier start; else
    the start is not in these logs."""
    lost = next((f for f in (first, *tied) if f.rank in echoes), first)
    where = f" on {lost.host}" if lost.host else ""
    said = f"torchrun names rank {lost.rank}{where} first ({how(lost)}), but its own error only says a peer closed"
    unordered = len({f.table for f in failures}) > 1 and not _timed(failures)
    same = [
        f
        for f in failures
        if f.rank not in echoes
        and f.signal not in ECHO_SIGNALS
        and (
            (f.table == lost.table and f.time == lost.time)
            or (f in tied)
            or (unordered and f.table != lost.table and f.root_cause)
        )
    ]
    if len({f.rank for f in same}) == 1:
        start = same[0]
        when = (
            "first in another agent's table (the tables' times cannot order them)"
            if unordered and start.table != lost.table
            else "in the same second"
        )
        message = f"{said} its connection: rank {start.rank} ({how(start)}), which failed of its own {when}, is the likelier start"
        return Finding(logs_ids.CHILD_FAILED, "error", message, hint(start.signal) or FIX, (start.rank,))
    message = (
        f"{said} its connection: the failure started on a peer whose own lines are not in these logs or name no"
        " error (another node's log, or a rank the agent stopped after), so no rank here is to blame"
    )
    return Finding(logs_ids.CHILD_FAILED, "error", message, ECHO_FIX, ())


FIX = "the rank's own traceback is earlier in its output"
ECHO_FIX = (
    "read every node's log together (`ncclcheck logs node*/`): the rank whose error is not a closed connection started"
    " it; if no rank has one, a peer closed the connection without dying (a collective or size mismatch: rerun with"
    " TORCH_DISTRIBUTED_DEBUG=DETAIL)"
)


def _sigkill(first: ChildFailure) -> str:
    if first.signal != "SIGKILL":
        return ""
    return (
        "; SIGKILL is not a crash: the host's OOM killer, a kill from outside (kill -9, the scheduler) or the rank's"
        f" own code sent it, and these logs cannot tell which (`dmesg -T` on {first.host or 'its host'} names an OOM"
        " kill)"
    )


def _reported(failures: Sequence[ChildFailure]) -> ChildFailure:
    return next((f for f in failures if f.root_cause), failures[0])


def _order(f: ChildFailure) -> tuple[str, int, bool, int]:
    kind = 0 if f.signal in CRASH_SIGNALS else 2 if f.signal in ECHO_SIGNALS else 1
    return (f.time or "", kind, not f.root_cause, f.rank)


def _earliest(failures: Sequence[ChildFailure]) -> ChildFailure:
    """The first by the tables' seconds; within the first second, by the agents' own log lines where every table's
    root cause in it has one (their microseconds order what the tables cannot)."""
    second = min(f.time or "" for f in failures)
    now = [f for f in failures if f.time == second]
    roots = _roots_in_agent_order(now)
    return roots[0] if roots else min(now, key=_order)


def _roots_in_agent_order(now: Sequence[ChildFailure]) -> list[ChildFailure]:
    """The tables' root causes in one second, ordered by their agents' log lines; none when any lacks one."""
    roots = [f for f in now if f.root_cause]
    if len({f.table for f in roots}) < 2 or not all(f.at for f in roots):
        return []
    return sorted(roots, key=lambda f: _seconds(f.at))


def _seconds(at: str | None) -> float:
    """Seconds into the day of an agent line's glog time ("1124 15:23:15.686000")."""
    clock = (at or "").rsplit(" ", 1)[-1]
    try:
        h, m, s = clock.split(":")
        return int(h) * 3600 + int(m) * 60 + float(s)
    except ValueError:
        return 0.0


def _across(failures: Sequence[ChildFailure], first: ChildFailure) -> str:
    """What the other tables said, and whether the tables can order the first failure at all."""
    ordered = _roots_in_agent_order([f for f in failures if f.time == first.time])
    if len(ordered) > 1 and ordered[0] is first:
        said = "; ".join(
            f"rank {f.rank}{f' on {f.host}' if f.host else ''} {_seconds(f.at) - _seconds(first.at):.3f} s later"
            for f in ordered[1:4]
        )
        return (
            f"; the other agents' tables name a failure in the same second ({said} by the agents' own log lines):"
            " echoes of it"
        )
    later = sorted((f for f in failures if f.root_cause and f.table != first.table), key=_order)
    if not later:
        return ""
    said = "; ".join(f"rank {f.rank}{f' on {f.host}' if f.host else ''} at {_clock(f)}" for f in later[:4])
    return f"; the other agents' tables name a later first failure ({said}): echoes of it"


def _tied(failures: Sequence[ChildFailure], first: ChildFailure) -> list[ChildFailure]:
    """Other tables' root causes the tables cannot put after ``first``: the same second and the same kind of end,
    and no agent line of each to order them."""
    if len(_roots_in_agent_order([f for f in failures if f.time == first.time])) > 1:
        return []
    return [
        f
        for f in failures
        if f.table != first.table and f.root_cause and _order(f)[:2] == _order(first)[:2] and f.rank != first.rank
    ][:4]


def _clock(f: ChildFailure) -> str:
    """The table's time of day ("15:23:15"): the date is the same for failures a job's agents report together."""
    return (f.time or "").rsplit("_", 1)[-1]
