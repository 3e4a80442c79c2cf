"""The one verdict of ``ncclcheck run``, from what it saw: the job's exit code, the hangs caught live, the logs
analysis of the run dir, the ranks that left before the others failed, and the slow episodes. Pure.

A job that finished with exit code 0 but had ranks holding the others back is ``slow``: a word of its own, since a
slow job is not a failed one (its exit code stays the job's own). A job that failed or hung keeps ``fail`` or
``hang``: that is what the user must fix first; its slow episodes are still listed in the report."""

from __future__ import annotations

from collections.abc import Sequence

from ncclcheck.analysis.logs.verdict import PEER_LOST, SYMPTOMS, hard_errors
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import logs as logs_ids
from ncclcheck.model.ids import run as run_ids
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.ranks import span
from ncclcheck.model.run import HangRecord, RankEnd, RunVerdict, SlowEpisode

LEFT_FIX = (
    "see why that rank stopped: its last lines in the launcher output (a break, a return, a swallowed exception); "
    "every rank must run the same number of steps: DistributedSampler(drop_last=True), the same number of batches "
    "everywhere, or DDP's join() / the torch.distributed.algorithms.Join context manager for uneven inputs"
)


def early_leaver(ends: Sequence[RankEnd], failed: set[int], report: LogReport) -> Finding | None:
    """A rank that ended cleanly while its peers still ran, before any of them failed, where what the others then
    logged only says a peer went away (or timed out): it left, and they failed for it, however soon after.

    Clean: exit code 0, or a code its launcher reaped first that torchrun does not list as failed. The others'
    errors must say a peer went away or a collective timed out; a peer that failed of its own (an error that is not
    a symptom, wrapper or secondary error, or only a plain exception of its own) is the cause instead."""
    failing = [e.time for e in ends if e.exit_code not in (None, 0) or e.rank in failed]
    first_failure = min(failing, default=None)
    left = [
        e
        for e in ends
        if (e.exit_code == 0 or (e.exit_code is None and e.rank not in failed))
        and any(o.time > e.time and o.rank != e.rank for o in ends)
        and (first_failure is None or e.time < first_failure)
    ]
    ranks = tuple(sorted({e.rank for e in left}))
    if not ranks or any(not set(f.ranks) <= set(ranks) for f in hard_errors(report.findings)):
        return None  # another rank failed of its own
    if not any(f.id in PEER_LOST or f.id in SYMPTOMS for f in report.findings if f.severity == "error"):
        return None  # nothing says the others failed for want of a peer (a plain exception is their own)
    known = all(e.exit_code == 0 for e in left)
    how = "with exit code 0" if known else "cleanly (torchrun does not list it as failed)"
    after = (
        f"; the first of the others failed {first_failure - max(e.time for e in left):.2f} s later"
        if first_failure is not None
        else ""
    )
    message = (
        f"rank {span(list(ranks))} ended {how} while the other ranks still ran{after}, and their errors only say "
        "a peer went away: a rank that leaves the training loop early (a break, a return, uneven data) leaves the "
        "others waiting in their next collective until it fails"
    )
    return Finding(run_ids.RANK_LEFT_EARLY, "error", message, LEFT_FIX, ranks=ranks, culprits=ranks)


# libstdc++'s __verbose_terminate_handler (libsupc++/vterminate.cc), std::terminate called outside any exception:
# most often a std::thread destroyed while still joinable, i.e. a thread left running when the process exits
TERMINATE = "terminate called without an active exception"
ABORT_FAMILY = frozenset({logs_ids.CHILD_FAILED, logs_ids.PROCESS_ABORTED})
AT_EXIT_FIX = (
    "end the job cleanly: call torch.distributed.destroy_process_group() once the work is done, and stop and join"
    " every thread you started (a data loader's, a logger's, a C++ extension's) before the script returns"
)


