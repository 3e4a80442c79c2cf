"""Inside one rank: what its main thread waits on, followed through its threads and child processes to the end.

Each hop rests on exact evidence: the library frame a thread stands in (a DataLoader's ``_next_data``, ``Popen.wait``,
``Queue.get``, ``Event.wait``), the statement at the user's line (``with stats_lock:``, ``batches.get()``), its
locals (the DataLoader's ``worker_id``), and the kernel (the system call, the file descriptor and its target, the
child a ``wait4`` names). The end is a thread or process that waits on nothing inside the rank:
- computing (its thread runs), sleeping (``time.sleep``, alone or in a poll loop), reading a file, pipe or FIFO,
  a socket outside the job, a child that does not finish, a process that has exited;
- a lock no live thread holds, a queue, event or condition no live thread fills or signals;
- a circle of waits (a deadlock between threads);
- unknown: the target could not be read, and the hop says which and why.
A thread in a collective is not followed here: it waits on other ranks (``analysis.watch.graph``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ncclcheck.analysis.stacks import collective, cuda_sync, loader_wait, user_frame
from ncclcheck.model.stacks import Frame
from ncclcheck.model.waits import ChildSample, CodeAt, Deep, End, Hop, KernelWait, ThreadSample
from ncclcheck.model.watch import RankView

WORKER_LOOP = "_worker_loop"
SUBPROCESS = ("wait", "_wait", "_try_wait", "communicate")  # Popen's, by their last name
SLEEPS = frozenset({"clock_nanosleep", "nanosleep", "pause"})
READS = frozenset({"read", "pread64", "readv", "recvfrom", "recvmsg", "recvmmsg", "poll", "ppoll", "select"})
READS |= {"pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2"}
SOCKET_CALLS = frozenset({"accept", "accept4", "connect"})
OPENS = frozenset({"open", "openat"})
FIFO_WCHAN = ("wait_for_partner", "fifo_open", "pipe_read", "pipe_write")
BUSY_PERCENT = 25.0  # main-thread CPU over a sample interval that says it runs (a loaded node gives it less)
# a main thread the kernel found runnable at the look (R) that also ran this much of the interval: it runs, on a node
# whose other processes leave it less than BUSY_PERCENT
RUNNABLE_PERCENT = 5.0
_HopMaker = Callable[[str], Hop]  # a thread's step: its who, site and code, with the words given


@dataclass(frozen=True)
class Followed:
    """The hops inside a rank, from its main thread to the end, and the end's class."""

    hops: tuple[Hop, ...]
    end: End

    @property
    def fix_class(self) -> End:
        """The class whose fix applies: a lock held across another wait is the lock's to fix (do not hold it across
        a sleep or blocking I/O), a child process that never ends the child's; else where the chain ends."""
        first = self.hops[0].what if self.hops else ""
        if first.startswith("waits for lock ") and "held by" in first:
            return "lock"
        if first.startswith("waits for its child pid"):
            return "child"
        return self.end


@dataclass(frozen=True)
class _Proc:
    """A process of the rank's tree as the follower sees it: its label, threads (main first) and children."""

    pid: int
    label: str  # "rank 1", "rank 1's DataLoader worker (pid 4312)"
    threads: tuple[ThreadSample, ...]
    children: tuple[ChildSample, ...]  # every descendant of the rank; a process picks its own by parent
    code: Deep


def follow(v: RankView) -> Followed | None:
    """The rank's main thread's wait followed to its end; None when it waits in a collective (on other ranks) or its
    stack is not known."""
    stack = v.sample.stack
    if not stack or collective(stack) or v.collective:
        return None
    deep = v.sample.deep or Deep()
    if v.sample.code is not None and deep.code_at(v.sample.code.file, v.sample.code.line) is None:
        deep = dataclasses.replace(deep, code=(*deep.code, v.sample.code))
    main = ThreadSample(v.sample.pid or 0, "MainThread", stack, deep.kernel, deep.main_locals)
    if deep.kernel is None and _computes(v):
        main = ThreadSample(main.tid, main.name, stack, KernelWait(None, running=True), deep.main_locals)
    proc = _Proc(v.sample.pid or 0, f"rank {v.rank}", (main, *deep.threads), deep.children, deep)
    hops, end = _thread(proc, main, f"rank {v.rank}", set())
    return Followed(tuple(hops), end)


