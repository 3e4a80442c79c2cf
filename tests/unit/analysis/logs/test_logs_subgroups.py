"""A timeout in a process group other than the default one: torch's "[PG ID 2 PG GUID 3(NAME) Rank 0]" names the
rank within that group, not the job's global rank. The report never turns it into a global rank, and never names
global ranks that are neither in the logs nor known to be in that group: it says the group's other members are not
in these logs (real excerpts: fixture 45, a 16-way reduce-scatter in PG 1 of torch 2.3)."""

from __future__ import annotations

from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.analysis.logs.line_facts import _text_rank
from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport


def read(pattern: str) -> LogReport:
    (path,) = FIXTURES.glob(pattern)
    return analyse(frame_all(path.read_text().splitlines(), path.name))


def timeout(report: LogReport) -> Finding:
    return next(f for f in report.findings if f.id == "collective-timeout")


def test_a_subgroup_timeout_names_the_group_not_global_ranks() -> None:
    report = read("nccl_logs/45_*.log")
    (t,) = report.timeouts
    assert (t.pg, t.group_rank, t.rank) == ("1", 6, None) and t.subgroup
    found = timeout(report)
    assert "reported by rank(s) 6 of process group 1 (its global rank is not in these lines)" in found.message
    assert "the other 15 members of that group are not in these logs" in found.message
    assert "which of them it waited on cannot be told here" in found.message
    assert "0-5" not in found.message and found.culprits == () and found.ranks == ()


def test_the_default_groups_ranks_stay_global_ranks() -> None:
    """[PG ID 0 PG GUID 0(default_pg) Rank 2] is global rank 2 (M15): its timeout is annotated as before."""
    report = read("nccl_logs_more/M15_*.log")
    assert {t.rank for t in report.timeouts} == {2} and not any(t.subgroup for t in report.timeouts)
    assert "reported by rank(s) 2" in timeout(report).message


def test_old_formats_without_a_group_keep_their_rank() -> None:
    """torch before 2.3 printed "[Rank 1]" alone (fixture 41): the one rank the line gives."""
    report = read("nccl_logs/41_*.log")
    assert {t.rank for t in report.timeouts} == {1, 2, 3, 6, 7}


def test_a_text_rank_is_global_only_in_the_default_group() -> None:
    lines = {  # the prefixes of real lines: M15, M12, fixture 45, fixture 43
        "[PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated": 2,
        "[PG ID 1 PG GUID 1 Rank 2]  failure detected by watchdog at work sequence id: 1116": None,
        "[PG 1 Rank 6] Process group watchdog thread terminated with exception: [Rank 6] Watchdog caught": None,
        "[PG ID 0 PG GUID 0(default_pg) Rank 7] ProcessGroupNCCL's watchdog got stuck for 480 seconds": 7,
    }
    assert {text: _text_rank(text) for text in lines} == lines
