"""``ncclcheck watch --once --json`` against real stuck (and healthy) torchrun/gloo jobs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from ncclcheck.cli import main
from ncclcheck.collectors import sampler
from ncclcheck.collectors.jobs import discover
from ncclcheck.collectors.pyspy import dump_all
from ncclcheck.collectors.watch_source import LauncherSource
from ncclcheck.tui.app import RankTable, WatchApp

WORKERS = Path(__file__).parent / "workers"
SOURCE = (WORKERS / "watch_job.py").read_text().splitlines()
FAST = ["--stall", "1.5", "--settle", "3.5", "--interval", "0.5"]


def at(statement: str, nth: int = 0) -> str:
    """``watch_job.py:N`` of the nth line holding ``statement``."""
    numbers = [i for i, line in enumerate(SOURCE, 1) if statement in line]
    return f"watch_job.py:{numbers[nth]}"


class RealJob:
    def __init__(self, mode: str, log: Path) -> None:
        self.log = log
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
               "--monitor-interval=600", str(WORKERS / "watch_job.py")]  # fmt: skip
        with log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "MODE": mode},
                                         start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 90
        while not all(f"ready {r}" in log.read_text(errors="replace") for r in (0, 1)):
            assert self.proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)

    def rank_pid(self, rank: int) -> int:
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            if child.environ().get("RANK") == str(rank):
                return child.pid
        raise AssertionError(f"no rank {rank}")

    def stop(self) -> None:
        """torchrun puts its workers in their own sessions: kill them by name, not by process group."""
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        for child in children:
            try:
                child.send_signal(signal.SIGCONT)
                child.kill()
            except psutil.NoSuchProcess:
                pass
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        psutil.wait_procs(children, timeout=10)
        assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE], "orphan ranks left"


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Any]:
    started: list[RealJob] = []

    def start(mode: str) -> RealJob:
        started.append(RealJob(mode, tmp_path / f"{mode}.log"))
        return started[-1]

    yield start
    for j in started:
        j.stop()


def watch(job: RealJob, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["watch", "--once", "--json", "--pid", str(job.proc.pid), *FAST])
    return code, json.loads(capsys.readouterr().out)


def kinds(report: dict[str, Any]) -> dict[str, list[int]]:
    return {f["kind"]: f["ranks"] for f in report["findings"]}


def test_op_mismatch(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = watch(job("op"), capsys)
    assert code == 1 and kinds(report) == {"mismatch": [1]}
    assert report["schema"] == "ncclcheck.watch/1" and report["job"]["world_size"] == 2
    by_rank = {r["rank"]: r for r in report["ranks"]}
    assert by_rank[0]["collective"] == "all_reduce" and by_rank[1]["collective"] == "broadcast"
    assert by_rank[0]["call_site"] == f"{WORKERS / at('    dist.all_reduce(t)')} (train_step)"
    assert by_rank[0]["stack"] and by_rank[0]["since_s"] >= 1.5
    assert f"rank 0 waits in all_reduce at {at('    dist.all_reduce(t)')}" in report["findings"][0]["message"]


def test_order_mismatch(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = watch(job("order"), capsys)
    assert code == 1 and kinds(report) == {"mismatch": [1]}
    message = report["findings"][0]["message"]
    assert (
        f"all_reduce at {at('dist.all_reduce(t)', 2)}" in message
        and f"broadcast at {at('dist.broadcast(t, 0)', 2)}" in message
    )


def test_straggler_in_user_code(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = watch(job("straggler"), capsys)
    assert code == 1 and kinds(report) == {"straggler": [1]}
    expected = f"rank 1 is not in any collective: it has been in slow_batch at {at('time.sleep(3600)')}"
    assert expected in report["findings"][0]["message"]


def test_stopped_rank_is_dead(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    j = job("op")
    pid = j.rank_pid(1)
    os.kill(pid, signal.SIGSTOP)
    code, report = watch(j, capsys)
    found = kinds(report)
    assert code == 1 and found["dead"] == [1]
    assert f"kill -CONT {pid}" in next(f["message"] for f in report["findings"] if f["kind"] == "dead")
    assert {r["rank"]: r["status"] for r in report["ranks"]}[1] == "stopped"


def test_killed_rank_is_dead(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    j = job("wait")
    os.kill(j.rank_pid(1), signal.SIGKILL)
    code, report = watch(j, capsys)
    assert code == 1 and kinds(report)["dead"] == [1]
    assert {r["rank"]: r["status"] for r in report["ranks"]}[1] in ("zombie", "gone", "missing")


def test_healthy_job_has_no_finding(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = watch(job("healthy"), capsys)
    assert code == 0 and report["findings"] == [], report
    assert {r["status"] for r in report["ranks"]} <= {"running", "sleeping"}


def test_no_job_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "--once", "--json", "--pid", str(os.getpid())]) == 3
    assert "no pid" in capsys.readouterr().err


def test_launcher_source_shows_real_ranks_in_the_app(job: Any) -> None:
    """What ``smoke --tui`` runs: the app over the ranks under a launcher, found once they exist."""
    j = job("healthy")
    source = LauncherSource(j.proc.pid, 2, 10.0)
    app = WatchApp(source, 0.3)

    async def drive() -> None:
        async with app.run_test(size=(150, 30)):
            for _ in range(300):
                if app.shown is not None and app.query_one(RankTable).row_count == 2:
                    break
                await asyncio.sleep(0.05)
            assert app.shown is not None and {v.sample.pid for v in app.shown.ranks} == {j.rank_pid(0), j.rank_pid(1)}
            assert "no problem seen" in str(app.query_one("#findings").render())

    asyncio.run(drive())


@pytest.mark.parametrize(("mode", "most"), [("healthy", 3), ("op", 8)])
def test_ranks_whose_io_moves_are_dumped_less_often(
    job: Any, monkeypatch: pytest.MonkeyPatch, mode: str, most: int
) -> None:
    """A healthy gloo job's ranks move bytes between samples: their stacks are refreshed every REFRESH-th
    sample only. Ranks stuck in a collective move nothing and are dumped at every sample."""
    j = job(mode)
    dumped: list[int] = []

    def counting(pids: list[int], *args: Any) -> Any:
        dumped.extend(pids)
        return dump_all(pids, *args)

    monkeypatch.setattr(sampler, "dump_all", counting)
    s = sampler.Sampler(discover(j.proc.pid)[0])
    snapshots = []
    for _ in range(8):
        snapshots.append(s.sample())
        time.sleep(0.3)
    for rank in (0, 1):
        pid = j.rank_pid(rank)
        assert (dumped.count(pid) <= most) and (dumped.count(pid) >= (8 if mode == "op" else 2)), dumped
        assert all(snap.samples[rank].stack for snap in snapshots)  # a kept stack is still shown


def test_native_frames_show_where_the_collective_waits(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """--native adds the C++ frames under the collective (c10d's Work::wait) and changes nothing else."""
    j = job("op")
    code = main(["watch", "--once", "--json", "--native", "--pid", str(j.proc.pid), *FAST])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and kinds(report) == {"mismatch": [1]}
    rank0 = next(r for r in report["ranks"] if r["rank"] == 0)
    native = [f for f in rank0["stack"] if f["native"]]
    assert native and any(".so" in f["file"] for f in native), rank0["stack"]
    assert rank0["collective"] == "all_reduce"
    assert rank0["call_site"] == f"{WORKERS / at('    dist.all_reduce(t)')} (train_step)"


def test_native_without_stacks_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "--once", "--native", "--no-stacks"]) == 2
    assert "--native needs stacks" in capsys.readouterr().err
