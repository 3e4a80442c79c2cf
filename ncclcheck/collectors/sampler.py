"""Sample a job's ranks: psutil for state, CPU, memory and I/O; py-spy (non-blocking, time-limited) for stacks.

Never pauses or signals the job: py-spy runs with ``--nonblocking`` and psutil only reads /proc.
py-spy calls run at most ``concurrency`` at a time, so 8+ ranks per node stay cheap.
"""

from __future__ import annotations

import time

import psutil

from ncclcheck.collectors.processes import normal_status
from ncclcheck.collectors.pyspy import dump_all
from ncclcheck.model.watch import Job, RankProc, RankSample, Snapshot


class Sampler:
    """Keeps each rank's psutil handle between samples, so CPU % is over the interval."""

    def __init__(self, job: Job, stacks: bool = True, concurrency: int = 4, timeout_s: float = 5.0) -> None:
        self.job, self.stacks, self.timeout_s, self.concurrency = job, stacks, timeout_s, concurrency
        self.procs: dict[int, psutil.Process] = {}
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
        dumps = dump_all(live, self.timeout_s, self.concurrency) if live else {}
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
