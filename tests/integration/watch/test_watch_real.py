"""``ncclcheck watch --once --json`` against real stuck, healthy and finishing torchrun/gloo jobs."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
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
from conftest import WORKERS

from ncclcheck.cli import main
from ncclcheck.collectors import sampler
from ncclcheck.collectors.jobs import discover
from ncclcheck.collectors.progress import read_progress
from ncclcheck.collectors.pyspy import dump_all
from ncclcheck.model.watch import WatchState
from ncclcheck.sources.live import samples
from ncclcheck.sources.smoke import LauncherSource
from ncclcheck.sources.watch import LiveSource
from ncclcheck.tui.app import WatchApp
from ncclcheck.tui.widgets import RankTable

pytestmark = pytest.mark.integration

SOURCE = (WORKERS / "watch_job.py").read_text().splitlines()
FAST = ["--stall", "1.5", "--settle", "3.5", "--interval", "0.5"]


def at(statement: str, nth: int = 0) -> str:
    """``watch_job.py:N`` of the nth line holding ``statement``."""
    numbers = [i for i, line in enumerate(SOURCE, 1) if statement in line]
    return f"watch_job.py:{numbers[nth]}"


class RealJob:
    def __init__(
        self,
        mode: str,
        log: Path,
        nproc: int = 2,
        env: dict[str, str] | None = None,
        launcher: tuple[str, ...] = ("--monitor-interval=600",),
        script: Path = WORKERS / "watch_job.py",
    ) -> None:
        self.log, self.nproc = log, nproc
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            *launcher,
            str(script),
        ]
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "MODE": mode, **(env or {})},
                start_new_session=True,
            )
        self.wait_for(*(f"ready {r}" for r in range(nproc)))

    def wait_for(self, *lines: str, deadline_s: float = 90) -> None:
        deadline = time.monotonic() + deadline_s
        while not all(line in self.log.read_text(errors="replace") for line in lines):
            assert time.monotonic() < deadline, self.log.read_text(errors="replace")
            time.sleep(0.1)

    def rank_pid(self, rank: int) -> int:
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            if child.environ().get("RANK") == str(rank):
                return child.pid
        raise AssertionError(f"no rank {rank}")

    def stop(self) -> None:
        stop_tree(self.proc)


def stop_tree(proc: subprocess.Popen[Any]) -> None:
    """torchrun and mp.spawn put their workers in their own sessions: kill them by tree, not by process group."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    for child in children:
        try:
            child.send_signal(signal.SIGCONT)
            child.kill()
        except psutil.NoSuchProcess:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    psutil.wait_procs(children, timeout=10)
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE], "orphan ranks left"


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Any]:
    started: list[RealJob] = []

    def start(mode: str, **kwargs: Any) -> RealJob:
        started.append(RealJob(mode, tmp_path / f"{mode}-{len(started)}.log", **kwargs))
        return started[-1]

    yield start
    for j in started:
        j.stop()


