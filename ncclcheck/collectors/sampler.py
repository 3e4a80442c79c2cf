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
stands still inside a torch.distributed call (the same frames as at the last sample, no collective bytes since).
A rank that stands still outside one gets a closer look (``collectors.deep``): every thread with its locals, what
each waits on in the kernel, its child processes read the same way, and the source at their frames; what it waits
on is followed from there. Both are read once per place and kept while the rank stays there (the closer look is
taken again after ``REFRESH`` samples: a child may have moved or died), so a healthy job never pays for them.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psutil

from ncclcheck.collectors.control_plane import posted
from ncclcheck.collectors.deep import deep_look
from ncclcheck.collectors.processes import (
    exit_status,
    main_thread_cpu,
    main_thread_switches,
    normal_status,
    process_state,
    tracer_of,
)
from ncclcheck.collectors.pyspy import dump_all, dump_locals_all
from ncclcheck.collectors.rank_ends import RankEnds
from ncclcheck.collectors.recorder import Recorder
from ncclcheck.collectors.sockets import SMALL, TcpSocket, significant, socket_bytes, socket_inodes, tcp_sockets
from ncclcheck.collectors.source_code import code_at
from ncclcheck.model.args import FrameLocals, PostedOps
from ncclcheck.model.stacks import Frame, in_c10d, mine
from ncclcheck.model.waits import CodeAt, Deep
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
    tracer: str | None = None  # stopped under ptrace: who holds it


@dataclass(frozen=True)
class _Held:
    """What was read of a rank at its place: its locals, a closer look (outside a collective), and for how many
    samples it has been kept."""

    stack: tuple[Frame, ...]
    locals: tuple[FrameLocals, ...] | None
    deep: Deep | None
    age: int
    p2p: PostedOps | None = None


@dataclass(frozen=True)
class _Dumped:
    """A rank's last py-spy dump, its socket bytes at the last sample, and how many samples old the dump is."""

    net: int | None
    stack: tuple[Frame, ...]
    error: str | None
    age: int
    ran: tuple[float | None, int | None] = (None, None)  # the main thread's CPU seconds and switches at the dump


