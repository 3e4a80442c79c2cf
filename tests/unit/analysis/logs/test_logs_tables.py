"""torchrun's failure tables across agents (tests/fixtures/torchrun/two_nodes*: real two-agent jobs on this machine,
INDEX.md says how): the rank that failed first is the earliest by the tables' own times, not the first table's
"first observed failure" (which is its own lowest failing rank); in one second, the agents' own log lines order
the tables; without them a tie is said, not broken."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.failure_tables import child_findings
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.logs import ChildFailure

TORCHRUN = FIXTURES / "torchrun"


def read(*paths: Path, keep: str = "") -> LogReport:
    """The report over these files in this order; ``keep`` drops every line holding it when it is the word
    ``no-agent-lines`` (a partial log: what an excerpt without the agents' own lines gives)."""
    lines = []
    for path in paths:
        text = path.read_text().splitlines()
        if keep == "no-agent-lines":
            text = [t for t in text if "failed (exitcode" not in t]
        lines += list(frame_all(text, path.name))
    return analyse(lines)


def child(report: LogReport) -> Finding:
    return next(f for f in report.findings if f.id == "child-failed")


@pytest.mark.parametrize("order", [("node0", "node1"), ("node1", "node0")])
def test_the_earliest_table_names_the_first_failure_in_any_file_order(order: tuple[str, str]) -> None:
    """Node 1's table (rank 3, 15:23:15) is 3 s before node 0's (rank 0, its own "first observed failure")."""
    report = read(*(TORCHRUN / "two_nodes" / f"{n}.log" for n in order))
    found = child(report)
    assert found.ranks == (3,), found.message
    assert "rank 3 on localhost failed first (exit code 1, at 15:23:15)" in found.message
    assert "later first failure (rank 0 on localhost at 15:23:18): echoes of it" in found.message
    assert report.root_cause is not None and "rank 3 gives up" in report.root_cause.message


def test_two_tables_in_one_file_are_two_tables() -> None:
    """An agent's output and another's pasted into one file: the tables are still told apart."""
    both = TORCHRUN / "two_nodes"
    text = (both / "node0.log").read_text().splitlines() + (both / "node1.log").read_text().splitlines()
    report = analyse(frame_all(text, "both.log"))
    assert child(report).ranks == (3,)
    assert {f.table for f in report.failures} == {0, 1}


def test_in_one_second_the_agents_own_lines_order_the_tables() -> None:
    """Both tables say 15:25:12; the agents' glog lines say node 1's failure came 0.424 s before node 0's."""
    found = child(read(*(TORCHRUN / "two_nodes_same_second" / f"node{n}.log" for n in (0, 1))))
    assert found.ranks == (3,), found.message
    assert "rank 0 on localhost 0.424 s later by the agents' own log lines" in found.message


def test_in_one_second_without_the_agents_lines_the_rank_that_only_lost_its_peer_is_not_the_start() -> None:
    """Both tables say 15:25:12 and no agent line orders them; node 0's first (rank 0) only says "Connection closed
    by peer": node 1's first, rank 3, failed of its own and is the likelier start."""
    report = read(*(TORCHRUN / "two_nodes_same_second" / f"node{n}.log" for n in (0, 1)), keep="no-agent-lines")
    found = child(report)
    assert found.ranks == (3,)
    assert "rank 0 on localhost first (exit code 1), but its own error only says a peer closed" in found.message


def test_a_tie_of_two_ranks_that_failed_of_their_own_is_said_not_broken() -> None:
    """Hand-built facts (two agents' tables, the same second, no agent lines): neither first failure is an echo."""
    rows = (
        ChildFailure(1, 1, "n0", -15, "SIGTERM", False, "2026-11-24_15:25:12", 0, 11),
        ChildFailure(0, 0, "n0", 1, None, True, "2026-11-24_15:25:12", 0, 10),
        ChildFailure(2, 0, "n1", -15, "SIGTERM", False, "2026-11-24_15:25:12", 1, 21),
        ChildFailure(3, 1, "n1", 1, None, True, "2026-11-24_15:25:12", 1, 20),
    )
    (found,) = child_findings(rows)
    assert found.ranks == (0, 3) and not found.culprits
    assert "failed in the same second (15:25:12)" in found.message
    assert "which failed first cannot be told" in found.message


@pytest.mark.parametrize("order", [("node0", "node1"), ("node1", "node0")])
def test_the_first_failing_ranks_own_error_leads(order: tuple[str, str]) -> None:
    """Two ranks raise their own errors (rank 3 at 15:26:04, rank 0 two seconds later): rank 3's leads the
    report whichever file is read first."""
    report = read(*(TORCHRUN / "two_nodes_two_errors" / f"{n}.log" for n in order))
    assert child(report).ranks == (3,)
    assert report.root_cause is not None
    assert report.root_cause.message.startswith("RuntimeError: rank 3: the shard it was given is empty")
    assert "ValueError: rank 0: checkpoint directory" in report.root_cause.message  # said, behind it


def test_one_table_keeps_its_own_first_observed_failure() -> None:
    """One agent's table alone: its "first observed failure" stands (the times cannot say more than it does)."""
    found = child(read(TORCHRUN / "two_nodes" / "node1.log"))
    assert found.ranks == (3,)
    assert found.message.startswith("torchrun: rank 3 on localhost failed first (exit code 1)")
    assert "at 15:" not in found.message


@pytest.mark.parametrize(
    "path", [TORCHRUN / "two_nodes" / "node0.log", FIXTURES / "real_failures" / "gloo_size_silent.log"]
)
def test_a_first_failure_that_only_lost_its_peer_blames_no_one_here(path: Path) -> None:
    """Node 0's table names rank 0 first, but rank 0's own error is gloo's "Connection closed by peer" (the peer,
    rank 3, is on the other node); in gloo_size_silent rank 0 lost rank 1, which the agent then stopped: the rank
    that showed the failure is not where it started."""
    report = read(path)
    found = child(report)
    assert found.ranks == () and found.culprits == ()
    assert "torchrun names rank 0 on localhost first (exit code 1), but its own error only says a peer closed" in (
        found.message
    )
    assert report.root_cause is not None and report.root_cause.blamed == ()


def test_in_one_second_a_rank_that_failed_of_its_own_is_the_likelier_start() -> None:
    """Hand-built facts (the table's rows): rank 0 lost its peer, rank 1 exited 1 in the same second, rank 2 was
    stopped by the agent: rank 1 is the likelier start, whatever the table's tie to the lowest rank says."""
    rows = (
        ChildFailure(2, 2, "h", -15, "SIGTERM", False, "2026-11-24_15:00:00", 0, 12),
        ChildFailure(1, 1, "h", 1, None, False, "2026-11-24_15:00:00", 0, 11),
        ChildFailure(0, 0, "h", 1, None, True, "2026-11-24_15:00:00", 0, 10),
    )
    (found,) = child_findings(rows, frozenset({0}))
    assert found.ranks == (1,) and "rank 1 (exit code 1), which failed of its own in the same second" in found.message
    (plain,) = child_findings(rows)  # without the echo, the table's own first stands
    assert plain.ranks == (0,)


def test_a_table_whose_head_was_cut_off_is_read_whole() -> None:
    """M26 starts at entry [5] of its table (the excerpt's cut): those rows are failures too, not stray errors."""
    (path,) = (FIXTURES / "nccl_logs_more").glob("M26_*.log")
    report = read(path)
    assert {f.rank for f in report.failures} == {0, 6, 7}
    assert child(report).ranks == (0,)
    assert not any(f.id == "unrecognised-error" for f in report.findings)