def watch(job: RealJob, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    code = main(["watch", "--once", "--json", "--pid", str(job.proc.pid), *(extra or FAST)])
    return code, json.loads(capsys.readouterr().out)


def kinds(report: dict[str, Any]) -> dict[str, list[int]]:
    return {f["kind"]: f["culprits"] for f in report["findings"]}


def the(report: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(f for f in report["findings"] if f["kind"] == kind)


# mismatches: the odd rank where a majority exists, nobody on a tie


def test_op_mismatch_with_a_majority_names_the_odd_rank(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """One stuck job looked at three ways: the fast settings, the default --once with --stall 60 (only the quick
    answer can come back before 60 s), and --native (C++ frames under the collective, nothing else changed)."""
    j = job("op", nproc=3)
    code, report = watch(j, capsys)
    assert code == 1 and kinds(report) == {"mismatch": [0]}
    assert the(report, "mismatch")["ranks"] == [0, 1, 2]
    assert report["schema"] == "ncclcheck.watch/2" and report["job"]["world_size"] == 3
    by_rank = {r["rank"]: r for r in report["ranks"]}
    assert by_rank[0]["collective"] == "all_reduce" and by_rank[1]["collective"] == "broadcast"
    assert by_rank[0]["call_site"] == f"{WORKERS / at('    dist.all_reduce(t)')} (train_step)"
    assert by_rank[0]["stack"] and by_rank[0]["since_s"] >= 1.5
    message = the(report, "mismatch")["message"]
    assert (
        f"rank 0 waits in all_reduce at {at('    dist.all_reduce(t)')}" in message
        and "rank 0 is the odd one out" in message
    )
    code, report = watch(j, capsys, "--stall", "60")
    assert code == 1 and kinds(report) == {"mismatch": [0]}
    assert report["window"]["seconds"] < 60 and report["verdict"]["status"] == "problem"
    # a --native dump pauses each rank; on a loaded node one may time out, which is said (unreadable), never blamed;
    # the native frames are waited for as a state (a dump that got through), with a deadline, never for a time
    deadline = time.monotonic() + 120
    while True:
        code, report = watch(j, capsys, "--native", *FAST)
        found = {k: v for k, v in kinds(report).items() if k != "unreadable"}
        # dumps that time out leave it undecided (4) at worst: never a wrong verdict, and looked at again
        assert (code, found) in ((1, {"mismatch": [0]}), (4, {})), (code, report["verdict"], report["findings"])
        rank0 = next(r for r in report["ranks"] if r["rank"] == 0)
        native = [f for f in rank0["stack"] if f["native"]]
        if (code == 1 and native) or time.monotonic() > deadline:
            break
    assert native and any(".so" in f["file"] for f in native), rank0["stack"]
    assert rank0["collective"] == "all_reduce"
    assert rank0["call_site"] == f"{WORKERS / at('    dist.all_reduce(t)')} (train_step)"


def test_two_ranks_in_different_collectives_is_a_tie(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Rank 0 diverged here (all_reduce against broadcast), but with two ranks the stacks cannot tell: both are
    listed, neither is blamed, both call sites are shown, and no row is marked as the culprit."""
    j = job("op")
    code, report = watch(j, capsys)
    mismatch = the(report, "mismatch")
    assert code == 1 and mismatch["ranks"] == [0, 1] and mismatch["culprits"] == []
    assert "cannot tell which side is wrong" in mismatch["message"]
    assert at("    dist.all_reduce(t)") in mismatch["message"] and at("dist.broadcast(t, 0)") in mismatch["message"]
    # without stacks (--no-stacks) the same stuck job is never called healthy
    code, report = watch(j, capsys, "--no-stacks", *FAST)
    assert code == 1 and kinds(report) == {"no-progress": []}
    assert not report["verdict"]["message"].startswith("✓")


def test_order_mismatch(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = watch(job("order"), capsys)
    assert code == 1 and kinds(report) == {"mismatch": []}
    message = the(report, "mismatch")["message"]
    assert (
        f"all_reduce at {at('dist.all_reduce(t)', 2)}" in message
        and f"broadcast at {at('dist.broadcast(t, 0)', 2)}" in message
    )


# a straggler, with and without chatty threads


def test_straggler_in_user_code(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    j = job("straggler")
    code, report = watch(j, capsys)
    assert code == 1 and kinds(report) == {"straggler": [1]}
    expected = (
        f"rank 1, at {at('time.sleep(3600)')} in slow_batch (`time.sleep(3600)`), is not in any collective: it sleeps"
    )
    message = the(report, "straggler")["message"]
    assert (
        message.startswith(f"rank 0 waits in all_reduce at {at('    dist.all_reduce(t)')} for rank 1")
        and expected in message
    )
    assert (
        the(report, "straggler")["end"] == "sleeping"
        and the(report, "straggler")["chain"][1]["code"] == "time.sleep(3600)"
    )
    # --settle shorter than --stall: what stood still through the whole window counts
    code, report = watch(j, capsys, "--stall", "30", "--settle", "2.5", "--interval", "0.5")
    assert code == 1 and kinds(report) == {"straggler": [1]}
    assert 2.5 <= report["window"]["seconds"] < 30 and report["window"]["samples"] >= 2


def test_straggler_found_while_every_rank_logs_from_a_thread(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Rank 2 stuck in its data loader, every rank printing a heartbeat 5 times a second: the heartbeats move
    the processes' I/O, not their main threads, nor their sockets."""
    j = job("straggler", nproc=3, env={"CHATTY": "1"})
    code, report = watch(j, capsys, "--stall", "3", "--settle", "5")
    assert code == 1 and kinds(report) == {"straggler": [2]}
    assert (
        "in slow_batch (`time.sleep(3600)`), is not in any collective: it sleeps" in the(report, "straggler")["message"]
    )
    assert "heartbeat" in j.log.read_text()


@pytest.mark.parametrize("mode", ["healthy", "uneven"])
def test_healthy_jobs_with_chatty_threads_have_no_finding(
    job: Any, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    """uneven: the last rank is 0.8 s slower per step, so the others wait in all_reduce a while every step: no hang,
    but a slow rank, named as such once the shares can be compared (about 8 s of rounds); the healthy job's ranks
    spend most of their time in all_reduce: at most the note that it is communication-bound."""
    code, report = watch(job(mode, env={"CHATTY": "1"}), capsys, "--stall", "3", "--settle", "8", "--interval", "0.5")
    allowed = {"healthy": [("communication-bound", [])], "uneven": [("slow-rank", [1])]}[mode]
    found = [(f["kind"], f["culprits"]) for f in report["findings"]]
    assert all(f in allowed for f in found), report["findings"]
    status = report["verdict"]["status"]
    assert status in ("ok", "pending", "warning") and report["window"]["seconds"] >= 8
    # pending at --settle's end (a slow rank not proven yet) is no pass: exit 4, never 0
    assert code == (1 if found and found[0][0] == "slow-rank" else 4 if status == "pending" else 0)
    assert {r["status"] for r in report["ranks"]} <= {"running", "sleeping"}


def test_default_once_on_a_healthy_job_answers_early(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Early: once every rank moved and the ranks' shares could be compared (about 10 s), not at --stall. The job's
    ranks spend most of their time in all_reduce: at most the note that it is communication-bound."""
    code, report = watch(job("healthy"), capsys, "--stall", "60")
    assert code == 0 and report["verdict"]["status"] == "ok", report["verdict"]
    assert [f["kind"] for f in report["findings"]] in ([], ["communication-bound"]), report["findings"]
    assert "none holds the others back" in report["verdict"]["message"]
    assert report["verdict"]["message"].startswith("✓") and report["window"]["seconds"] < 30


# dead, stopped, finished


def test_stopped_rank_others_wait_on_is_an_error(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    j = job("op")
    pid = j.rank_pid(1)
    os.kill(pid, signal.SIGSTOP)
    code, report = watch(j, capsys)
    dead = the(report, "dead")
    assert code == 1 and dead["culprits"] == [1] and dead["severity"] == "error"
    assert f"kill -CONT {pid}" in dead["message"]
    assert {r["rank"]: r["status"] for r in report["ranks"]}[1] == "stopped"


def test_killed_rank_nobody_waits_on_yet_is_reported_not_dead(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Killed before watching began: its slot is empty, how it ended is not known here; not called dead. Rank 0
    sleeps in user code, not in a collective, and has not moved since: it may wait on rank 1, a warning."""
    j = job("wait")
    os.kill(j.rank_pid(1), signal.SIGKILL)
    code, report = watch(j, capsys)
    exited = the(report, "exited")
    assert code == 1 and exited["severity"] == "warning" and "dead" not in kinds(report)
    assert "rank 0 has not moved" in exited["message"]
    rank1 = {r["rank"]: r for r in report["ranks"]}[1]
    assert rank1["status"] in ("zombie", "gone", "missing")
    # torchrun (--monitor-interval 600) has not reaped it: whether the zombie's exit code could be read decides
    # whether rank 1 is named; either way the finding must say what it knows and blame no one beyond it
    if rank1.get("exit_code") is None:
        assert exited["ranks"] == [0, 1] and exited["culprits"] == [] and "exit code not known" in exited["message"]
    else:
        assert exited["culprits"] == [1] and "was killed by signal 9" in exited["message"]


def test_a_rank_killed_while_watched_is_named_with_its_signal(job: Any) -> None:
    j = job("wait")
    source = LiveSource(discover(j.proc.pid)[0], 10.0)
    state = source.poll()
    os.kill(j.rank_pid(1), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while not any(f.id == "exited" for f in state.findings):
        assert time.monotonic() < deadline, state.verdict
        time.sleep(0.3)
        state = source.poll()
    exited = next(f for f in state.findings if f.id == "exited")
    assert exited.culprits == (1,) and exited.severity == "warning" and "killed by signal 9" in exited.message


def test_a_job_that_finishes_is_finished_not_dead(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """torchrun reaps its ranks and exits, as it does by default: the watch ends with it."""
    j = job("finish", env={"FINISH_AFTER": "3"}, launcher=("--monitor-interval=1",))
    code, report = watch(j, capsys, "--stall", "10", "--settle", "60")  # ends when the job does
    assert code == 0 and kinds(report) == {"finished": []}, report["findings"]
    assert report["verdict"]["status"] == "finished" and report["job"]["launcher_running"] is False
    assert {r["exit_code"] for r in report["ranks"]} <= {0, None}  # 0 where a sample saw the zombie
    assert report["window"]["seconds"] < 60


def test_a_finished_job_with_a_failed_rank_says_which(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A launcher that has not reaped its ranks yet (here: every 600 s): zombies keep their exit codes."""
    j = job("finish", env={"FINISH_AFTER": "3", "FAIL_RANK": "1"})
    code, report = watch(j, capsys, "--stall", "10", "--settle", "12")
    finished = the(report, "finished")
    # every rank ends within a moment: rank 1 first names it, rank 0 (code 0) first cannot tell an early leaver
    assert code == 1 and finished["culprits"] in ([1], []) and "rank 1 exited with code 1" in finished["message"]
    assert "its launcher still runs" in finished["message"]


def test_a_rank_pid_finds_its_siblings(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    j = job("healthy")
    code = main(["watch", "--once", "--json", "--pid", str(j.rank_pid(1)), "--stall", "3", "--settle", "3"])
    report = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in report["ranks"]] == [0, 1] and report["findings"] == []
    assert code == (4 if report["verdict"]["status"] == "pending" else 0)  # pending is no pass
    assert report["job"]["launcher_pid"] == j.proc.pid and report["job"]["script"].endswith("watch_job.py")


def test_several_jobs_are_listed_and_picked_by_prefix(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = job("straggler"), job("healthy")
    ours = [j for j in discover() if j.launcher_pid in (first.proc.pid, second.proc.pid)]
    assert len(ours) == 2
    assert main(["watch", "--once", "--json"]) == 2
    listed = json.loads(capsys.readouterr().out)
    assert listed["schema"] == "ncclcheck.watch-jobs/1"
    mine = {j["id"]: j for j in listed["jobs"] if j["launcher_pid"] in (first.proc.pid, second.proc.pid)}
    assert {j["world_size"] for j in mine.values()} == {2} and all(j["cwd"] and j["started"] for j in mine.values())
    target = next(j for j in ours if j.launcher_pid == first.proc.pid)
    code = main(["watch", "--once", "--json", "--job", target.id[:8], *FAST])
    assert code == 1 and kinds(json.loads(capsys.readouterr().out)) == {"straggler": [1]}
    assert main(["watch", "--once", "--job", "no-such-job"]) == 3


def test_an_mp_spawn_job_is_found_by_its_spawn_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "spawn.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(WORKERS / "spawn_job.py")],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PORT": "29617"},
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while not all(f"ready {r}" in log.read_text(errors="replace") for r in (0, 1)):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        code = main(["watch", "--once", "--json", "--pid", str(proc.pid), *FAST])
        report = json.loads(capsys.readouterr().out)
        assert report["job"]["id"] == f"spawn:{proc.pid}" and report["job"]["found_as"] == "spawn"
        assert code == 1 and kinds(report) == {"straggler": [1]}
        assert "load_batch" in the(report, "straggler")["message"]
    finally:
        stop_tree(proc)


def test_the_live_source_follows_an_elastic_restart(job: Any) -> None:
    j = job("restart", launcher=("--monitor-interval=0.5", "--max-restarts=1"))
    source = LiveSource(discover(j.proc.pid)[0], 10.0)
    before = {r.pid for r in source.job.ranks}
    deadline = time.monotonic() + 90
    state = source.poll()
    while {v.sample.pid for v in state.ranks} & before or any(
        v.sample.status != "sleeping" and v.sample.status != "running" for v in state.ranks
    ):
        assert time.monotonic() < deadline, [(v.rank, v.sample.pid, v.sample.status) for v in state.ranks]
        time.sleep(0.5)
        state = source.poll()
    assert [v.rank for v in state.ranks] == [0, 1] and any("ranks restarted" in n for n in state.notes)
    assert not any(f.id == "dead" for f in state.findings)


def test_no_job_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "--once", "--json", "--pid", str(os.getpid())]) == 3
    assert "no pid" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--stall", "0.5"], "at least 1.5"),
        (["--settle", "nan"], "number of seconds"),
        (["--interval", "0"], "> 0"),
        (["--native", "--no-stacks"], "--native needs stacks"),
    ],
)
def test_usage_errors_say_what_is_wrong(capsys: pytest.CaptureFixture[str], flags: list[str], says: str) -> None:
    assert main(["watch", "--once", *flags]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


# the app over real ranks, and the sampler's cost


def test_launcher_source_shows_every_real_rank_in_the_app(job: Any) -> None:
    """What ``smoke --tui`` runs: the app over the ranks under a launcher, once all of them exist."""
    j = job("healthy", nproc=3)
    source = LauncherSource(j.proc.pid, 3, 10.0)
    app = WatchApp(source, 0.3, samples=samples)

    async def drive() -> None:
        async with app.run_test(size=(150, 30)):
            for _ in range(600):
                if app.shown is not None and app.shown.verdict.status == "ok":
                    break
                await asyncio.sleep(0.05)
            assert app.shown is not None and {v.sample.pid for v in app.shown.ranks} == {
                j.rank_pid(r) for r in range(3)
            }
            assert app.query_one(RankTable).row_count == 3 and app.shown.findings == ()
            assert "no problem seen" in str(app.query_one("#verdict").render())

    asyncio.run(drive())


@pytest.mark.parametrize(("mode", "most", "least"), [("healthy", 3, 2), ("op", 2, 1)])
def test_ranks_whose_sockets_move_are_dumped_less_often(
    job: Any, monkeypatch: pytest.MonkeyPatch, mode: str, most: int, least: int
) -> None:
    """A healthy gloo job's ranks move bytes between samples: their stacks are refreshed every REFRESH-th
    sample only. Ranks blocked in a collective never run (no CPU time, no context switch on the main thread):
    their frames cannot change, so the first dump stands (an 8-rank stuck job costs an agent < 1 % of a core)."""
    j = job(mode)
    dumped: list[int] = []

    def counting(pids: list[int], *args: Any) -> Any:
        dumped.extend(pids)
        return dump_all(pids, *args)

    monkeypatch.setattr(sampler, "dump_all", counting)
    s = sampler.Sampler(discover(j.proc.pid)[0])
    snapshots = []
    try:
        for _ in range(8):
            snapshots.append(s.sample())
            time.sleep(0.3)
    finally:
        s.close()  # its recorder's py-spy rounds end with the test, not in whatever test the worker runs next
    assert s.sockets_readable
    for rank in (0, 1):
        pid = j.rank_pid(rank)
        assert least <= dumped.count(pid) <= most, dumped
        assert all(snap.samples[rank].stack for snap in snapshots)  # a kept stack is still shown
        assert all(snap.samples[rank].net_bytes is not None for snap in snapshots)


@contextlib.contextmanager
def smoke_held_at_rank_1(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``ncclcheck smoke`` on 3 gloo ranks, rank 1 held by the hang drill (timeout 120 s); ended with its tree."""
    cmd = [sys.executable, "-m", "ncclcheck", "smoke", "--nproc", "3", "--backend", "gloo"]
    cmd += [
        "--ops",
        "broadcast,all_reduce",
        "--timeout",
        "120",
        "--drill",
        "hang@1:all_reduce",
        "--log-dir",
        str(tmp_path),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    finally:
        tree = psutil.Process(proc.pid).children(recursive=True)
        for p in tree:
            p.kill()
        stop_tree(proc)
        psutil.wait_procs(tree, timeout=10)
        assert not [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], "orphans left"


def test_smoke_tui_source_waits_for_every_rank_and_never_shows_ok_through_a_hang(tmp_path: Path) -> None:
    """What ``smoke --tui`` shows: all 3 ranks (not the first one found, the rest "missing"), then, with rank 1
    sitting in the hang drill, "watching" until the straggler is judged, never ✓."""
    with smoke_held_at_rank_1(tmp_path) as proc:
        # as `smoke --tui` makes it, with smoke's log dir (its progress files); a --stall of 3 s, to see the straggler
        source = LauncherSource(proc.pid, 3, 3.0, str(tmp_path))
        seen = [source.poll()]
        deadline = time.monotonic() + 120
        while not any(f.id == "straggler" for f in seen[-1].findings):
            assert time.monotonic() < deadline and proc.poll() is None, [s.verdict for s in seen[-5:]]
            time.sleep(0.2)
            seen.append(source.poll())
        assert {len(s.ranks) for s in seen if s.ranks} == {3}
        assert not any(f.id == "dead" for s in seen for f in s.findings)
        straggler = next(f for f in seen[-1].findings if f.id == "straggler")
        assert straggler.culprits == (1,) and "drill_hang" in straggler.message
        # the sample that first sees rank 1 in the drill also sees every rank arrive somewhere new: moving, truly;
        # from the next one on, nothing moves, and nothing may say ✓
        hung = next(i for i, s in enumerate(seen) if any(v.doing == "drill_hang" for v in s.ranks))
        assert all(s.verdict.status != "ok" for s in seen[hung + 1 :]), [s.verdict for s in seen[hung:]]


def test_smoke_tui_judges_with_smoke_progress_and_deadline(tmp_path: Path) -> None:
    """``smoke --tui`` hands its source smoke's --timeout and log dir: from the moment rank 1's progress file says the
    drill holds it, no state says ✓ or "moving"; the top line counts rank 1 standing still against the timeout."""
    with smoke_held_at_rank_1(tmp_path) as proc:
        source = LauncherSource(proc.pid, 3, 120.0, str(tmp_path))
        held: list[WatchState] = []  # the states polled once rank 1's progress said the drill holds it
        deadline = time.monotonic() + 120
        while len(held) < 8 or not any("rank 1 standing still" in s.verdict.message for s in held):
            assert time.monotonic() < deadline and proc.poll() is None, [s.verdict for s in held[-5:]]
            drill = any(r.rank == 1 and r.last_event == "drill" for r in read_progress(str(tmp_path)))
            state = source.poll()
            if drill:
                held.append(state)
            time.sleep(0.5)
        verdicts = [s.verdict for s in held]
        assert all(v.status != "ok" and "✓" not in v.message and "moving" not in v.message for v in verdicts), verdicts
        assert "rank 1 standing still" in verdicts[-1].message and "of 120 s" in verdicts[-1].message, verdicts[-1]


def test_ranks_spinning_at_one_line_cannot_be_told_from_a_hang(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Every rank busy inside one long call: a long computation, or an NCCL hang spinning in a CUDA sync. Neither
    ✓ nor a finding: "cannot tell", exit code 4."""
    code, report = watch(job("spin"), capsys, "--stall", "3", "--settle", "5")
    assert code == 4 and report["findings"] == [] and report["verdict"]["status"] == "undecided"
    assert "cannot tell" in report["verdict"]["message"] and "used CPU" in report["verdict"]["message"]


def test_a_rank_that_crashed_is_not_taken_for_a_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Looking the job up again after a rank died finds the survivors only: that is not a new job."""
    from watch_states import job as hand_job
    from watch_states import sample, stack, states

    from ncclcheck.sources import watch as watch_source

    before = dataclasses.replace(hand_job(2), launcher_pid=os.getpid())  # a launcher that lives
    source = LiveSource(before, 10.0)
    source.state = states(before, {0: sample(0, stack(None)), 1: sample(1, (), status="gone")})
    looked: list[int | None] = []

    def found(job: Any) -> Any:
        return lambda pid=None: looked.append(pid) or (job,)

    survivors = dataclasses.replace(before, ranks=before.ranks[:1])
    monkeypatch.setattr(watch_source, "discover", found(survivors))
    source.looked_again = 0.0
    source._follow_restart()
    assert looked == [os.getpid()] and source.job is before and source.restarted is None
    restarted = dataclasses.replace(before, ranks=tuple(dataclasses.replace(r, pid=r.pid + 50) for r in before.ranks))
    monkeypatch.setattr(watch_source, "discover", found(restarted))
    source.looked_again = 0.0
    source._follow_restart()
    assert source.job is restarted and source.restarted is not None
    assert any("ranks restarted" in n for n in source._notes())
