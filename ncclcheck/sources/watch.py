"""The live data source of ``ncclcheck watch``: sample the job, track it, hand back a WatchState.

When the job's rank processes are gone while its launcher lives on (torchrun's elastic restart), the
job is looked up again (at every sample once all of them are gone, else at most every ``REDISCOVER_S``),
and the new ranks are watched from then on.
"""

from __future__ import annotations

import time

from ncclcheck.analysis.gpu import judge as judge_gpus
from ncclcheck.analysis.ras import judge as judge_ras
from ncclcheck.analysis.ras import ours
from ncclcheck.analysis.watch.flight import asked_for, exact, with_exact, with_outside
from ncclcheck.analysis.watch.judge import Judging, track
from ncclcheck.analysis.watch.notes import watch_notes
from ncclcheck.collectors.control_plane import environ, live_flight, live_groups
from ncclcheck.collectors.gpu import look as look_at_gpus
from ncclcheck.collectors.jobs import discover
from ncclcheck.collectors.processes import process_state
from ncclcheck.collectors.ras import address, query
from ncclcheck.collectors.sampler import Sampler
from ncclcheck.model.findings import Finding
from ncclcheck.model.flight import FrDump
from ncclcheck.model.ras import RasStatus
from ncclcheck.model.watch import Job, WatchState
from ncclcheck.probes.host import find_py_spy

REDISCOVER_S = 3.0
RAS_EVERY_S = 2.0  # how often NCCL RAS is asked while ranks stand still
RAS_AGAIN_S = 30.0  # how long after "nothing listens" it is tried again (a job whose NCCL starts later)
RAS_GATHER_S = 3  # what RAS may take to gather the job's counts (the look waits that long at most)
GROUPS_EVERY_S = 5.0  # how often the ranks' process groups are read again (groups are made as a job goes)


class RasPolls:
    """NCCL RAS asked while the job's ranks stand still: its replies over this stall, and what it could not say."""

    def __init__(self, job: Job) -> None:
        env = environ(job.ranks[0].pid) if job.ranks else {}
        self.host, self.port = address(env or None)
        self.pids = {r.pid: r.rank for r in job.ranks}
        self.polls: list[RasStatus] = []
        self.asked = -RAS_AGAIN_S
        self.note: str | None = None
        self.refused = False

    def findings(self, stalled: bool, stall_s: float) -> tuple[Finding, ...]:
        """RAS's findings over this stall (asked at most every RAS_EVERY_S); () while nothing stands still."""
        if not stalled:
            self.polls = []
            return ()
        now = time.monotonic()
        wait = RAS_AGAIN_S if (self.note or self.refused) and not self.polls else RAS_EVERY_S
        if now - self.asked >= wait:
            self.asked = now
            reply = query(self.host, self.port, RAS_GATHER_S)
            self.refused = False
            if reply.status is not None and ours(reply.status, self.pids):
                self.polls.append(reply.status)
                self.note = None
            elif reply.status is not None:
                self.note = f"NCCL RAS at {reply.address} answers for another job (none of its PIDs is this job's)"
            elif reply.text is not None:
                self.note = f"NCCL RAS at {reply.address} answers in text only (NCCL older than 2.28.7): not judged"
            elif reply.refused:  # a gloo job, RAS off, an NCCL before 2.24: nothing to say each look
                self.note = None
                self.refused = True
            else:
                self.note = f"NCCL RAS: {reply.error}"
        return judge_ras(self.polls, self.pids, stall_s)


class GpuLooks:
    """The node's GPUs read at each look while ranks stand still in a collective or at a CUDA synchronisation
    (NVML); a node without a driver or nvidia-ml-py is asked once, and says nothing more (a gloo job on CPUs)."""

    def __init__(self, job: Job) -> None:
        self.pids = {r.pid: r.rank for r in job.ranks}
        self.error: str | None = None

    def findings(self, waiting: tuple[int, ...]) -> tuple[Finding, ...]:
        if not waiting or self.error is not None:
            return ()
        look = look_at_gpus()
        if look.error is not None:
            self.error = look.error
            return ()
        return judge_gpus(look, self.pids, waiting)


class GroupFiles:
    """The job's process groups as its ranks wrote them (``ncclcheck run``'s hook, ``groups-rank<N>.json``): read at
    the first look and every ``GROUPS_EVERY_S`` after; the last read is kept while no file is there."""

    def __init__(self, job: Job) -> None:
        self.pids = {r.rank: r.pid for r in job.ranks}
        self.at: float | None = None
        self.groups: tuple[frozenset[int], ...] = ()

    def known(self) -> tuple[frozenset[int], ...]:
        now = time.monotonic()
        if self.at is None or now - self.at >= GROUPS_EVERY_S:
            self.at = now
            self.groups = live_groups(self.pids) or self.groups
        return self.groups


