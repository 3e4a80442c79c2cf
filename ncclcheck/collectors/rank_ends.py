"""When each rank process ends, to the millisecond, and with what exit code where the kernel still holds it.

The sampler looks every few seconds; a rank that leaves and a peer that fails 50 ms later (gloo fails the
survivor at once) fall in one sample. A pidfd (Linux >= 5.3) becomes readable the moment its process exits,
also for a process that is not our child, so the order of exits is exact. The exit code is read from the
zombie's /proc entry right then, before its parent (torchrun polls every 0.1 s) reaps it; when the parent won
the race it stays unknown. Without pidfd the ranks are polled every ``POLL_S``.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time

from ncclcheck.collectors.processes import exit_status, process_state
from ncclcheck.model.run import RankEnd

POLL_S = 0.05  # without a pidfd: how often the ranks are polled
WAKE_S = 5.0  # with pidfds the thread sleeps in select() until one ends or a new one is added (a byte on a pipe)


class RankEnds:
    """Watches rank pids from a thread of its own; ``add`` new ones as they appear, ``ends()`` what was seen."""

    def __init__(self) -> None:
        self.ended = threading.Event()  # set at every end: the caller's sampler takes a look right away
        self._lock = threading.Lock()
        self._fds: dict[int, tuple[int, int]] = {}  # fd -> (rank, pid)
        self._polled: dict[int, int] = {}  # pid -> rank, where no pidfd could be opened
        self._ends: list[RankEnd] = []
        self._watched: set[int] = set()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()  # add() and close() wake the thread's select()
        self._thread = threading.Thread(target=self._run, name="ncclcheck-rank-ends", daemon=True)
        self._thread.start()

    def add(self, rank: int, pid: int) -> None:
        with self._lock:
            if pid in self._watched:
                return
            self._watched.add(pid)
            try:
                self._fds[os.pidfd_open(pid)] = (rank, pid)
            except (AttributeError, OSError):
                self._polled[pid] = rank  # no pidfd here (old kernel, seccomp), or the pid is already gone
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def ends(self) -> tuple[RankEnd, ...]:
        with self._lock:
            return tuple(self._ends)

    def close(self) -> None:
        self._stop.set()
        self._wake()
        self._thread.join(2.0)
        with self._lock:
            for fd in [*self._fds, self._wake_r, self._wake_w]:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._fds.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                fds = list(self._fds)
            ready: list[int] = []
            with contextlib.suppress(OSError, ValueError):
                ready, _, _ = select.select([self._wake_r, *fds], [], [], POLL_S if self._polled else WAKE_S)
            for fd in ready:
                if fd == self._wake_r:
                    with contextlib.suppress(OSError):
                        os.read(self._wake_r, 4096)
                else:
                    self._ended_fd(fd)
            self._poll_rest()

    def _ended_fd(self, fd: int) -> None:
        with self._lock:
            rank, pid = self._fds.pop(fd)
        with contextlib.suppress(OSError):
            os.close(fd)
        self._record(rank, pid)

    def _poll_rest(self) -> None:
        with self._lock:
            polled = list(self._polled.items())
        for pid, rank in polled:
            if process_state(pid) in ("gone", "zombie"):
                with self._lock:
                    self._polled.pop(pid, None)
                self._record(rank, pid)

    def _record(self, rank: int, pid: int) -> None:
        end = RankEnd(rank, pid, time.time(), exit_status(pid))
        with self._lock:
            self._ends.append(end)
        self.ended.set()
