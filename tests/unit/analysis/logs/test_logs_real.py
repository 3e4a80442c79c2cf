"""``ncclcheck logs`` on logs made here by real torchrun/gloo failures, and fuzzing that it never raises."""

from __future__ import annotations

import pytest
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all

LOGS = FIXTURES / "nccl_logs"


def real_lines() -> list[str]:
    if not LOGS.is_dir():
        return ["host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"]
    return [line for p in sorted(LOGS.glob("*.log")) for line in p.read_text(errors="replace").splitlines() if line][
        :400
    ]


REAL = real_lines()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_random_bytes_never_raise(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    analyse(frame_all(text.splitlines(keepends=True), "fuzz"))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(REAL), min_size=1, max_size=20), st.integers(1, 120), st.integers(0, 200))
def test_truncated_and_rewrapped_real_lines_never_raise(lines: list[str], width: int, cut: int) -> None:
    text = "\n".join(lines)[cut:]
    wrapped = [text[i : i + width] + "\n" for i in range(0, len(text), width)]
    analyse(frame_all(wrapped, "fuzz"))


@pytest.mark.parametrize("width", [80, 100, 120])
def test_hard_wrapped_lines_are_rejoined(width: int) -> None:
    line = (
        "node1:2345:2399 [3] NCCL INFO NET/IB : Got completion from peer 10.1.2.3<44206> with status=12 opcode=129"
        " len=65536 vendor err 129 (Recv) localGid ::ffff:10.1.2.4 remoteGids::ffff:10.1.2.3"
    )
    wrapped = [line[i : i + width] + "\n" for i in range(0, len(line), width)]
    report = analyse(frame_all(["node1:2345:2345 [3] NCCL INFO Using network IB\n", *wrapped], "wrapped.log"))
    assert report.root_cause is not None and report.root_cause.id == "ib-retry-exceeded"
    assert "10.1.2.3" in report.root_cause.message


def test_torchrun_naming_an_echo_as_first_failure_is_corrected() -> None:
    # torchrun's timestamps are whole seconds and ties go to the lowest rank: here it names rank 0,
    # which raised because rank 2 was SIGKILLed in the same second. (Real 2.13 summary, ranks swapped.)
    summary = """\
Failures:
[1]:
  time      : 2026-11-21_08:20:42
  host      : gpu-7
  rank      : 2 (local_rank: 2)
  exitcode  : -9 (pid: 24370)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 24370
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_08:20:42
  host      : gpu-7
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 24369)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
=======================================================
"""
    report = analyse(frame_all(summary.splitlines(), "torchrun.log"))
    assert report.root_cause is not None and report.root_cause.id == "child-failed"
    assert report.root_cause.ranks == (2,)
    assert report.root_cause.message == (
        "torchrun: rank 2 on gpu-7 was killed (signal SIGKILL); rank(s) 0 failed too; torchrun's"
        ' "first observed failure" names rank 0 (exit code 1), an echo of it; SIGKILL is not a crash: the host\'s OOM'
        " killer, a kill from outside (kill -9, the scheduler) or the rank's own code sent it, and these logs cannot"
        " tell which (`dmesg -T` on gpu-7 names an OOM kill)"
    )
