"""The zoo: real hangs of many kinds on real torchrun/gloo jobs (tests/workers/zoo.py), each with its truth, run as a
user would: the job under ``ncclcheck run --stall 4``, and ``ncclcheck watch --once --json --pid TORCHRUN`` beside it
once it hangs. Each case must give its true culprit and chain in watch's JSON and in run's hang record (or, for a
crash, run's verdict), and the twins (the same code without the bug, one job) must give nothing.

The cases run a few at a time from one module fixture (a hung job costs no CPU; their start-up does): every test of
this module runs in one xdist group, and each asserts its own case's outcome.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import WORKERS
from zoo_cases import ZOO, Truth

from ncclcheck.probes.host import find_py_spy

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("zoo")]

WORKER = WORKERS / "zoo.py"
AT_ONCE = 6  # cases whose jobs start together (their start-up is what costs CPU; a hung job costs none)
STALL = "4"


@dataclass
class Outcome:
    """What a case gave: watch's JSON (None: watch found no job), run's hang records and report, its output."""

    watch: dict[str, Any] | None = None
    watch_code: int | None = None
    hangs: list[dict[str, Any]] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)
    output: str = ""
    seconds: dict[str, float] = field(default_factory=dict)


def _torchrun(run: subprocess.Popen[bytes]) -> int | None:
    """run's torchrun child; a child that ends while it is read (run's py-spy dumps come and go) is passed over."""
    try:
        children = psutil.Process(run.pid).children()
    except psutil.Error:
        return None
    for child in children:
        try:
            if "torch.distributed.run" in " ".join(child.cmdline()):
                return int(child.pid)
        except psutil.Error:
            continue
    return None


def _text(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


def under_run(case: str, nproc: int, work: Path, stall: str = STALL, interval: str = "1") -> subprocess.Popen[bytes]:
    """``ncclcheck run --dir WORK/run`` over ``torchrun`` of the zoo's ``case``, its output in WORK/run.log."""
    (work / "scratch").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CASE": case, "ZOO_DIR": str(work / "scratch")}
    cmd = [sys.executable, "-m", "ncclcheck", "run", "--dir", str(work / "run"), "--stall", stall]
    cmd += ["--interval", interval, "--", sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += [f"--nproc-per-node={nproc}", "--monitor-interval=0.1", str(WORKER)]
    with (work / "run.log").open("wb") as handle:
        return subprocess.Popen(cmd, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def await_ready(run: subprocess.Popen[bytes], log: Path, nproc: int, deadline_s: float = 120) -> None:
    """Until every rank printed "ready" (or the job ended)."""
    deadline = time.monotonic() + deadline_s
    while _text(log).count("ready ") < nproc and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)


def watch_once(launcher: int, case: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """``ncclcheck watch --once --json --pid LAUNCHER`` as a user types it."""
    cmd = [sys.executable, "-m", "ncclcheck", "watch", "--once", "--json", "--pid", str(launcher), *flags]
    env = {**os.environ, "CASE": case}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180, check=False)


def play(case: str, truth: Truth, root: Path) -> Outcome:
    """One case from start to end, as a user would run it."""
    work = root / case
    log = work / "run.log"
    out = Outcome()
    began = time.monotonic()
    run = under_run(case, truth.nproc, work)
    try:
        await_ready(run, log, truth.nproc)
        ready = time.monotonic()
        out.seconds["start"] = ready - began
        launcher = _torchrun(run)
        if launcher is not None:
            flags = ("--stall", "3", "--settle", "3") if truth.crash else ("--stall", "3", "--interval", "1")
            watch = watch_once(launcher, case, *flags)
            out.watch_code = watch.returncode
            out.watch = json.loads(watch.stdout) if watch.stdout.strip().startswith("{") else None
            out.seconds["watch"] = time.monotonic() - ready
        hangs = work / "run" / "hangs"
        while not truth.crash and run.poll() is None and not any(hangs.glob("*.json")):
            assert time.monotonic() - ready < 90, _text(log)[-3000:]
            time.sleep(0.2)
        out.seconds["record"] = time.monotonic() - ready
        if run.poll() is None and not truth.crash:
            run.send_signal(signal.SIGTERM)  # the user ends it: run ends torchrun and its workers
        run.wait(timeout=90)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    out.hangs = [json.loads(p.read_text()) for p in sorted((work / "run" / "hangs").glob("*.json"))]
    report = work / "run" / "report.json"
    out.report = json.loads(report.read_text()) if report.exists() else {}
    out.output = _text(log)
    return out


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("zoo")
    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        futures = {case: pool.submit(play, case, truth, root) for case, truth in ZOO.items()}
        return {case: f.result() for case, f in futures.items()}


def _first_hang(findings: list[dict[str, Any]]) -> dict[str, Any] | None:
    not_hangs = {"slow-rank", "slow-node", "communication-bound", "finished", "exited", "control-silent"}
    hangs = [f for f in findings if f["severity"] in ("error", "warning") and f["kind"] not in not_hangs]
    return hangs[0] if hangs else None


@pytest.mark.parametrize("case", [c for c, t in ZOO.items() if not t.crash])
def test_each_hang_gives_its_true_culprit_and_chain_in_watch_and_in_runs_record(
    zoo: dict[str, Outcome], case: str
) -> None:
    truth, out = ZOO[case], zoo[case]
    assert out.watch is not None, (out.watch_code, out.output[-2000:])
    found = _first_hang(out.watch["findings"])
    assert found is not None, out.watch["findings"]
    assert (found["kind"], tuple(found["culprits"])) == (truth.kind, truth.culprits), found
    for word in truth.words:
        assert word in found["message"], (word, found["message"])
    assert out.hangs, out.output[-3000:]
    record = out.hangs[0]
    first = _first_hang(record["findings"])
    assert first is not None and (first["kind"], tuple(first["culprits"])) == (truth.kind, truth.culprits), first
    for word in truth.words:
        assert word in first["message"], (word, first["message"])
    verdict = out.report["verdict"]
    assert verdict["status"] == "hang" and verdict["root_cause"] == truth.kind, verdict
    if truth.culprits:  # with nobody to blame, the verdict lists the ranks involved
        assert tuple(verdict["ranks"]) == truth.culprits, verdict
    assert "/control/hook/" not in first["message"] and "sitecustomize" not in first["message"]


@pytest.mark.parametrize("case", [c for c, t in ZOO.items() if t.crash])
def test_each_crash_names_the_rank_that_began_it_never_the_ranks_the_launcher_ended(
    zoo: dict[str, Outcome], case: str
) -> None:
    truth, out = ZOO[case], zoo[case]
    verdict = out.report["verdict"]
    assert verdict["status"] == "fail" and tuple(verdict["ranks"]) == truth.culprits, verdict
    assert verdict["root_cause"] in truth.kind.split("|"), verdict
    for word in truth.words:
        assert word in verdict["message"], (word, verdict["message"])
    assert not out.hangs, "a crash is not a hang"
    if out.watch is not None:  # watch saw the end (else the job was gone before it looked: exit 3, no job)
        blamed = {r for f in out.watch["findings"] if f["severity"] != "info" for r in f["culprits"]}
        assert blamed <= set(truth.culprits), out.watch["findings"]


def test_the_twins_of_every_case_run_healthy_under_run_and_watch_with_no_finding(tmp_path: Path) -> None:
    """One job runs the twin of each case (the same code without its bug: a slow start that joins, groups created
    by every rank in order, batched and plain point-to-point that match, DataLoader workers, threads with locks,
    events and queues, a subprocess, a socket that answers, a bounded computation, a checkpoint), each phase
    shorter than --stall: run records nothing, passes, and watch over the whole job finds nothing wrong."""
    log = tmp_path / "run.log"
    run = under_run("twins", 3, tmp_path)
    try:
        deadline = time.monotonic() + 120
        while _torchrun(run) is None and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        launcher = _torchrun(run)
        looks = []
        while launcher is not None and run.poll() is None:
            watch = watch_once(launcher, "twins", "--stall", STALL, "--settle", "3", "--interval", "0.5")
            if watch.stdout.strip().startswith("{"):
                looks.append(json.loads(watch.stdout))
        assert run.wait(timeout=120) == 0, _text(log)[-3000:]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    text = _text(log)
    for name in ("late-init", "group-creation", "p2p", "dataloader", "threads", "processes", "compute"):
        assert all(f"twin {name} {r}" in text for r in range(3)), name
    assert all(f"done {r}" in text for r in range(3))
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["verdict"]["status"] == "pass" and report["hangs"] == [], report["verdict"]
    assert looks, "watch never saw the twins' ranks"
    wrong = [f for look in looks for f in look["findings"] if f["severity"] in ("error", "warning")]
    assert wrong == [], wrong


def test_ranks_waiting_inside_init_process_group_end_on_the_first_sigint(tmp_path: Path) -> None:
    """Rank 0 waits in init_process_group (C++: the store) for rank 1, which polls for a file: torch's C++ wait never
    runs Python's SIGINT handler, so without run's hook rank 0 sits out torchrun's SIGINT until its SIGKILL 30 s
    later. Under run it ends on that first SIGINT, killed by it, not by SIGKILL."""
    log = tmp_path / "run.log"
    run = under_run("late-init", 2, tmp_path, stall="60")
    try:
        deadline = time.monotonic() + 120
        while _text(log).count("ready ") < 2:
            assert run.poll() is None and time.monotonic() < deadline, _text(log)[-3000:]
            time.sleep(0.1)
        launcher = _torchrun(run)
        assert launcher is not None
        ranks = psutil.Process(launcher).children()
        while not any("init_process_group" in _stack(p.pid) for p in ranks):
            assert time.monotonic() < deadline, "rank 0 never reached init_process_group"
            time.sleep(0.2)
        run.send_signal(signal.SIGINT)  # the user's one ^C
        assert run.wait(timeout=120) == 130
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    text = _text(log)
    assert "Sending process" in text and "closing signal SIGINT" in text, text[-2500:]  # torchrun passed it on
    assert "Unable to shutdown process" not in text, text[-2500:]  # ... and did not have to SIGKILL anyone


def _stack(pid: int) -> str:
    dump = subprocess.run(
        [find_py_spy() or "py-spy", "dump", "--pid", str(pid), "--nonblocking"],
        capture_output=True,
        text=True,
        check=False,
    )
    return dump.stdout


def test_watch_on_a_launcher_whose_ranks_have_not_started_waits_for_them(tmp_path: Path) -> None:
    """torchrun waits in its rendezvous for a second node that never comes: no rank yet. watch --pid on it says it
    waits for the ranks, and ends with "no job" once its window is over; on a launcher whose ranks do start (the
    rendezvous of one node), it waits for them and watches them."""
    env = {**os.environ, "CASE": "sleep", "ZOO_DIR": str(tmp_path)}
    two = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            "--nproc-per-node=1",
            "--rdzv-backend=c10d",
            "--rdzv-endpoint=127.0.0.1:0",
            str(WORKER),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    one = None
    try:
        waited = subprocess.run(
            [sys.executable, "-m", "ncclcheck", "watch", "--once", "--json", "--pid", str(two.pid), "--settle", "3"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert waited.returncode == 3, waited.stderr
        assert f"pid {two.pid} is a launcher whose ranks have not started" in waited.stderr
        assert f"no rank of launcher pid {two.pid}" in waited.stderr
        one = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(WORKER)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        seen = subprocess.run(
            [sys.executable, "-m", "ncclcheck", "watch", "--once", "--json", "--pid", str(one.pid), "--stall", "3"],
            capture_output=True,
            text=True,
            check=False,
            timeout=180,
        )
        report = json.loads(seen.stdout)
        assert report["job"]["world_size"] == 2 and len(report["ranks"]) == 2, seen.stderr
    finally:
        for proc in (two, one):
            if proc is not None:
                for kid in psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []:
                    kid.kill()
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
