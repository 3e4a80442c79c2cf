"""``ncclcheck watch --agent``: sample this node's ranks of the job as ``watch`` does and write one JSON line
per sample to stdout (schema ncclcheck.watch-agent/3), for a viewer on another machine (``watch --fanout``,
``--slurm``) or for a file (``--agents FILE`` replays it).

Never opens a socket and never signals the job. Ends when its stdin closes (where stdin is a pipe: the
viewer went away), when stdout is closed, when the job's ranks on this node are all gone, on SIGTERM,
SIGHUP or ^C; with --once after its first line. Exit code: 0, 2 several jobs and no --job, 3 no job here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import stat
import sys
import threading
import time
from typing import Any

from ncclcheck import exits
from ncclcheck.collectors.jobs import discover, pick
from ncclcheck.collectors.rendezvous import launcher_endpoint
from ncclcheck.model.agent_line import AgentLines
from ncclcheck.signals import handling
from ncclcheck.sources.live import samples
from ncclcheck.sources.watch import LiveSource

DONE = "every rank of the job on this node has exited"


def run(args: argparse.Namespace) -> int:
    stop = threading.Event()
    with handling((signal.SIGTERM, signal.SIGHUP, signal.SIGINT), lambda *_: stop.set()):
        _stop_when_stdin_closes(stop)
        return _sample(args, stop)


def _sample(args: argparse.Namespace, stop: threading.Event) -> int:
    lines = AgentLines(socket.gethostname())
    jobs = discover(args.pid)
    if args.slurm_job:  # started by the viewer's --slurm: this SLURM job's ranks, whatever else runs here
        jobs = tuple(j for j in jobs if j.slurm_job == args.slurm_job)
    if args.job:
        jobs = pick(jobs, args.job)
    if len(jobs) != 1:
        what = f"job {args.job}" if args.job else "torch distributed job"
        what += f" of SLURM job {args.slurm_job}" if args.slurm_job else ""
        error = (
            f"no {what} found on this node (its ranks exited, never started here, or are not readable by this user)"
            if not jobs
            else f"{len(jobs)} jobs on this node ({', '.join(j.id for j in jobs)}): give the viewer --job ID"
        )
        _emit(lines.line(None, time.time(), error=error))
        return exits.NO_JOB if not jobs else exits.USAGE
    source = LiveSource(jobs[0], args.stall, stacks=not args.no_stacks, native=args.native)
    lines.rendezvous = launcher_endpoint(jobs[0].launcher_pid)  # the viewer reads the job's map there; never us
    try:
        return _report(source, stop, args, lines)
    finally:
        source.close()


def _report(source: LiveSource, stop: threading.Event, args: argparse.Namespace, lines: AgentLines) -> int:
    """One agent line per sample until the job on this node is over, the reader went away or a stop came."""
    for look in samples(source, args.interval, stop):
        state = look.state
        assert state is not None  # the loop raises what a poll raised
        over = state.verdict.status == "finished" and not state.launcher_running
        line = lines.line(
            state,
            time.time(),
            interval_s=args.interval,
            flight=source.flight,
            groups=source.groups.groups,
            done=DONE if over else None,
        )
        if not _emit(line):
            return exits.OK  # nobody reads any more
        if over or args.once:
            return exits.OK
    return exits.OK


def _emit(line: dict[str, Any]) -> bool:
    try:
        sys.stdout.write(json.dumps(line, separators=(",", ":")) + "\n")
        sys.stdout.flush()
        return True
    except (BrokenPipeError, ValueError):  # the reader went away (ValueError: stdout already closed)
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return False


def _stop_when_stdin_closes(stop: threading.Event) -> None:
    """A viewer that goes away closes the pipe to our stdin (srun --input=all forwards it to every node). Where
    stdin is /dev/null or a terminal (pdsh, a shell), it says nothing, and stdout's broken pipe ends us."""
    try:
        fd = sys.stdin.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError, AttributeError):
        return
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return

    def read() -> None:
        try:
            while os.read(fd, 4096):
                pass
        except (OSError, ValueError):
            pass
        stop.set()

    threading.Thread(target=read, daemon=True).start()
