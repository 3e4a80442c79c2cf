"""NCCL's own INFO lines, folded per rank: version, network, devices, interfaces, GDR, init, and transports."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from ncclcheck.analysis.logs.events import TRAIL
from ncclcheck.analysis.logs.remembered import Remembered
from ncclcheck.model.logs import Connection, LogLine, RankLog

VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+(?:\+cuda[\d.]+)?)")
INIT = re.compile(
    r"comm (0x[0-9a-f]+) rank (\d+) nranks (\d+) cudaDev (\d+)(?: nvmlDev \d+)? busId ([0-9a-f]+)"
    r"(?: commId (0x[0-9a-f]+))?(?: localSize \d+)? - Init (START|COMPLETE)"
)
TOPO = re.compile(r"comm 0x[0-9a-f]+ rank (\d+) nRanks (\d+) nNodes (\d+)")
# A network or transport name may hold a space (aws-ofi-nccl's "AWS Libfabric"): read to the end, not to a space
NETWORK = re.compile(r"Using network (\w[\w ./-]*?)\s*$")
NET_IB = re.compile(r"NET/(\w[\w ]*?) ?: Using ((?:\[\d+\]\S+\s*)+)(?:\[RO\])?\s*;\s*OOB ([\w.-]+):(\S+?)<")
NET_SOCKET = re.compile(r"NET/Socket : Using ((?:\[\d+\][\w.-]+:\S+<\d+>\s*)+)")
BOOTSTRAP = re.compile(r"Bootstrap ?: Using ((?:\[\d+\])?[\w.-]+:\S+<\d+>(?:\s+\[\d+\][\w.-]+:\S+<\d+>)*)")
ITEM = re.compile(r"(?:\[\d+\])?([\w.:-]+?)(?::([0-9A-Fa-f:.%\w-]+))?<\d+>")
DEVICE = re.compile(r"\[\d+\](\S+)")  # an HCA port as NCCL lists it, suffixes and all: "mlx5_0:1/IB/SHARP"
GDR_OFF = re.compile(r"GPU Direct RDMA Disabled for (?:HCA (\d+) '([\w-]+)'( \(no module\))?|GPU (\S+) / HCA (\d+) .*)")
ENV = re.compile(r"\b((?:NCCL|TORCH)_\w+) set (?:by environment )?to (\S*)")
RETRIED = re.compile(r"Call to connect returned (?P<why>[^,]+), retrying")  # socket.h / socket.cc, NCCL 2.4-2.11
CONNECTION = re.compile(
    r"(?:Channel|Ring) (\d+)(?:/\d+)? : (\d+)(?:\[[0-9a-f]+\])? -> (\d+)(?:\[[0-9a-f]+\])?"
    r"(?: \[(send|receive)\])? via (NET/[\w-]+(?: [\w-]+)*/\S*|\S+(?: pointer| shared memory)?)"
)


def link_layer(device: str) -> str | None:
    """The link layer of an HCA port as NCCL lists it: "mlx5_0:1/IB/SHARP" is IB (SHARP is a capability, not a link
    layer), "mlx5_bond_0:1/RoCE" RoCE; None for a device named without one."""
    parts = device.split("/")
    return parts[1] if len(parts) > 1 and parts[1] else None


@dataclass
class Accumulator:
    """Mutable accumulator for one log source; frozen into a RankLog at the end."""

    file: str
    first_line: int
    host: str | None
    pid: str | None
    dev: int | None
    prefix_rank: int | None = None  # the rank a launcher's prefix of its first line named (torchrun's, MPI's)
    rank: int | None = None  # the rank and size of the largest communicator it set up (its world, not a subgroup)
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
    comm_ids: dict[str, None] = field(default_factory=dict)  # in order, at most MAX_COMMS
    trail: tuple[int, str] | None = None  # its first line of NCCL's error trail: number, text
    # NCCL before 2.12 says a connect it retries ("Call to connect returned ..., retrying"): its last such line, and
    # the line of its last Init COMPLETE (a retry followed by one was transient)
    retried: tuple[int, str] | None = None
    completed_at: int | None = None
    touched: set[str] = field(default_factory=set)  # the fields a line set outright (not only if unset)

    def inferred_rank(self) -> int | None:
        """The global rank: its launcher prefix's, else its largest communicator's (NCCL's Init line: a subgroup's
        rank is not the global one), else the end of its connection lines that is this process (most common)."""
        if self.prefix_rank is not None:
            return self.prefix_rank
        if self.rank is not None:
            return self.rank
        votes = Counter(c.dst if c.direction == "receive" else c.src for c in self.connections.values())
        return votes.most_common(1)[0][0] if votes else None

    def freeze(self) -> RankLog:
        return RankLog(
            self.host,
            self.pid,
            self.dev,
            self.inferred_rank(),
            self.nranks,
            self.bus_id,
            self.version,
            self.network,
            self.devices,
            self.sockets,
            self.bootstrap,
            tuple(self.gdr_off),
            self.started,
            self.complete,
            tuple(sorted(self.env.items())),
            tuple(self.connections.values()),
            self.first_line,
            self.file,
            tuple(sorted(self.comm_ids)),
            self.trail,
        )


Key = tuple[str | int | None, ...]


def source_key(line: LogLine) -> Key:
    """Which process (and device, for single-process multi-GPU) wrote the line."""
    return key_of(line.file, line.host, line.pid, line.dev, line.rank)


def key_of(file: str, host: str | None, pid: str | None, dev: int | None, rank: int | None) -> Key:
    """``source_key`` of a line given in parts: its host, pid and device, or (no NCCL header) its file and the
    rank its launcher prefix named."""
    return (host, pid, dev) if host is not None else (file, rank, dev)


# What one NCCL message does to its source's accumulator, as (field, value) steps: pure in the text, so a
# message printed by many ranks or many times is parsed once (``ops`` below remembers the latest ones).
Op = tuple[str, object]


def steps_of(text: str) -> tuple[Op, ...]:
    """The steps one NCCL message makes (``ops`` remembers them per message)."""
    if " -> " in text and TRAIL.match(text) is not None:  # NCCL's error trail (events.TRAIL)
        return (("trail", text),)
    if "Call to connect returned" in text and RETRIED.search(text) is not None:
        return (("retried", text),)
    if (m := INIT.search(text)) is not None:
        comm_id = (("comm_id", m.group(6)),) if m.group(6) else ()
        return (
            ("comm", (int(m.group(2)), int(m.group(3)))),
            ("bus_id", m.group(5)),
            ("started", m.group(7) == "START"),
            ("complete", m.group(7) == "COMPLETE"),
            *comm_id,
        )
    if (m := CONNECTION.search(text)) is not None:
        conn = Connection(int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(5), m.group(4) or "")
        return (("conn", ((conn.channel, conn.src, conn.dst, conn.direction), conn)),)
    if (m := NET_IB.search(text)) is not None:
        return (
            ("devices", tuple(DEVICE.findall(m.group(2)))),
            ("network?", "IB" if m.group(1) == "IB" else m.group(1)),
            ("bootstrap?", (f"{m.group(3)}({m.group(4)})",)),
        )
    if (m := NET_SOCKET.search(text)) is not None:
        return (("sockets", tuple(f"{n}({a})" if a else n for n, a in ITEM.findall(m.group(1)))),)
    if (m := BOOTSTRAP.search(text)) is not None:
        return (("bootstrap", tuple(f"{n}({a})" if a else n for n, a in ITEM.findall(m.group(1)))),)
    steps: list[Op] = []
    if (m := NETWORK.search(text)) is not None:
        steps.append(("network", m.group(1)))
    elif (m := VERSION.search(text)) is not None:
        steps.append(("version?", m.group(1)))
    elif (m := TOPO.search(text)) is not None:
        steps.append(("comm", (int(m.group(1)), int(m.group(2)))))
    elif (m := GDR_OFF.search(text)) is not None:
        steps.append(("gdr", m.group(0)))
    steps += [("env", (name, value.rstrip("."))) for name, value in ENV.findall(text)]
    return tuple(steps)


ops = Remembered(steps_of)  # the steps one NCCL message makes, parsed once per distinct message
_memo = ops.known


Keyed = tuple[tuple[int, int, int, str], Connection]  # a connection and its key in ``Accumulator.connections``


def only_connection(steps: tuple[Op, ...]) -> Keyed | None:
    """The connection a message's steps add, when that is all they do (the commonest NCCL line of a large job's
    logs): the caller adds it with no call to ``read_line``."""
    if len(steps) == 1 and steps[0][0] == "conn":
        keyed: Keyed = steps[0][1]  # type: ignore[assignment]
        return keyed
    return None


def read_line(acc: Accumulator, text: str, steps: tuple[Op, ...] | None = None, number: int = 0) -> None:
    """Fold one NCCL message (its ``steps``, when known; ``number``: its line's) into the accumulator."""
    for name, value in ops(text) if steps is None else steps:
        if name == "trail":
            acc.trail = acc.trail or (number, text)
        elif name == "conn":
            keyed: Keyed = value  # type: ignore[assignment]
            acc.connections.setdefault(*keyed)  # a connection and its key: the first one of a key is kept
        elif name == "comm":  # a communicator's rank and size: the largest one's are kept (ties: the latest)
            comm: tuple[int, int] = value  # type: ignore[assignment]
            if acc.nranks is None or comm[1] >= acc.nranks:
                acc.rank, acc.nranks = comm
        elif name in ("started", "complete"):
            setattr(acc, name, getattr(acc, name) or value)
            if name == "complete" and value:
                acc.completed_at = number
        elif name == "retried":
            acc.retried = (number, text)
        elif name == "comm_id":
            if len(acc.comm_ids) < MAX_COMMS:
                acc.comm_ids[value] = None  # type: ignore[index]
        elif name.endswith("?"):
            if not getattr(acc, name[:-1]):
                setattr(acc, name[:-1], value)
        elif name == "gdr":
            if len(acc.gdr_off) < MAX_GDR_OFF and value not in acc.gdr_off:
                acc.gdr_off.append(value)  # type: ignore[arg-type]  # one per HCA, not one per line
        elif name == "env":
            pair: tuple[str, str] = value  # type: ignore[assignment]
            acc.env[pair[0]] = pair[1]
        else:
            setattr(acc, name, value)
            acc.touched.add(name)


def _merge(acc: Accumulator, later: Accumulator) -> None:
    """Fold ``later`` (the same source's lines further on, folded on their own) into ``acc``: as if its lines
    had been read into ``acc`` one by one."""
    for name in later.touched:  # set outright: the later value wins
        setattr(acc, name, getattr(later, name))
    for name in ("network", "bootstrap", "version"):  # set only if unset: the earlier value, when there was one
        if name not in later.touched and not getattr(acc, name):
            setattr(acc, name, getattr(later, name))
    acc.touched |= later.touched
    if later.nranks is not None and (acc.nranks is None or later.nranks >= acc.nranks):
        acc.rank, acc.nranks = later.rank, later.nranks
    acc.started, acc.complete = acc.started or later.started, acc.complete or later.complete
    for item in later.gdr_off:
        if len(acc.gdr_off) < MAX_GDR_OFF and item not in acc.gdr_off:
            acc.gdr_off.append(item)
    acc.env.update(later.env)
    for comm_id in later.comm_ids:
        if len(acc.comm_ids) < MAX_COMMS:
            acc.comm_ids[comm_id] = None
    for key, conn in later.connections.items():
        acc.connections.setdefault(key, conn)
    acc.trail = acc.trail or later.trail
    acc.retried = later.retried or acc.retried  # the last of each
    acc.completed_at = later.completed_at or acc.completed_at


MAX_GDR_OFF = 32
MAX_COMMS = 64


class RankFold:
    """Folds NCCL lines into one accumulator per source; memory grows with processes, not with lines."""

    def __init__(self) -> None:
        self._accs: dict[Key, Accumulator] = {}

    def feed(self, line: LogLine) -> None:
        self.add_line(line.file, line.line, line.text, line.host, line.pid, line.dev, line.rank)

    def add_line(
        self, file: str, number: int, text: str, host: str | None, pid: str | None, dev: int | None, rank: int | None
    ) -> None:
        """``feed`` of a line given in parts (the fast lane makes no LogLine)."""
        acc = self.source(file, number, host, pid, dev, rank)
        steps = _memo.get(text)
        if steps is None or steps:  # most lines of a large log change nothing: no call for them
            read_line(acc, text, steps, number)

    def source(
        self, file: str, number: int, host: str | None, pid: str | None, dev: int | None, rank: int | None
    ) -> Accumulator:
        """The accumulator of the source of a line (``key_of``), made at its first line."""
        key = (host, pid, dev) if host is not None else (file, rank, dev)  # key_of's, without a call
        acc = self._accs.get(key)
        if acc is None:
            acc = self._accs[key] = Accumulator(file, number, host, pid, dev, prefix_rank=rank)
        return acc

    def merge(self, later: RankFold, offset: int) -> None:
        """Add a fold of the lines that follow (their numbers counted from ``offset``), as if fed here."""
        for key, acc in later._accs.items():
            mine = self._accs.get(key)
            trail = (acc.trail[0] + offset, acc.trail[1]) if acc.trail else None
            retried = (acc.retried[0] + offset, acc.retried[1]) if acc.retried else None
            completed = acc.completed_at + offset if acc.completed_at is not None else None
            moved = replace(acc, trail=trail, retried=retried, completed_at=completed)
            if mine is None:
                self._accs[key] = replace(moved, first_line=acc.first_line + offset)
            else:
                _merge(mine, moved)

    def stuck(self) -> list[tuple[Accumulator, int, str]]:
        """The sources whose last connect retry (NCCL before 2.12) no Init COMPLETE followed: each, with that line's
        number and text (a connection still failing where its lines end: a job stuck there, or a log cut there)."""
        return [
            (acc, *acc.retried)
            for acc in self._accs.values()
            if acc.retried is not None and (acc.completed_at is None or acc.completed_at < acc.retried[0])
        ]

    def rank_of(self, key: Key) -> int | None:
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
