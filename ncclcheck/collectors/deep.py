"""A closer look at a rank that stands still: every Python thread with its locals (one ``py-spy dump --locals
--nonblocking``), what each thread waits on in the kernel, its child processes (DataLoader workers, a ``subprocess``)
read the same way, and the source at the user's frames. Never pauses the job; read once per place by the sampler.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import psutil

from ncclcheck.collectors.processes import exit_status, normal_status
from ncclcheck.collectors.pyspy import DUMP_TIMEOUT_S, dump_threads
from ncclcheck.collectors.sockets import TcpSocket
from ncclcheck.collectors.source_code import code_at
from ncclcheck.collectors.waits import kernel_wait
from ncclcheck.model.args import FrameLocals
from ncclcheck.model.stacks import mine
from ncclcheck.model.waits import ChildSample, CodeAt, Deep, ThreadSample

MAX_CHILDREN = 16  # children read per rank (a DataLoader's workers, a shell and what it runs)
MAX_CODE = 64  # statements read per rank


def deep_look(
    pid: int, sockets: dict[int, TcpSocket] | None, timeout_s: float = DUMP_TIMEOUT_S
) -> tuple[Deep, tuple[FrameLocals, ...] | None]:
    """The rank's deeper evidence, and its main thread's locals (None when py-spy could not read them)."""
    threads, _ = dump_threads(pid, timeout_s)
    threads = tuple(_with_kernel(pid, t, sockets) for t in threads)
    main = threads[0] if threads and threads[0].name == "MainThread" else None
    others = tuple(t for t in threads if t is not main)
    children = _children(pid, sockets, timeout_s)
    everyone = [*threads, *(t for c in children for t in c.threads[:1])]
    deep = Deep(
        main.kernel if main is not None else kernel_wait(pid, pid, sockets),
        others,
        children,
        _code(everyone),
        main.locals if main is not None else (),
    )
    return deep, _frame_locals(main) if main is not None else None


def _with_kernel(pid: int, thread: ThreadSample, sockets: dict[int, TcpSocket] | None) -> ThreadSample:
    if not thread.tid:
        return thread
    return ThreadSample(thread.tid, thread.name, thread.frames, kernel_wait(pid, thread.tid, sockets), thread.locals)


def _frame_locals(main: ThreadSample) -> tuple[FrameLocals, ...]:
    """The main thread's frames with their locals, as ``collectors.pyspy.dump_locals`` gives them."""
    held = {(file, line): values for file, line, values in main.locals}
    return tuple(FrameLocals(f.function, f.filename, f.line, held.get((f.filename, f.line), ())) for f in main.frames)


def _children(pid: int, sockets: dict[int, TcpSocket] | None, timeout_s: float) -> tuple[ChildSample, ...]:
    try:
        procs = psutil.Process(pid).children(recursive=True)[:MAX_CHILDREN]
    except psutil.Error:
        return ()
    if not procs:
        return ()
    with ThreadPoolExecutor(max_workers=min(8, len(procs))) as pool:
        return tuple(pool.map(lambda p: _child(p, sockets, timeout_s), procs))


def _child(proc: psutil.Process, sockets: dict[int, TcpSocket] | None, timeout_s: float) -> ChildSample:
    try:
        with proc.oneshot():
            parent, status = proc.ppid(), normal_status(str(proc.status()))
            cmdline = " ".join(proc.cmdline())[:300]
            exe = os.path.basename(proc.exe()) if status != "zombie" else ""
    except psutil.Error:
        return ChildSample(proc.pid, 0, "", "gone")
    if status == "zombie":
        return ChildSample(proc.pid, parent, cmdline, status, exit_status(proc.pid))
    kernel = kernel_wait(proc.pid, proc.pid, sockets)
    if "python" not in exe and "python" not in cmdline.split(" ")[0]:
        return ChildSample(proc.pid, parent, cmdline, status, kernel=kernel)
    threads, error = dump_threads(proc.pid, timeout_s)
    threads = tuple(_with_kernel(proc.pid, t, sockets) for t in threads)
    return ChildSample(proc.pid, parent, cmdline, status, None, threads, kernel, error)


def _code(threads: list[ThreadSample]) -> tuple[CodeAt, ...]:
    """The statements at the user's frames of these threads (their innermost first)."""
    out: dict[tuple[str, int], CodeAt] = {}
    for thread in threads:
        for frame in thread.frames:
            key = (frame.filename, frame.line)
            if key in out or not mine(frame) or len(out) >= MAX_CODE:
                continue
            found = code_at(*key)
            if found is not None:
                out[key] = found
    return tuple(out.values())