def _computes(v: RankView) -> bool:
    """Whether the main thread computes, by its CPU over the last interval (and the kernel's state at the look)."""
    cpu = v.main_cpu_percent
    if cpu is None:
        return False
    return cpu >= BUSY_PERCENT or (v.sample.status == "running" and cpu >= RUNNABLE_PERCENT)


def _thread(proc: _Proc, thread: ThreadSample, who: str, seen: set[tuple[int, int]]) -> tuple[list[Hop], End]:
    """The hops from ``thread`` on, and where they end."""
    if (proc.pid, thread.tid) in seen:
        return [Hop(who, "waits on a thread already in this chain: the threads wait on one another")], "deadlock"
    seen = seen | {(proc.pid, thread.tid)}
    frame = user_frame(thread.frames)
    code = proc.code.code_at(frame.filename, frame.line) if frame else None
    site = f"{frame.filename}:{frame.line}" if frame else None
    functions = {f.function.rsplit(".", 1)[-1] for f in thread.frames}
    files = [f.filename for f in thread.frames]

    def hop(what: str) -> Hop:
        return Hop(who, what, site, code.text if code else None, frame.function if frame else None)

    if loader_wait(thread.frames):
        return _dataloader(proc, thread, hop, seen)
    if any(f.endswith("subprocess.py") for f in files) and functions & set(SUBPROCESS):
        return _subprocess(proc, thread, hop, seen)
    if cuda_sync(thread.frames):
        return [
            hop(
                "waits at a CUDA synchronisation: for the GPU's queue (an NCCL collective not completed, or a "
                "kernel still running)"
            )
        ], "gpu"
    waits = _waits_on(thread, code)
    if waits is not None:
        known = identity(thread, frame, waits[1]) if frame is not None else None
        return _object(proc, thread, (waits[0], waits[1], known), code, hop, seen)
    return _kernel(thread, code, hop)


def _waits_on(thread: ThreadSample, code: CodeAt | None) -> tuple[str, str] | None:
    """(kind, object) of a thread blocked on a Python synchronisation object: a lock it enters, a queue it gets
    from, an event or condition it waits on, a thread it joins. None when it is not one (or the kernel shows it
    running)."""
    kernel = thread.kernel
    if kernel is not None and kernel.running:
        return None
    functions = [f.function for f in thread.frames if not f.native]
    objects = [c.rpartition(".")[0] for c in (code.calls if code else ()) if "." in c]
    method = {c.rpartition(".")[0]: c.rpartition(".")[2] for c in (code.calls if code else ()) if "." in c}
    if any(f in ("Queue.get", "SimpleQueue.get") for f in functions):
        return "queue", next((o for o in objects if method.get(o) == "get"), "")
    if "Event.wait" in functions:
        return "event", next((o for o in objects if method.get(o) == "wait"), "")
    if "Thread.join" in functions or "Thread._wait_for_tstate_lock" in functions:
        return "join", next((o for o in objects if method.get(o) == "join"), "")
    if any(f in ("Condition.wait", "Condition.wait_for", "Semaphore.acquire", "Barrier.wait") for f in functions):
        return "condition", next((o for o in objects if method.get(o) in ("wait", "wait_for", "acquire")), "")
    futex = kernel is not None and kernel.syscall in ("futex", "futex_waitv")
    if code is not None and code.enters and (futex or kernel is None):
        return "lock", code.enters[0]
    acquire = next((o for o in objects if method.get(o) == "acquire"), None)
    if acquire is not None and (futex or kernel is None):
        return "lock", acquire
    return None


