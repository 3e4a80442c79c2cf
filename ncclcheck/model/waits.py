"""What a rank's threads and child processes wait on, as the kernel and the source show it; and a chain of waits.

Facts (collected by ``collectors.waits`` and ``collectors.source_code``, read by ``analysis.watch.local``):
- ``KernelWait``: the system call a thread is blocked in and what it blocks on (``/proc/PID/task/TID/syscall`` and
  ``wchan``; a file descriptor's target from ``/proc/PID/fd``, a TCP socket's peer from the socket table);
- ``ThreadSample``: one Python thread's frames (py-spy) and its kernel wait;
- ``ChildSample``: a child process of a rank (a DataLoader worker, a ``subprocess``), its state and threads;
- ``CodeAt``: the statement at a frame's line, read with Python's ``ast``: its text, the ``with`` blocks around it,
  what it calls, the loop it is in, and which functions of the file fill what it waits on.
A finding's ``chain`` is the waits followed to their end, one ``Hop`` each.
Each type reads back its own ``to_json`` (a node agent's line carries them to the viewer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ncclcheck.model.stacks import Frame

# Where a chain of waits ends: the class of the culprit's wait, which picks the fix.
End = Literal[
    "computing",  # a thread busy in its own code
    "sleeping",  # time.sleep, alone or in a poll loop
    "reading",  # a read of a file, a pipe or a FIFO that does not return
    "socket",  # a socket outside the job that does not answer (or a connect, an accept)
    "child",  # a child process that does not finish (its own end, where it has none of ours)
    "exited",  # a process that has exited (a worker killed, a rank gone)
    "absent",  # a rank that never started, or runs nowhere to be seen
    "lock",  # a lock no live thread holds (the holder died), or one held across a wait
    "nobody",  # a queue, event or condition no live thread fills or signals
    "deadlock",  # waits that run in a circle
    "gpu",  # a CUDA synchronisation: the GPU queue
    "unknown",  # a wait whose target could not be read
]
ENDS: tuple[End, ...] = (
    "computing",
    "sleeping",
    "reading",
    "socket",
    "child",
    "exited",
    "absent",
    "lock",
    "nobody",
    "deadlock",
    "gpu",
    "unknown",
)


@dataclass(frozen=True)
class KernelWait:
    """A thread's system call as the kernel shows it. ``syscall`` None: running (``running``) or not readable."""

    syscall: str | None
    wchan: str = ""
    running: bool = False
    fd: int | None = None
    target: str | None = None  # what ``fd`` (or an open's path) is: a path, ``pipe:[N]``, ``socket:[N]``
    peer: str | None = None  # a TCP socket's remote end, ``10.0.0.5:8080``
    local: str | None = None  # a TCP socket's local end
    listening: bool = False  # ``fd`` is a listening socket (an accept)
    child: int | None = None  # the pid a wait4/waitid waits for (-1: any child)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "", False)}


def kernel_from_json(d: object) -> KernelWait | None:
    if not isinstance(d, dict):
        return None
    return KernelWait(
        _str(d.get("syscall")),
        str(d.get("wchan") or ""),
        d.get("running") is True,
        _int(d.get("fd")),
        _str(d.get("target")),
        _str(d.get("peer")),
        _str(d.get("local")),
        d.get("listening") is True,
        _int(d.get("child")),
    )


@dataclass(frozen=True)
class ThreadSample:
    """One Python thread of a process: its frames, innermost first, and its kernel wait (where read)."""

    tid: int
    name: str
    frames: tuple[Frame, ...]
    kernel: KernelWait | None = None
    locals: tuple[tuple[str, int, tuple[tuple[str, str], ...]], ...] = ()  # (file, line, (name, repr)) per frame read

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tid": self.tid,
            "name": self.name,
            "frames": [[f.function, f.filename, f.line, f.native] for f in self.frames],
        }
        if self.kernel is not None:
            out["kernel"] = self.kernel.to_json()
        if self.locals:
            out["locals"] = [[file, line, [list(v) for v in values]] for file, line, values in self.locals]
        return out

    def local(self, name: str) -> str | None:
        """The repr of local ``name`` in the innermost frame that has it."""
        return next((r for _, _, values in self.locals for n, r in values if n == name), None)


def thread_from_json(d: object) -> ThreadSample | None:
    if not isinstance(d, dict) or not isinstance(d.get("frames"), list):
        return None
    frames = tuple(Frame(str(f[0]), str(f[1]), int(f[2]), bool(f[3])) for f in d["frames"] if len(f) == 4)
    found: list[tuple[str, int, tuple[tuple[str, str], ...]]] = []
    for entry in d.get("locals") or []:
        if isinstance(entry, list) and len(entry) == 3:
            found.append((str(entry[0]), int(entry[1]), tuple((str(a), str(b)) for a, b in entry[2])))
    return ThreadSample(
        int(d.get("tid", 0)), str(d.get("name", "")), frames, kernel_from_json(d.get("kernel")), tuple(found)
    )


@dataclass(frozen=True)
class ChildSample:
    """A child process of a rank (or of one of its children): what it runs, its state, and its threads (main first)
    where py-spy could read them; a process that is not Python has only its kernel wait."""

    pid: int
    parent: int
    cmdline: str
    status: str  # running, sleeping, disk-sleep, stopped, zombie, gone
    exit_code: int | None = None
    threads: tuple[ThreadSample, ...] = ()
    kernel: KernelWait | None = None  # its main thread's, also when it is not Python
    error: str | None = None  # why its stack could not be read

    @property
    def main(self) -> ThreadSample | None:
        return self.threads[0] if self.threads else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pid": self.pid,
            "parent": self.parent,
            "cmdline": self.cmdline,
            "status": self.status,
            "exit_code": self.exit_code,
            "threads": [t.to_json() for t in self.threads],
            "error": self.error,
        }
        if self.kernel is not None:
            out["kernel"] = self.kernel.to_json()
        return out


