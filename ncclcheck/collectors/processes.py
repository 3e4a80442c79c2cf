"""What /proc says of a process: its state, its main thread's CPU, its exit code, environment, script and cwd."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable

import psutil

# psutil's names, folded to what a rank's state means for a job: a traced rank is as stopped as a SIGSTOPped one.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
STATUS = {"tracing-stop": "stopped", "dead": "gone", "idle": "sleeping", "waking": "running"}


def normal_status(status: str) -> str:
    return STATUS.get(status, status)


def tracer_of(pid: int) -> str | None:
    """Who holds a process under ptrace ("py-spy (pid 12)"; "a tracer (pid 12)" where its name cannot be read),
    or None when nothing traces it."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            line = next((x for x in handle if x.startswith("TracerPid:")), "")
        tracer = int(line.split()[1]) if line else 0
    except (OSError, ValueError, IndexError):
        return None
    if tracer <= 0:
        return None
    try:
        with open(f"/proc/{tracer}/comm", encoding="utf-8", errors="replace") as handle:
            name = handle.read().strip()
    except OSError:
        name = ""
    return f"{name or 'a tracer'} (pid {tracer})"


def process_state(pid: int | None) -> str:
    if pid is None:
        return "unknown"
    try:
        status = str(psutil.Process(pid).status())
    except psutil.NoSuchProcess:
        return "gone"
    except psutil.Error:
        return "unknown"
    return normal_status(status)


def _stat_fields(path: str) -> list[str] | None:
    """The fields of a /proc stat file after the command name (field 3 onwards), or None when unreadable."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def main_thread_run_delay(pid: int) -> float | None:
    """Seconds the process's main thread has spent runnable but waiting for a CPU (``schedstat``'s run delay): a
    thread that computes on cores other processes take has little CPU time and much of this."""
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat", encoding="ascii") as handle:
            fields = handle.read().split()
        return int(fields[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def main_thread_cpu(pid: int) -> float | None:
    """CPU seconds the process's main thread has used (user + system): moves only while that thread runs."""
    fields = _stat_fields(f"/proc/{pid}/task/{pid}/stat")
    if fields is None or len(fields) < 13:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def main_thread_switches(pid: int) -> int | None:
    """Context switches of the process's main thread so far (voluntary + involuntary). Unchanged, with its CPU
    time unchanged too, the thread has not run since: its stack cannot have changed."""
    try:
        with open(f"/proc/{pid}/task/{pid}/status", encoding="ascii", errors="replace") as handle:
            counts = [int(line.split()[1]) for line in handle if "ctxt_switches:" in line]
    except (OSError, ValueError, IndexError):
        return None
    return sum(counts) if len(counts) == 2 else None


def exit_status(pid: int) -> int | None:
    """A zombie's exit code (negative: the signal that killed it), readable until its parent reaps it."""
    fields = _stat_fields(f"/proc/{pid}/stat")
    if fields is None or len(fields) < 50 or fields[0] != "Z":
        return None
    status = int(fields[49])
    return status >> 8 if status & 0x7F == 0 else -(status & 0x7F)


def environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.Error, OSError):
        return {}


def script_of(cmdline: str) -> str:
    """``train.py --lr 1`` from ``/usr/bin/python3 -u train.py --lr 1``: what the ranks run, without the interpreter."""
    try:
        words = shlex.split(cmdline)
    except ValueError:
        words = cmdline.split()
    if words and "python" in os.path.basename(words[0]):
        words = words[1:]
        while words and words[0].startswith("-") and words[0] not in ("-m", "-c"):
            words = words[1:]
    return " ".join(words)[:200]


def cwd_of(pid: int) -> str:
    try:
        return psutil.Process(pid).cwd()
    except (psutil.Error, OSError):
        return ""


def started_of(pids: Iterable[int]) -> float | None:
    times = []
    for pid in pids:
        try:
            times.append(psutil.Process(pid).create_time())
        except psutil.Error:
            continue
    return min(times) if times else None
