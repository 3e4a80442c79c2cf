"""A chain of waits in words, and the fix for where it ends.

"rank 0 waits in all_reduce at train.py:40 for rank 1; rank 1, at train.py:33 in train (`for batch in loader:`),
waits for its DataLoader worker (pid 4312); rank 1's DataLoader worker (pid 4312), at dataset.py:41 in
Shards.__getitem__ (`with open(path, "rb") as f:`), opens the FIFO /data/x, which blocks until a process opens its
other end".
"""

from __future__ import annotations

from collections.abc import Sequence

from ncclcheck.model.ranks import span
from ncclcheck.model.stacks import short
from ncclcheck.model.waits import End, Hop
from ncclcheck.model.watch import RankView

FIXES: dict[End, str] = {
    "computing": (
        "the rank computes while the others wait: if the work is legitimately long (an evaluation, a checkpoint on "
        "one rank), do it on every rank or raise the collective timeout; if it should have ended, it loops (a "
        "condition that never turns, data-dependent work): its line shows where"
    ),
    "sleeping": (
        "the rank sleeps, or polls for something that never comes (a file, a flag, a service): check what its loop "
        "waits for; put a deadline on such waits, and never make a rank wait for a condition only some ranks set"
    ),
    "reading": (
        "a read that never returns: a FIFO or pipe with no writer, a hung network filesystem (NFS, Lustre), a "
        "device; check that path from the node (`ls`, `cat`, `dmesg`); for a DataLoader, DataLoader(timeout=...) "
        "turns a stuck worker into an error that names it"
    ),
    "socket": (
        "a socket outside the job that does not answer (a metrics or data service, a download, a database): give "
        "the call a timeout (socket.settimeout, a client's timeout) and check that service from this node"
    ),
    "child": (
        "a child process that does not finish: give subprocess.run(..., timeout=...) a timeout, or look at what "
        "the child waits for (its state above); DataLoader workers: DataLoader(timeout=...)"
    ),
    "exited": (
        "a process the others wait on has exited: read why (its log, `ncclcheck logs`; killed by signal 9: the OOM "
        "killer, `dmesg`); the others cannot finish without it"
    ),
    "lock": (
        "a lock no live thread releases: take locks only in `with` blocks (never acquire() without a release in "
        "finally), do not hold one across a sleep or blocking I/O, and let a thread that fails release what it holds"
    ),
    "nobody": (
        "nothing will fill the queue or signal the event the thread waits for: the thread that should has ended or "
        "died (its exception is in the rank's log); wait with a timeout and check that the producer is alive"
    ),
    "deadlock": (
        "the waits run in a circle: order them so that one side can go on (the same order of collectives and group "
        "creation on every rank; locks taken in one order; a Lock is not reentrant: use RLock)"
    ),
    "gpu": (
        "the thread waits for the GPU: an NCCL collective that has not completed (see its Flight Recorder, "
        "`ncclcheck logs`) or a long kernel; py-spy dump --native shows where"
    ),
    "absent": (
        "the rank never started or is not there: every rank of the world must start and call init_process_group "
        "with the same world size (torchrun --nnodes/--nproc-per-node, WORLD_SIZE) and reach the same calls"
    ),
    "unknown": (
        "what it waits on could not be read: py-spy dump --native --pid PID shows its C frames; "
        "ncclcheck watch --native too"
    ),
}


def sentence(hops: Sequence[Hop]) -> str:
    """The chain as one sentence: each hop with its place in the user's code."""
    return "; ".join(_hop(h) for h in hops)


def _hop(h: Hop) -> str:
    """``rank 1, at train.py:33 (`for batch in loader:`), waits for ...``."""
    if not h.site:
        return f"{h.who} {h.what}"
    code = f" (`{h.code}`)" if h.code else ""
    inside = f" in {h.function}" if h.function and h.function != "<module>" else ""
    return f"{h.who}, at {short(h.site)}{inside}{code}, {h.what}"


def waiting(waiters: Sequence[RankView], op: str, on: Sequence[int]) -> Hop:
    """The first hop: the ranks that wait, where, and for whom."""
    sites = sorted({short(v.call_site) for v in waiters if v.call_site})
    codes = {v.sample.code.text for v in waiters if v.sample.code is not None}
    code = f" (`{codes.pop()}`)" if len(sites) == 1 and len(codes) == 1 else ""
    at = f" at {sites[0]}{code}" if len(sites) == 1 else f" at {', '.join(sites)}" if sites else ""
    verb = "waits" if len(waiters) == 1 else "wait"
    return Hop(f"rank {span([v.rank for v in waiters])}", f"{verb} in {op}{at} for rank {span(list(on))}")
