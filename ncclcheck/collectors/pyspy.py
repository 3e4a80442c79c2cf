"""Take a py-spy dump of a process, never pausing it (``--nonblocking``), with a timeout.

``native`` adds C/C++ frames; py-spy can only unwind them with the process paused, so it is the
one mode that briefly stops the process, and only when a user asks for it."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

from ncclcheck.model.args import FrameLocals
from ncclcheck.model.stacks import Frame
from ncclcheck.model.waits import ThreadSample
from ncclcheck.probes.host import find_py_spy

DUMP_TIMEOUT_S = 10.0


def _json(pid: int, flags: tuple[str, ...], timeout_s: float) -> tuple[object, str | None]:
    """``py-spy dump --pid PID --json FLAGS``'s JSON (a list of threads), or None and why there is none."""
    binary = find_py_spy()
    if binary is None:
        return None, "py-spy is not installed (pip install py-spy)"
    try:
        done = subprocess.run(
            [binary, "dump", "--pid", str(pid), "--json", *flags],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"py-spy dump timed out after {timeout_s:.0f} s"
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["unknown error"])[0]
        return None, f"py-spy could not read pid {pid}: {reason}"
    try:
        return json.loads(done.stdout), None
    except ValueError:
        return None, "py-spy printed no JSON"


def dump(pid: int, timeout_s: float = DUMP_TIMEOUT_S, native: bool = False) -> tuple[tuple[Frame, ...], str | None]:
    """The main thread's frames (innermost first), or an error that says why there are none."""
    threads, error = _json(pid, ("--native" if native else "--nonblocking",), timeout_s)
    if not isinstance(threads, list):
        return (), error or "py-spy printed no list of threads"
    main = next((t for t in threads if t.get("thread_name") == "MainThread"), threads[0] if threads else None)
    if main is None:
        return (), "py-spy found no thread"
    return tuple(
        Frame(f.get("name", "?"), f.get("filename", "?"), int(f.get("line", 0)), bool(f.get("module")))
        for f in main["frames"]
    ), None


def dump_all(
    pids: list[int], timeout_s: float = DUMP_TIMEOUT_S, in_flight: int = 8, native: bool = False
) -> dict[int, tuple[tuple[Frame, ...], str | None]]:
    """Dumps of several processes at once, at most ``in_flight`` py-spy processes at a time."""
    with ThreadPoolExecutor(max_workers=min(in_flight, max(len(pids), 1))) as pool:
        return dict(zip(pids, pool.map(lambda pid: dump(pid, timeout_s, native), pids)))


def dump_locals(pid: int, timeout_s: float = DUMP_TIMEOUT_S) -> tuple[FrameLocals, ...] | None:
    """The main thread's frames with their locals' reprs (``--locals --nonblocking``), or None when unreadable."""
    binary = find_py_spy()
    if binary is None:
        return None
    try:
        done = subprocess.run(
            [binary, "dump", "--pid", str(pid), "--json", "--locals", "--nonblocking"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        return main_thread_locals(json.loads(done.stdout)) if done.returncode == 0 else None
    except (subprocess.TimeoutExpired, ValueError):
        return None


def dump_locals_all(
    pids: list[int], timeout_s: float = DUMP_TIMEOUT_S, in_flight: int = 8
) -> dict[int, tuple[FrameLocals, ...] | None]:
    """Locals of several processes at once, at most ``in_flight`` py-spy processes at a time."""
    if not pids:
        return {}
    with ThreadPoolExecutor(max_workers=min(in_flight, len(pids))) as pool:
        return dict(zip(pids, pool.map(lambda pid: dump_locals(pid, timeout_s), pids)))


def main_thread_locals(threads: object) -> tuple[FrameLocals, ...] | None:
    """The main thread's frames and locals from py-spy's JSON (a list of threads), or None if it has none."""
    if not isinstance(threads, list):
        return None
    main = next((t for t in threads if isinstance(t, dict) and t.get("thread_name") == "MainThread"), None)
    if main is None:
        return None
    return tuple(
        FrameLocals(
            str(f.get("name", "?")),
            str(f.get("filename", "?")),
            int(f.get("line", 0)),
            tuple((str(v.get("name", "")), str(v.get("repr", ""))) for v in f.get("locals") or []),
        )
        for f in main.get("frames", [])
    )


def dump_threads(pid: int, timeout_s: float = DUMP_TIMEOUT_S) -> tuple[tuple[ThreadSample, ...], str | None]:
    """Every Python thread of a process with its frames and their locals (``--locals --nonblocking``), the main
    thread first; or why none could be read."""
    threads, error = _json(pid, ("--locals", "--nonblocking"), timeout_s)
    return (threads_of(threads), None) if error is None else ((), error)


def threads_of(threads: object) -> tuple[ThreadSample, ...]:
    """py-spy's JSON (a list of threads) as threads with their frames and locals, the main thread first."""
    if not isinstance(threads, list):
        return ()
    out = []
    for t in threads:
        if not isinstance(t, dict):
            continue
        frames = t.get("frames") or []
        out.append(
            ThreadSample(
                int(t.get("os_thread_id") or t.get("thread_id") or 0),
                str(t.get("thread_name") or ""),
                tuple(
                    Frame(str(f.get("name", "?")), str(f.get("filename", "?")), int(f.get("line", 0))) for f in frames
                ),
                locals=tuple(
                    (
                        str(f.get("filename", "?")),
                        int(f.get("line", 0)),
                        tuple((str(v.get("name", "")), str(v.get("repr", ""))) for v in f.get("locals") or []),
                    )
                    for f in frames
                    if f.get("locals")
                ),
            )
        )
    out.sort(key=lambda t: t.name != "MainThread")
    return tuple(out)
