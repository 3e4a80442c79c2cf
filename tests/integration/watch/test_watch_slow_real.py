"""Fail-slow on real torchrun/gloo jobs (tests/workers/slow_job.py): ``watch --once`` names the rank the others wait
for, and names nobody in a balanced job, one whose steps vary together, one checkpoint, or a compile's first step.
Speed (seconds to name it, over repeated runs; the watched job's slowdown) lives in benchmarks/bench_slow.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKERS
from test_watch_real import RealJob, kinds, the

from ncclcheck.cli import main

pytestmark = pytest.mark.integration

SCRIPT = WORKERS / "slow_job.py"
SOURCE = SCRIPT.read_text().splitlines()


def at(statement: str) -> str:
    return f"slow_job.py:{next(i for i, line in enumerate(SOURCE, 1) if statement in line)}"


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Any]:
    started: list[RealJob] = []

    def start(mode: str, nproc: int = 3, **env: str) -> RealJob:
        env = {"WORK": "sleep", **env}  # a step's compute asleep: the suite beside it keeps its cores
        started.append(RealJob(mode, tmp_path / f"{mode}.log", nproc=nproc, env=env, script=SCRIPT))
        return started[-1]

    yield start
    for j in started:
        j.stop()


def watch(j: RealJob, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    code = main(["watch", "--once", "--json", "--pid", str(j.proc.pid), "--stall", "30", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_a_rank_three_times_slower_in_compute_is_named(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --settle, watch answers as soon as the shares can be compared (about 10 s). Its compute busy: the
    message says so."""
    code, report = watch(job("compute", FACTOR="3", WORK="busy"), capsys)
    assert code == 1 and kinds(report) == {"slow-rank": [2]}, (report["verdict"], report["findings"])
    f = the(report, "slow-rank")
    assert f["message"].startswith(
        f"rank 2 holds the others back: ranks 0-1 wait for it in all_reduce at {at('dist.all_reduce(t)')}"
    )
    inside = {at("while time.monotonic() < end"), at("x = torch.tanh(x @ x.T / 64)")}  # its loop's two lines
    assert any(f"in compute() at {line} (busy" in f["message"] for line in inside), f["message"]
    assert f["roles"] == {"2": "slow", "0": "waiting", "1": "waiting"}
    shares = {s["rank"]: s for s in report["shares"]}
    assert shares[2]["wait"] < 0.2 < shares[0]["wait"] and shares[2]["deviation"] < -0.2
    assert report["verdict"] == {"status": "warning", "message": "! slow-rank: see the findings"}


def test_a_rank_waiting_on_its_data_loader_is_named_idle(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = watch(job("data", FACTOR="3"), capsys)
    assert code == 1 and kinds(report) == {"slow-rank": [2]}, (report["verdict"], report["findings"])
    f = the(report, "slow-rank")
    # the call site is the user's innermost frame: the dataset's __getitem__, where the time goes
    assert f"waiting for its DataLoader at {at('time.sleep(self.seconds)')} (idle" in f["message"]
    assert "num_workers" in f["fix"]


def test_two_slow_ranks_of_eight_are_both_named(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = watch(job("compute", nproc=8, FACTOR="3", SLOW_RANKS="3,6", STEP_S="0.2"), capsys)
    assert code == 1 and kinds(report) == {"slow-rank": [3, 6]}, (report["verdict"], report["findings"])


def test_a_job_that_no_rank_holds_back_has_no_finding(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """One job with all three (each alone in tests/unit/analysis/watch/test_watch_slow.py): rank 2's first step takes 4 s longer (a
    compile) while the others wait; then every rank's step time changes each step, the same on all; and rank 0
    writes a checkpoint once, for 3 s, 5 s in."""
    env = {"SLOW_RANKS": "2", "WARMUP_S": "4", "CKPT_AFTER": "5", "CKPT_S": "3"}
    code, report = watch(job("mixed", **env), capsys, "--settle", "14")
    assert report["findings"] == [], (report["verdict"], report["findings"])
    # over a window this short the compile and the checkpoint still show in the pooled shares: at most "may hold
    # them back, not proven" (pending), never a finding
    # (on a loaded machine the rounds may not yet cover 4 parts of the window: "too soon to tell", never a finding)
    verdict = report["verdict"]
    said = ("none holds the others back", "too soon to tell", "not proven over the window yet")
    assert verdict["status"] in ("ok", "pending") and any(s in verdict["message"] for s in said), verdict
    assert code == (4 if verdict["status"] == "pending" else 0)  # pending is no pass: the evidence did not decide


# A slow node of two: the test hosts (own network, PID, mount and UTS namespaces), watched from outside both.


@pytest.mark.xdist_group("agents_and_test_hosts")
def test_a_node_whose_ranks_are_all_slow_is_named_as_the_node(tmp_path: Path) -> None:
    from netns import two_hosts

    with two_hosts("10.79.20") as hosts:
        logs = [tmp_path / f"node{i}.log" for i in (0, 1)]
        for i, host in enumerate(hosts):
            env = {**os.environ, "MODE": "compute", "SLOW_RANKS": "2,3", "GLOO_SOCKET_IFNAME": "eth0", "WORK": "sleep"}
            cmd = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                f"--node-rank={i}",
                "--nproc-per-node=2",
                "--master-addr=node0",
                "--master-port=29561",
                "--monitor-interval=600",
                str(SCRIPT),
            ]
            host.popen(cmd, env=env, stdout=logs[i].open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while sum(log.read_text(errors="replace").count("ready") for log in logs) < 4:
            assert time.monotonic() < deadline, "\n".join(log.read_text(errors="replace") for log in logs)
            time.sleep(0.2)
        each = " ".join(str(h.pid1) for h in hosts)
        fanout = f"for t in {each}; do nsenter -t $t -n -p -m -u -- {{}} & done; wait"
        done = subprocess.run(
            [sys.executable, "-m", "ncclcheck", "watch", "--fanout", fanout, "--once", "--json", "--stall", "30"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    report = json.loads(done.stdout)
    assert done.returncode == 1 and kinds(report) == {"slow-node": [2, 3]}, (report["verdict"], report["findings"])
    assert the(report, "slow-node")["message"].startswith("node node1 (ranks 2-3) holds the others back")


def test_a_rank_whose_main_thread_does_not_run_is_not_recorded_again() -> None:
    """A process whose main thread is blocked (as a rank in a collective is: here a plain sleep, which starts in a
    moment): after one round that shows it never ran, its rounds are that stack again, at the cost of /proc reads
    (no py-spy). (A process that runs is recorded every round: the tests above need it.)"""
    from ncclcheck.collectors.recorder import Recorder

    code = "import time\nprint('ready', flush=True)\ntime.sleep(600)\n"
    blocked = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert blocked.stdout is not None and blocked.stdout.readline().strip() == "ready"
        time.sleep(1)  # asleep by now (a loaded machine may still run it a moment after the print)
        recorder = Recorder([blocked.pid]).start()
        time.sleep(7.5)
        recorder.close()
        rounds = recorder.take().get(blocked.pid, ())
    finally:
        blocked.kill()
        blocked.wait()
    # one record shows it never ran (two where it still ran a moment in the first); after that, none
    assert recorder.recorded <= 2 and len(rounds) >= 3 and recorder.recorded < len(rounds), rounds
    assert all(len(r.stacks) == 1 and r.main_cpu_s == 0.0 for r in rounds[1:]) and rounds[1].stacks == rounds[-1].stacks
    assert rounds[-1].stacks[0][0][0].line == 3  # time.sleep(600), the <module> frame's line
