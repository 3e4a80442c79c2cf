"""Sample a job's ranks: psutil for state, CPU and memory; /proc for the main thread's CPU; sock_diag for
the bytes on each rank's TCP sockets; py-spy (non-blocking, time-limited) for the main thread's stack.

Never pauses or signals the job: py-spy runs with ``--nonblocking`` and the rest only reads /proc and
the kernel's socket table. py-spy calls run at most ``concurrency`` at a time, so 8+ ranks per node
stay cheap. A rank whose sockets moved bytes since the last sample is progressing whatever its stack
says, so it keeps its last stack for up to ``REFRESH`` samples instead of a fresh dump: a healthy gloo
job is dumped a quarter as often. A rank whose main thread has not run at all since its dump (no CPU time,
no context switch: blocked in a collective, a lock, a sleep) keeps that dump: its frames cannot have moved.
Every other rank is dumped at every sample.

The locals of the main thread (``py-spy --locals``: the collective's arguments) are read only for a rank that
stands still inside a torch.distributed call (the same frames as at the last sample, no collective bytes since),
or outside one with its main thread asleep since (no CPU time, no context switch: a ``work.wait()``).
They are read once per place and kept while the rank stays there, so a healthy job never pays for them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

from ncclcheck.collectors.processes import (
    exit_status,
    main_thread_cpu,
    main_thread_switches,
    normal_status,
    process_state,
)
from ncclcheck.collectors.pyspy import dump_all, dump_locals_all
from ncclcheck.collectors.recorder import Recorder
from ncclcheck.collectors.sockets import SMALL, TcpSocket, significant, socket_bytes, socket_inodes, tcp_sockets
from ncclcheck.model.args import FrameLocals
from ncclcheck.model.stacks import Frame, in_c10d
from ncclcheck.model.watch import Job, RankProc, RankSample, Snapshot

REFRESH = 4


@dataclass(frozen=True)
class _State:
    """What /proc and the socket table say of one rank at one sample."""

    status: str
    cpu_percent: float = 0.0
    rss: int = 0
    threads: int = 0
    main_cpu_s: float | None = None
    net: int | None = None
    exit_code: int | None = None
    switches: int | None = None  # the main thread's context switches so far


@dataclass(frozen=True)
class _Dumped:
    """A rank's last py-spy dump, its socket bytes at the last sample, and how many samples old the dump is."""

    net: int | None
    stack: tuple[Frame, ...]
    error: str | None
    age: int
    ran: tuple[float | None, int | None] = (None, None)  # the main thread's CPU seconds and switches at the dump


