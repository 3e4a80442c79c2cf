"""NCCL's own INFO lines, folded per rank: version, network, devices, interfaces, GDR, init, and transports."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from ncclcheck.model.logs import Connection, LogLine, RankLog

VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+(?:\+cuda[\d.]+)?)")
INIT = re.compile(
    r"comm (0x[0-9a-f]+) rank (\d+) nranks (\d+) cudaDev (\d+)(?: nvmlDev \d+)? busId ([0-9a-f]+)"
    r"(?: commId (0x[0-9a-f]+))?(?: localSize \d+)? - Init (START|COMPLETE)"
)
TOPO = re.compile(r"comm 0x[0-9a-f]+ rank (\d+) nRanks (\d+) nNodes (\d+)")
NETWORK = re.compile(r"Using network (\w+)")
NET_IB = re.compile(r"NET/(\w+) ?: Using ((?:\[\d+\]\S+\s*)+)(?:\[RO\])?\s*;\s*OOB ([\w.-]+):(\S+?)<")
NET_SOCKET = re.compile(r"NET/Socket : Using ((?:\[\d+\][\w.-]+:\S+<\d+>\s*)+)")
BOOTSTRAP = re.compile(r"Bootstrap ?: Using ((?:\[\d+\])?[\w.-]+:\S+<\d+>(?:\s+\[\d+\][\w.-]+:\S+<\d+>)*)")
ITEM = re.compile(r"(?:\[\d+\])?([\w.:-]+?)(?::([0-9A-Fa-f:.%\w-]+))?<\d+>")
DEVICE = re.compile(r"\[\d+\](\S+)")
GDR_OFF = re.compile(r"GPU Direct RDMA Disabled for (?:HCA (\d+) '([\w-]+)'( \(no module\))?|GPU (\S+) / HCA (\d+) .*)")
ENV = re.compile(r"\b((?:NCCL|TORCH)_\w+) set (?:by environment )?to (\S*)")
CONNECTION = re.compile(
    r"(?:Channel|Ring) (\d+)(?:/\d+)? : (\d+)(?:\[[0-9a-f]+\])? -> (\d+)(?:\[[0-9a-f]+\])?"
    r"(?: \[(send|receive)\])? via (\S+(?: pointer| shared memory)?)"
)


@dataclass
class _Rank:
    """Mutable accumulator for one log source; frozen into a RankLog at the end."""

    file: str
    first_line: int
    host: str | None
    pid: str | None
    dev: int | None
    rank: int | None = None
    nranks: int | None = None
    bus_id: str | None = None
    version: str | None = None
    network: str | None = None
    devices: tuple[str, ...] = ()
    sockets: tuple[str, ...] = ()
    bootstrap: tuple[str, ...] = ()
    gdr_off: list[str] = field(default_factory=list)
    started: bool = False
    complete: bool = False
    env: dict[str, str] = field(default_factory=dict)
    connections: dict[tuple[int, int, int, str], Connection] = field(default_factory=dict)

    def inferred_rank(self) -> int | None:
        """The Init line's rank, else the end of its connection lines that is this process (most common)."""
        if self.rank is not None:
            return self.rank
        votes = Counter(c.dst if c.direction == "receive" else c.src for c in self.connections.values())
        return votes.most_common(1)[0][0] if votes else None

    def freeze(self) -> RankLog:
        return RankLog(
            self.host, self.pid, self.dev, self.inferred_rank(), self.nranks, self.bus_id, self.version, self.network,
            self.devices, self.sockets, self.bootstrap, tuple(self.gdr_off), self.started, self.complete,
            tuple(sorted(self.env.items())), tuple(self.connections.values()), self.first_line, self.file,
        )  # fmt: skip


def source_key(line: LogLine) -> tuple[str, ...]:
    """Which process (and device, for single-process multi-GPU) wrote the line."""
    if line.host is not None:
        return (line.host, line.pid or "", str(line.dev))
    return (line.file, str(line.rank if line.rank is not None else ""), str(line.dev))


def read_line(acc: _Rank, text: str) -> None:
    """Fold one NCCL message into the accumulator."""
    if (m := INIT.search(text)) is not None:
        acc.rank, acc.nranks, acc.bus_id = int(m.group(2)), int(m.group(3)), m.group(5)
        acc.started = acc.started or m.group(7) == "START"
        acc.complete = acc.complete or m.group(7) == "COMPLETE"
    elif (m := CONNECTION.search(text)) is not None:
        conn = Connection(int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(5), m.group(4) or "")
        acc.connections.setdefault((conn.channel, conn.src, conn.dst, conn.direction), conn)
    elif (m := NET_IB.search(text)) is not None:
        acc.devices = tuple(DEVICE.findall(m.group(2)))
        acc.network = acc.network or ("IB" if m.group(1) == "IB" else m.group(1))
        acc.bootstrap = acc.bootstrap or (f"{m.group(3)}({m.group(4)})",)
    elif (m := NET_SOCKET.search(text)) is not None:
        acc.sockets = tuple(f"{n}({a})" if a else n for n, a in ITEM.findall(m.group(1)))
    elif (m := BOOTSTRAP.search(text)) is not None:
        acc.bootstrap = tuple(f"{n}({a})" if a else n for n, a in ITEM.findall(m.group(1)))
    else:
        _read_other(acc, text)


def _read_other(acc: _Rank, text: str) -> None:
    if (m := NETWORK.search(text)) is not None:
        acc.network = m.group(1)
    elif (m := VERSION.search(text)) is not None:
        acc.version = acc.version or m.group(1)
    elif (m := TOPO.search(text)) is not None:
        acc.rank, acc.nranks = int(m.group(1)), int(m.group(2))
    elif (m := GDR_OFF.search(text)) is not None and len(acc.gdr_off) < MAX_GDR_OFF and m.group(0) not in acc.gdr_off:
        acc.gdr_off.append(m.group(0))  # one per HCA, not one per line
    for name, value in ENV.findall(text):
        acc.env[name] = value.rstrip(".")


MAX_GDR_OFF = 32


class RankFold:
    """Folds NCCL lines into one accumulator per source; memory grows with processes, not with lines."""

    def __init__(self) -> None:
        self._accs: dict[tuple[str, ...], _Rank] = {}

    def feed(self, line: LogLine) -> None:
        key = source_key(line)
        acc = self._accs.get(key)
        if acc is None:
            acc = self._accs[key] = _Rank(line.file, line.line, line.host, line.pid, line.dev, rank=line.rank)
        read_line(acc, line.text)

    def rank_of(self, key: tuple[str, ...]) -> int | None:
        acc = self._accs.get(key)
        return acc.inferred_rank() if acc else None

    def result(self) -> tuple[RankLog, ...]:
        return tuple(a.freeze() for a in self._accs.values())


def ranks(lines: Iterable[LogLine]) -> tuple[RankLog, ...]:
    """One RankLog per process/device that wrote NCCL lines, in order of first appearance."""
    fold = RankFold()
    for line in lines:
        if line.nccl:
            fold.feed(line)
    return fold.result()


def peer_map(log: RankLog) -> dict[int, tuple[str, ...]]:
    """peer rank -> the transports this rank's connections to (or from) it use."""
    out: dict[int, set[str]] = {}
    for c in log.connections:
        me = log.rank
        peer = c.dst if c.src == me else c.src if c.dst == me else c.dst
        out.setdefault(peer, set()).add(c.transport)
    return {peer: tuple(sorted(t)) for peer, t in sorted(out.items())}
