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


def read(*lines: str) -> LogReport:
    return analyse(frame_all(list(lines), "job.log"))


def test_one_all_reduce_with_different_sizes_is_the_cause_of_the_timeouts() -> None:
    cause = analyse(frame_all(CASE.read_text().splitlines(), "job.log")).root_cause
    assert cause is not None and cause.id == "collective-size-mismatch" and cause.culprits == (), cause
    assert "NumelIn=1000" in cause.message and "NumelIn=1024" in cause.message


def test_the_one_rank_whose_count_no_other_has_is_named() -> None:
    lines = [LINE.format(r=r, seq=57, op="ALLREDUCE", n=1000 if r == 2 else 1024) for r in range(4)]
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
    lines = [LINE.format(r=r, seq=seqs[r], op=op, n=sizes[r]) for r in range(2)]
    report = read(*lines)
    assert all(f.id != "collective-size-mismatch" for f in report.findings), report.findings
    assert report.root_cause is not None and report.root_cause.id == "collective-timeout", report.root_cause
