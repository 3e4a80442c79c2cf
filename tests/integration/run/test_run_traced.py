"""A rank held under ptrace for a moment by someone else's sampler (``py-spy dump --native`` while ``ncclcheck run``
watches) is not the culprit of the job's hang.

Seen live on an H100 (``make gpu-check``'s p2p case, tests/fixtures/gpu_check/p2p): gpu_check's own py-spy dumps
held rank 0 for two of run's samples, and run's verdict was "rank 0 is stopped (SIGSTOP, or held by a debugger)"
over a send/recv deadlock. The same job here on gloo, with py-spy holding rank 0 again and again for the
first 4 s of the deadlock."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import WORKERS

pytestmark = pytest.mark.integration

WORKER = WORKERS / "nccl_gpu.py"


def ranks_of(run: subprocess.Popen[bytes], tmp: Path) -> list[int]:
    """This test's ranks (their environment names its run dir), their pids in rank order."""
    try:
        kids = psutil.Process(run.pid).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for p in kids:
        try:
            line, environ = " ".join(p.cmdline()), p.environ()
            if "nccl_gpu.py" in line and "torch.distributed.run" not in line and str(tmp) in str(environ):
                found.append((int(environ.get("RANK", "-1")), p.pid))
        except (psutil.Error, ValueError):
            continue
    return [pid for _, pid in sorted(found)]


def test_a_send_recv_deadlock_is_named_while_a_sampler_holds_a_rank(tmp_path: Path) -> None:
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(pyspy).exists():
        pytest.skip("py-spy is not installed")
    env = {**os.environ, "MODE": "p2p", "BACKEND": "gloo", "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "ncclcheck", "run", "--dir", str(tmp_path / "run"), "--stall", "6"]
    argv += ["--on-hang", "exit", "--", sys.executable, "-m", "torch.distributed.run", "--standalone"]
    argv += ["--nproc-per-node=2", "--monitor-interval=0.5", str(WORKER)]
    out = (tmp_path / "out").open("wb")
    run = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        ranks: list[int] = []
        while len(ranks) < 2 and run.poll() is None:
            ranks = ranks_of(run, tmp_path)
            time.sleep(0.1)
        while run.poll() is None and (tmp_path / "out").read_text(errors="replace").count("ready ") < 2:
            time.sleep(0.05)
        held, began = 0, time.monotonic()
        while run.poll() is None and time.monotonic() - began < 4:  # rank 0 held under ptrace, a dump at a time
            subprocess.run([pyspy, "dump", "--native", "--pid", str(ranks[0])], capture_output=True, check=False)
            held += 1
        code = run.wait(120)
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(30)
        out.close()
    verdict = json.loads((tmp_path / "run" / "report.json").read_text())["verdict"]
    said = (tmp_path / "out").read_text(errors="replace")
    assert held > 0, said
    assert code != 0 and verdict["status"] == "hang", verdict
    assert "stopped" not in verdict["message"] and "held" not in verdict["message"], verdict
    assert "cycle" in verdict["message"] and verdict["ranks"] == [0, 1], verdict


def test_ranks_that_spin_where_the_stacks_cannot_tell_are_decided_by_their_live_flight_recorders(
    tmp_path: Path,
) -> None:
    """Rank 0 busy-polls its async all_reduce, rank 1 computes in a loop before it: both main threads busy at one
    line (NCCL's host thread spins so in a CUDA synchronisation: gpu_check's sleep case, where run saw no hang in
    45 s). The stacks cannot tell; the ranks' Flight Recorders (run's control plane) say rank 1 never issued it."""
    env = {**os.environ, "MODE": "poll", "BACKEND": "gloo", "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "ncclcheck", "run", "--dir", str(tmp_path / "run"), "--stall", "6"]
    argv += ["--on-hang", "exit", "--", sys.executable, "-m", "torch.distributed.run", "--standalone"]
    argv += ["--nproc-per-node=2", "--monitor-interval=0.5", str(WORKER)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=150, check=False)
    verdict = json.loads((tmp_path / "run" / "report.json").read_text())["verdict"]
    assert done.returncode != 0 and verdict["status"] == "hang", (verdict, done.stdout[-2000:])
    assert verdict["ranks"] == [1] and verdict["root_cause"] == "fr-not-joined", verdict


def test_a_hang_seen_again_after_a_sampler_let_a_rank_go_is_one_record(tmp_path: Path) -> None:
    """--on-hang watch: the hang is recorded; then py-spy holds the rank that sleeps (no verdict while it is held)
    and lets it go: the same hang is seen again, and it stays one record."""
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(pyspy).exists():
        pytest.skip("py-spy is not installed")
    env = {**os.environ, "MODE": "before", "BACKEND": "gloo", "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "ncclcheck", "run", "--dir", str(tmp_path / "run"), "--stall", "6", "--interval"]
    argv += ["1", "--", sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    argv += ["--monitor-interval=0.5", str(WORKER)]
    hangs = tmp_path / "run" / "hangs"
    run = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        while run.poll() is None and not (hangs.is_dir() and any(hangs.glob("*.json"))):
            time.sleep(0.2)
        ranks = ranks_of(run, tmp_path)
        assert len(ranks) == 2 and run.poll() is None
        began = time.monotonic()
        while time.monotonic() - began < 4:  # rank 1 (the one that sleeps) held under ptrace again and again
            subprocess.run([pyspy, "dump", "--native", "--pid", str(ranks[1])], capture_output=True, check=False)
        seen = time.monotonic()
        while time.monotonic() - seen < 8 and run.poll() is None:  # let go: the hang is judged again
            time.sleep(0.5)
    finally:
        run.send_signal(signal.SIGINT)
        run.wait(60)
    assert len(list(hangs.glob("*.json"))) == 1, sorted(p.name for p in hangs.glob("*.json"))
