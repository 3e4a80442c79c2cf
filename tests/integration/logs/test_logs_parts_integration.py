"""Large logs read in parts by real worker processes: the report a single pass gives, and no traceback,
hang or orphan when the reader leaves, a signal comes or a worker is killed."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from big_logs import LOGS, job_text

from ncclcheck.collectors.logfiles import sources
from ncclcheck.sources import log_parts
from ncclcheck.sources.logs import diagnose


@pytest.fixture
def tiny_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts of a few KiB: hundreds of cuts through the fixtures' blocks, tracebacks and summaries."""
    monkeypatch.setattr(log_parts, "PART", 6 << 10)
    monkeypatch.setattr(log_parts, "MIN_PART", 1)
    monkeypatch.setattr(log_parts, "WORTH_IT", 1)


@pytest.mark.integration
def test_parts_give_the_report_one_pass_gives(tmp_path: Path, tiny_parts: None) -> None:
    log = tmp_path / "job.log"
    log.write_text(job_text(), encoding="utf-8")
    found = sources([str(log)])
    assert len(log_parts.plan(found, cores=2)[0]) > 50
    one_pass, in_parts = diagnose(found, cores=1), diagnose(found, cores=2)
    assert in_parts == one_pass
    assert {"ib-retry-exceeded", "store-port-in-use", "child-failed"} <= {f.id for f in one_pass.findings}
    wrapped = next(f for f in one_pass.findings if f.id == "ib-retry-exceeded")
    assert any(e.text.endswith("hca mlx5_2") for e in wrapped.evidence)  # glued back, whatever the cuts
    assert one_pass.ranks and one_pass.timeouts and one_pass.failures


@pytest.mark.integration
def test_many_files_and_gzip_in_workers_give_the_same_report(tmp_path: Path, tiny_parts: None) -> None:
    for i, path in enumerate(LOGS[:30]):
        text = path.read_bytes()
        if i % 3 == 0:
            (tmp_path / f"{i:02d}.log.gz").write_bytes(gzip.compress(text))
        else:
            (tmp_path / f"{i:02d}.log").write_bytes(text)
    (tmp_path / "99.log.gz").write_bytes(gzip.compress(LOGS[0].read_bytes())[:-40])  # cut short
    found = sources([str(tmp_path)])
    plan = log_parts.plan(found, cores=2)
    assert all(p.span is None for i in plan for p in plan[i] if found[i].path.endswith(".gz"))
    one_pass, in_parts = diagnose(found, cores=1), diagnose(found, cores=2)
    assert in_parts == one_pass
    assert any("cut short" in n for n in in_parts.notes) and in_parts.incomplete


@pytest.mark.integration
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL])
def test_a_signal_ends_every_worker(big_log: Path, signum: int) -> None:
    log = big_log
    proc = subprocess.Popen(
        [sys.executable, "-m", "ncclcheck", "logs", str(log)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        parent = psutil.Process(proc.pid)
        workers: list[psutil.Process] = []
        for _ in range(600):  # up to 60 s on a loaded machine; no timing is asserted
            workers = parent.children(recursive=True)
            if workers or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert workers, "the reader started no worker on a 48 MiB log"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    expected = {signal.SIGINT: 130, signal.SIGKILL: -signal.SIGKILL}.get(signum, 128 + signum)
    assert proc.returncode == expected, err
    assert b"Traceback" not in err, err
    _, alive = psutil.wait_procs(workers, timeout=10)  # killed outright: the kernel ends them (PDEATHSIG)
    assert not alive, alive


@pytest.mark.integration
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to start workers")
def test_the_command_reads_a_big_log_in_parts_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_parts, "PART", 1 << 20)  # the defaults scaled down 16x: 6 MiB stands for 96
    monkeypatch.setattr(log_parts, "WORTH_IT", 3 << 19)
    text = job_text()
    log = tmp_path / "big.log"
    log.write_text(text * max(1, (6 << 20) // len(text)), encoding="utf-8")
    found = sources([str(log)])
    assert len(log_parts.plan(found)[0]) > 3
    assert diagnose(found) == diagnose(found, cores=1)


@pytest.mark.integration
def test_a_reader_that_leaves_early_gets_no_traceback() -> None:
    """`ncclcheck logs job/ | head`: head leaves; ncclcheck ends quietly with 141, as `cat` would."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ncclcheck", "logs", "--json", str(LOGS[0])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # before a byte is written: the write fails with EPIPE
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141 and err == b"", err


@pytest.mark.integration
def test_workers_killed_before_they_are_given_a_part_have_it_read_here(tmp_path: Path, tiny_parts: None) -> None:
    """A worker killed while it waits for its first part: handing it the part fails (EPIPE); the part is read
    here and the rest go on, with no BrokenPipeError reaching the command (which would read as `| head`: 141)."""
    log = tmp_path / "job.log"
    log.write_text(job_text(), encoding="utf-8")
    parts = log_parts.plan(sources([str(log)]), cores=2)[0]
    with log_parts.done_in_order(parts, cores=2) as done:
        for child in psutil.Process().children():
            child.kill()
            child.wait(10)
        got = list(done)
    assert [_seen(d) for d in got] == [_seen(log_parts.fold_part(p)) for p in parts]


def _seen(done: log_parts.Done) -> tuple[object, ...]:
    """A part's Done as values (its NCCL fold is a mutable accumulator: compared by its result)."""
    fields = dataclasses.fields(done.recording)
    value = tuple(getattr(done.recording, f.name) for f in fields if f.name != "nccl")
    return value, done.recording.nccl.result(), done.notes, done.incomplete


@pytest.mark.integration
def test_a_worker_killed_midway_has_its_part_read_here_and_nothing_hangs(big_log: Path) -> None:
    """The OOM killer ends one worker: its part is read by ncclcheck itself; the report is the one-pass one."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ncclcheck", "logs", "--json", str(big_log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        parent = psutil.Process(proc.pid)
        workers: list[psutil.Process] = []
        for _ in range(600):
            workers = parent.children(recursive=True)
            if workers or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert workers, "no worker started"
        workers[0].kill()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, 1) and b"Traceback" not in err, err
    got = json.loads(out)
    one_pass = diagnose(sources([str(big_log)]), cores=1)
    assert got["lines"] == one_pass.lines
    assert [f["id"] for f in got["findings"]] == [f.id for f in one_pass.findings]
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, alive
