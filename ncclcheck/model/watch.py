"""What ``ncclcheck watch`` sees: the job's rank processes, one sample of each, and what it concluded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ncclcheck.model.args import CallArgs, FrameLocals, PostedOps
from ncclcheck.model.findings import Finding
from ncclcheck.model.flight import FrDump
from ncclcheck.model.shares import RankShare, Round, Tally
from ncclcheck.model.stacks import Frame
from ncclcheck.model.waits import CodeAt, Deep

AGENT_SCHEMA = (
    "ncclcheck.watch-agent/3"  # one JSON line per sample of a node's ranks: model.agent_line writes and reads it
)
# read too, for files recorded with them: /2 sent every rank in full, /1 its rounds as objects
AGENT_SCHEMAS = (AGENT_SCHEMA, "ncclcheck.watch-agent/2", "ncclcheck.watch-agent/1")


# ok, pending (not judged yet), undecided (the evidence cannot decide), warning, problem, finished (the job is over)
WatchStatus = Literal["ok", "pending", "undecided", "warning", "problem", "finished"]


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
    store_port: int | None = None  # MASTER_PORT: the store's traffic is not the collectives' traffic


@dataclass(frozen=True)
class Job:
    """One distributed job's ranks on this node."""

    id: str  # TORCHELASTIC_RUN_ID, else MASTER_ADDR:MASTER_PORT, else the launcher pid
    world_size: int
    nodes: int | None
    launcher_pid: int | None
    ranks: tuple[RankProc, ...]
    script: str = ""  # what the ranks run (the script or -m module and its arguments)
    cwd: str = ""
    started: float | None = None  # epoch seconds: the launcher's start, else the first rank's
    how: str = "env"  # env: ranks carry RANK/WORLD_SIZE; spawn: torch.multiprocessing.spawn children
    orphaned: bool = False  # started by torchrun (its variables are set), now children of init: torchrun is gone
    slurm_job: str | None = None  # the SLURM job the ranks run in (their SLURM_JOB_ID)

    def expected_local(self) -> tuple[int, ...]:
        """Rank numbers that should live on this node: the found ones plus gaps in this node's block.

        The block starts at ``RANK - LOCAL_RANK`` (torchrun numbers nodes' ranks one after the other, also
        when nodes run different numbers of them) and holds ``LOCAL_WORLD_SIZE`` ranks."""
        found = {p.rank for p in self.ranks}
        sizes = {p.local_world_size for p in self.ranks if p.local_world_size}
        starts = {p.rank - p.local_rank for p in self.ranks if p.local_rank is not None}
        if len(sizes) == 1 and len(starts) == 1:
            size, start = sizes.pop(), starts.pop()
            found |= set(range(start, min(start + size, self.world_size)))
        return tuple(sorted(found))

    def remote(self) -> tuple[int, ...]:
        """Rank numbers of the job that do not live on this node."""
        here = set(self.expected_local())
        return tuple(r for r in range(self.world_size) if r not in here)


@dataclass(frozen=True)
class RankSample:
    """One look at one rank: process state and counters from /proc, the main thread's stack from py-spy."""

    rank: int
    local_rank: int | None
    pid: int | None
    host: str
    status: str  # running, sleeping, disk-sleep, stopped, zombie, gone, missing
    cpu_percent: float
    rss_bytes: int
    threads: int
    main_cpu_s: float | None  # CPU seconds of the main thread so far; None: unreadable
    net_bytes: int | None  # bytes moved on its TCP sockets (the store's left out); None: unreadable
    stack: tuple[Frame, ...]
    stack_error: str | None
    exit_code: int | None = None  # a zombie's exit code; negative: killed by that signal
    locals: tuple[FrameLocals, ...] | None = None  # read only while it stands still in a torch.distributed call
    rounds: tuple[Round, ...] = ()  # its main thread's stacks sampled many times a second, finished since the last look
    deep: Deep | None = None  # its threads, children, kernel waits and source, read while it stands still outside c10d
    p2p: PostedOps | None = None  # its point-to-point ops as run's hook recorded them, read while it stands still
    ended: float | None = None  # when it ended (epoch seconds, to the millisecond: a pidfd), where seen
    code: CodeAt | None = None  # the statement at its main thread's innermost line of the user's code
    # stopped under ptrace: who holds it ("py-spy (pid 12)"); None: not traced (SIGSTOP, or running)
    tracer: str | None = None


@dataclass(frozen=True)
class Snapshot:
    """Every rank of a job at one moment (``time`` is seconds on the sampler's clock)."""

    time: float
    job: Job
    samples: tuple[RankSample, ...]
    launcher_running: bool | None = None  # None: no launcher known
    recording: bool = False  # the ranks' stacks are sampled in rounds (``collectors.recorder``): shares will come


