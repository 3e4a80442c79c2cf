"""Ranks that timed out in the same collective with different element counts, where NCCL needs the same count on every
rank (analysis/logs/cross_rank._size_mismatch): a shape that depends on the rank, the cause of the timeouts. Must-fire:
the review's two ranks (nobody named: which count is wrong cannot be told), the one odd rank of three or more named.
Must-not: collectives whose counts may differ by rank (ALLGATHER, ALLTOALL), equal counts, and different SeqNums (the
desync finding, which stays behind the timeout: the old format hides the process group)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.model.log_report import LogReport

CASE = FIXTURES / "review_cases" / "launchers" / "27_timeout_same_seq_different_numel.log"
LINE = (
    "[rank{r}]:[E612 11:02:10.108209410 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation"
    " timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={n}, NumelOut={n}, Timeout(ms)=600000) ran for 600031"
    " milliseconds before timing out."
)


WORK = (
    "[rank{r}]:[E612 11:02:10.119203114 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank {r}]  failure"
    " detected by watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, last completed work: 56"
)


def read(*lines: str) -> LogReport:
    return analyse(frame_all(list(lines), "job.log"))


def world(r: int, seq: int, op: str, n: int) -> tuple[str, str]:
    """A rank's watchdog timeout and the line that says its group is the default one (torch >= 2.4)."""
    return LINE.format(r=r, seq=seq, op=op, n=n), WORK.format(r=r, seq=seq)


def test_one_all_reduce_with_different_sizes_is_the_cause_of_the_timeouts() -> None:
    cause = analyse(frame_all(CASE.read_text().splitlines(), "job.log")).root_cause
    assert cause is not None and cause.id == "collective-size-mismatch" and cause.culprits == (), cause
    assert "NumelIn=1000" in cause.message and "NumelIn=1024" in cause.message


def test_the_one_rank_whose_count_no_other_has_is_named() -> None:
    lines = [x for r in range(4) for x in world(r, 57, "ALLREDUCE", 1000 if r == 2 else 1024)]
    cause = read(*lines).root_cause
    assert cause is not None and cause.id == "collective-size-mismatch" and cause.culprits == (2,), cause


@pytest.mark.parametrize(
    ("op", "sizes", "seqs"),
    [
        ("ALLGATHER", (1000, 1024), (57, 57)),  # uneven all_gather: counts may differ by rank
        ("ALLTOALL_BASE", (1000, 1024), (57, 57)),
        ("ALLREDUCE", (1024, 1024), (57, 57)),
        ("ALLREDUCE", (1000, 1024), (57, 58)),  # different collectives: the desync finding, not this one
    ],
)
def test_must_not_counts_that_may_differ_or_do_not_make_a_size_mismatch(
    op: str, sizes: tuple[int, int], seqs: tuple[int, int]
) -> None:
    lines = [x for r in range(2) for x in world(r, seqs[r], op, sizes[r])]
    report = read(*lines)
    assert all(f.id != "collective-size-mismatch" for f in report.findings), report.findings
    assert report.root_cause is not None and report.root_cause.id == "collective-timeout", report.root_cause


def test_must_not_instances_of_one_sub_group_are_compared() -> None:
    """Two tensor-parallel instances share the group's id; each instance's sizes agree, the instances' differ."""
    text = (FIXTURES / "review_cases" / "launchers" / "27b_tp_groups_same_pgid_different_numel.log").read_text()
    report = analyse(frame_all(text.splitlines(), "job.log"))
    assert all(f.id != "collective-size-mismatch" for f in report.findings), report.findings


def test_must_not_timeouts_of_an_unknown_group_are_compared() -> None:
    """No line says the collective was the default group's: it may be a sub-group's instances."""
    lines = [LINE.format(r=r, seq=57, op="ALLREDUCE", n=1000 if r else 1024) for r in range(2)]
    report = read(*lines)
    assert all(f.id != "collective-size-mismatch" for f in report.findings), report.findings
