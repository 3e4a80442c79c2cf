"""How a rank died, read for what it means: which deaths are a cause and which are echoes.

torchrun's "Root Cause (first observed failure)" is the failure with the earliest timestamp, in
whole seconds, ties going to the lowest rank: when one rank dies and its peers fail in the same
second, it often names a peer. A rank killed by the OOM killer or a crash signal is a cause; its
peers' errors, SIGTERM (the agent stopping the rest) and SIGABRT (torch's watchdog ending the
ranks left waiting) are echoes.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence

from ncclcheck.model.logs import ChildFailure

CRASH_SIGNALS = frozenset({"SIGKILL", "SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE"})

_HINTS = {
    "SIGKILL": "SIGKILL with no error of its own is most often the kernel's OOM killer"
    " (`dmesg -T | grep -i -e oom -e killed` on its host) or the scheduler",
    "SIGBUS": "SIGBUS under NCCL is most often /dev/shm too small for its shared-memory buffers"
    " (docker's 64 MB): run `ncclcheck env`",
    "SIGSEGV": "a crash in native code: run it again with TORCH_SHOW_CPP_STACKTRACES=1 and NCCL_DEBUG=INFO",
    "SIGABRT": "SIGABRT is ProcessGroupNCCL's abort (a watchdog timeout or NCCL error): the cause is earlier in"
    " that rank's output",
    "SIGTERM": "SIGTERM came from outside (the scheduler, or the agent tearing down after another failure)",
}


def signal_of(exitcode: int | None) -> str | None:
    """The signal's name for a negative exit code (Popen's way of saying "killed by")."""
    if exitcode is None or exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return None


def how(failure: ChildFailure) -> str | None:
    """ "signal SIGKILL" or "exit code 1", as torchrun's summary gave it (None when it gave neither)."""
    if failure.signal:
        return f"signal {failure.signal}"
    return f"exit code {failure.exitcode}" if failure.exitcode is not None else None


def hint(sig: str | None) -> str:
    """What dying of ``sig`` most often means ("" when nothing useful can be said)."""
    return _HINTS.get(sig or "", _HINTS["SIGSEGV"] if sig in CRASH_SIGNALS else "")


def killed(failures: Sequence[ChildFailure]) -> ChildFailure | None:
    """The rank a crash signal killed: torchrun's root cause if it is one, else the first such rank."""
    crashed = [f for f in failures if f.signal in CRASH_SIGNALS]
    return next((f for f in crashed if f.root_cause), crashed[0] if crashed else None)
