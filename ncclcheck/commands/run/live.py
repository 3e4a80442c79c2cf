"""The sampler beside a job that ``ncclcheck run`` launched: this node's agent lines, a hang record (with a Flight
Recorder dump request) when ranks stand still past --stall, and a slow episode's record while ranks hold the others
back. It runs in a thread of ``run``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import threading
import time
from typing import Any

from ncclcheck.analysis.watch.judge import hangs_in, next_delay
from ncclcheck.collectors.dump_request import ask_for_dumps
from ncclcheck.collectors.incident import EarlyDumps
from ncclcheck.collectors.jobs import discover
from ncclcheck.collectors.rank_ends import RankEnds
from ncclcheck.collectors.rendezvous import launcher_endpoint
from ncclcheck.collectors.run_job import Launched
from ncclcheck.commands.run.control import keep_incident, on_hang
from ncclcheck.commands.run.slow import SlowLog
from ncclcheck.model.run import HangRecord
from ncclcheck.model.stacks import Frame
from ncclcheck.model.waits import Deep
from ncclcheck.report_files import replace_json
from ncclcheck.sources.watch import LiveSource
from ncclcheck.views.run import hang_line
from ncclcheck.views.watch import to_json as watch_json
from ncclcheck.views.watch_agent import agent_line

FIND_S = 0.2  # how often the ranks are looked for at first
FIND_FOR_S = 60.0  # ... and for how long; then every --interval (a launcher that starts no ranks for a while)
WHOLE_S = 10.0  # how long to wait for the rest of this node's ranks once the first is found


def sample_live(
    launched: Launched,
    args: argparse.Namespace,
    run_dir: str,
    console: Any,
    hangs: list[HangRecord],
    slow: SlowLog,
    ends: RankEnds,
    stop: threading.Event,
    end_now: threading.Event,
    interrupted: threading.Event,
) -> None:
    """The watch sampler beside the job: a hang record when ranks stand still past --stall, slow episodes while a
    look names ranks that hold the others back (a hang keeps precedence: it closes the episode). Once the user or a
    signal ended the job (``interrupted``, set before the launcher is signalled), ranks that exit or stop answering
    do so because we ended them: that is neither a hang nor an early leaver, and nothing more is recorded.

    Ranks are looked for every ``FIND_S`` at first, so the first sample comes right after they appear; every rank
    is handed to ``ends``, which wakes the sampler when one ends; a last sample is taken when the job is over: a job
    of a few seconds still leaves its agent lines."""
    source: LiveSource | None = None
    last: tuple[Any, ...] | None = None
    said: set[str] = set()  # the sampler's notes (no ptrace, ...), each said once
    sent: dict[int, tuple[Frame, ...]] = {}
    host, seq, rendezvous, started = socket.gethostname(), 0, None, time.monotonic()
    flight: object = ()  # the Flight Recorders last written to the agent lines
    rounds_sent: dict[int, float] = {}  # each rank's last round written: a line carries only the new ones
    deep_sent: dict[int, Deep | None] = {}  # each rank's closer look as last written: sent again when it changes
    seen: float | None = None  # when the first of the job's ranks was found
    early = EarlyDumps(os.path.join(run_dir, "fr"))
    lines = open(os.path.join(run_dir, "watch-agent.jsonl"), "a", encoding="utf-8")  # noqa: SIM115 - closed below
    try:
        while True:
            final = stop.is_set()  # the job is over: one last sample, then no more
            if source is None:
                if final:
                    break
                jobs = discover(launched.proc.pid)
                seen = seen or (time.monotonic() if jobs else None)
                # the launcher starts its ranks one after the other: wait (a little) for all of this node's to exist,
                # or the ones not yet started would be watched as missing
                partial = jobs and len(jobs[0].ranks) < len(jobs[0].expected_local())
                if not jobs or (partial and seen is not None and time.monotonic() - seen < WHOLE_S):
                    stop.wait(FIND_S if time.monotonic() - started < FIND_FOR_S else args.interval)
                    continue
                source = LiveSource(jobs[0], args.stall)
                rendezvous = launcher_endpoint(jobs[0].launcher_pid)
            for r in source.job.ranks:
                ends.add(r.rank, r.pid)
            state = source.poll()
            fresh, flight = (source.flight if source.flight is not flight else None), source.flight
            # This node's agent lines (ncclcheck.watch-agent/1), as `watch --agent` writes them: a viewer reads
            # every node's run dir (`watch --agents FILE`, or `--fanout 'tail -n +1 -F .../watch-agent.jsonl'`).
            lines.write(
                json.dumps(
                    agent_line(
                        state,
                        host,
                        sent,
                        time.time(),
                        seq,
                        rendezvous=rendezvous,
                        interval_s=args.interval,
                        flight=fresh,
                        rounds_sent=rounds_sent,
                        deep_sent=deep_sent,
                    )
                )
                + "\n"
            )
            lines.flush()
            seq += 1
            if final:
                break
            now = time.time()
            for note in state.notes:
                if note not in said:
                    said.add(note)
                    console.print(f"ncclcheck run: {note}", style="yellow")
            if interrupted.is_set():  # this sample may already show the ranks the launcher is ending
                slow.end()
                stop.wait(args.interval)
                continue
            slow.look(state, now, args.interval)
            suspect = any(v.collective and v.still_s >= args.stall / 2 for v in state.ranks)
            if early.suspect(suspect):  # the first suspicion: the ring still holds the stuck group's entries
                console.print("ncclcheck run: ranks stand still: asked NCCL ranks for an early Flight Recorder dump")
            errors = list(hangs_in(state.findings))  # warnings too: what stood still past --stall is a hang
            key = tuple((f.id, f.culprits) for f in errors)
            if errors and key != last and not stop.is_set() and not end_now.is_set():  # --on-hang exit: one record
                path = os.path.join(run_dir, "hangs", f"hang-{time.strftime('%Y%m%d-%H%M%S')}-{len(hangs) + 1}.json")
                ending = args.on_hang == "exit"  # said in the record, so that `logs RUN_DIR` knows who ended it
                replace_json(path, watch_json(state, args.interval) | ({"ended_job": True} if ending else {}))
                first = errors[0]
                kinds = tuple(f.id for f in errors)
                record = HangRecord(path, now, kinds, first.ranks, first.culprits, first.message, ended_job=ending)
                record = on_hang(run_dir, record, console)  # the ranks' own Flight Recorders, when they answer
                hangs.append(record)
                hang_line(record, console)
                asked_at = time.time()
                asked, _ = ask_for_dumps(os.path.join(run_dir, "fr", "pipe_"))
                if asked:
                    console.print(f"ncclcheck run: asked {asked} NCCL rank(s) for a Flight Recorder dump (fr/)")
                pids = {r.rank: r.pid for r in source.job.ranks}
                try:  # the incident's extras failing must not end the watch: the record is already written
                    early.collect()
                    keep_incident(run_dir, record, pids, asked_at if asked else None, console, early.copies())
                except OSError as exc:
                    console.print(f"ncclcheck run: the incident could not be kept whole: {exc}", style="yellow")
                if ending:
                    end_now.set()
            last = key if errors else None
            _pause(next_delay(state, args.interval), stop, ends.ended)
    except Exception as exc:  # the sampler failing must not take the job or the verdict with it
        console.print(f"ncclcheck run: the live watch stopped: {type(exc).__name__}: {exc}", style="yellow")
    finally:
        lines.close()
        if source is not None:
            source.close()
        with contextlib.suppress(OSError):  # the open episode's record, closed: the job is over
            slow.end()


def _pause(seconds: float, stop: threading.Event, ended: threading.Event) -> None:
    """Wait ``seconds``, or until the job is over or a rank has ended (its end is then sampled at once)."""
    deadline = time.monotonic() + seconds
    while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
        if ended.wait(min(0.5, left)):
            ended.clear()
            return
