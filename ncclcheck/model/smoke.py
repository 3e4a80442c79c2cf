"""Frozen data of a smoke run: what each rank reported, per-op results, and a hang's diagnosis."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from ncclcheck.model.findings import Finding
from ncclcheck.model.logs import RankLog
from ncclcheck.model.ranks import span
from ncclcheck.model.stacks import Frame


@dataclass(frozen=True)
class Fingerprint:
    """What a rank runs with: the things that must agree across a job, or explain why it hangs."""

    rank: int
    host: str
    torch: str
    nccl: str | None
    backend: str
    socket_ifname: str | None
    ib_ports: tuple[str, ...]
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Timing:
    """One rank's own times of one op at one size."""

    op: str
    bytes: int
    count: int
    times_us: tuple[float, ...]
    wrong: int


@dataclass(frozen=True)
class RankProgress:
    """A rank's progress file, read back: identity, its last step, its timings, and (rank 0) the job's."""

    rank: int
    pid: int | None
    host: str | None
    last_event: str
    last_op: str | None
    last_bytes: int
    last_call: str | None
    last_time: float
    ended: bool
    results: tuple[OpResult, ...]
    world_size: int = 0
    local_rank: int = 0
    timings: tuple[Timing, ...] = ()
    fingerprint: Fingerprint | None = None
    job_fingerprints: tuple[Fingerprint, ...] = ()
    error: str | None = None  # the exception this rank failed with, if it failed in Python
    error_time: float | None = None


@dataclass(frozen=True)
class StandingStill:
    """Ranks at one place that made no progress (no step, no finished iteration) for ``still_s`` of the ``limit_s``
    smoke's watchdog gives them (``--timeout``, plus the init grace while in init) before it calls a hang."""

    ranks: tuple[int, ...]
    place: str  # "in all_reduce 1M", "held by a drill before all_reduce", "after broadcast 8B", "in init"
    still_s: float
    limit_s: float

    def text(self) -> str:
        return f"rank {span(self.ranks)} standing still {self.still_s:.0f} s of {self.limit_s:g} s {self.place}"


def size_text(nbytes: int) -> str:
    """``1M`` for 1048576, ``8B`` for 8: the sizes as ``--sizes`` takes them."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


@dataclass(frozen=True)
class OpResult:
    """One op at one size, job-wide."""

    op: str
    bytes: int
    count: int
    status: str
    time_us_p50: float | None
    time_us_p95: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    wrong: int
    time_us_min: float | None = None  # the fastest iteration: a degraded link slows every one, noise only some


@dataclass(frozen=True)
class HangSample:
    """What the watchdog saw of one local rank when the deadline passed."""

    rank: int
    pid: int | None
    process: str
    stack: tuple[Frame, ...]
    stack_error: str | None


@dataclass(frozen=True)
class RankState:
    """A rank's diagnosis: its state, the collective it is in, and where it was called."""

    rank: int
    state: str
    collective: str | None
    call_site: str | None
    stack: tuple[str, ...]


@dataclass(frozen=True)
class Hang:
    """The op that did not finish, the ranks to blame, and every rank's state."""

    op: str
    bytes: int
    culprits: tuple[int, ...]
    ranks: tuple[RankState, ...]
    message: str


RunState = Literal["running", "interrupted", "concluded"]
RUNNING: Final = "running"
INTERRUPTED: Final = "interrupted"
CONCLUDED: Final = "concluded"
SmokeVerdict = Literal["pass", "fail", "running", "interrupted"]
# The variable smoke's launcher lists the names it set itself in: never reported as the user's settings.
SET_BY_SMOKE = "NCCLCHECK_SET_BY_SMOKE"


@dataclass(frozen=True)
class SmokeSummary:
    """Everything a smoke run found; ``scope`` is "job" on node 0, "node" elsewhere.

    ``state``: ``running`` while the ranks run (the JSON written as it goes), ``interrupted`` when ^C,
    SIGTERM or SIGHUP ended it first, ``concluded`` once the ranks finished, failed or hung.
    """

    world_size: int
    nodes: int
    node_rank: int
    backend: str
    results: tuple[OpResult, ...]
    hang: Hang | None
    findings: tuple[Finding, ...]
    fingerprints: tuple[Fingerprint, ...]
    transports: tuple[RankLog, ...]
    log_dir: str
    finished: bool
    state: RunState = CONCLUDED

    @property
    def scope(self) -> str:
        return "job" if self.node_rank == 0 else "node"

    @property
    def verdict(self) -> SmokeVerdict:
        """``pass`` or ``fail`` once concluded; a run that has not concluded says so, whatever it saw."""
        if self.state != CONCLUDED:
            return RUNNING if self.state == RUNNING else INTERRUPTED
        bad = self.hang or any(f.severity == "error" for f in self.findings)
        return "fail" if bad or not self.finished or any(r.status != "ok" for r in self.results) else "pass"


@dataclass(frozen=True)
class Launch:
    """How to start torchrun on this node for a smoke run; ``master_port`` None on one node: torchrun picks one."""

    nproc: int
    nodes: int
    node_rank: int
    master_addr: str | None
    master_port: int | None
    backend: str
    log_dir: str
    worker_args: tuple[str, ...]

    @property
    def world_size(self) -> int:
        return self.nproc * self.nodes
