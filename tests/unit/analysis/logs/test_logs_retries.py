"""NCCL before 2.12 prints "Call to connect returned ..., retrying" while it retries a connect (socket.h: once a
second of refusals, at each timed-out try) and "Connect to ... failed" when it gives up. A retry its process completed
an init after was transient (information); one no Init COMPLETE followed is a connection still failing where the
lines end (connect-failed): nccl_logs/26 is such a job, stuck."""

from __future__ import annotations

from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.analysis.logs.nccl import RankFold
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.logs import LogLine

RETRY = "gpu02:1900:1960 [1] NCCL INFO Call to connect returned Connection refused, retrying"
INIT = "gpu02:1900:1960 [1] NCCL INFO comm 0x66bb rank 1 nranks 2 cudaDev 1 busId 19000 commId 0x9f3b - Init COMPLETE"
SUB = "gpu02:1900:1970 [1] NCCL INFO comm 0x77cc rank 0 nranks 1 cudaDev 1 busId 19000 commId 0x9f3c - Init START"


def read(*lines: str) -> LogReport:
    return analyse(frame_all(list(lines), "rank1.log"))


def test_a_retry_its_process_then_completed_an_init_after_is_information() -> None:
    report = read(RETRY, RETRY, INIT, "epoch 0 step 100 loss 2.3012")
    assert report.status == "pass" and report.root_cause is None, report.findings
    assert [f.severity for f in report.findings if f.id == "connect-retried"] == ["info"]


def test_a_retry_no_init_completed_after_is_a_failing_connection() -> None:
    # alone (its rank unknown: no Init line says it), and a later communicator's connect after the first's init
    for lines, ranks in (((RETRY, RETRY), ()), ((INIT, SUB, RETRY), (1,))):
        cause = read(*lines).root_cause
        assert cause is not None and cause.id == "connect-failed" and cause.ranks == ranks, cause
        assert "Connection refused" in cause.message and "never completed its init after" in cause.message
    real = analyse(frame_all((FIXTURES / "nccl_logs" / "26_socket-connect-timed-out-retrying_veth.log").read_text()
                             .splitlines(), "26.log")).root_cause  # fmt: skip
    assert real is not None and real.id == "connect-failed" and "Connection timed out" in real.message


def test_a_retry_and_the_init_after_it_in_two_parts_of_a_big_log_merge_as_one_pass() -> None:
    def fold(texts: tuple[str, ...]) -> RankFold:
        out = RankFold()
        for n, line in enumerate(frame_all(list(texts), "rank1.log"), 1):
            assert isinstance(line, LogLine)
            out.add_line(line.file, n, line.text, line.host, line.pid, line.dev, line.rank)
        return out

    whole = fold((RETRY, RETRY, INIT))
    first, second = fold((RETRY, RETRY)), fold((INIT,))
    first.merge(second, 2)
    assert whole.stuck() == first.stuck() == []
    stuck_first, stuck_second = fold((INIT,)), fold((RETRY,))
    stuck_first.merge(stuck_second, 1)
    assert [(n, t[-30:]) for _, n, t in stuck_first.stuck()] == [
        (2, t[-30:]) for _, _, t in fold((INIT, RETRY)).stuck()
    ]
