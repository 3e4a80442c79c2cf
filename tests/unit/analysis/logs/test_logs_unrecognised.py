"""The safety net: an error line no rule explains is reported as unrecognised, and the logs are never "pass"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.cli import main

HEALTHY = [
    "node1:2211:2211 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
    "node1:2211:2211 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE",
    "step 100 | loss 2.31 | no error so far",  # lowercase: not an alarm
    "WARNING:torch.distributed.run: Setting OMP_NUM_THREADS environment variable for each process to be 1",
]


def ids(lines: list[str]) -> dict[str, list[str]]:
    report = analyse(frame_all(lines, "x.log"))
    return {f.id: [e.text for e in f.evidence] for f in report.findings}


@pytest.mark.parametrize(
    "line",
    [
        "node1:2211:2299 [0] transport/net_ofi.cc:812 NCCL WARN NET/OFI Unknown provider failure -28 (a new message)",
        "[cosmos] 2026-05-14 05:28:06,261 - cosmos - ERROR - Process 1 failed with return code 1",
        "FATAL: the checkpoint writer lost its lease",
        "terminate called without an active exception",
    ],
)
def test_an_error_line_no_rule_explains_is_reported(
    line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    found = ids([*HEALTHY, line])
    assert (
        list(found) == ["unrecognised-error"] and line.split(" NCCL WARN ")[-1][:40] in found["unrecognised-error"][0]
    )
    (tmp_path / "x.log").write_text("\n".join([*HEALTHY, line]) + "\n")
    assert main(["logs", "--json", str(tmp_path / "x.log")]) == 4
    verdict = json.loads(capsys.readouterr().out)["verdict"]
    assert verdict["status"] == "unknown"


def test_a_healthy_log_and_the_context_of_known_errors_raise_nothing() -> None:
    assert ids(HEALTHY) == {}
    traceback = [
        "Traceback (most recent call last):",
        '  File "train.py", line 12, in <module>',
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 (most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f in libc10.so)",
        "train.py FAILED",
    ]
    assert "unrecognised-error" not in ids(traceback)


def test_an_unrecognised_line_beside_a_known_error_keeps_the_known_cause() -> None:
    lines = [*HEALTHY, "node1:2211:2299 [0] NCCL WARN Something nobody has seen", "ValueError: bad batch"]
    report = analyse(frame_all(lines, "x.log"))
    assert report.root_cause is not None and report.root_cause.id == "python-exception"
    assert report.status == "fail" and report.unrecognised
