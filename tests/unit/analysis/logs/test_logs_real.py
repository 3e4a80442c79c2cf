"""``ncclcheck logs`` on logs made here by real torchrun/gloo failures, and fuzzing that it never raises."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, WORKERS
from hypothesis import given, settings
from hypothesis import strategies as st

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.cli import main

LOGS = FIXTURES / "nccl_logs"


def failing_run(tmp_path: Path, worker: str, *torchrun: str) -> Path:
    """Run ``worker`` on gloo ranks (2 unless told) under torchrun; its console output, as a user would save it."""
    log = tmp_path / f"{worker}.log"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        *(torchrun or ["--nproc-per-node=2"]),
        str(WORKERS / f"{worker}.py"),
    ]
    with log.open("wb") as out:
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=120, check=False).returncode
    assert code != 0, log.read_text()
    return log


def diagnose(log: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["logs", "--json", str(log)])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("worker", "cause", "also"),
    [
        ("crash", "python-exception", {"child-failed"}),
        ("mismatch", "collective-mismatch", {"child-failed"}),
        ("ddp_unused", "ddp-unused-parameters", {"child-failed"}),
    ],
)
def test_real_gloo_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], worker: str, cause: str, also: set[str]
) -> None:
    code, report = diagnose(failing_run(tmp_path, worker), capsys)
    assert code == 1 and report["verdict"]["root_cause"] == cause
    assert {f["id"] for f in report["findings"]} >= {cause} | also
    if worker == "crash":
        assert report["verdict"]["ranks"] == [1] and "worker bug on rank 1" in report["verdict"]["message"]
        child = next(f for f in report["findings"] if f["id"] == "child-failed")
        assert child["ranks"] == [1]


@pytest.mark.integration
def test_a_killed_rank_is_the_root_cause_not_its_peers_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Rank 2 is SIGKILLed; ranks 0 and 1 then raise gloo's "Connection closed/reset by peer".
    log = failing_run(tmp_path, "oom_killed", "--nproc-per-node=3", "--monitor-interval=3")
    code, report = diagnose(log, capsys)
    assert code == 1 and report["verdict"]["root_cause"] == "child-failed" and report["verdict"]["ranks"] == [2]
    child = next(f for f in report["findings"] if f["id"] == "child-failed")
    assert "rank 2 on localhost" in child["message"] and "SIGKILL" in child["message"] and "OOM killer" in child["fix"]
    peers = next(f for f in report["findings"] if f["id"] == "peer-crashed")
    assert peers["severity"] == "error" and set(peers["ranks"]) <= {0, 1}
    assert "python-exception" not in {f["id"] for f in report["findings"]}


def _wait_for(path: Path, text: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while text not in path.read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, path.read_text(errors="replace")
        time.sleep(0.05)


@pytest.mark.integration
def test_store_host_killed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An env:// job (no torchrun): SIGKILL rank 0, which hosts the TCPStore, while rank 1 waits on the store."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    logs = [tmp_path / f"rank{r}.log" for r in range(2)]
    procs = []
    for rank, log in enumerate(logs):
        with log.open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(WORKERS / "store_host.py")],
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**env, "RANK": str(rank)},
                )
            )
    try:
        _wait_for(logs[1], "waiting on the store", procs[1])
        procs[0].send_signal(signal.SIGKILL)
        assert procs[1].wait(timeout=60) != 0
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    code = main(["logs", "--json", str(tmp_path)])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["verdict"]["root_cause"] == "store-connection-lost"
    assert report["verdict"]["ranks"] == [1]
    assert f"127.0.0.1:{port}" in report["verdict"]["message"]


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