def aborted_at_exit(report: LogReport, backends: tuple[str, ...]) -> Finding | None:
    """Ranks that died of SIGABRT with C++'s "terminate called without an active exception" and no error before it,
    on a job whose process groups are not NCCL: no watchdog aborted them; they aborted on their way out.

    ``backends``: what the ranks' hook recorded. NCCL, or none recorded, keeps the logs' own words (ProcessGroupNCCL's
    abort ends a rank mid-work with SIGABRT too)."""
    aborted = sorted({f.rank for f in report.failures if f.signal == "SIGABRT"})
    if not aborted or not backends or "nccl" in backends:
        return None
    if any(f.signal not in ("SIGABRT", "SIGTERM") for f in report.failures):
        return None  # another death (an exit code, a crash signal) is a cause of its own
    if any(f.severity == "error" and f.id not in ABORT_FAMILY for f in report.findings):
        return None  # an error before the abort is its cause
    said = [e for f in report.findings for e in f.evidence if TERMINATE in e.text]
    if not said:
        return None
    backend = ", ".join(backends)
    message = (
        f'rank {span(aborted)} aborted (SIGABRT) at exit with no error before it: "{TERMINATE}" is C++\'s'
        " std::terminate outside any exception, most often a thread still running when the process ended (a process"
        f" group not destroyed, a thread not joined); the job used {backend}, not NCCL, so no NCCL watchdog aborted it"
        " and the ranks had finished their work"
    )
    return Finding(
        run_ids.ABORTED_AT_EXIT, "error", message, AT_EXIT_FIX, tuple(aborted), tuple(said[:3]), tuple(aborted)
    )


def verdict(
    exit_code: int,
    interrupted: bool,
    hangs: tuple[HangRecord, ...],
    report: LogReport,
    early: Finding | None,
    slow: tuple[SlowEpisode, ...] = (),
    at_exit: Finding | None = None,
) -> tuple[RunVerdict, tuple[Finding, ...]]:
    """The verdict and the findings of the run on top of the logs' own (``at_exit``: see ``aborted_at_exit``)."""
    extra = [early] if early is not None and exit_code != 0 else []
    failed = exit_code != 0 and not (interrupted and not hangs)
    if extra and exit_code != 0 and not interrupted:  # the most specific cause: a live "dead" record follows from it
        e = extra[0]
        return RunVerdict("fail", e.id, e.culprits, e.message), tuple(extra)
    if hangs:
        first = hangs[0]
        blamed = first.culprits or first.ranks
        return RunVerdict("hang", first.kinds[0] if first.kinds else run_ids.HANG, blamed, first.message), tuple(extra)
    if interrupted:
        return RunVerdict(
            "fail", run_ids.INTERRUPTED, (), "ended by a signal (^C, SIGTERM or SIGHUP) before any hang was seen"
        ), tuple(extra)
    cause = report.root_cause
    if not failed and slow:
        return slow_verdict(slow), tuple(extra)
    if not failed:
        return RunVerdict("pass", None, (), "the job finished with exit code 0"), tuple(extra)
    if at_exit is not None and not extra:
        return RunVerdict("fail", at_exit.id, at_exit.culprits, at_exit.message), (at_exit,)
    if cause is not None:
        return RunVerdict("fail", cause.id, cause.blamed, cause.message), tuple(extra)
    return RunVerdict(
        "fail",
        run_ids.EXIT_CODE,
        (),
        f"the job exited with code {exit_code}; its output names no known error (see launcher.log in the run dir)",
    ), tuple(extra)


def slow_verdict(episodes: tuple[SlowEpisode, ...]) -> RunVerdict:
    """``slow``: the longest episode named, with what it cost, and how many there were."""
    longest = max(episodes, key=lambda e: e.seconds)
    ranks = list(longest.culprits)
    who = f"rank{'s' if len(ranks) > 1 else ''} {span(ranks)}"
    if longest.kind == watch_ids.SLOW_NODE:
        who += " (every rank of one node)"
    slower = f" (about {longest.factor:.1f}× slower)" if longest.factor else ""
    more = (
        f"; {len(episodes)} slow episodes, {sum(e.seconds for e in episodes):.0f} s in all" if len(episodes) > 1 else ""
    )
    message = f"{who} held the others back for {longest.seconds:.0f} s of the run{slower}{more}: see {longest.path}"
    return RunVerdict("slow", longest.kind, longest.culprits, message)
