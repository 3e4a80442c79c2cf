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
from typing import IO, Any

from ncclcheck.model.args import args_from_json, posted_from_json
from ncclcheck.model.flight import FrDump, dump_from_json
from ncclcheck.model.shares import Tally, tally_from_json, window
from ncclcheck.model.stacks import Frame
from ncclcheck.model.waits import Deep, code_from_json, deep_from_json
from ncclcheck.model.watch import AGENT_SCHEMA, AgentReport, RankSample, RankView, RendezvousEndpoint

LABEL = re.compile(r"^\s*(?:\[(?P<bracket>[^\]]+)\]|(?P<plain>[\w.@/-]+):)\s?")
KEEP_TEXT = 8  # last lines of a node's own words kept


@dataclass
class Streams:
    """What has come so far: each node's latest report, and the other lines by label."""

    reports: dict[str, AgentReport] = field(default_factory=dict)
    text: dict[str, deque[str]] = field(default_factory=dict)
    stacks: dict[tuple[str, int], tuple[Frame, ...]] = field(default_factory=dict)
    flights: dict[str, tuple[FrDump, ...]] = field(default_factory=dict)  # per host, as last sent
    tallies: dict[tuple[str, int], tuple[Tally, ...]] = field(default_factory=dict)  # per node and rank: the window
    deeps: dict[tuple[str, int], Deep | None] = field(default_factory=dict)  # per node and rank: its last closer look
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
            if isinstance(data, dict) and data.get("schema") == AGENT_SCHEMA and isinstance(data.get("host"), str):
                report = parse(data, self.stacks, received, self.tallies, self.deeps)
                if report is not None:
                    if isinstance(data.get("flight"), list):
                        dumps = (dump_from_json(d) for d in data["flight"])
                        self.flights[report.host] = tuple(d for d in dumps if d is not None)
                    report = dataclasses.replace(report, flight=self.flights.get(report.host, ()))
                    self.reports[report.host] = report
                    self.first_seen = report.received if self.first_seen is None else self.first_seen
                    return
        match = LABEL.match(line)
        label = (match.group("bracket") or match.group("plain")) if match else ""
        words = line[match.end() :] if match else line
        self.text.setdefault(label, deque(maxlen=KEEP_TEXT)).append(words.strip())


def parse(
    data: dict[str, Any],
    stacks: dict[tuple[str, int], tuple[Frame, ...]],
    received: float,
    tallies: dict[tuple[str, int], tuple[Tally, ...]] | None = None,
    deeps: dict[tuple[str, int], Deep | None] | None = None,
) -> AgentReport | None:
    """An agent line as the viewer holds it; a rank's stack comes from an earlier line when this one left it
    out (unchanged), its rounds of sampled stacks are added to those of earlier lines (``tallies``). None: a line
    this version cannot read."""
    held = {} if tallies is None else tallies
    host = str(data["host"])
    raw_job = data.get("job")
    job: dict[str, Any] = raw_job if isinstance(raw_job, dict) else {}
    try:
        looks = {} if deeps is None else deeps
        views = tuple(_view(r, host, stacks, held, looks) for r in data.get("ranks", []))
        return AgentReport(
            host=host,
            received=float(data.get("time", received)) if received < 0 else received,
            node_rank=_int(data.get("node_rank")),
            job_id=job.get("id"),
            world_size=_int(job.get("world_size")),
            nodes=_int(job.get("nodes")),
            launcher_running=job.get("launcher_running"),
            window_s=float(data.get("window_s", 0.0)),
            samples=int(data.get("samples", 0)),
            views=views,
            notes=tuple(str(n) for n in data.get("notes", [])),
            error=data.get("error"),
            done=data.get("done"),
            rendezvous=_endpoint(data.get("rendezvous")),
            interval_s=_float(data.get("interval_s")),
            recording=bool(data.get("recording")),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _endpoint(data: object) -> RendezvousEndpoint | None:
    """The agent's torchrun's c10d rendezvous endpoint, as the agent reported it."""
    if not isinstance(data, dict):
        return None
    host, _, port = str(data.get("endpoint", "")).rpartition(":")
    if not host or not port.isdigit():
        return None
    address = data.get("address")
    return RendezvousEndpoint(
        host, int(port), str(data.get("run_id") or "none"), address if isinstance(address, str) else None
    )


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _view(
    r: dict[str, Any],
    host: str,
    stacks: dict[tuple[str, int], tuple[Frame, ...]],
    tallies: dict[tuple[str, int], tuple[Tally, ...]],
    deeps: dict[tuple[str, int], Deep | None],
) -> RankView:
    rank = int(r["rank"])
    if "deep" in r:  # sent when it changed; null once the rank moved on
        deeps[(host, rank)] = deep_from_json(r["deep"])
    if isinstance(r.get("rounds"), list):
        new = (tally_from_json(t) for t in r["rounds"])
        tallies[(host, rank)] = window(tallies.get((host, rank), ()), [t for t in new if t is not None])
    if "stack" in r:
        stacks[(host, rank)] = tuple(Frame(str(f[0]), str(f[1]), int(f[2]), bool(f[3])) for f in r["stack"])
    sample = RankSample(
        rank=rank,
        local_rank=_int(r.get("local_rank")),
        pid=_int(r.get("pid")),
        host=host,
        status=str(r["status"]),
        cpu_percent=float(r.get("cpu_percent") or 0.0),
        rss_bytes=int(r.get("rss_bytes") or 0),
        threads=int(r.get("threads") or 0),
        main_cpu_s=None,
        net_bytes=_int(r.get("socket_bytes")),
        stack=stacks.get((host, rank), ()),
        stack_error=r.get("stack_error"),
        exit_code=_int(r.get("exit_code")),
        deep=deeps.get((host, rank)),
        p2p=posted_from_json(r.get("p2p")),
        ended=_float(r.get("ended")),
        code=code_from_json(r.get("code")),
    )
    cpu = r.get("main_cpu_percent")
    return RankView(
        sample,
        r.get("collective"),
        r.get("call_site"),
        str(r.get("doing") or sample.status),
        since_s=float(r["since_s"]),
        still_s=float(r["still_s"]),
        quiet_s=float(r["quiet_s"]),
        idle_s=float(r["idle_s"]),
        idle_samples=int(r.get("idle_samples", 0)),
        main_cpu_percent=None if cpu is None else float(cpu),
        progressing=bool(r.get("progressing")),
        moved_samples=int(r.get("moved_samples", 0)),
        args=args_from_json(r.get("args")),
        tallies=tallies.get((host, rank), ()),
        held_s=float(r.get("held_s") or 0.0),
    )


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
            host = _torn_down(line)
            if host is not None and host in streams.reports and host not in torn:
                torn.add(host)
                kept = streams.reports[host]
                streams.reports[host] = dataclasses.replace(kept, notes=(*kept.notes, TEARDOWN_NOTE))
            if host is None or host not in torn:
                streams.add_line(line, -1.0)  # -1: the line's own time
    return streams


def _torn_down(line: str) -> str | None:
    """The host of an agent line whose ended ranks were all ended by SIGTERM (or reaped unread), at least one."""
    brace = line.find("{")
    try:
        data = json.loads(line[brace:]) if brace >= 0 else None
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("schema") != AGENT_SCHEMA or not isinstance(data.get("ranks"), list):
        return None
    ended = [r for r in data["ranks"] if isinstance(r, dict) and r.get("status") in ("gone", "zombie")]
    codes = {r.get("exit_code") for r in ended}
    if not ended or -signal.SIGTERM not in codes or not codes <= {-signal.SIGTERM, None}:
        return None
    return str(data.get("host"))