def identity(thread: ThreadSample, frame: Frame, expr: str) -> str | None:
    """The address of the object a name stands for in a frame (py-spy's repr of a local: ``<_thread.lock at
    0x7f..>``): two frames naming one object by different names (a lock passed as an argument) are matched by it."""
    values = next((v for f, n, v in thread.locals if f == frame.filename and n == frame.line), ())
    text = next((r for name, r in values if name == expr), None)
    if text is None or " at 0x" not in text:
        return None
    return text.rsplit(" at ", 1)[1].rstrip(">")


def _object(
    proc: _Proc,
    thread: ThreadSample,
    waits: tuple[str, str, str | None],
    code: CodeAt | None,
    hop: _HopMaker,
    seen: set[tuple[int, int]],
) -> tuple[list[Hop], End]:
    kind, obj, known = waits
    name = f"`{obj}`" if obj else {"queue": "a queue", "event": "an event", "lock": "a lock"}.get(kind, "a condition")
    others = [t for t in proc.threads if t.tid != thread.tid]
    if kind == "lock":
        mine = code is not None and obj in code.holds
        if mine:
            return [hop(f"waits to take {name}, which it already holds itself: a Lock is not reentrant")], "deadlock"
        holder = next((t for t in others if _holds(proc, t, obj, known)), None)
        if holder is not None:
            first = hop(f"waits for lock {name}, held by {_thread_name(holder)}")
            hops, end = _thread(proc, holder, f"{proc.label}'s {_thread_name(holder)}", seen)
            return [first, *hops], end
        return [
            hop(
                f"waits for lock {name}, which no live thread of {proc.label} holds in a `with` block: the thread "
                "that took it may have ended or died holding it (an acquire() with no release, or an exception "
                "between them)"
            )
        ], "lock"
    what = {"queue": "to get from", "event": "for", "join": "for the thread", "condition": "on"}[kind]
    fillers = dict(code.fillers).get(obj, ()) if code is not None and obj else ()
    filler = next((t for t in others if _runs(t, fillers)), None) if fillers else None
    if filler is None and kind == "join" and obj:
        filler = next((t for t in others if obj.rsplit(".", 1)[-1] in t.name), None)
    if filler is not None:
        doing = {"queue": "fills it", "event": "sets it", "join": "", "condition": "signals it"}[kind]
        first = hop(f"waits {what} {name}; {_thread_name(filler)} {doing}".rstrip())
        hops, end = _thread(proc, filler, f"{proc.label}'s {_thread_name(filler)}", seen)
        return [first, *hops], end
    if fillers:
        runs = ", ".join(f"{f}()" for f in fillers[:3])
        why = (
            f"no live thread of {proc.label} runs {runs}, which {'fills' if kind == 'queue' else 'signals'} it: "
            "the thread that would has ended, died or never started"
        )
    elif others:
        why = (
            f"none of {proc.label}'s other threads ({', '.join(_thread_name(t) for t in others[:4])}) fills or "
            "signals it, as far as their code shows"
        )
    else:
        why = f"{proc.label} has no other thread to fill or signal it"
    return [hop(f"waits {what} {name}: {why}")], "nobody"


def _holds(proc: _Proc, thread: ThreadSample, obj: str, known: str | None) -> bool:
    """Whether ``thread`` stands inside a ``with`` block of the object (in any of its user frames): the same object
    by address where both sides' locals show it (``known``: the waiter's), else the same name."""
    for frame in thread.frames:
        code = proc.code.code_at(frame.filename, frame.line)
        for expr in code.holds if code is not None else ():
            theirs = identity(thread, frame, expr)
            if (known is not None and theirs == known) or (expr == obj and (known is None or theirs is None)):
                return True
    return False


