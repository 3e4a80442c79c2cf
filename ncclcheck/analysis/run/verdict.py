"""The one verdict of ``ncclcheck run``, from what it saw: the job's exit code, the hangs caught live, the logs
analysis of the run dir, and the ranks that left before the others failed. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.ranks import span
from ncclcheck.model.run import HangRecord, RunVerdict

EARLY_S = 5.0  # a rank gone this long before the job ended, while the others ran on, left early


def early_leavers(gone: Mapping[int, float], ended: float, failed: set[int]) -> tuple[int, ...]:
    """Ranks whose process ended at least EARLY_S before the job did and that torchrun does not list as failed:
    they returned (exit 0, as far as the launcher cares) while others ran on."""
    return tuple(sorted(r for r, at in gone.items() if ended - at >= EARLY_S and r not in failed))


def verdict(
    exit_code: int,
    interrupted: bool,
    hangs: tuple[HangRecord, ...],
    report: LogReport,
    early: tuple[int, ...],
) -> tuple[RunVerdict, tuple[Finding, ...]]:
    """The verdict and the findings of the run on top of the logs' own."""
    extra: list[Finding] = []
    failed = exit_code != 0 and not (interrupted and not hangs)
    if early and exit_code != 0:
        extra.append(
            Finding(
                "rank-left-early",
                "error",
                f"rank {span(list(early))} ended {EARLY_S:.0f} s or more before the job failed, while the other ranks "
                "ran on: a rank that leaves the training loop early (a break, a swallowed exception, uneven data) "
                "leaves the others waiting in their next collective until they time out",
                "see why that rank stopped: its last lines in the launcher output; every rank must run the same "
                "number of steps (drop_last, or the same number of batches everywhere)",
                ranks=early,
                culprits=early,
            )
        )
    if extra and exit_code != 0 and not interrupted:  # the most specific cause: a live "dead" record follows from it
        e = extra[0]
        return RunVerdict("fail", e.id, e.culprits, e.message), tuple(extra)
    if hangs:
        first = hangs[0]
        blamed = first.culprits or first.ranks
        return RunVerdict("hang", first.kinds[0] if first.kinds else "hang", blamed, first.message), tuple(extra)
    if interrupted:
        return RunVerdict("fail", "interrupted", (), "interrupted (^C) before any hang was seen"), tuple(extra)
    cause = report.root_cause
    if not failed:
        return RunVerdict("pass", None, (), "the job finished with exit code 0"), tuple(extra)
    if cause is not None:
        return RunVerdict("fail", cause.id, cause.blamed, cause.message), tuple(extra)
    return RunVerdict(
        "fail",
        "exit-code",
        (),
        f"the job exited with code {exit_code}; its output names no known error (see launcher.log in the run dir)",
    ), tuple(extra)
