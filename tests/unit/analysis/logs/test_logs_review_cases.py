"""What a review of the reader found wrong, held (tests/fixtures/review_cases/INDEX.md: each input from real lines)."""

from __future__ import annotations

from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.analysis.logs.line_facts import _text_rank
from ncclcheck.model.log_report import LogReport

CASES = FIXTURES / "review_cases"


def read(*names: str) -> LogReport:
    lines = []
    for name in names:
        lines += list(frame_all((CASES / name).read_text().splitlines(), name))
    return analyse(lines)


def test_a_width_long_line_does_not_swallow_a_crash_banner() -> None:
    report = read("b3.log")
    assert report.root_cause is not None and report.root_cause.id == "native-crash"
    assert report.root_cause.culprits == (1,) and "at native_crash.py:17 in crash" in report.root_cause.message


def test_a_timeout_whose_group_is_on_the_next_line_is_that_groups() -> None:
    report = read("d2.log")
    (t,) = report.timeouts
    assert (t.pg, t.group_rank, t.rank, t.subgroup) == ("2", 4, 4, True)
    timeout = next(f for f in report.findings if f.id == "collective-timeout")
    assert "reported by rank(s) 4 of process group 2 (global rank(s) 4)" in timeout.message
    assert timeout.culprits == () and "look at them first" not in timeout.message


def test_torch_2_4s_group_prefix_is_read() -> None:
    assert _text_rank("[PG 0 (default_pg) Rank 3] Exception (either an error or timeout)") == 3
    assert _text_rank("[PG 2 (tp_group) Rank 0] Process group watchdog thread terminated") is None
    (t,) = read("g1.log").timeouts
    assert (t.pg, t.pg_desc, t.group_rank, t.rank) == ("2", "tp_group", 0, None)


def test_a_pid_two_nodes_share_orders_nothing() -> None:
    found = next(f for f in read("pid_shared/node0.log", "pid_shared/node1.log").findings if f.id == "child-failed")
    assert (
        found.ranks == (3,) and "rank 0 on localhost first (exit code 1), but its own error only says" in found.message
    )


def test_tables_that_cannot_be_ordered_name_the_rank_that_failed_of_its_own() -> None:
    report = read("times_missing/a.log", "times_missing/b.log")
    found = next(f for f in report.findings if f.id == "child-failed")
    assert found.ranks == (3,) and "the tables' times cannot order them" in found.message


def test_a_cut_inside_parentheses_is_glued_by_the_fast_reader_too() -> None:
    (t,) = read("c1.log").timeouts
    assert (t.op, t.seq, t.pg) == ("_ALLGATHER_BASE", 1522789, "2")


def _lines(pattern: str) -> list[str]:
    (path,) = FIXTURES.glob(pattern)
    return path.read_text().splitlines()


def test_a_c_plus_plus_exceptions_frames_without_its_message_never_pass() -> None:
    """M14's lines 4-12 alone ("Exception raised from checkTimeout …" and its frames): a log cut after the error."""
    report = analyse(frame_all(_lines("nccl_logs_more/M14_*.log")[3:12], "m14-cut"))
    assert report.status == "unknown" and "its error line is not in these logs" in report.findings[0].message


def test_a_traceback_cut_before_its_exception_never_passes() -> None:
    lines = [x for x in _lines("nccl_logs_more/M20_*.log") if "Error:" not in x]
    report = analyse(frame_all(lines, "m20-cut"))
    assert report.status == "unknown", [f.id for f in report.findings]


def test_the_stack_of_a_failed_collective_not_found_alone_is_a_failure() -> None:
    """M12's line 2 alone: torch prints it only after a collective failed on that rank."""
    report = analyse(frame_all(_lines("nccl_logs_more/M12_*.log")[1:2], "m12-one"))
    assert report.status == "fail" and report.root_cause is not None
    assert report.root_cause.id == "failed-collective-no-stack" and report.root_cause.ranks == (1,)


def test_a_collective_smaller_than_the_job_is_a_sub_groups_without_a_group_named() -> None:
    report = read("d1_no_group_line.log")
    timeout = next(f for f in report.findings if f.id == "collective-timeout")
    assert "reported by rank(s) 0 of a 2-member process group" in timeout.message
    assert "not the default group" in timeout.message and timeout.culprits == ()
    assert "look at them first" not in timeout.message