def _runs(thread: ThreadSample, functions: Sequence[str]) -> bool:
    """Whether one of the thread's frames is one of ``functions`` (qualified as py-spy names them)."""
    return any(f.function == name or f.function.endswith("." + name) for f in thread.frames for name in functions)


def _thread_name(thread: ThreadSample) -> str:
    return f"thread {thread.name}" if thread.name else f"thread {thread.tid}"


def _dataloader(proc: _Proc, thread: ThreadSample, hop: _HopMaker, seen: set[tuple[int, int]]) -> tuple[list[Hop], End]:
    workers = [c for c in proc.children if c.parent == proc.pid and _is_worker(c)]
    wanted = _worker_id(thread)
    chosen = next((c for c in workers if _worker_index(c) == wanted), None) if wanted is not None else None
    if chosen is None:
        dead = [c for c in workers if c.status in ("zombie", "gone")]
        busy = [c for c in workers if c not in dead and not _idle_worker(c)]
        chosen = next(iter(dead or busy), None)
    if chosen is None:
        if not workers:
            return [hop("waits for its DataLoader, whose worker processes could not be seen")], "unknown"
        return [hop(f"waits for its DataLoader; its {len(workers)} worker(s) are idle, waiting for work")], "unknown"
    hops, end = _child(proc, chosen, f"{proc.label}'s DataLoader worker (pid {chosen.pid})", seen)
    return [hop(f"waits for its DataLoader worker (pid {chosen.pid})"), *hops], end


def _is_worker(child: ChildSample) -> bool:
    main = child.main
    return child.status in ("zombie", "gone", "stopped") or (
        main is not None and any(f.function == WORKER_LOOP for f in main.frames)
    )


def _idle_worker(child: ChildSample) -> bool:
    """A worker at the top of its loop, waiting for the next index (no dataset code and no fetch on its stack)."""
    main = child.main
    if main is None:
        return False
    inner = [f for f in main.frames if f.function != "<listcomp>"]
    at = next((i for i, f in enumerate(inner) if f.function == WORKER_LOOP), None)
    return at is not None and not any("fetch" in f.function or not _library(f) for f in inner[:at])


def _library(frame: Frame) -> bool:
    return "/site-packages/" in frame.filename or "/lib/python" in frame.filename or frame.filename.startswith("<")


def _worker_id(thread: ThreadSample) -> int | None:
    value = thread.local("worker_id")
    return int(value) if value is not None and value.isdigit() else None


def _worker_index(child: ChildSample) -> int | None:
    """The worker's index: the ``i`` of the DataLoader loop that forked it (its stack keeps that frame)."""
    main = child.main
    value = main.local("i") if main is not None else None
    return int(value) if value is not None and value.isdigit() else None


def _subprocess(proc: _Proc, thread: ThreadSample, hop: _HopMaker, seen: set[tuple[int, int]]) -> tuple[list[Hop], End]:
    mine = [c for c in proc.children if c.parent == proc.pid]
    pid = thread.kernel.child if thread.kernel is not None else None
    chosen = next((c for c in mine if c.pid == pid), None) or (mine[0] if len(mine) == 1 else None)
    if chosen is None:
        what = f"pid {pid}" if pid and pid > 0 else "a child process"
        return [hop(f"waits for {what} to exit, which could not be seen")], "unknown"
    label = f"its child pid {chosen.pid} (`{_command(chosen)}`)"
    hops, end = _child(proc, chosen, f"{proc.label}'s child pid {chosen.pid}", seen)
    return [hop(f"waits for {label} to exit"), *hops], end


def _command(child: ChildSample) -> str:
    return child.cmdline if len(child.cmdline) <= 60 else child.cmdline[:57] + "..."


