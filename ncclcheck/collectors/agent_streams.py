"""The viewer's side of a multi-node watch: the agents' JSON lines, read from a fan-out tool's output (srun,
pdsh, clush, an ssh loop, kubectl exec) or from a file of lines collected before.

Fan-out tools put a label before each line (``node3: ``, ``[pod/x] ``, srun's ``0: ``): an agent line is
found by its opening brace, and its own ``host`` names the node. Any other line is the tool's or the
node's own words (ssh refused, command not found, a Python error): kept per label, so that a node whose
agent could not start is reported with what it said.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ncclcheck.model.agent_line import Held, flight_from_json, groups_from_json
from ncclcheck.model.flight import FrDump
from ncclcheck.model.watch import AGENT_SCHEMAS, AgentReport

LABEL = re.compile(r"^\s*(?:\[(?P<bracket>[^\]]+)\]|(?P<plain>[\w.@/-]+):)\s?")
KEEP_TEXT = 8  # last lines of a node's own words kept
UNREAD = (
    "its agent's lines from line {seq} on could not be read: malformed, or a rank sent as a row whose state never"
    " came here (reading began after the line that carried it: the agent sends every rank in full every 32 lines)"
)


@dataclass
class Streams:
    """What has come so far: each node's latest report, and the other lines by label."""

    reports: dict[str, AgentReport] = field(default_factory=dict)
    text: dict[str, deque[str]] = field(default_factory=dict)
    held: Held = field(default_factory=Held)  # per node and rank: what the lines sent before
    flights: dict[str, tuple[FrDump, ...]] = field(default_factory=dict)  # per host, as last sent
    groups: dict[str, tuple[frozenset[int], ...]] = field(default_factory=dict)  # per host, as last sent
    unread: set[str] = field(default_factory=set)  # hosts whose lines cannot be read since their last one read
    first_seen: float | None = None

    def add_line(self, raw: str, received: float) -> None:
        """One line of output, agent's or not."""
        line = raw.rstrip("\r\n")
        if not line.strip():
            return
        brace = line.find("{")
        if brace >= 0:
            try:
                data = json.loads(line[brace:])
            except ValueError:
                data = None
            if isinstance(data, dict) and data.get("schema") in AGENT_SCHEMAS and isinstance(data.get("host"), str):
                report = self.held.read(data, received)
                if report is not None:
                    flight = flight_from_json(data)
                    if flight is not None:
                        self.flights[report.host] = flight
                    groups = groups_from_json(data)
                    if groups is not None:
                        self.groups[report.host] = groups
                    held = self.groups.get(report.host, ())
                    report = dataclasses.replace(report, flight=self.flights.get(report.host, ()), groups=held)
                    self.reports[report.host] = report
                    self.unread.discard(report.host)
                    self.first_seen = report.received if self.first_seen is None else self.first_seen
                    return
                if data["host"] not in self.unread:  # said once until a line of it is read, never its JSON
                    self.unread.add(data["host"])
                    self.text.setdefault(data["host"], deque(maxlen=KEEP_TEXT)).append(
                        UNREAD.format(seq=data.get("seq"))
                    )
                return
        match = LABEL.match(line)
        label = (match.group("bracket") or match.group("plain")) if match else ""
        words = line[match.end() :] if match else line
        self.text.setdefault(label, deque(maxlen=KEEP_TEXT)).append(words.strip())


class FanOut:
    """A fan-out command (its own process group), its stdout and stderr read line by line into ``Streams``.

    Closing it closes the agents' stdin (an agent ends when its stdin closes), then ends the command's
    whole process tree: nothing is left behind on ^C, SIGTERM or an exception in the viewer."""

    def __init__(self, argv: list[str] | str, shell: bool = False, env: dict[str, str] | None = None) -> None:
        self.streams, self.lock = Streams(), threading.Lock()
        self.proc = subprocess.Popen(
            argv,
            shell=shell,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            text=True,
            errors="replace",
        )
        self.readers = [
            threading.Thread(target=self._read, args=(pipe,), daemon=True)
            for pipe in (self.proc.stdout, self.proc.stderr)
            if pipe is not None
        ]
        for reader in self.readers:
            reader.start()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            with self.lock:
                self.streams.add_line(line, time.time())

    def running(self) -> bool:
        return self.proc.poll() is None

    def close(self, grace_s: float = 3.0) -> None:
        """Close the agents' stdin; then SIGTERM (with SIGCONT, for a stopped member) and at last SIGKILL what is
        left of the command's process group, even when the command itself has already exited."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace_s)
        group = self.proc.pid  # its own session: the group id is its pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not _group_alive(group, self.proc):
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, sig)
                os.killpg(group, signal.SIGCONT)  # a stopped member acts on the SIGTERM only once it runs
            deadline = time.monotonic() + grace_s
            while _group_alive(group, self.proc) and time.monotonic() < deadline:
                time.sleep(0.05)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace_s)
        for reader in self.readers:
            reader.join(1.0)


def _group_alive(group: int, leader: subprocess.Popen[str]) -> bool:
    """Whether any process is left in the process group (its leader reaped first, so it does not count)."""
    leader.poll()
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


TEARDOWN_NOTE = (
    "replayed up to the job's teardown: after this sample its ranks were ended by SIGTERM (their launcher, or"
    " `ncclcheck run --on-hang exit`), which is not judged: what they were doing before it is"
)


def replay(path: str) -> Streams:
    """Agent lines collected before (a file, or ``-`` for stdin), on the lines' own clock: a node's history up to
    its teardown. Ranks ended by SIGTERM with none ended of its own before them were ended from outside (after a
    hang, by its launcher or ``run --on-hang exit``): that end says nothing of the job, so the node is judged on its
    last sample before it. A rank that ended of its own (an exit code, a crash signal) is judged as it ended."""
    streams = Streams()
    torn: set[str] = set()
    handle: IO[str]
    with (
        open(0, encoding="utf-8", errors="replace", closefd=False)
        if path == "-"
        else Path(path).open(encoding="utf-8", errors="replace")
    ) as handle:
        for line in handle:
            host, torn_down = _torn_down(line, streams.held)
            if host is not None and host in torn:
                continue  # after its teardown
            if torn_down and host is not None and host in streams.reports:
                torn.add(host)
                kept = streams.reports[host]
                streams.reports[host] = dataclasses.replace(kept, notes=(*kept.notes, TEARDOWN_NOTE))
                continue
            streams.add_line(line, -1.0)  # -1: the line's own time
    return streams


def _torn_down(line: str, held: Held) -> tuple[str | None, bool]:
    """The host of an agent line (None: not one), and whether the line's ended ranks were all ended by SIGTERM (or
    reaped unread), at least one. A rank sent as a row ended as it was last sent in full (``held``)."""
    brace = line.find("{")
    try:
        data = json.loads(line[brace:]) if brace >= 0 else None
    except ValueError:
        return None, False
    if not isinstance(data, dict) or data.get("schema") not in AGENT_SCHEMAS or not isinstance(data.get("ranks"), list):
        return None, False
    host = str(data.get("host"))
    ends: list[tuple[object, object]] = []
    for r in data["ranks"]:
        if isinstance(r, dict):
            ends.append((r.get("status"), r.get("exit_code")))
        elif isinstance(r, list) and r and (view := held.views.get((host, r[0]))) is not None:
            ends.append((view.sample.status, view.sample.exit_code))
    codes = {code for status, code in ends if status in ("gone", "zombie")}
    return host, bool(codes) and -signal.SIGTERM in codes and codes <= {-signal.SIGTERM, None}
