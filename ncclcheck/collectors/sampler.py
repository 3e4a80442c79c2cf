"""Sample a job's ranks: psutil for state, CPU, memory and I/O; py-spy (non-blocking, time-limited) for stacks.

Never pauses or signals the job: py-spy runs with ``--nonblocking`` and psutil only reads /proc.
py-spy calls run at most ``concurrency`` at a time, so 8+ ranks per node stay cheap. A rank whose
I/O moved since the last sample is progressing whatever its stack says, so it keeps its last stack
for up to ``REFRESH`` samples instead of a fresh dump: a healthy gloo job is dumped a quarter as often,
while a rank that stands still is dumped every time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

from ncclcheck.collectors.processes import normal_status
from ncclcheck.collectors.pyspy import dump_all
from ncclcheck.model.smoke import Frame
from ncclcheck.model.watch import Job, RankProc, RankSample, Snapshot

REFRESH = 4


@dataclass(frozen=True)
class _Dumped:
    """A rank's last py-spy dump, the I/O count at the last sample, and how many samples old the dump is."""

    io: int
    stack: tuple[Frame, ...]
    error: str | None
    age: int


class Sampler:
    """Keeps each rank's psutil handle between samples, so CPU % is over the interval."""

    def __init__(
        self, job: Job, stacks: bool = True, concurrency: int = 4, timeout_s: float = 5.0, native: bool = False
    ) -> None:
        self.job, self.stacks, self.timeout_s, self.concurrency = job, stacks, timeout_s, concurrency
        self.native = native  # C/C++ frames too: py-spy pauses each rank briefly to unwind them
        self.procs: dict[int, psutil.Process] = {}
        self.dumped: dict[int, _Dumped] = {}
        for r in job.ranks:
            try:
                self.procs[r.pid] = psutil.Process(r.pid)
                self.procs[r.pid].cpu_percent(None)
            except psutil.Error:
                pass

    def sample(self) -> Snapshot:
        by_rank = {r.rank: r for r in self.job.ranks}
        states = {r.pid: self._state(r) for r in self.job.ranks}
        live = [pid for pid, s in states.items() if s[0] not in ("gone", "zombie", "stopped")] if self.stacks else []
        dumps = self._stacks(live, {pid: s[4] for pid, s in states.items()})
        samples = []
        for rank in self.job.expected_local():
            proc = by_rank.get(rank)
            if proc is None:
                samples.append(RankSample(rank, None, None, "", "missing", 0.0, 0, 0, 0, (), None))
                continue
            status, cpu, rss, threads, io = states[proc.pid]
            stack, error = dumps.get(proc.pid, ((), None))
            samples.append(
                RankSample(rank, proc.local_rank, proc.pid, proc.host, status, cpu, rss, threads, io, stack, error)
            )
        return Snapshot(time.monotonic(), self.job, tuple(samples))

    def _stacks(self, pids: list[int], io: dict[int, int]) -> dict[int, tuple[tuple[Frame, ...], str | None]]:
        """Each live rank's stack: a fresh dump, or the last one while its I/O moves (at most REFRESH samples)."""
        kept: dict[int, tuple[tuple[Frame, ...], str | None]] = {}
        for pid in pids:
            last = self.dumped.get(pid)
            if last is not None and io[pid] != last.io and last.age + 1 < REFRESH and last.error is None:
                kept[pid] = (last.stack, None)
                self.dumped[pid] = _Dumped(io[pid], last.stack, None, last.age + 1)
        fresh = dump_all([p for p in pids if p not in kept], self.timeout_s, self.concurrency, self.native)
        for pid, (stack, error) in fresh.items():
            self.dumped[pid] = _Dumped(io[pid], stack, error, 0)
        return {**kept, **fresh}

    def _state(self, rank: RankProc) -> tuple[str, float, int, int, int]:
        proc = self.procs.get(rank.pid)
        if proc is None:
            return "gone", 0.0, 0, 0, 0
        try:
            with proc.oneshot():
                status = str(proc.status())
                io = proc.io_counters()
                return (
                    normal_status(status), proc.cpu_percent(None), proc.memory_info().rss, proc.num_threads(),
                    io.read_chars + io.write_chars if hasattr(io, "read_chars") else io.read_bytes + io.write_bytes,
                )  # fmt: skip
        except psutil.NoSuchProcess:
            return "gone", 0.0, 0, 0, 0
        except psutil.Error:
            return "unknown", 0.0, 0, 0, 0
