"""Find jobs started with ``torch.multiprocessing.spawn`` (``mp.spawn``): no torchrun, no RANK in the environment.

Each rank is a ``multiprocessing`` spawn (or forkserver) child of the user's script, and its rank is
the spawn index, the ``i`` that torch's ``_wrap(fn, i, args, error_file)`` passes to the user's
function. py-spy reads it from that frame's locals (``--nonblocking``); it also tells a torch rank
from any other multiprocessing child. The world size is ``nprocs`` from the parent's
``start_processes`` frame or WORLD_SIZE from the environment, whichever is larger (a job spawned on several
nodes has ranks elsewhere; their spawn index is then not their global rank, and the job says so), else the
number of children.
Without py-spy (or ptrace), a child with libtorch loaded counts, numbered in start order (spawn
starts index 0 first), and the job says so.
"""

from __future__ import annotations

import re
import socket
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import psutil

from ncclcheck.collectors.processes import cwd_of, environ, script_of, started_of
from ncclcheck.collectors.pyspy import dump_locals
from ncclcheck.model.watch import Job, RankProc
from ncclcheck.probes._sysfs import parse_int

CHILD_MARKS = ("from multiprocessing.spawn import spawn_main", "from multiprocessing.forkserver import main")
SPAWN_PY = "torch/multiprocessing/spawn.py"


def spawn_jobs() -> tuple[Job, ...]:
    """Every mp.spawn job on this node, its ranks numbered by their spawn index."""
    children: dict[int, list[psutil.Process]] = defaultdict(list)
    for proc in psutil.process_iter(["cmdline", "ppid"]):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if any(mark in cmdline for mark in CHILD_MARKS) and "RANK" not in environ(proc):
            children[proc.info["ppid"]].append(proc)
    return tuple(job for parent, procs in sorted(children.items()) if (job := _job(parent, procs)) is not None)


def _job(parent_pid: int, procs: list[psutil.Process]) -> Job | None:
    with ThreadPoolExecutor(max_workers=min(len(procs), 8)) as pool:
        indices = dict(zip((p.pid for p in procs), pool.map(lambda p: _index(p.pid), procs)))
    found = {pid: i for pid, i in indices.items() if i is not None}
    guessed = False
    if not found:  # no py-spy: torch ranks by libtorch, in start order
        torch_children = sorted(p.pid for p in procs if _has_torch(p.pid))
        found, guessed = {pid: i for i, pid in enumerate(torch_children)}, True
    if not found:
        return None
    orphaned = parent_pid <= 1  # the script that spawned them exited; init (or a subreaper) adopted them
    try:
        parent_cmdline = "" if orphaned else " ".join(psutil.Process(parent_pid).cmdline())
    except psutil.Error:
        parent_cmdline = ""
    # the Process psutil already holds: one that ended since it was listed has no environment, never an exception
    env = environ(next(p for p in procs if p.pid == min(found)))
    # A job spawned on several nodes (nprocs per node, WORLD_SIZE in all) has ranks elsewhere: the larger wins.
    world = max((None if orphaned else _nprocs(parent_pid)) or 0, parse_int(env.get("WORLD_SIZE")) or 0, len(found))
    host = socket.gethostname()
    ranks = tuple(
        sorted(
            (
                RankProc(pid, i, i, world, len(found), None, host, "", parse_int(env.get("MASTER_PORT")))
                for pid, i in found.items()
            ),
            key=lambda r: r.rank,
        )
    )
    how = "spawn-guessed" if guessed else "spawn-nodes" if world > len(found) else "spawn"
    script = (
        "(orphaned mp.spawn ranks: the script that spawned them has exited)" if orphaned else script_of(parent_cmdline)
    )
    launcher = None if orphaned else parent_pid
    return Job(
        f"spawn:{parent_pid}",
        world,
        None,
        launcher,
        ranks,
        script=script,
        cwd=cwd_of(min(found)),
        started=started_of([launcher] if launcher else list(found)),
        how=how,
    )


def _index(pid: int) -> int | None:
    for frame in dump_locals(pid) or ():
        if frame.function == "_wrap" and frame.filename.endswith(SPAWN_PY):
            return parse_int(frame.get("i"))
    return None


def _nprocs(parent_pid: int) -> int | None:
    for frame in dump_locals(parent_pid) or ():
        if frame.function in ("start_processes", "spawn") and frame.filename.endswith(SPAWN_PY):
            return parse_int(frame.get("nprocs"))
    return None


def _has_torch(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            return any(re.search(r"libtorch(_cpu|_python)?\.so", line) for line in f)
    except OSError:
        return False
