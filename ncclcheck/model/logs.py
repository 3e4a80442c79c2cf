"""Frozen data read from NCCL, torch and torchrun logs: framed lines, connections, and each rank's view."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LogLine:
    """One logical log line with its launcher prefixes removed and its NCCL header (if any) split out."""

    file: str
    line: int
    text: str
    host: str | None = None
    pid: str | None = None
    dev: int | None = None
    level: str | None = None
    rank: int | None = None

    @property
    def nccl(self) -> bool:
        return self.level is not None


@dataclass(frozen=True)
class Connection:
    """One channel connection as NCCL logged it: ``src -> dst via transport``."""

    channel: int
    src: int
    dst: int
    transport: str
    direction: str

    @property
    def kind(self) -> str:
        """P2P, SHM or NET (NET/IB, NET/Socket and plugins alike)."""
        head = self.transport.split("/", 1)[0]
        return "SHM" if head in ("SHM", "direct shared memory") else head


@dataclass(frozen=True)
class RankLog:
    """What the NCCL log of one rank (one host:pid:[dev]) says about its communicator and transports."""

    host: str | None
    pid: str | None
    dev: int | None
    rank: int | None
    nranks: int | None
    bus_id: str | None
    nccl_version: str | None
    network: str | None
    net_devices: tuple[str, ...]
    socket_interfaces: tuple[str, ...]
    bootstrap: tuple[str, ...]
    gdr_disabled: tuple[str, ...]
    init_started: bool
    init_complete: bool
    env: tuple[tuple[str, str], ...]
    connections: tuple[Connection, ...]
    first_line: int
    file: str
    comm_ids: tuple[str, ...] = ()  # the NCCL communicators it set up (commId): the ranks of one job share one
    trail: tuple[int, str] | None = None  # its first line of NCCL's error trail ("net.cc:870 -> 2"): number, text

    @property
    def name(self) -> str:
        rank = f"rank {self.rank}" if self.rank is not None else "rank ?"
        where = ":".join(p for p in (self.host, self.pid) if p)
        return f"{rank} ({where} [{self.dev}])" if where else rank


@dataclass(frozen=True)
class Timeout:
    """One torch watchdog timeout line: which rank, process group, collective, and how long."""

    rank: int | None
    pg: str | None
    seq: int
    op: str
    numel_in: int | None
    numel_out: int | None
    timeout_ms: int | None
    ran_ms: int | None
    file: str
    line: int
    group_rank: int | None = None  # the rank within ``pg`` its watchdog names ("[PG ID 2 ... Rank 0]")
    pg_desc: str | None = None  # the group's name, where torch prints it ("PIPELINE_MODEL_PARALLEL_GROUP")

    @property
    def subgroup(self) -> bool:
        """A process group other than the default one: its ranks are not the job's global ranks."""
        return self.pg is not None and self.pg != "0" and self.pg_desc != "default_pg"


@dataclass(frozen=True)
class Event:
    """A framed line as its emitter wrote it (analysis/logs/events.py): who, how severe, from which rank and host,
    when (as the emitter printed it)."""

    file: str
    line: int
    emitter: str
    severity: str
    rank: int | None
    host: str | None
    time: str | None
    text: str


@dataclass(frozen=True)
class ChildFailure:
    """One entry of torchrun's ChildFailedError summary."""

    rank: int
    local_rank: int | None
    host: str | None
    exitcode: int | None
    signal: str | None
    root_cause: bool  # the entry its table calls "Root Cause (first observed failure)"
    time: str | None = None  # as the table gives it: "2026-11-24_15:23:15" (whole seconds, the agent's clock)
    table: int = 0  # which failure table of the logs (each agent prints its own)
    pid: int | None = None
    at: str | None = None  # the agent's own "failed (exitcode: N) ... (pid: P)" line's time ("1124 15:23:15.686")


def peer_map(log: RankLog) -> dict[int, tuple[str, ...]]:
    """peer rank -> the transports this rank's connections to (or from) it use."""
    out: dict[int, set[str]] = {}
    for c in log.connections:
        me = log.rank
        peer = c.dst if c.src == me else c.src if c.dst == me else c.dst
        out.setdefault(peer, set()).add(c.transport)
    return {peer: tuple(sorted(t)) for peer, t in sorted(out.items())}
