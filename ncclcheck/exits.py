"""Every exit code ncclcheck returns, in one place (docs/exit-codes.md lists the same): the codes, what each
command's verdict exits with, and the one error type for bad input: a ``UsageError`` anywhere below ``cli.main`` is
one line on stderr and exit 2."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ncclcheck.model.log_report import LogStatus
from ncclcheck.model.smoke import SmokeVerdict
from ncclcheck.model.watch import WatchStatus

OK = 0  # nothing wrong found (env: no check fails; smoke: pass; logs: pass; watch --once: no problem)
PROBLEM = 1  # a problem found: a failed check, a failed or hung smoke run, an error in the logs, a watch finding
USAGE = 2  # bad input: a flag, a path, a value (also watch: several jobs and no --job)
NO_JOB = 3  # watch: no job found on this node (or no agent reported one)
LAUNCH_FAILED = 3  # smoke: torchrun could not be started or the rendezvous address does not resolve
UNDECIDED = 4  # watch: the evidence cannot decide; logs: an error line no rule explains, or nothing read ("unknown")
NOT_FOUND = 127  # run: the launcher command is not on PATH (as a shell says)
INTERRUPTED = 130  # ^C (128 + SIGINT)
PIPE = 141  # 128 + SIGPIPE: the reader of our output left (a shell reports the same for `cat big | head`)


# What each command's verdict exits with, the verdict as its report names it ("verdict" or "verdict.status" in its
# JSON). A verdict missing here is a KeyError, never a quiet 0: a new one is given its code here.
ENV: Mapping[str, int] = {"pass": OK, "fail": PROBLEM}
LOGS: Mapping[LogStatus, int] = {"pass": OK, "fail": PROBLEM, "unknown": UNDECIDED}
# running and interrupted are no pass (a run that a signal ended exits 128 + N before it is judged)
SMOKE: Mapping[SmokeVerdict, int] = {"pass": OK, "fail": PROBLEM, "running": PROBLEM, "interrupted": PROBLEM}
# pending at the end of --once (nothing judged yet, a slow rank not proven) is no pass any more than undecided is
WATCH: Mapping[WatchStatus, int] = {
    "ok": OK,
    "finished": OK,
    "warning": PROBLEM,
    "problem": PROBLEM,
    "pending": UNDECIDED,
    "undecided": UNDECIDED,
}


def by_signal(signum: int) -> int:
    """128 + N: the code a shell reports for a process that signal N ended."""
    return 128 + signum


def env(verdict: str) -> int:
    """``env``: 1 when a check fails, else 0."""
    return ENV[verdict]


def logs(status: LogStatus) -> int:
    """``logs``: 1 on an error, 4 when the logs cannot pass (``unknown``), else 0."""
    return LOGS[status]


def smoke(verdict: SmokeVerdict, launch_failed: bool) -> int:
    """``smoke``: 0 on pass, 1 on a failed or hung run, 3 when torchrun could not be started."""
    return LAUNCH_FAILED if launch_failed else SMOKE[verdict]


def watch(status: WatchStatus, severities: Iterable[str]) -> int:
    """``watch --once`` (one node or every node): a finding that is an error or a warning is a problem (1), whatever
    the verdict; else the verdict's code (4 when it is pending or undecided: the evidence did not decide)."""
    return PROBLEM if any(s in ("error", "warning") for s in severities) else WATCH[status]


def run(returncode: int, signalled: int | None) -> int:
    """``run``: the job's own code, whatever the verdict (128 + N when signal N ended the launcher: ``returncode``
    is a Popen one); a job that did not end with 0 after ncclcheck got signal N (``signalled``) gives 128 + N."""
    code = by_signal(-returncode) if returncode < 0 else returncode
    return by_signal(signalled) if signalled is not None and code != 0 else code


class UsageError(Exception):
    """Bad input: its message is printed as one line on stderr, and ncclcheck exits with ``USAGE``."""
