"""Flight Recorder dumps as frozen data: one per rank, each a ring buffer of collective and p2p entries."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from ncclcheck.model.findings import Finding


@dataclass(frozen=True)
class FrEntry:
    """One recorded collective or p2p op, reduced to what matching across ranks needs."""

    record_id: int
    pg: str  # process group name, e.g. "0"
    pg_desc: str  # e.g. "default_pg"
    seq: int  # collective_seq_id
    p2p_seq: int
    is_p2p: bool
    lib: str  # "nccl", "gloo", ...
    op: str  # "all_reduce", "broadcast", "send", ...
    peer: str  # profiling_name's tail: "1->2", "3<-0", or ""
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    state: str  # "scheduled" | "started" | "completed" (gloo: "completed" once retired)
    call_site: str  # innermost frame outside torch, "file:line function", or ""
    # torch's watchdog retired it (None: the dump does not say). NCCL's "completed" only says its CUDA events query
    # done, and events never recorded do too: an op still being issued (its communicator being made, or NCCL
    # blocking in the call) reads "completed" while never retired (seen on an H100: a send/recv deadlock)
    retired: bool | None = None

    @property
    def finished(self) -> bool:
        """Completed, as far as the dump can tell: not an NCCL op its watchdog never retired."""
        return self.state == "completed" and not (self.lib == "nccl" and self.retired is False)


@dataclass(frozen=True)
class PgProgress:
    """How far one rank got in one process group (the dump's ``pg_status``)."""

    pg: str
    enqueued: int
    started: int
    completed: int


@dataclass(frozen=True)
class FrDump:
    """One rank's dump: where it came from, its format version, its groups and its entries."""

    file: str
    rank: int
    version: str
    pg_ranks: tuple[tuple[str, tuple[int, ...]], ...]  # (pg name or desc, member ranks) from pg_config
    progress: tuple[PgProgress, ...]
    entries: tuple[FrEntry, ...]


def dump_to_json(dump: FrDump, tail: int = 8) -> dict[str, Any]:
    """A rank's recorder as a node agent sends it: its groups and counters, and only the last ``tail`` entries of each
    group (the collectives a hang is judged by: the ranks' last sequence numbers and where they diverge)."""
    kept: dict[tuple[str, bool], list[FrEntry]] = defaultdict(list)
    for e in dump.entries:
        kept[(e.pg, e.is_p2p)].append(e)
    entries = sorted((e for group in kept.values() for e in group[-tail:]), key=lambda e: e.record_id)
    return {**asdict(dump), "entries": [asdict(e) for e in entries]}


def dump_from_json(data: object) -> FrDump | None:
    """``dump_to_json``'s form read back (None when it is not that form)."""
    if not isinstance(data, dict):
        return None
    try:
        return FrDump(
            str(data["file"]),
            int(data["rank"]),
            str(data["version"]),
            tuple((str(name), tuple(int(r) for r in ranks)) for name, ranks in data["pg_ranks"]),
            tuple(
                PgProgress(str(p["pg"]), int(p["enqueued"]), int(p["started"]), int(p["completed"]))
                for p in data["progress"]
            ),
            tuple(_entry(e) for e in data["entries"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _entry(e: dict[str, Any]) -> FrEntry:
    sizes = ("input_sizes", "output_sizes")
    fields = {**e, **{k: tuple(tuple(int(d) for d in s) for s in e[k]) for k in sizes}}
    fields.update(input_dtypes=tuple(e["input_dtypes"]), output_dtypes=tuple(e["output_dtypes"]))
    return FrEntry(**fields)


@dataclass(frozen=True)
class Unreadable:
    """A file that looked like a dump but could not be used, and why."""

    file: str
    reason: str
    rank: int | None = None  # from the file name, when it has one


@dataclass(frozen=True)
class RankStep:
    """How far one rank got in one group: the pg_status counters and the last op it enqueued."""

    rank: int
    enqueued: int
    started: int
    completed: int
    last_op: str
    call_site: str


@dataclass(frozen=True)
class GroupReport:
    """One process group across the dumps: its members, where they first diverge, how far each got."""

    pg: str
    desc: str
    ranks: tuple[int, ...]
    first_divergent_seq: int | None
    steps: tuple[RankStep, ...]


@dataclass(frozen=True)
class DumpInfo:
    """One dump that was read."""

    file: str
    rank: int
    version: str
    entries: int


@dataclass(frozen=True)
class FlightReport:
    """What the dumps say: which were read, which ranks are missing, per-group progress, and findings."""

    dumps: tuple[DumpInfo, ...]
    unreadable: tuple[Unreadable, ...]
    world_size: int
    missing_ranks: tuple[int, ...]
    groups: tuple[GroupReport, ...]
    findings: tuple[Finding, ...]
