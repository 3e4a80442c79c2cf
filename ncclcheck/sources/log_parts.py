"""Read many or large logs on every core: files, and big files' line-aligned ranges, folded in worker processes.

A part is a whole file (gzip too) or a range of a big plain file, cut after a line nothing can be glued to
(``frame.cut_after``). Each worker frames and reads its part into a ``Recording``; the caller replays the
parts in file order into one LogFold, so the report is the one a single pass gives. Streams (stdin, a
FIFO, ``<(cmd)``) and small inputs are read in this process. The workers end with this process: on
return, on any exception, on ^C, SIGTERM and SIGHUP (``ncclcheck logs`` sets those handlers), their pool is
terminated; they ignore ^C themselves (the terminal sends it to the whole group) and leave it to us; and
when this process is killed outright, the kernel ends them (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import multiprocessing
import os
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from ncclcheck.analysis.logs.diagnose import quiet
from ncclcheck.analysis.logs.frame import cut_after, fold_chunks
from ncclcheck.analysis.logs.recording import Recorder, Recording
from ncclcheck.collectors.logfiles import LogSource, Reading, chunks, gzipped, span_chunks, spans, wide

PART = 16 << 20  # a big file is cut into ranges of about this many bytes
MIN_PART = 1 << 20  # a smaller file is read here unless there are many of them
WORTH_IT = 24 << 20  # below this many bytes in all, starting workers costs more than it saves


@dataclass(frozen=True)
class Part:
    """One piece of work: a whole source (``span`` None) or a byte range of it."""

    source: LogSource
    span: tuple[int, int] | None


@dataclass(frozen=True)
class Done:
    """A part's recording and what reading it could not do whole."""

    recording: Recording
    notes: tuple[str, ...]
    incomplete: bool


def plan(found: Sequence[LogSource], cores: int | None = None) -> dict[int, list[Part]]:
    """Which sources (by index) go to workers, and in which parts; none when one core or little to read."""
    cores = cores if cores is not None else usable_cores()
    sizes = {i: _size(s) for i, s in enumerate(found) if s.kind == "log" and s.path != "-"}
    if cores < 2 or sum(v for v in sizes.values() if v >= MIN_PART) < WORTH_IT:
        return {}
    parts: dict[int, list[Part]] = {}
    for i, size in sizes.items():
        if size < MIN_PART:
            continue
        source = found[i]
        if size > PART + PART // 2 and not gzipped(source.path) and not wide(source.path):
            try:
                parts[i] = [Part(source, span) for span in spans(source.path, PART, cut_after)]
            except OSError:  # unreadable, or gone since: read here, where the reason becomes a note
                continue
        else:
            parts[i] = [Part(source, None)]
    return parts


def usable_cores() -> int:
    """The cores this process may run on (taskset, a cgroup's cpuset), or all of them where the OS cannot say
    (macOS has no affinity call; the logs of a cluster are often read on a laptop)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def _size(source: LogSource) -> int:
    try:
        st = os.stat(source.path)
    except OSError:
        return 0
    return st.st_size if os.path.isfile(source.path) else 0  # a FIFO's size says nothing


def fold_part(part: Part) -> Done:
    """In a worker: frame and read one part."""
    reading = Reading()
    if part.span is None:
        text: Iterator[str] = chunks(part.source, reading=reading)
    else:
        text = span_chunks(part.source, *part.span, reading)
    recorder = Recorder()
    lines = fold_chunks(text, part.source.name, quiet, recorder)
    return Done(recorder.result(lines), tuple(reading.notes), reading.incomplete)


@contextlib.contextmanager
def done_in_order(parts: Sequence[Part], cores: int | None = None) -> Iterator[Iterator[Done]]:
    """Each part's ``Done``, in the order given, from workers started at once (they work while the caller
    reads what is read here); at most two parts per worker are held ahead of the reader, so memory stays
    bounded however many there are. A worker that dies (the OOM killer, a kill) has its part read here
    instead: the report is the same. The workers end when the block ends, however it ends."""
    if not parts:
        yield iter(())
        return
    count = min(cores if cores is not None else usable_cores(), len(parts))
    context = multiprocessing.get_context("fork")
    workers: list[_Worker] = []
    try:
        with _signals_held():  # a ^C or SIGTERM while they are half started would leave one behind
            workers += [_Worker(context) for _ in range(count)]
        yield _in_order(list(parts), workers)
    finally:
        with _signals_held():
            for worker in workers:
                worker.end()


class _Worker:
    """One process reading parts sent down its own pipe (no queue shared with the others: one that dies
    holds no lock the rest need)."""

    def __init__(self, context: multiprocessing.context.ForkContext) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, os.getpid()), daemon=True)
        self.process.start()
        child.close()
        self.part: tuple[int, Part] | None = None  # what it reads now

    def end(self) -> None:
        self.conn.close()
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def _serve(conn: Connection, parent: int) -> None:
    """A worker's loop: a part in, its Done out, until the pipe closes."""
    _worker_start(parent)
    while True:
        try:
            part = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(fold_part(part))


def _in_order(parts: list[Part], workers: list[_Worker]) -> Iterator[Done]:
    done: dict[int, Done] = {}
    todo = iter(enumerate(parts))
    ahead = 2 * len(workers)

    def give_out() -> None:
        for worker in list(workers):
            if worker.part is None and len(done) + sum(w.part is not None for w in workers) < ahead:
                item = next(todo, None)
                if item is None:
                    return
                try:
                    worker.conn.send(item[1])
                    worker.part = item
                except OSError:  # it died since (a kill, the OOM killer): its part is read here, the rest go on
                    done[item[0]] = fold_part(item[1])
                    workers.remove(worker)
                    worker.end()

    give_out()
    for index in range(len(parts)):
        while index not in done:
            busy = [w for w in workers if w.part is not None]
            if not busy:  # every worker is gone: the rest is read here
                item = next(todo)
                done[item[0]] = fold_part(item[1])
                continue
            wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
            for worker in busy:
                number, part = worker.part  # type: ignore[misc]
                if worker.conn.poll():
                    try:
                        done[number] = worker.conn.recv()
                        worker.part = None
                        continue
                    except (EOFError, OSError):
                        pass
                if not worker.process.is_alive():  # died before it answered: read its part here
                    done[number] = fold_part(part)
                    workers.remove(worker)
                    worker.end()
            give_out()
        yield done.pop(index)
        give_out()


ENDING = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold ^C, SIGTERM and SIGHUP for a moment; they arrive (and end the reading) right after."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, ENDING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _worker_start(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C reaches the whole process group: the parent decides
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the pool's terminate
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, ENDING)  # forked while the parent held them
    # A parent killed outright (SIGKILL, the OOM killer) runs no cleanup, and a worker waiting on the task
    # pipe never sees it close (its siblings hold it open): have the kernel end the worker with its parent.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent was already gone
        os._exit(1)
    # What the parent had before the fork (modules, its caches) lives as long as the worker: out of the collector's
    # sight, a full collection walks only what reading made, and leaves the pages shared with the parent alone
    gc.freeze()
