"""The live data source of ``ncclcheck watch``: sample the job, track it, hand back a WatchState."""

from __future__ import annotations

import time

from ncclcheck.analysis.watch import track
from ncclcheck.collectors.jobs import discover
from ncclcheck.collectors.sampler import Sampler
from ncclcheck.model.watch import Job, WatchState
from ncclcheck.probes.host import find_py_spy

PTRACE_FIX = (
    "py-spy may not read these processes (ptrace): run ncclcheck as root or the job's user with "
    "CAP_SYS_PTRACE (docker: --cap-add SYS_PTRACE; k8s: securityContext.capabilities.add [SYS_PTRACE]), "
    "or `sudo sysctl kernel.yama.ptrace_scope=0`; the table still shows process state"
)


class LiveSource:
    """Each ``poll`` takes one sample of every local rank and returns the tracked state."""

    def __init__(self, job: Job, stall_s: float, stacks: bool = True, native: bool = False) -> None:
        self.job, self.stall_s = job, stall_s
        self.sampler = Sampler(job, stacks=stacks and find_py_spy() is not None, native=native)
        self.state: WatchState | None = None
        self.samples = 0
        self.notes: tuple[str, ...] = (
            () if find_py_spy() else ("py-spy is not installed: no stacks (pip install py-spy)",)
        )

    def poll(self) -> WatchState:
        state = track(self.state, self.sampler.sample(), self.stall_s)
        errors = [v.sample.stack_error for v in state.ranks if v.sample.stack_error]
        notes = self.notes
        if errors and any("ermission" in e or "ptrace" in e.lower() for e in errors):
            notes += (PTRACE_FIX,)
        self.state = WatchState(state.time, state.job, state.ranks, state.findings, notes)
        self.samples += 1
        return self.state


class LauncherSource:
    """For ``smoke --tui``: watch the ranks under a launcher we started, once they exist."""

    def __init__(self, launcher_pid: int, world_size: int, stall_s: float) -> None:
        self.launcher_pid, self.world_size, self.stall_s = launcher_pid, world_size, stall_s
        self.live: LiveSource | None = None
        self.started = time.monotonic()

    def poll(self) -> WatchState:
        if self.live is None:
            jobs = discover(self.launcher_pid)
            if jobs and len(jobs[0].ranks) >= min(self.world_size, 1):
                self.live = LiveSource(jobs[0], self.stall_s)
        if self.live is not None:
            return self.live.poll()
        waiting = Job(f"launcher pid {self.launcher_pid}", self.world_size, None, self.launcher_pid, ())
        return WatchState(time.monotonic(), waiting, (), (), ("waiting for the ranks to start",))
