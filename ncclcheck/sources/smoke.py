"""The live data source of ``smoke --tui``: the watch view of the ranks under the launcher smoke started, with
the smoke run's own progress files overruling a view that saw motion."""

from __future__ import annotations

import dataclasses
import time

from ncclcheck.analysis.smoke.progress import smoke_verdict, standing_still
from ncclcheck.collectors.jobs import discover
from ncclcheck.collectors.progress import read_beats, read_progress
from ncclcheck.model.watch import Job, Verdict, WatchState
from ncclcheck.sources.watch import LiveSource


class LauncherSource:
    """For ``smoke --tui``: watch the ranks under a launcher we started, once all ``nproc`` of them exist.

    ``stall_s`` is smoke's ``--timeout``; with the smoke run's ``log_dir``, its ranks' progress files overrule a view
    that saw motion: a rank that takes no step is shown standing still against that deadline, never as moving.
    """

    def __init__(self, launcher_pid: int, nproc: int, stall_s: float, log_dir: str | None = None) -> None:
        self.launcher_pid, self.nproc, self.stall_s, self.log_dir = launcher_pid, nproc, stall_s, log_dir
        self.live: LiveSource | None = None
        self.started = time.monotonic()

    def poll(self) -> WatchState:
        return self._with_smoke(self._watched())

    def close(self) -> None:
        if self.live is not None:
            self.live.close()

    def _watched(self) -> WatchState:
        if self.live is None:
            jobs = discover(self.launcher_pid)
            if jobs and len(jobs[0].ranks) >= self.nproc:
                self.live = LiveSource(jobs[0], self.stall_s, record=False)  # a smoke test's pace is its own
        if self.live is not None:
            return self.live.poll()
        waiting = Job(f"launcher pid {self.launcher_pid}", self.nproc, None, self.launcher_pid, ())
        verdict = Verdict("pending", f"… waiting for the ranks to start ({time.monotonic() - self.started:.0f} s)")
        return WatchState(time.monotonic(), waiting, (), (), verdict)

    def _with_smoke(self, state: WatchState) -> WatchState:
        if self.log_dir is None:
            return state
        ranks = read_progress(self.log_dir)
        still = standing_still(ranks, read_beats(self.log_dir), time.time(), self.stall_s)
        verdict = smoke_verdict(state.verdict, still)
        return state if verdict == state.verdict else dataclasses.replace(state, verdict=verdict)