def _code(stack: tuple[Frame, ...]) -> CodeAt | None:
    """The statement at the innermost frame of the user's code (the file is parsed once per version)."""
    frame = next((f for f in stack if mine(f)), None)
    return code_at(frame.filename, frame.line) if frame is not None else None


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
        self.sockets: dict[int, TcpSocket] | None = None  # the socket table of the last sample
        # per pid: the last sample's stack, socket bytes, and main thread's CPU seconds and context switches
        self.seen: dict[int, tuple[tuple[Frame, ...], int | None, tuple[float | None, int | None]]] = {}
        self.held: dict[int, _Held] = {}  # per pid: what was read at its place
        self.locals_read = 0  # py-spy --locals dumps taken so far (what reading arguments has cost)
        self.deep_read = 0  # closer looks taken so far
        # where each rank's time goes: its main thread sampled at a fixed rate, in rounds (fail-slow's evidence)
        self.recorder = Recorder([r.pid for r in job.ranks]).start() if stacks and record else None
        self.ends = RankEnds()  # when each rank ends, and its exit code, before its launcher reaps it
        for r in job.ranks:
            self.ends.add(r.rank, r.pid)
        for r in job.ranks:
            try:
                self.procs[r.pid] = psutil.Process(r.pid)
                self.procs[r.pid].cpu_percent(None)
            except psutil.Error:
                pass

    def sample(self) -> Snapshot:
        by_rank = {r.rank: r for r in self.job.ranks}
        sockets = tcp_sockets()
        self.sockets = sockets
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
        frame_locals, deep, p2p = self._locals(dumps, states)
        rounds = self.recorder.take() if self.recorder is not None else {}
        ended = {e.pid: e for e in self.ends.ends()}
        samples = []
        for rank in self.job.expected_local():
            proc = by_rank.get(rank)
            if proc is None:
                samples.append(RankSample(rank, None, None, "", "missing", 0.0, 0, 0, None, None, (), None))
                continue
            st = states[proc.pid]
            end = ended.get(proc.pid)
            if end is not None and st.status in ("gone", "zombie") and st.exit_code is None:
                st = dataclasses.replace(st, exit_code=end.exit_code)
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
                    deep.get(proc.pid),
                    p2p.get(proc.pid),
                    end.time if end is not None and st.status in ("gone", "zombie") else None,
                    _code(stack),
                    st.tracer,
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
        self.ends.close()

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
    ) -> tuple[dict[int, tuple[FrameLocals, ...] | None], dict[int, Deep], dict[int, PostedOps]]:
        """Locals for the ranks standing still in a torch.distributed call, and a closer look (with locals) at those
        standing still outside one: read once per place, kept while the rank stands still there (not once it moved,
        though to the same frames); a closer look is taken again every ``REFRESH`` samples. With them, the
        point-to-point ops each has posted, where ``ncclcheck run``'s hook records them."""
        out: dict[int, tuple[FrameLocals, ...] | None] = {}
        deep: dict[int, Deep] = {}
        p2p: dict[int, PostedOps] = {}
        wanted, closer = [], []
        for pid, (stack, error) in dumps.items():
            st = states[pid]
            now = (stack, st.net, (st.main_cpu_s, st.switches))
            before = self.seen.get(pid)
            self.seen[pid] = now
            held = self.held.get(pid)
            still = before is not None and before[:2] == now[:2]
            # a rank that moved (collective bytes, or other frames since the last look) may have finished its call
            # and begun the next at the same frames (a loop's broadcast, its src now another): read it afresh
            if error is not None or not stack or not still:
                self.held.pop(pid, None)
            elif held is not None and held.stack == stack and (held.deep is None or held.age + 1 < REFRESH):
                self.held[pid] = dataclasses.replace(held, age=held.age + 1)
                out[pid] = held.locals
                if held.deep is not None:
                    deep[pid] = held.deep
                if held.p2p is not None:
                    p2p[pid] = held.p2p
            elif in_c10d(stack):
                wanted.append(pid)
            else:
                closer.append(pid)
        ranks = {r.pid: r.rank for r in self.job.ranks}
        asked = posted({ranks[pid]: pid for pid in wanted + closer if pid in ranks}) if wanted or closer else {}
        for pid, found in dump_locals_all(wanted, self.timeout_s, self.concurrency).items():
            self.held[pid] = _Held(dumps[pid][0], found, None, 0, asked.get(ranks.get(pid, -1)))
            out[pid] = found
        for pid, (look, found) in self._closer(closer).items():
            self.held[pid] = _Held(dumps[pid][0], found, look, 0, asked.get(ranks.get(pid, -1)))
            out[pid], deep[pid] = found, look
        for pid in wanted + closer:
            ops = self.held[pid].p2p
            if ops is not None:
                p2p[pid] = ops
        self.locals_read += len(wanted) + len(closer)
        self.deep_read += len(closer)
        return out, deep, p2p

    def _closer(self, pids: list[int]) -> dict[int, tuple[Deep, tuple[FrameLocals, ...] | None]]:
        if not pids:
            return {}
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(pids))) as pool:
            return dict(zip(pids, pool.map(lambda pid: deep_look(pid, self.sockets, self.timeout_s), pids)))

    def _state(self, rank: RankProc, sockets: dict[int, TcpSocket] | None) -> _State:
        proc = self.procs.get(rank.pid)
        if proc is None:
            return _State("gone")
        try:
            with proc.oneshot():
                raw = str(proc.status())
                status = normal_status(raw)
                if status == "zombie":
                    return _State("zombie", exit_code=exit_status(rank.pid))
                cpu, rss, threads = proc.cpu_percent(None), proc.memory_info().rss, proc.num_threads()
        except psutil.NoSuchProcess:
            return _State("gone")
        except psutil.Error:
            return _State("unknown")
        switches = main_thread_switches(rank.pid)  # before the CPU time: a switch in between makes it look awake
        tracer = tracer_of(rank.pid) if raw == psutil.STATUS_TRACING_STOP else None
        return _State(
            status, cpu, rss, threads, main_thread_cpu(rank.pid), self._net(rank, sockets), None, switches, tracer
        )

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
