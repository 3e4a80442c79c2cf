"""The gpu tier: real NCCL on a real GPU (deselected where there is none; `make gpu-check` runs it on a lent GPU).
Two ranks share the one GPU under different NCCL_HOSTIDs (tests/workers/nccl_gpu.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import WORKERS

WORKER = WORKERS / "nccl_gpu.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(WORKER)]

pytestmark = [pytest.mark.gpu, pytest.mark.integration]


def run_hang(tmp_path: Path, mode: str) -> tuple[int, dict[str, object]]:
    env = {**os.environ, "MODE": mode, "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}
    argv = [
        sys.executable,
        "-m",
        "ncclcheck",
        "run",
        "--dir",
        str(tmp_path / "run"),
        "--stall",
        "6",
        "--on-hang",
        "exit",
    ]
    done = subprocess.run([*argv, "--", *TORCHRUN], env=env, capture_output=True, text=True, timeout=150, check=False)
    return done.returncode, json.loads((tmp_path / "run" / "report.json").read_text())


def test_a_healthy_nccl_job_on_one_gpu_passes(tmp_path: Path) -> None:
    code, report = run_hang(tmp_path, "healthy")
    assert code == 0 and report["verdict"]["status"] == "pass", report["verdict"]  # type: ignore[index]


def test_a_rank_that_sleeps_before_its_collective_is_named_while_the_other_waits_at_a_cuda_sync(tmp_path: Path) -> None:
    started = time.monotonic()
    code, report = run_hang(tmp_path, "before")
    verdict = report["verdict"]
    assert code != 0 and verdict["ranks"] == [1], verdict  # type: ignore[index]
    assert time.monotonic() - started < 120


def test_every_rank_at_a_cuda_sync_after_a_skipped_collective_names_nobody_wrongly(tmp_path: Path) -> None:
    code, report = run_hang(tmp_path, "skip")
    verdict = report["verdict"]
    assert code != 0 and verdict["status"] == "hang", verdict  # type: ignore[index]
    assert verdict["ranks"] in ([], [1]), verdict  # type: ignore[index]  # rank 1 skipped it: never rank 0 alone
