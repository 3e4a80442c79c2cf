"""The sampler beside a job that ``ncclcheck run`` launched: this node's agent lines, a hang record (with a Flight
Recorder dump request) when ranks stand still past --stall, and a slow episode's record while ranks hold the others
back. It runs in a thread of ``run``."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import IO, Any

from ncclcheck.analysis.watch.judge import hangs_in, next_delay
from ncclcheck.collectors.dump_request import ask_for_dumps
from ncclcheck.collectors.incident import EarlyDumps
from ncclcheck.collectors.jobs import discover
from ncclcheck.collectors.rank_ends import RankEnds
from ncclcheck.collectors.rendezvous import launcher_endpoint
from ncclcheck.collectors.run_job import Launched
from ncclcheck.commands.run.control import keep_incident, on_hang
from ncclcheck.commands.run.slow import SlowLog
from ncclcheck.model.agent_line import AgentLines
from ncclcheck.model.live import Look
from ncclcheck.model.run import HangRecord, RunDir, hang_json
from ncclcheck.model.watch import WatchState
from ncclcheck.report_files import replace_json
from ncclcheck.sources.live import samples
from ncclcheck.sources.watch import LiveSource
from ncclcheck.views.run import hang_line
from ncclcheck.views.watch import to_json as watch_json

FIND_S = 0.2  # how often the ranks are looked for at first
FIND_FOR_S = 60.0  # ... and for how long; then every --interval (a launcher that starts no ranks for a while)
WHOLE_S = 10.0  # how long to wait for the rest of this node's ranks once the first is found


@dataclass(frozen=True)
class Watching:
    """How the sampler watches: --stall, --interval, --on-hang."""

    stall_s: float
    interval_s: float
    on_hang: str  # watch, exit


@dataclass(frozen=True)
class Signals:
    """What the job's supervisor and the sampler tell each other: the job is over (``stop``), end it now
    (``end_now``: --on-hang exit or a second ^C), the user or a signal ended it (``interrupted``)."""

    stop: threading.Event
    end_now: threading.Event
    interrupted: threading.Event


class LiveSampler:
    """The watch sampler beside the job: a hang record when ranks stand still past --stall, slow episodes while a
    look names ranks that hold the others back (a hang keeps precedence: it closes the episode). Once the user or a
    signal ended the job (``interrupted``, set before the launcher is signalled), ranks that exit or stop answering
    do so because we ended them: that is neither a hang nor an early leaver, and nothing more is recorded.

    Ranks are looked for every ``FIND_S`` at first, so the first sample comes right after they appear; every rank
    is handed to ``ends``, which wakes the sampler when one ends; a last sample is taken when the job is over: a job
    of a few seconds still leaves its agent lines."""

    def __init__(
        self,
        launched: Launched,
        watching: Watching,
        run_dir: RunDir,
        console: Any,
        slow: SlowLog,
        ends: RankEnds,
        signals: Signals,
    ) -> None:
        self.launched, self.watching, self.run_dir, self.console = launched, watching, run_dir, console
        self.slow, self.ends, self.signals = slow, ends, signals
        self.hangs: list[HangRecord] = []
        self.host = socket.gethostname()
        self.said: set[str] = set()  # the sampler's notes (no ptrace, ...), each said once
        self.last: tuple[Any, ...] | None = None  # the hang last recorded, while it lasts
        self.early = EarlyDumps(run_dir.fr)
        self.lines = AgentLines(self.host)

    def run(self) -> None:
        """Find the job's ranks, then one look per sample until the job is over (the thread's target)."""
        source: LiveSource | None = None
        out = open(self.run_dir.agent_lines, "a", encoding="utf-8")  # noqa: SIM115 - closed below
        try:
            source = self._find()
            if source is not None:
                self.lines.rendezvous = launcher_endpoint(source.job.launcher_pid)
                for look in samples(source, self.watching.interval_s, self.signals.stop, **self._pace()):
                    self.look(source, look, out)
        except Exception as exc:  # the sampler failing must not take the job or the verdict with it
            self.console.print(f"ncclcheck run: the live watch stopped: {type(exc).__name__}: {exc}", style="yellow")
        finally:
            out.close()
            if source is not None:
                source.close()
            with contextlib.suppress(OSError):  # the open episode's record, closed: the job is over
                self.slow.end()

    def look(self, source: LiveSource, look: Look, out: IO[str]) -> None:
        """One sample: its agent line, then (unless it is the last, or the job is being ended) its judgement."""
        assert look.state is not None  # the loop raises what a poll raised
        state = look.state
        for r in source.job.ranks:
            self.ends.add(r.rank, r.pid)
        # This node's agent lines (ncclcheck.watch-agent/3), as `watch --agent` writes them: a viewer reads
        # every node's run dir (`watch --agents FILE`, or `--fanout 'tail -n +1 -F .../watch-agent.jsonl'`).
        line = self.lines.line(
            state, time.time(), self.watching.interval_s, flight=source.flight, groups=source.groups.groups
        )
        out.write(json.dumps(line) + "\n")
        out.flush()
        if look.final:
            return
        now = time.time()
        for note in state.notes:
            if note not in self.said:
                self.said.add(note)
                self.console.print(f"ncclcheck run: {note}", style="yellow")
        if self.signals.interrupted.is_set():  # this sample may already show the ranks the launcher is ending
            self.slow.end()
            return
        self.slow.look(state, now, self.watching.interval_s)
        self._judge(source, state, now)

    def _pace(self) -> dict[str, Any]:
        """After ^C or a signal, a look every --interval; else ``next_delay``, woken by a rank that ends."""
        interrupted, interval_s = self.signals.interrupted, self.watching.interval_s

        def delay(state: WatchState | None, _: float) -> float:
            return interval_s if interrupted.is_set() else next_delay(state, interval_s)

        return {"delay": delay, "wait": self._pause, "last": True}

    def _find(self) -> LiveSource | None:
        """This node's ranks of the job, once all of them exist (or ``WHOLE_S`` after the first); None: the job
        ended first. The launcher starts its ranks one after the other: the ones not yet started would be watched
        as missing."""
        stop, started, seen = self.signals.stop, time.monotonic(), None
        while not stop.is_set():
            jobs = discover(self.launched.proc.pid)
            seen = seen or (time.monotonic() if jobs else None)
            partial = jobs and len(jobs[0].ranks) < len(jobs[0].expected_local())
            if jobs and not (partial and seen is not None and time.monotonic() - seen < WHOLE_S):
                return LiveSource(jobs[0], self.watching.stall_s)
            stop.wait(FIND_S if time.monotonic() - started < FIND_FOR_S else self.watching.interval_s)
        return None

    def _judge(self, source: LiveSource, state: WatchState, now: float) -> None:
        suspect = any(v.collective and v.still_s >= self.watching.stall_s / 2 for v in state.ranks)
        if self.early.suspect(suspect):  # the first suspicion: the ring still holds the stuck group's entries
            self.console.print("ncclcheck run: ranks stand still: asked NCCL ranks for an early Flight Recorder dump")
        errors = list(hangs_in(state.findings))  # warnings too: what stood still past --stall is a hang
        # one hang, one record: by the ranks it blames (the stacks' straggler and the recorders' fr-not-joined of the
        # same rank are the same hang, told twice), else by what it is where nobody is blamed
        blamed = sorted({c for f in errors for c in f.culprits})
        key = tuple(f"rank {c}" for c in blamed) or tuple(sorted({f.id for f in errors}))
        stop, end_now = self.signals.stop, self.signals.end_now
        if errors and key != self.last and not stop.is_set() and not end_now.is_set():  # --on-hang exit: one record
            self._record(source, state, now, errors)
        held = any(v.sample.status == "stopped" for v in state.ranks)  # a look without a verdict: a rank held a moment
        if errors or not held:  # the same hang seen again once it is let go is the same record, not a second one
            self.last = key if errors else None

    def _record(self, source: LiveSource, state: WatchState, now: float, errors: list[Any]) -> None:
        path = self.run_dir.hang(time.strftime("%Y%m%d-%H%M%S"), len(self.hangs) + 1)
        ending = self.watching.on_hang == "exit"  # said in the record, so that `logs RUN_DIR` knows who ended it
        replace_json(path, hang_json(watch_json(state, self.watching.interval_s), ending))
        first = errors[0]
        kinds = tuple(f.id for f in errors)
        record = HangRecord(path, now, kinds, first.ranks, first.culprits, first.message, ended_job=ending)
        record = on_hang(self.run_dir, record, self.console)  # the ranks' own Flight Recorders, when they answer
        self.hangs.append(record)
        hang_line(record, self.console)
        asked_at = time.time()
        asked, _ = ask_for_dumps(self.run_dir.fr_pipes)
        if asked:
            self.console.print(f"ncclcheck run: asked {asked} NCCL rank(s) for a Flight Recorder dump (fr/)")
        pids = {r.rank: r.pid for r in source.job.ranks}
        try:  # the incident's extras failing must not end the watch: the record is already written
            self.early.collect()
            keep_incident(self.run_dir, record, pids, asked_at if asked else None, self.console, self.early.copies())
        except OSError as exc:
            self.console.print(f"ncclcheck run: the incident could not be kept whole: {exc}", style="yellow")
        if ending:
            self.signals.end_now.set()

    def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, or until the job is over or a rank has ended (its end is then sampled at once)."""
        stop, ended = self.signals.stop, self.ends.ended
        deadline = time.monotonic() + seconds
        while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
            if ended.wait(min(0.5, left)):
                ended.clear()
                return
