"""Which rank's error is the cause when torchrun's tables say which rank failed first (analysis/logs/verdict.py):
tests/fixtures/review_cases/INDEX.md says how each input was made. Must-fire: a bug in the code is not the network,
a peer's echo is not the cause, whatever order the files are given in. Must-not: a rank stopped by its agent keeps a
death of its own (its thread died while the rank that waited failed first), an error printed before the first rank's
exception is not cleared, and tables whose first failures cannot be ordered change nothing."""

from __future__ import annotations

from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.model.log_report import LogReport

CASES = FIXTURES / "review_cases" / "first_failure"


def read(*texts: tuple[str, str]) -> LogReport:
    lines = []
    for name, text in texts:
        lines += list(frame_all(text.splitlines(), name))
    return analyse(lines)


def case(name: str) -> tuple[str, str]:
    return name, (CASES / name).read_text()


def test_a_bug_in_the_code_is_not_the_network_of_the_rank_stopped_after_it() -> None:
    report = read(case("code_bug_then_connect_refused.log"))
    cause = report.root_cause
    assert cause is not None and cause.id == "python-exception" and cause.ranks == (1,), cause
    assert "unknown backbone 'resnet5O'" in cause.message
    assert any(f.id == "connect-failed" for f in report.findings)  # still listed: an echo, not the cause


def test_the_first_ranks_exception_comes_before_a_wrapper_whose_rank_lost_its_peer() -> None:
    cause = read(case("code_bug_and_peer_lost.log")).root_cause
    assert cause is not None and cause.id == "python-exception" and cause.ranks == (1,), cause
    assert "stack expects each tensor to be equal size" in cause.message


def test_the_tables_times_order_the_nodes_whichever_file_comes_first() -> None:
    node0, node1 = case("oom_then_ib/node0.log"), case("oom_then_ib/node1.log")
    for order in ((node0, node1), (node1, node0)):
        cause = read(*order).root_cause
        assert cause is not None and cause.id == "model-oom" and cause.ranks == (1,), cause


def test_must_not_an_ib_fault_before_the_exception_stays_the_cause() -> None:
    """The same console, but rank 0's IB completion error is printed before rank 1's exception: the network failed
    first (rank 1's exception came after it), though torchrun names rank 1 first and stopped rank 0."""
    name, text = case("code_bug_then_connect_refused.log")
    ib = (
        "[rank0]:node1:800:850 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer"
        " 10.0.0.12<51234> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.11"
        " remoteGids::ffff:10.0.0.12 hca mlx5_0"
    )
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "Traceback" in line)
    cause = read((name, "\n".join([*lines[:at], ib, *lines[at:]]))).root_cause
    assert cause is not None and cause.id == "ib-retry-exceeded" and cause.ranks == (0,), cause


def test_must_not_the_ib_fault_that_came_first_by_the_tables_times_is_cleared() -> None:
    """The mirror of the out-of-memory case: node 0's IB error and abort at 10:00:04, node 1's OOM at 10:00:05."""
    node0 = case("oom_then_ib/node0.log")
    early = (node0[0], node0[1].replace("10:00:42", "10:00:04").replace("10:00:41", "10:00:03"))
    cause = read(early, case("oom_then_ib/node1.log")).root_cause
    assert cause is not None and cause.id == "ib-retry-exceeded" and cause.ranks == (0,), cause


def test_must_not_tables_in_one_second_across_nodes_order_nothing() -> None:
    """Both agents' failures in the same second: the times cannot order them; the reading in log order stands."""
    node0, node1 = case("oom_then_ib/node0.log"), case("oom_then_ib/node1.log")
    tied = (node0[0], node0[1].replace("10:00:42", "10:00:05").replace("10:00:41", "10:00:05"))
    first = read(tied, node1).root_cause
    assert first is not None and first.id == "ib-retry-exceeded", first  # the first primary error read
