"""NCCL RAS's view of a job (NCCL >= 2.24; ``src/ras/client_support.cc``): every communicator's ranks with their
process, GPU, status and collective operation counts, and the ranks RAS could not reach. The one home of its JSON
reply (``SET FORMAT json``, NCCL >= 2.28.7), read into frozen facts."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

OPS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")  # ncclFuncToString, NCCL_NUM_FUNCTIONS
IN_PROGRESS = 7  # ncclInProgress: init_state of a rank still initialising its communicator


@dataclass(frozen=True)
class RasRank:
    """One rank of a communicator as RAS reports it."""

    rank: int  # its rank in the communicator
    host: str
    pid: int
    cuda_dev: int
    counts: tuple[tuple[str, int], ...]  # (op, operations launched so far), in OPS order
    init_state: int = 0  # an ncclResult_t: 0 done, 7 in progress, else the error init ended with
    async_error: int = 0
    abort: bool = False

    def count(self, op: str) -> int:
        return next((n for o, n in self.counts if o == op), 0)


@dataclass(frozen=True)
class RasMissing:
    """A rank of a communicator whose data RAS could not gather."""

    rank: int
    host: str
    pid: int
    unresponsive: bool
    dead: bool  # considered dead: unreachable over the RAS network


@dataclass(frozen=True)
class RasComm:
    hash: str
    size: int
    ranks: tuple[RasRank, ...]
    missing: tuple[RasMissing, ...] = ()


@dataclass(frozen=True)
class RasStatus:
    """One reply: what RAS gathered across the job, when it was asked (seconds on the asker's clock)."""

    time: float
    nccl_version: str
    comms: tuple[RasComm, ...]
    timeouts: int = 0


# NCCL 2.28.9 left out the comma between a communicator's "ranks" and "missing_ranks" (Ray repairs it the same way)
_MISSING_COMMA = re.compile(r'\]\s*\n(\s*"missing_ranks")')


def status_from_json(text: str, time: float) -> RasStatus:
    """RAS's JSON reply; raises ValueError on one that is not (a partial read, another server)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = json.loads(_MISSING_COMMA.sub(r"],\n\1", text))
    if not isinstance(data, dict) or "communicators" not in data:
        raise ValueError("not a RAS status reply")
    comms = []
    for comm in data["communicators"]:
        ranks = tuple(
            RasRank(
                int(r["rank"]),
                str(r.get("host", "")),
                int(r.get("pid", 0)),
                int(r.get("cuda_dev", -1)),
                tuple((op, int(r.get("collective_counts", {}).get(op, 0))) for op in OPS),
                int(r.get("status", {}).get("init_state", 0)),
                int(r.get("status", {}).get("async_error", 0)),
                bool(r.get("status", {}).get("abort_flag", False)),
            )
            for r in comm.get("ranks", [])
        )
        missing = tuple(
            RasMissing(
                int(m["rank"]),
                str(m.get("host", "")),
                int(m.get("pid", 0)),
                bool(m.get("status", {}).get("unresponsive", False)),
                bool(m.get("status", {}).get("considered_dead", False)),
            )
            for m in comm.get("missing_ranks", [])
        )
        comms.append(RasComm(str(comm.get("hash", "")), int(comm.get("size", len(ranks))), ranks, missing))
    timeouts = int(data.get("ras", {}).get("timeouts_count", 0))
    return RasStatus(time, str(data.get("nccl_version", "")), tuple(comms), timeouts)