@dataclass(frozen=True)
class RankView:
    """A rank as the table shows it: its sample, what it is in, and how long it has stood where it is.

    Clocks of standing still, each reset by more kinds of movement than the one before:
    - ``since_s``: a new place (Python frames or process state);
    - ``still_s``: also a collective's bytes on its sockets; what proves progress (main-thread CPU does
      not: NCCL spins the main thread while it waits);
    - ``quiet_s``: also, where its sockets cannot be counted, main-thread CPU: what findings about
      collectives wait for, so that a healthy loop seen without socket counters is never called stuck;
    - ``idle_s``: also main-thread CPU in any case: nothing runs at all.
    ``held_s`` is the other way round: only a new *position* resets it, the user's functions it is called through
    (not their lines: a rank spinning in a loop, or polling for a file, stays at one position while its line moves).
    """

    sample: RankSample
    collective: str | None
    call_site: str | None
    doing: str  # the collective, or the innermost frame's function when not in one
    since_s: float
    still_s: float
    quiet_s: float
    idle_s: float
    idle_samples: int  # consecutive sample intervals with no movement of any kind
    main_cpu_percent: float | None  # the main thread's CPU over the last interval
    progressing: bool  # it moved (a new place, or a collective's bytes) since the last sample
    moved_samples: int = 0  # consecutive samples in which it progressed
    place: tuple[object, ...] = ()  # the last place seen (Python frames, state): a failed dump does not move it
    args: CallArgs | None = None  # the arguments of the torch.distributed call it stands in, where they were read
    tallies: tuple[Tally, ...] = ()  # its rounds of sampled stacks over the last minute, counted (where its time goes)
    held_s: float = 0.0  # at one position: the same functions of the user's code (a loop's lines may change)

    @property
    def rank(self) -> int:
        return self.sample.rank

    @property
    def known(self) -> bool:
        """Whether its stack was read: without one, what it waits in cannot be told."""
        return bool(self.sample.stack)


@dataclass(frozen=True)
class Verdict:
    """The one line on top: ok, pending (not judged yet, and how long until it is), warning, problem, finished."""

    status: WatchStatus
    message: str


@dataclass(frozen=True)
class AgentReport:
    """One node's latest line from its ``watch --agent``, as the viewer holds it (stacks filled in from earlier
    lines). ``received``: the viewer's clock when it came (the line's own time in a replay)."""

    host: str
    received: float
    node_rank: int | None
    job_id: str | None
    world_size: int | None
    nodes: int | None
    launcher_running: bool | None
    window_s: float
    samples: int
    views: tuple[RankView, ...]
    notes: tuple[str, ...] = ()
    error: str | None = None  # the agent's own words: no job on that node, several jobs, ...
    done: str | None = None  # why the agent ended, when it did
    rendezvous: RendezvousEndpoint | None = None  # its torchrun's c10d rendezvous, from the launcher's command line
    interval_s: float | None = None  # how often the agent writes a line
    flight: tuple[FrDump, ...] = ()  # its ranks' live Flight Recorders, asked through their control plane on a stall
    recording: bool = False  # its ranks' stacks are sampled in rounds, which its lines carry
    groups: tuple[frozenset[int], ...] = ()  # the job's process groups as its ranks wrote them (run's hook)


@dataclass(frozen=True)
class RendezvousEndpoint:
    """Where a torchrun's c10d rendezvous is, from its command line."""

    host: str
    port: int
    run_id: str  # --rdzv-id; torchrun's default is "none"
    address: str | None = None  # ``host`` as the launcher's node resolves it (the viewer may not resolve it)

    def text(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class RendezvousNode:
    """One node as torchrun's c10d rendezvous knows it."""

    addr: str  # the node's address or name as its torchrun gave it (--local-addr, else its FQDN)
    node_rank: int
    agent_pid: int | None  # its torchrun's pid, as that node numbers it
    heartbeat_age_s: float | None  # since its torchrun's last rendezvous heartbeat (every 5 s), on the reader's clock
    removed: bool = False  # seen in an earlier read, gone from this one: the other torchruns dropped it


@dataclass(frozen=True)
class RendezvousMap:
    """One read of a job's rendezvous state (``collectors.rendezvous``), or why it could not be read."""

    endpoint: str
    run_id: str
    round: int | None
    nodes: tuple[RendezvousNode, ...]
    error: str | None = None


@dataclass(frozen=True)
class NodeStatus:
    """One node of a job watched through agents: ok (its agent reports), silent (it stopped reporting),
    unreachable (its agent could not start, or ended with an error), missing (expected, never heard from)."""

    host: str
    node_rank: int | None
    agent: str  # ok, silent, unreachable, missing
    ranks: tuple[int, ...]
    sample_age_s: float | None  # seconds since its last line; None: never heard from
    detail: str = ""  # the fan-out tool's or agent's own words, when it failed
    address: str = ""  # as torchrun's rendezvous knows the node; "" when it was not read
    heartbeat_age_s: float | None = None  # its torchrun's last rendezvous heartbeat; None when not known
    left_rendezvous: bool = False  # the other torchruns removed it from the rendezvous (its heartbeat stopped)


@dataclass(frozen=True)
class WatchState:
    """One refresh: the job, every rank's view, and the findings; what views render and tests assert."""

    time: float
    job: Job
    ranks: tuple[RankView, ...]
    findings: tuple[Finding, ...]
    verdict: Verdict
    window_s: float = 0.0  # how long this job has been watched
    samples: int = 1
    notes: tuple[str, ...] = ()  # e.g. py-spy not permitted, with the fix
    launcher_running: bool | None = None
    nodes: tuple[NodeStatus, ...] = ()  # watched through agents, one per node (``watch --fanout/--slurm``)
    shares: tuple[RankShare, ...] = ()  # where each rank's time went over the last minute, where it was sampled
    recording: bool = False  # the ranks' stacks are sampled in rounds: a slow rank can be told once enough came