def child_from_json(d: object) -> ChildSample | None:
    if not isinstance(d, dict) or not isinstance(d.get("pid"), int):
        return None
    threads = tuple(t for t in (thread_from_json(x) for x in d.get("threads") or []) if t is not None)
    return ChildSample(
        int(d["pid"]),
        int(d.get("parent") or 0),
        str(d.get("cmdline") or ""),
        str(d.get("status") or "gone"),
        _int(d.get("exit_code")),
        threads,
        kernel_from_json(d.get("kernel")),
        _str(d.get("error")),
    )


@dataclass(frozen=True)
class CodeAt:
    """The statement at ``file:line`` as Python's ``ast`` reads it.

    ``text``: its first line, stripped; ``holds``: the expressions of the ``with`` blocks around it in its function,
    innermost first (``stats_lock``); ``enters``: the ``with`` items the line itself opens (a thread blocked there
    waits to enter them); ``calls``: the dotted names it calls (``dist.all_reduce``, ``batches.get``); ``loop``: the
    header of the innermost loop around it (``while not os.path.exists(path):``); ``fillers``: for each object it
    waits on (``batches`` in ``batches.get()``), the functions of the file that fill or signal it
    (``batches.put``, ``loaded.set``, ``cond.notify``), as (object, function names)."""

    file: str
    line: int
    text: str
    function: str = ""
    holds: tuple[str, ...] = ()
    enters: tuple[str, ...] = ()
    calls: tuple[str, ...] = ()
    loop: str | None = None
    fillers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    filling: tuple[str, ...] = ()  # the objects the statement's function fills or signals anywhere in its body

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "text": self.text,
            "function": self.function,
            "holds": list(self.holds),
            "enters": list(self.enters),
            "calls": list(self.calls),
            "loop": self.loop,
            "fillers": [[obj, list(names)] for obj, names in self.fillers],
            "filling": list(self.filling),
        }


def code_from_json(d: object) -> CodeAt | None:
    if not isinstance(d, dict) or not isinstance(d.get("file"), str) or not isinstance(d.get("line"), int):
        return None
    fillers = tuple(
        (str(e[0]), tuple(str(n) for n in e[1])) for e in d.get("fillers") or [] if isinstance(e, list) and len(e) == 2
    )
    return CodeAt(
        d["file"],
        d["line"],
        str(d.get("text") or ""),
        str(d.get("function") or ""),
        tuple(str(x) for x in d.get("holds") or []),
        tuple(str(x) for x in d.get("enters") or []),
        tuple(str(x) for x in d.get("calls") or []),
        _str(d.get("loop")),
        fillers,
        tuple(str(x) for x in d.get("filling") or []),
    )


@dataclass(frozen=True)
class Deep:
    """What a rank standing still outside a collective shows beyond its main thread's stack: its main thread's kernel
    wait, its other threads, its children, and the source at their frames. Read once per place."""

    kernel: KernelWait | None = None
    threads: tuple[ThreadSample, ...] = ()  # every Python thread but the main one
    children: tuple[ChildSample, ...] = ()
    code: tuple[CodeAt, ...] = ()
    main_locals: tuple[tuple[str, int, tuple[tuple[str, str], ...]], ...] = ()

    def code_at(self, file: str, line: int) -> CodeAt | None:
        return next((c for c in self.code if c.file == file and c.line == line), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": None if self.kernel is None else self.kernel.to_json(),
            "threads": [t.to_json() for t in self.threads],
            "children": [c.to_json() for c in self.children],
            "code": [c.to_json() for c in self.code],
            "main_locals": [[f, n, [list(v) for v in values]] for f, n, values in self.main_locals],
        }


def deep_from_json(d: object) -> Deep | None:
    if not isinstance(d, dict):
        return None
    main = thread_from_json({"frames": [], "locals": d.get("main_locals") or []})
    return Deep(
        kernel_from_json(d.get("kernel")),
        tuple(t for t in (thread_from_json(x) for x in d.get("threads") or []) if t is not None),
        tuple(c for c in (child_from_json(x) for x in d.get("children") or []) if c is not None),
        tuple(c for c in (code_from_json(x) for x in d.get("code") or []) if c is not None),
        main.locals if main is not None else (),
    )


@dataclass(frozen=True)
class Hop:
    """One step of a chain of waits: who (``rank 1``, ``rank 1's thread flusher``, ``DataLoader worker pid 4312``),
    what it does there in words, and where in the user's code (``file:line``, with the statement's text)."""

    who: str
    what: str
    site: str | None = None  # file:line of the user's own frame
    code: str | None = None  # the statement at that line
    function: str | None = None  # the function that line is in

    def to_json(self) -> dict[str, Any]:
        return {"who": self.who, "what": self.what, "site": self.site, "code": self.code, "function": self.function}


def hop_from_json(d: object) -> Hop | None:
    if not isinstance(d, dict) or not isinstance(d.get("who"), str):
        return None
    return Hop(d["who"], str(d.get("what") or ""), _str(d.get("site")), _str(d.get("code")), _str(d.get("function")))


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None
