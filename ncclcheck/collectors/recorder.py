"""Where each rank's main thread spends its time: ``py-spy record`` on every rank of this node, round after round.

A thread starts one ``py-spy record --nonblocking`` per rank for ``ROUND_S`` seconds at ``RATE`` samples a second
(the job is never paused: py-spy reads its memory), waits for them, reads the stacks they wrote and starts the next
round at once; the rounds of a node's ranks start together. A sample at a fixed rate, whatever the rank does, is
what makes shares of time fair: a dump taken only when something changed would count waiting more often than work.
Each record ends by itself after ``ROUND_S`` (also if ncclcheck is killed); ``close`` ends the running ones now.
What it costs the job: py-spy's own CPU, about 1 % of one core per rank (``benchmarks/bench_slow.py`` measures it).
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import weakref

from ncclcheck.collectors.processes import main_thread_cpu, main_thread_run_delay, main_thread_switches
from ncclcheck.model.shares import Round
from ncclcheck.model.stacks import Frame
from ncclcheck.probes.host import find_py_spy

ROUND_S = 2  # py-spy record takes whole seconds
RATE = 10  # samples a second: 20 a round, enough to tell a 1.5x slower rank within a few rounds
KEEP = 64  # rounds kept per rank until taken (a reader that stopped taking them does not grow memory)
FRAME = re.compile(r"^(?P<function>.*) \((?P<file>.*):(?P<line>\d+)\)$")
THREAD = re.compile(r"^thread \((?P<tid>\d+)\)")

_live: weakref.WeakSet[Recorder] = weakref.WeakSet()


class Recorder:
    """Rounds of ``py-spy record`` on ``pids``; ``take`` hands over the rounds finished since it was last called."""

    def __init__(self, pids: list[int], round_s: int = ROUND_S, rate: int = RATE) -> None:
        self.pids, self.round_s, self.rate = list(pids), round_s, rate
        self.binary = find_py_spy()
        self.folder = tempfile.mkdtemp(prefix="ncclcheck-record-")
        self.done: dict[int, list[Round]] = {pid: [] for pid in self.pids}
        self.running: dict[int, subprocess.Popen[bytes]] = {}
        # per rank whose main thread did not run through its last round: its counters, its one stack, how many samples
        self.still: dict[int, tuple[tuple[int | None, float | None], tuple[Frame, ...], int]] = {}
        self.recorded = 0  # py-spy records started so far (what the rounds have cost)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.readable = self.binary is not None and bool(self.pids)  # until every rank's round failed
        self.thread = threading.Thread(target=self._loop, name="ncclcheck-record", daemon=True)
        _live.add(self)

    def start(self) -> Recorder:
        if self.binary is not None and self.pids:
            self.thread.start()
        return self

    def take(self) -> dict[int, tuple[Round, ...]]:
        """The rounds each rank finished since the last call."""
        with self.lock:
            out = {pid: tuple(rounds) for pid, rounds in self.done.items() if rounds}
            for rounds in self.done.values():
                rounds.clear()
        return out

    def close(self) -> None:
        """End the running records now and remove their files."""
        self.stop.set()
        with self.lock:
            running = list(self.running.values())
        for proc in running:
            _end(proc)
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=self.round_s + 2)
        shutil.rmtree(self.folder, ignore_errors=True)

    def _loop(self) -> None:
        gone: set[int] = set()
        while not self.stop.is_set():
            pids = [pid for pid in self.pids if pid not in gone]
            if not pids:
                return
            for pid, found in self._round(pids).items():
                if found.error is not None and not os.path.exists(f"/proc/{pid}"):
                    gone.add(pid)  # the rank ended: nothing more to record
                    continue
                with self.lock:
                    self.done[pid] = [*self.done[pid], found][-KEEP:]
            last = self._last(pids)
            self.readable = not last or not all(r.error for r in last)
            if not self.readable:
                self.stop.wait(self.round_s)  # py-spy cannot read any rank (no ptrace): try again later, slowly

    def _last(self, pids: list[int]) -> list[Round]:
        with self.lock:
            return [self.done[pid][-1] for pid in pids if self.done[pid]]

    def _round(self, pids: list[int]) -> dict[int, Round]:
        """One round of every rank at once. A rank whose main thread did not run at all through its last round (no
        CPU time, no context switch: blocked in a collective, a lock, a sleep) and has not run since is not read
        again: its frames cannot have moved, so its round is the last one's stack, if it still has not run at the
        end. A stuck job costs /proc reads only."""
        assert self.binary is not None
        start = time.time()
        ran = {pid: _ran(pid) for pid in pids}
        delayed = {pid: main_thread_run_delay(pid) for pid in pids}
        held = {pid: self.still[pid] for pid in pids if pid in self.still and self.still[pid][0] == ran[pid]}
        procs: dict[int, tuple[subprocess.Popen[bytes], str]] = {}
        for pid in (p for p in pids if p not in held):
            path = os.path.join(self.folder, f"{pid}.txt")
            argv = [self.binary, "record", "--pid", str(pid), "--rate", str(self.rate), "--duration", str(self.round_s)]
            argv += ["--format", "raw", "--idle", "--threads", "--full-filenames", "--nonblocking", "--output", path]
            try:
                proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            except OSError as exc:
                return {p: Round(p, start, start, (), None, f"py-spy record could not start: {exc}") for p in pids}
            procs[pid] = (proc, path)
            self.recorded += 1
            with self.lock:
                self.running[pid] = proc
        if not procs:
            self.stop.wait(self.round_s)
        out = {}
        for pid, (proc, path) in procs.items():
            try:
                _, err = proc.communicate(timeout=self.round_s + 10)
            except subprocess.TimeoutExpired:
                _end(proc)
                err = b"py-spy record did not end"
            end, now = time.time(), _ran(pid)
            before, spent = ran[pid][1], now[1]
            used = None if before is None or spent is None else max(spent - before, 0.0)
            found = out[pid] = dataclasses.replace(
                _read(pid, path, start, end, used, proc.returncode, err),
                run_delay_s=_since(delayed[pid], main_thread_run_delay(pid)),
            )
            if now == ran[pid] and None not in now and len(found.stacks) == 1:
                self.still[pid] = (now, found.stacks[0][0], found.samples)
            else:
                self.still.pop(pid, None)
        end = time.time()
        for pid, (counters, stack, samples) in held.items():
            if _ran(pid) == counters:
                out[pid] = Round(
                    pid, start, end, ((stack, samples),), 0.0, None, _since(delayed[pid], main_thread_run_delay(pid))
                )
            else:
                self.still.pop(pid, None)  # it ran meanwhile: this round is not known; the next is read
        with self.lock:
            self.running.clear()
        return out


def _since(before: float | None, now: float | None) -> float | None:
    return None if before is None or now is None else max(now - before, 0.0)


def _ran(pid: int) -> tuple[int | None, float | None]:
    """The main thread's context switches and CPU seconds so far (switches first: a switch in between makes it look
    as if it ran)."""
    return main_thread_switches(pid), main_thread_cpu(pid)


def _read(pid: int, path: str, start: float, end: float, used: float | None, code: int | None, err: bytes) -> Round:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        os.unlink(path)
    except OSError:
        text = None
    if text is None:
        lines = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
        reason = next((line for line in lines if "rror" in line), lines[-1] if lines else f"exit code {code}")
        return Round(pid, start, end, (), used, f"py-spy record could not read pid {pid}: {reason.strip()}")
    return Round(pid, start, end, main_thread_stacks(text, pid), used)


def main_thread_stacks(text: str, pid: int) -> tuple[tuple[tuple[Frame, ...], int], ...]:
    """The main thread's stacks (innermost first) and counts from ``py-spy record --format raw --threads``."""
    out: dict[tuple[Frame, ...], int] = {}
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        parts = stack.split(";")
        head = THREAD.match(parts[0]) if parts else None
        if head is None or int(head["tid"]) != pid or not count.isdigit():
            continue
        frames = tuple(_frame(p) for p in reversed(parts[1:]))
        out[frames] = out.get(frames, 0) + int(count)
    return tuple(sorted(out.items(), key=lambda item: -item[1]))


def _frame(text: str) -> Frame:
    found = FRAME.match(text)
    if found is None:
        return Frame(text, "?", 0)
    return Frame(found["function"], found["file"], int(found["line"]))


def _end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@atexit.register
def _close_all() -> None:
    for recorder in list(_live):
        recorder.close()
