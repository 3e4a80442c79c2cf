"""Python stack dumps pasted into logs and tickets (py-spy ``dump`` text, faulthandler, gdb ``py-bt``, a condensed
listing of top functions), as read: each process with its threads, and where each process stands."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ncclcheck.model.stacks import Frame

# where a process stands, as its threads show it (analysis/stacks.place):
# - collective: in a torch.distributed call (its op in ``op``), on any of its threads;
# - startup: in init_process_group or a group's creation (a call every rank of the world makes);
# - cuda-sync: the host waits on the GPU (a synchronize, a blocking copy): with NCCL, on a collective not completed;
# - backward: its main thread waits on the autograd engine, whose threads run the gradient hooks' collectives;
# - dataloader: its main thread waits on its DataLoader's workers;
# - elsewhere: in its own code, busy or idle, outside any of the above;
# - launcher: torchrun's (or another launcher's) agent, not a rank;
# - idle-worker: a worker process waiting for its next task (a Ray worker's main loop), not a rank at work;
# - unreadable: its dump failed (py-spy could not suspend it): evidence, a process in the kernel's uninterruptible
#   sleep (a driver, a file system) often is the one that matters;
# - crashed: faulthandler's dump after a fatal error (a segfault, an abort): where it crashed, not what it waits on;
# - unknown: no main thread in the paste (a window cut before it).
Place = Literal[
    "collective",
    "startup",
    "cuda-sync",
    "backward",
    "dataloader",
    "elsewhere",
    "launcher",
    "idle-worker",
    "unreadable",
    "crashed",
    "unknown",
]
WAITING: frozenset[Place] = frozenset({"collective", "startup", "cuda-sync", "backward"})  # on the other ranks
NOT_RANKS: frozenset[Place] = frozenset({"launcher", "idle-worker", "crashed", "unknown"})  # judged by no wait
Format = Literal["py-spy", "faulthandler", "gdb", "listing", "frames"]


@dataclass(frozen=True)
class DumpedThread:
    """One thread of a dump: its id and name as printed, py-spy's idle/active guess, its frames innermost first."""

    tid: str
    name: str | None
    active: bool | None  # None: the format does not say
    frames: tuple[Frame, ...]
    line: int  # the line of its header in the file (1-based)

    @property
    def main(self) -> bool:
        return self.name == "MainThread"


@dataclass(frozen=True)
class DumpedProcess:
    """One process of a paste: the py-spy header's pid and command line (or process title), its threads."""

    label: str  # how the paste names it: "PID 309 (sglang::scheduler_TP6)", "trace-jean-zay-iam52 #9"
    pid: int | None
    command: str | None
    threads: tuple[DumpedThread, ...]
    line: int  # where it starts in the file
    format: Format
    rank: int | None = None  # only where the paste says it (a ``[rank3]:`` prefix)
    failed: str | None = None  # why its dump failed ("EPERM: Operation not permitted")
    children: tuple[tuple[int, bool], ...] = ()  # (pid, exited) of its children in a ``ps --forest`` beside it
    source: str = ""  # the file it was read from
    fatal: str | None = None  # the fatal error faulthandler dumped it for ("Segmentation fault")

    @property
    def main(self) -> DumpedThread | None:
        named = next((t for t in self.threads if t.main), None)
        if named is not None:
            return named
        unnamed = [t for t in self.threads if t.name is None]
        if len(unnamed) != len(self.threads):
            return None  # py-spy names every thread: its main thread is not in the paste
        # a format without thread names (a listing, bare frames, faulthandler, gdb): its one thread, else the one
        # thread whose outermost frame is a module's (the script the interpreter runs)
        if len(unnamed) == 1:
            return unnamed[0]
        scripts = [t for t in unnamed if t.frames and t.frames[-1].function == "<module>"]
        return scripts[0] if len(scripts) == 1 else None


@dataclass(frozen=True)
class StackDump:
    """The stack dumps of one file: its processes, or why they cannot be read."""

    source: str
    processes: tuple[DumpedProcess, ...]
    refused: str | None = None  # the stacks are there but cannot be told apart (several writers interleaved)


@dataclass(frozen=True)
class Stood:
    """Where one process of a dump stands, as analysis/stacks reads its threads."""

    process: DumpedProcess
    place: Place
    op: str | None  # the collective or world call, where one
    thread: DumpedThread | None  # the thread that shows it
    site: str | None  # ``file:line (function)`` of the innermost frame of the user's (or a library's) code
    words: str  # in plain words: "waits in all_reduce (c10d)", "busy in _apply (penaltylib/min_new_tokens.py:78)"
    certain: bool = True  # False where only a function's name suggests it (a copy to the device)