def _child(proc: _Proc, child: ChildSample, who: str, seen: set[tuple[int, int]]) -> tuple[list[Hop], End]:
    """A child process followed: its main thread where py-spy read it, else its state and kernel wait."""
    if child.status in ("zombie", "gone"):
        how = _exit_words(child.exit_code) if child.status == "zombie" else "has exited"
        return [Hop(who, f"{how}: what waits on it will not get its answer")], "exited"
    if child.status == "stopped":
        return [Hop(who, f"is stopped (SIGSTOP or a debugger; `kill -CONT {child.pid}` resumes it)")], "child"
    main = child.main
    if main is not None:
        inner = _Proc(child.pid, who, child.threads, proc.children, proc.code)
        return _thread(inner, main, who, seen)
    kernel = child.kernel
    if kernel is not None and kernel.running:
        return [Hop(who, f"runs (`{_command(child)}`, busy on a CPU)")], "computing"
    state = f" in {kernel.syscall}" if kernel is not None and kernel.syscall else ""
    where = f" ({kernel.wchan})" if kernel is not None and kernel.wchan else ""
    ends = _kernel_end(kernel)
    words = f"has not exited: `{_command(child)}` is blocked{state}{where}"
    if ends is not None:
        words += f": {ends[0]}"
    return [Hop(who, words)], ends[1] if ends is not None else "child"


def _exit_words(code: int | None) -> str:
    if code is None:
        return "has exited"
    return f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"


def _kernel(thread: ThreadSample, code: CodeAt | None, hop: _HopMaker) -> tuple[list[Hop], End]:
    """A thread whose wait is told by the kernel (or its code) alone: sleeping, reading, a socket, computing."""
    kernel = thread.kernel
    sleeping = kernel is not None and kernel.syscall in SLEEPS
    if sleeping or (kernel is None and code is not None and any(c.endswith("sleep") for c in code.calls)):
        loop = f", in a poll loop (`{code.loop}`)" if code is not None and code.loop else ""
        return [hop(f"sleeps{loop}")], "sleeping"
    found = _kernel_end(kernel)
    if found is not None:
        return [hop(found[0])], found[1]
    if kernel is not None and kernel.running:
        return [hop("computes")], "computing"
    if kernel is not None and kernel.syscall:
        where = f" ({kernel.wchan})" if kernel.wchan else ""
        return [hop(f"is blocked in {kernel.syscall}{where}: what it waits on could not be read")], "unknown"
    return [
        hop("waits on something its stack and the kernel do not name (py-spy --native shows the C frames)")
    ], "unknown"


def _kernel_end(kernel: KernelWait | None) -> tuple[str, End] | None:
    """Words and end class for a kernel wait on a file, pipe, FIFO or socket; None when it is none of those."""
    if kernel is None or kernel.syscall is None:
        return None
    fd = f" (fd {kernel.fd})" if kernel.fd is not None else ""
    target = kernel.target or ""
    if kernel.syscall in OPENS and target:
        if kernel.wchan in FIFO_WCHAN:
            return f"opens the FIFO {target}, which blocks until a process opens its other end", "reading"
        return f"opens {target} (blocked in the kernel: {kernel.wchan or 'unknown'})", "reading"
    if kernel.syscall in SOCKET_CALLS or kernel.listening:
        if kernel.syscall == "connect":
            return f"connects a socket{fd} to {kernel.peer or 'a peer'}, which does not answer", "socket"
        return f"waits for a connection on a listening socket{fd}", "socket"
    if kernel.syscall in READS or kernel.syscall == "write":
        reading = "writes to" if kernel.syscall == "write" else "reads"
        if kernel.peer:
            return f"{reading} a TCP socket{fd} to {kernel.peer}, which has sent nothing", "socket"
        if target.startswith("socket:"):
            return f"{reading} a socket{fd} ({target})", "socket"
        if target.startswith("pipe:"):
            return f"{reading} a pipe{fd} ({target}) that nothing writes to", "reading"
        if target:
            return f"{reading} {target}{fd}, which does not return", "reading"
    return None
