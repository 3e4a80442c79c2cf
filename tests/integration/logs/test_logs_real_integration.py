"""``ncclcheck logs`` on logs made here by real torchrun/gloo failures: gloo's own errors, a killed rank,
a killed store host."""

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
from conftest import WORKERS

from ncclcheck.cli import main


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
