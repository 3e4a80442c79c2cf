"""What ``ncclcheck watch`` sees: the job's rank processes, one sample of each, and what it concluded."""

from __future__ import annotations

from dataclasses import dataclass

from ncclcheck.model.smoke import Frame


@dataclass(frozen=True)
class RankProc:
    """A rank process found on this node, from its environment (set by torchrun, srun, mpirun, ...)."""

    pid: int
    rank: int
    local_rank: int | None
    world_size: int
    local_world_size: int | None
    group_rank: int | None
    host: str
    cmdline: str


@dataclass(frozen=True)
class Job:
    """One distributed job's ranks on this node."""

    id: str  # TORCHELASTIC_RUN_ID, else MASTER_ADDR:MASTER_PORT, else the launcher pid
    world_size: int
    nodes: int | None
    launcher_pid: int | None
    ranks: tuple[RankProc, ...]

    def expected_local(self) -> tuple[int, ...]:
        """Rank numbers that should live on this node: the found ones plus gaps in this node's block."""
        found = {p.rank for p in self.ranks}
        sizes = {p.local_world_size for p in self.ranks if p.local_world_size}
        groups = {p.group_rank for p in self.ranks if p.group_rank is not None}
        if len(sizes) == 1 and len(groups) == 1:
            size, group = sizes.pop(), groups.pop()
            found |= set(range(group * size, min((group + 1) * size, self.world_size)))
        return tuple(sorted(found))


@dataclass(frozen=True)
class RankSample:
    """One look at one rank: process state from psutil and the main thread's stack from py-spy."""

    rank: int
    local_rank: int | None
    pid: int | None
    host: str
    status: str  # running, sleeping, disk-sleep, stopped, zombie, gone, missing, remote
    cpu_percent: float
    rss_bytes: int
    threads: int
    io_chars: int  # read+write chars so far (sockets too): moves while a collective makes progress
    stack: tuple[Frame, ...]
    stack_error: str | None


@dataclass(frozen=True)
class Snapshot:
    """Every rank of a job at one moment (``time`` is seconds on the sampler's clock)."""

    time: float
    job: Job
    samples: tuple[RankSample, ...]


@dataclass(frozen=True)
class RankView:
    """A rank as the table shows it: its sample, what it is in, and for how long it has been there."""

    sample: RankSample
    collective: str | None
    call_site: str | None
    doing: str  # the collective, or the innermost frame's function when not in one
    since_s: float
    progressing: bool  # the stack or its socket I/O changed since the previous sample

    @property
    def rank(self) -> int:
        return self.sample.rank


@dataclass(frozen=True)
class WatchFinding:
    """A problem across ranks: mismatch, straggler, dead or stalled."""

    kind: str
    ranks: tuple[int, ...]
    message: str
    fix: str


@dataclass(frozen=True)
class WatchState:
    """One refresh: the job, every rank's view, and the findings; what views render and tests assert."""

    time: float
    job: Job
    ranks: tuple[RankView, ...]
    findings: tuple[WatchFinding, ...]
    notes: tuple[str, ...] = ()  # e.g. py-spy not permitted, with the fix
