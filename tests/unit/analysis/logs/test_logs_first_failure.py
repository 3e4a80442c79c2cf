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


# srun's reports of its tasks' ends, in the one output its tasks print to (srun --label): their order is the order of
# the failures, as torchrun's tables' times are.
SRUN = "srun_label_code_bug_then_store_timeout.out"


def srun_case(edit: tuple[str, str] | None = None, before_exit: str | None = None) -> LogReport:
    name, text = case(SRUN)
    if edit is not None:
        text = text.replace(*edit)
    if before_exit is not None:
        text = text.replace("srun: error: gpu-a01: task 0", f"{before_exit}\nsrun: error: gpu-a01: task 0", 1)
    return read((name, text))


def test_a_bug_in_the_code_is_not_the_store_the_task_that_ended_first_would_have_held() -> None:
    report = srun_case()
    cause = report.root_cause
    assert cause is not None and cause.id == "python-exception", cause
    assert "api_key not configured" in cause.message
    assert any(f.id == "store-connect-failed" for f in report.findings)  # still listed: an echo, not the cause


def test_must_not_an_error_printed_before_the_first_task_ended_stays_the_cause() -> None:
    """Task 1's IB completion error is printed before srun reports task 0's end: the network failed first."""
    ib = (
        "1: gpu-a02:800:850 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.0.0.12<51234>"
        " with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.11 remoteGids::ffff:10.0.0.12"
        " hca mlx5_0"
    )
    cause = srun_case(before_exit=ib).root_cause
    assert cause is not None and cause.id != "python-exception" and "status=12" in cause.evidence[0].text, cause


def test_must_not_a_task_srun_killed_first_orders_nothing() -> None:
    """The first end srun reports is a kill (the OOM killer, or srun ending the step): not a failure of the task's own
    making that the others' errors follow from; the verdict is the one without srun's lines."""
    killed = srun_case(("task 0: Exited with exit code 1", "task 0: Killed"))
    plain = srun_case(("srun: error: gpu-a01: task 0: Exited with exit code 1\n", ""))
    for report in (killed, plain):
        assert report.root_cause is not None and report.root_cause.id == "store-connect-failed", report.root_cause


def test_must_not_a_first_end_with_no_error_before_it_clears_the_errors_after_it() -> None:
    """Task 0's output holds no error before its end (its exception went elsewhere): nothing to put first."""
    name, text = case(SRUN)
    lines = [line for line in text.splitlines() if not line.startswith("0: ")]
    cause = read((name, "\n".join(lines))).root_cause
    assert cause is not None and cause.id == "store-connect-failed", cause


def test_must_not_srun_s_lines_in_another_file_order_the_tasks_output() -> None:
    name, text = case(SRUN)
    ends = [line for line in text.splitlines() if line.startswith("srun: ")]
    tasks = [line for line in text.splitlines() if not line.startswith("srun: ")]
    cause = read(("srun.err", "\n".join(ends)), (name, "\n".join(tasks))).root_cause
    assert cause is not None and cause.id == "store-connect-failed", cause
