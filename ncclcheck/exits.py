"""Every exit code ncclcheck returns, in one place (the README's table lists the same), and the one error type
for bad input: a ``UsageError`` anywhere below ``cli.main`` is one line on stderr and exit 2."""

from __future__ import annotations

OK = 0  # nothing wrong found (env: no check fails; smoke: pass; logs: pass; watch --once: no problem)
PROBLEM = 1  # a problem found: a failed check, a failed or hung smoke run, an error in the logs, a watch finding
USAGE = 2  # bad input: a flag, a path, a value (also watch: several jobs and no --job)
NO_JOB = 3  # watch: no job found on this node (or no agent reported one)
LAUNCH_FAILED = 3  # smoke: torchrun could not be started or the rendezvous address does not resolve
UNDECIDED = 4  # watch: the evidence cannot decide; logs: an error line no rule explains, or nothing read ("unknown")
NOT_FOUND = 127  # run: the launcher command is not on PATH (as a shell says)
INTERRUPTED = 130  # ^C (128 + SIGINT)
PIPE = 141  # 128 + SIGPIPE: the reader of our output left (a shell reports the same for `cat big | head`)


def by_signal(signum: int) -> int:
    """128 + N: the code a shell reports for a process that signal N ended."""
    return 128 + signum


class UsageError(Exception):
    """Bad input: its message is printed as one line on stderr, and ncclcheck exits with ``USAGE``."""
