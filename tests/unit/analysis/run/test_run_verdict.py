"""``run``'s early leaver, judged from the exact order of the ranks' ends and what the others logged: where it must
be named and where it must not."""

from __future__ import annotations

import pytest

from ncclcheck.analysis.run.verdict import early_leaver, verdict
from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.run import RankEnd

PEER_CLOSED = Finding("peer-closed", "error", "Connection closed by peer", ranks=(1,))
TIMEOUT = Finding("collective-timeout", "error", "Watchdog caught collective operation timeout", ranks=(1,))
WRAPPER = Finding("python-exception", "error", "ValueError: a batch with no labels", ranks=(1,))
OWN = Finding("cuda-oom", "error", "CUDA out of memory", ranks=(1,))


def report(*findings: Finding) -> LogReport:
    return LogReport(findings, (), (), (), findings[0] if findings else None, 10)


LEFT_THEN_FAILED = (RankEnd(0, 100, 10.000, 0), RankEnd(1, 101, 10.040, 1))


@pytest.mark.parametrize("logged", [(PEER_CLOSED,), (TIMEOUT,), (PEER_CLOSED, WRAPPER)])
def test_a_clean_exit_before_the_others_failed_for_want_of_it_is_named_however_soon(
    logged: tuple[Finding, ...],
) -> None:
    found = early_leaver(LEFT_THEN_FAILED, {1}, report(*logged))
    assert found is not None and found.culprits == (0,) and "0.04 s later" in found.message


def test_an_exit_code_the_launcher_reaped_first_counts_when_torchrun_does_not_list_the_rank() -> None:
    ends = (RankEnd(0, 100, 10.0, None), RankEnd(1, 101, 10.5, None))
    found = early_leaver(ends, {1}, report(PEER_CLOSED))
    assert found is not None and found.culprits == (0,) and "does not list it as failed" in found.message
    assert early_leaver(ends, {0, 1}, report(PEER_CLOSED)) is None  # both listed as failed: nobody left cleanly


@pytest.mark.parametrize(
    ("ends", "failed", "logged", "why"),
    [
        (LEFT_THEN_FAILED, {1}, (WRAPPER,), "the other failed of its own: a plain exception"),
        (LEFT_THEN_FAILED, {1}, (PEER_CLOSED, OWN), "the other failed of its own: out of memory"),
        (LEFT_THEN_FAILED, {1}, (), "nothing logged says a peer went away"),
        ((RankEnd(1, 101, 9.9, 1), RankEnd(0, 100, 10.0, 0)), {1}, (PEER_CLOSED,), "it ended after the failure"),
        ((RankEnd(0, 100, 10.0, 0),), set(), (PEER_CLOSED,), "no peer ran on after it"),
        ((RankEnd(0, 100, 10.0, -9), RankEnd(1, 101, 10.1, 1)), {1}, (PEER_CLOSED,), "killed, not a clean exit"),
    ],
)
def test_not_an_early_leaver(
    ends: tuple[RankEnd, ...], failed: set[int], logged: tuple[Finding, ...], why: str
) -> None:
    assert early_leaver(ends, failed, report(*logged)) is None, why


def test_the_leaver_is_the_run_s_cause_unless_it_passed_or_was_interrupted() -> None:
    logged = report(PEER_CLOSED)
    found = early_leaver(LEFT_THEN_FAILED, {1}, logged)
    failed, _ = verdict(1, False, (), logged, found)
    assert (failed.status, failed.root_cause, failed.ranks) == ("fail", "rank-left-early", (0,))
    passed, extra = verdict(0, False, (), logged, found)
    assert passed.status == "pass" and extra == ()
    stopped, _ = verdict(130, True, (), logged, found)
    assert stopped.root_cause == "interrupted"
