"""``run``'s verdict on ranks that aborted (SIGABRT): at exit on a gloo job, or mid-work on NCCL (the logs' own words)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.run.verdict import aborted_at_exit, verdict
from ncclcheck.collectors.logfiles import sources
from ncclcheck.model.log_report import LogReport
from ncclcheck.sources.logs import diagnose

AT_EXIT = FIXTURES / "launch" / "gloo_abort_at_exit.log"  # real: see fixtures/launch/INDEX.md
# a real launcher summary: every rank SIGABRT, ProcessGroupNCCL's abort (fixtures/nccl_logs/INDEX.md, 49)
NCCL_ABORTS = FIXTURES / "nccl_logs" / "49_torchrun-childfailederror-multi-failures.log"
# a real NCCL watchdog's own terminate: "terminate called after throwing an instance of 'c10::DistBackendError'"
NCCL_TERMINATE = FIXTURES / "nccl_logs" / "45_terminate-distbackenderror_watchdog-thread-terminated.log"


def read(path: Path) -> LogReport:
    return diagnose(sources([str(path)]))


def test_a_gloo_job_whose_ranks_abort_at_exit_is_said_so_with_its_backend() -> None:
    report = read(AT_EXIT)
    found = aborted_at_exit(report, ("gloo",))
    assert found is not None and found.culprits == (0, 1) and found.ranks == (0, 1)
    assert "aborted (SIGABRT) at exit with no error before it" in found.message
    assert "the job used gloo, not NCCL" in found.message and "finished their work" in found.message
    assert "destroy_process_group()" in found.fix and "join" in found.fix
    assert all("terminate called without an active exception" in e.text for e in found.evidence)
    result, extra = verdict(1, False, (), report, None, (), found)
    assert (result.status, result.root_cause, result.ranks) == ("fail", "aborted-at-exit", (0, 1))
    assert "ProcessGroupNCCL" not in result.message and extra == (found,)


@pytest.mark.parametrize(
    ("path", "backends", "why"),
    [
        (AT_EXIT, ("nccl",), "an NCCL job's abort may be its watchdog's, mid-work: the logs' words stay"),
        (AT_EXIT, ("gloo", "nccl"), "one NCCL group is enough for its watchdog to abort the rank"),
        (AT_EXIT, (), "no backend recorded (--no-control): not known to be gloo"),
        (NCCL_ABORTS, ("nccl",), "ProcessGroupNCCL's abort of every rank"),
        (NCCL_ABORTS, ("gloo",), "no terminate line says std::terminate was called outside an exception"),
        (NCCL_TERMINATE, ("gloo",), "the terminate came with an exception: that error is the cause"),
    ],
)
def test_not_an_abort_at_exit(path: Path, backends: tuple[str, ...], why: str) -> None:
    assert aborted_at_exit(read(path), backends) is None, why


def test_an_nccl_abort_mid_work_keeps_the_logs_words() -> None:
    report = read(NCCL_ABORTS)
    result, _ = verdict(1, False, (), report, None, (), aborted_at_exit(report, ("nccl",)))
    assert report.root_cause is not None and result.message == report.root_cause.message
    assert "ProcessGroupNCCL's abort" in report.root_cause.fix


def test_an_error_before_the_abort_is_its_cause(tmp_path: Path) -> None:
    log = tmp_path / "launcher.log"
    lines = AT_EXIT.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:12]) + "[rank0]: RuntimeError: the loss is nan\n" + "".join(lines[12:]))
    assert aborted_at_exit(read(log), ("gloo",)) is None