class LiveSource:
    """Each ``poll`` takes one sample of every local rank and returns the tracked state."""

    def __init__(
        self, job: Job, stall_s: float, stacks: bool = True, native: bool = False, record: bool = True
    ) -> None:
        self.job, self.judging = job, Judging(stall_s)
        self.stacks, self.native, self.record = stacks and find_py_spy() is not None, native, record
        self.sampler = Sampler(job, stacks=self.stacks, native=native, record=record)
        self.state: WatchState | None = None
        self.samples = 0
        self.looked_again = time.monotonic()
        self.stacks_wanted = stacks
        self.restarted: tuple[str, tuple[int, ...]] | None = None
        self.asked: tuple[tuple[str, tuple[int, ...]], ...] = ()  # the stall the control planes were asked in
        self.exact: tuple[Finding, ...] = ()
        self.flight: tuple[FrDump, ...] = ()  # what they answered then (a node agent sends them on to the viewer)
        self.ras = RasPolls(job)
        self.gpus = GpuLooks(job)
        self.groups = GroupFiles(job)

    def poll(self, final: bool = False) -> WatchState:
        """One sample; ``final``: the last look of ``--once``, where standing still through the window counts."""
        self._follow_restart()
        self.state = track(self.state, self.sampler.sample(), self.judged(final), self._notes())
        self.samples += 1
        state = self.with_flight(self.state)
        stalled = any(v.still_s >= min(self.judging.stall_s, 2 * RAS_EVERY_S) for v in state.ranks)
        state = with_outside(state, self.ras.findings(stalled, self.judging.stall_s))
        waiting = tuple(v.rank for v in state.ranks if v.collective and v.still_s >= self.judging.stall_s)
        return with_outside(state, self.gpus.findings(waiting))

    def judged(self, final: bool = False, window_s: float | None = None) -> Judging:
        """How a look is judged: ``--stall``, whether it is ``--once``'s last, and the job's groups where its ranks
        wrote them (read from files: a Python handler asked while a rank exits aborted it)."""
        return Judging(self.judging.stall_s, final, window_s, self.groups.known())

    def close(self) -> None:
        """Stop sampling: the recording's py-spy processes end now."""
        self.sampler.close()

    def with_flight(self, state: WatchState) -> WatchState:
        """Once ranks stood still past the threshold (an error found, or ranks waiting on other nodes), the live
        Flight Recorders of the ranks that serve a control plane, asked once per such stall. Where they name other
        culprits than the first error (the stacks' vote), their exact findings go first."""
        stall = asked_for(state, self.judging.threshold(state.window_s))
        if not stall:
            self.asked, self.exact, self.flight = (), (), ()
        elif self.asked != stall:
            self.asked = stall
            dumps, unreadable, silent = live_flight({r.rank: r.pid for r in self.job.ranks})
            self.flight, self.exact = tuple(dumps), exact(dumps, unreadable, silent)
        return with_exact(state, self.exact)

    def _notes(self) -> tuple[str, ...]:
        errors = [v.sample.stack_error for v in (self.state.ranks if self.state else ()) if v.sample.stack_error]
        readable = self.sampler.sockets_readable
        notes = watch_notes(self.stacks_wanted, self.stacks, errors, readable, self.job.how, self.restarted)
        return notes + ((self.ras.note,) if self.ras.note else ())

    def _follow_restart(self) -> None:
        """New rank pids under the same launcher or job id (an elastic restart): watch those from now on."""
        if self.state is None:
            return
        lost = [v for v in self.state.ranks if v.sample.status in ("gone", "zombie", "missing")]
        if not lost:
            return
        if len(lost) < len(self.state.ranks) and time.monotonic() - self.looked_again < REDISCOVER_S:
            return  # some ranks left: look again now and then; all of them: at once (a restart is due)
        self.looked_again = time.monotonic()
        if self.job.launcher_pid is not None and process_state(self.job.launcher_pid) in ("gone", "unknown"):
            return
        launcher = self.job.launcher_pid
        again = [j for j in discover(launcher) if j.id == self.job.id or (launcher and j.launcher_pid == launcher)]
        old = {r.pid for r in self.job.ranks}
        # a restart: all new pids, as many ranks; never a subset of the old ones (a crashed rank is not "restarted")
        fresh = next((j for j in again if not old & {r.pid for r in j.ranks} and len(j.ranks) >= len(old)), None)
        if fresh is None:
            return
        self.job = fresh
        self.sampler.close()
        self.sampler = Sampler(fresh, stacks=self.stacks, native=self.native, record=self.record)
        self.ras = RasPolls(fresh)
        self.gpus = GpuLooks(fresh)
        self.groups = GroupFiles(fresh)  # a restarted job makes its groups again
        self.restarted = (time.strftime("%H:%M:%S"), tuple(r.pid for r in fresh.ranks))
