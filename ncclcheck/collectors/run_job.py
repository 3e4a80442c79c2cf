"""The job under ``ncclcheck run``: the launcher started in its own session with the evidence switched on,
its output passed through to this terminal unchanged and kept in the run dir, ^C and SIGTERM handed to it
the way torchrun expects, and its whole process tree ended (bounded) before ncclcheck returns."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO

import psutil

END_GRACE_S = 30.0  # torchrun gives its workers 30 s after a SIGTERM before it kills them


class Launched:
    def __init__(self, argv: list[str], env: dict[str, str], log_path: str) -> None:
        self.log = open(log_path, "wb")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.started = time.time()
        self.pump = threading.Thread(target=self._pump, args=(self.proc.stdout,), daemon=True)
        self.pump.start()
        self.descendants: dict[int, psutil.Process] = {}

    def _pump(self, pipe: IO[bytes] | None) -> None:
        if pipe is None:
            return
        out = sys.stdout.buffer
        for chunk in iter(lambda: pipe.read1(65536), b""):  # type: ignore[attr-defined]
            self.log.write(chunk)
            self.log.flush()
            with contextlib.suppress(OSError, ValueError):
                out.write(chunk)
                out.flush()

    def remember_tree(self) -> None:
        """Note every process under the launcher: ranks run in their own sessions, and one that outlives the
        launcher must still be found and ended."""
        try:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self.descendants.setdefault(child.pid, child)
        except psutil.Error:
            pass

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self.pump.join(5.0)
        return code

    def end(self, grace_s: float = END_GRACE_S) -> None:
        """SIGTERM the launcher (it ends its workers), then SIGKILL whatever is left of the tree after ``grace_s``."""
        self.remember_tree()
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            self.wait(grace_s)
        self.remember_tree()
        left = [p for p in self.descendants.values() if _alive(p)]
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        _, still = psutil.wait_procs(left, timeout=min(grace_s, 10.0))
        for proc in still:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(still, timeout=10.0)
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait(10.0)

    def close(self) -> None:
        self.pump.join(5.0)
        self.log.close()


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