class Sampler:
    """Keeps each rank's psutil handle between samples, so CPU % is over the interval."""

    def __init__(
        self,
        job: Job,
        stacks: bool = True,
        concurrency: int = 4,
        timeout_s: float = 5.0,
        native: bool = False,
        record: bool = True,
    ) -> None:
        self.job, self.stacks, self.timeout_s, self.concurrency = job, stacks, timeout_s, concurrency
        self.native = native  # C/C++ frames too: py-spy pauses each rank briefly to unwind them
        self.procs: dict[int, psutil.Process] = {}
        self.dumped: dict[int, _Dumped] = {}
        self.sockets_readable = True
        self.socket_counts: dict[int, dict[int, int]] = {}  # per rank pid: bytes so far on each countable socket
        self.net_moved: dict[int, int] = {}  # per rank pid: bytes that counted as a collective's, since watching began
        self.last_sample: float | None = None
        self.floor = SMALL
        # per pid: the last sample's stack, socket bytes, and main thread's CPU seconds and context switches
        self.seen: dict[int, tuple[tuple[Frame, ...], int | None, tuple[float | None, int | None]]] = {}
        self.held: dict[int, tuple[tuple[Frame, ...], tuple[FrameLocals, ...] | None]] = {}  # per pid: place, locals
        self.locals_read = 0  # py-spy --locals dumps taken so far (what reading arguments has cost)
        # where each rank's time goes: its main thread sampled at a fixed rate, in rounds (fail-slow's evidence)
        self.recorder = Recorder([r.pid for r in job.ranks]).start() if stacks and record else None
        for r in job.ranks:
            try:
                self.procs[r.pid] = psutil.Process(r.pid)
                self.procs[r.pid].cpu_percent(None)
            except psutil.Error:
                pass

    def sample(self) -> Snapshot:
        by_rank = {r.rank: r for r in self.job.ranks}
        sockets = tcp_sockets()
        now = time.monotonic()
        # heartbeats are a rate (NCCL RAS: ~120 B/s a connection): the floor grows with the time between samples
        self.floor = max(SMALL, int(SMALL * (now - self.last_sample))) if self.last_sample is not None else SMALL
        self.last_sample = now
        self.sockets_readable = sockets is not None
        states = {r.pid: self._state(r, sockets) for r in self.job.ranks}
        live = (
            [pid for pid, s in states.items() if s.status not in ("gone", "zombie", "stopped")] if self.stacks else []
        )
        dumps = self._stacks(live, states)
        frame_locals = self._locals(dumps, states)
        rounds = self.recorder.take() if self.recorder is not None else {}
        samples = []
        for rank in self.job.expected_local():
            proc = by_rank.get(rank)
            if proc is None:
                samples.append(RankSample(rank, None, None, "", "missing", 0.0, 0, 0, None, None, (), None))
                continue
            st = states[proc.pid]
            stack, error = dumps.get(proc.pid, ((), None))
            samples.append(
                RankSample(
                    rank,
                    proc.local_rank,
                    proc.pid,
                    proc.host,
                    st.status,
                    st.cpu_percent,
                    st.rss,
                    st.threads,
                    st.main_cpu_s,
                    st.net,
                    stack,
                    error,
                    st.exit_code,
                    frame_locals.get(proc.pid),
                    rounds.get(proc.pid, ()),
                )
            )
        launcher = self.job.launcher_pid
        running = None if launcher is None else process_state(launcher) not in ("gone", "zombie", "unknown")
        if self.job.orphaned:
            running = False  # torchrun's ranks, handed to init: their launcher died before we looked
        return Snapshot(time.monotonic(), self.job, tuple(samples), running, self.recording)

    @property
    def recording(self) -> bool:
        """Whether rounds of sampled stacks are being recorded (and some rank could be read)."""
        return self.recorder is not None and self.recorder.readable

    def close(self) -> None:
        """End the recording (its py-spy processes) now."""
        if self.recorder is not None:
            self.recorder.close()

    def _stacks(self, pids: list[int], states: dict[int, _State]) -> dict[int, tuple[tuple[Frame, ...], str | None]]:
        """Each live rank's stack: the last dump while its main thread has not run since (no CPU time, no
        context switch: its frames cannot have moved; a rank blocked in a collective costs no dump), or while
        its sockets move (at most REFRESH samples); else a fresh dump."""
        kept: dict[int, tuple[tuple[Frame, ...], str | None]] = {}
        for pid in pids:
            last, now = self.dumped.get(pid), states[pid]
            if last is None or last.error is not None:
                continue
            ran = (now.main_cpu_s, now.switches)
            asleep = None not in ran and ran == last.ran and not self.native  # --native: C frames are asked for
            moved = now.net is not None and now.net != last.net
            if asleep or (moved and last.age + 1 < REFRESH):
                kept[pid] = (last.stack, None)
                # the counters stay those of the dump: the stack is as old as they are, not as old as this look
                self.dumped[pid] = _Dumped(now.net, last.stack, None, 0 if asleep else last.age + 1, last.ran)
        fresh = dump_all([p for p in pids if p not in kept], self.timeout_s, self.concurrency, self.native)
        for pid, (stack, error) in fresh.items():
            self.dumped[pid] = _Dumped(states[pid].net, stack, error, 0, (states[pid].main_cpu_s, states[pid].switches))
        return {**kept, **fresh}

    def _locals(
        self, dumps: dict[int, tuple[tuple[Frame, ...], str | None]], states: dict[int, _State]
    ) -> dict[int, tuple[FrameLocals, ...] | None]:
        """Locals for the ranks standing still in a torch.distributed call, or asleep outside one (a main thread
        blocked in ``work.wait()`` on an isend/irecv/batch handle shows only the user's frame): read once per
        place, kept while the rank stands still there (not once it moved, though to the same frames)."""
        out: dict[int, tuple[FrameLocals, ...] | None] = {}
        wanted = []
        for pid, (stack, error) in dumps.items():
            st = states[pid]
            now = (stack, st.net, (st.main_cpu_s, st.switches))
            before = self.seen.get(pid)
            self.seen[pid] = now
            held = self.held.get(pid)
            still = before is not None and before[:2] == now[:2]
            asleep = still and before is not None and None not in now[2] and before[2] == now[2]
            # a rank that moved (collective bytes, or other frames since the last look) may have finished its call
            # and begun the next at the same frames (a loop's broadcast, its src now another): read it afresh
            if error is not None or not stack or not still or not (in_c10d(stack) or asleep or held):
                self.held.pop(pid, None)
            elif held is not None and held[0] == stack:
                out[pid] = held[1]
            else:
                wanted.append(pid)
        for pid, found in dump_locals_all(wanted, self.timeout_s, self.concurrency).items():
            self.held[pid] = (dumps[pid][0], found)
            out[pid] = found
        self.locals_read += len(wanted)
        return out

    def _state(self, rank: RankProc, sockets: dict[int, TcpSocket] | None) -> _State:
        proc = self.procs.get(rank.pid)
        if proc is None:
            return _State("gone")
        try:
            with proc.oneshot():
                status = normal_status(str(proc.status()))
                if status == "zombie":
                    return _State("zombie", exit_code=exit_status(rank.pid))
                cpu, rss, threads = proc.cpu_percent(None), proc.memory_info().rss, proc.num_threads()
        except psutil.NoSuchProcess:
            return _State("gone")
        except psutil.Error:
            return _State("unknown")
        switches = main_thread_switches(rank.pid)  # before the CPU time: a switch in between makes it look awake
        return _State(status, cpu, rss, threads, main_thread_cpu(rank.pid), self._net(rank, sockets), None, switches)

    def _net(self, rank: RankProc, sockets: dict[int, TcpSocket] | None) -> int | None:
        """The bytes a rank's collectives have moved since watching began, or None when they cannot be counted."""
        inodes = socket_inodes(rank.pid) if sockets is not None else None
        if sockets is None or inodes is None:
            self.sockets_readable = False
            return None
        skip = frozenset({rank.store_port}) if rank.store_port else frozenset()
        now = socket_bytes(sockets, inodes, skip)
        before = self.socket_counts.get(rank.pid)
        self.socket_counts[rank.pid] = now
        if before is not None:  # the first look sets the baseline: what moved before it is not progress now
            self.net_moved[rank.pid] = self.net_moved.get(rank.pid, 0) + significant(before, now, self.floor)
        return self.net_moved.get(rank.pid, 0)
