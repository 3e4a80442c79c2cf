"""What NCCL RAS's replies say about a job, judged by their operation counts (never by which group RAS prints as the
outlier: it names the minority even when the majority is behind, NCCL #1911).

RAS knows how many collectives of each kind every rank of every communicator has *launched*. Counts that differ are
normal while a job runs (one rank launches before another); the same counts reply after reply, over ``--stall``
seconds, are a hang: the ranks behind never launched the next operation the others wait in. Who is behind is decided
by the counts: a strict minority behind is named; a minority ahead (one rank that launched a collective the others
did not, an ``if rank == 0:``) is said, with nobody named, as is a tie. A process RAS considers dead, or a rank with an
asynchronous error or an abort, is named as such. RAS's {host, pid} becomes the job's global rank through the PIDs
ncclcheck already knows; a reply whose PIDs are none of the job's is another job's (two jobs can answer on one port).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ras import OPS, RasComm, RasRank, RasStatus

BEHIND_FIX = (
    "the ranks behind never launched the collective the others wait in: read where they stand (their stacks: "
    "`ncclcheck watch`), a path of their code that skips it, or a rank stuck before it; the Flight Recorder gives the "
    "call's sequence number and sizes"
)
AHEAD_FIX = (
    "the stacks or the Flight Recorder decide: a collective only some ranks call (an `if rank == 0:`), or the others "
    "stuck before it"
)
DEAD_FIX = (
    "the process RAS cannot reach has died or its node is down: its log's last lines, `dmesg` and the scheduler's "
    "record of that node; the others wait on it"
)
ERROR_FIX = "read that rank's NCCL WARN lines (NCCL_DEBUG=WARN): its error is the cause the others wait on"
SHARED_FIX = (
    "invalid usage: compare the ranks' collectives at the hang (the Flight Recorder, TORCH_DISTRIBUTED_DEBUG=DETAIL);"
    " remote error: the first error on the peer it names; an abort: the timeout or error that made torch abort"
)


def ours(status: RasStatus, pids: Mapping[int, int]) -> bool:
    """Whether a reply is about this job: some rank's PID is one of its ranks' (two jobs may share a RAS port)."""
    return any(r.pid in pids for c in status.comms for r in c.ranks) or not pids


def judge(polls: Sequence[RasStatus], pids: Mapping[int, int], stall_s: float) -> tuple[Finding, ...]:
    """Findings over replies in time order. ``pids``: the job's PIDs to their global ranks (those seen here)."""
    if not polls:
        return ()
    last = polls[-1]
    found: list[Finding] = []
    for comm in last.comms:
        found.extend(_failed(comm, pids))
        held = _held_since(polls, comm)
        if held is not None and last.time - held >= stall_s:
            finding = _behind(comm, pids, last.time - held, len(polls))
            if finding is not None:
                found.append(finding)
    return tuple(found)


def _who(comm_rank: int, host: str, pid: int, pids: Mapping[int, int]) -> str:
    """``rank 3 (PID 4242 on node7)``: the global rank where the PID is the job's, else the communicator's rank."""
    where = f"PID {pid} on {host}" if host else f"PID {pid}"
    if pid in pids:
        return f"rank {pids[pid]} ({where})"
    return f"communicator rank {comm_rank} ({where})"


def _globals(ranks: Sequence[RasRank], pids: Mapping[int, int]) -> tuple[int, ...]:
    return tuple(sorted({pids[r.pid] for r in ranks if r.pid in pids}))


def _failed(comm: RasComm, pids: Mapping[int, int]) -> list[Finding]:
    out = []
    dead = [m for m in comm.missing if m.dead or m.unresponsive]
    if dead:
        said = ", ".join(_who(m.rank, m.host, m.pid, pids) for m in dead)
        how = "considered dead" if all(m.dead for m in dead) else "not answering"
        culprits = tuple(sorted({pids[m.pid] for m in dead if m.pid in pids}))
        message = f"NCCL RAS: in communicator {comm.hash} ({comm.size} ranks), {said} {how} (unreachable over RAS)"
        out.append(Finding(watch_ids.RAS_DEAD, "error", message, DEAD_FIX, ranks=culprits, culprits=culprits))
    failed = [r for r in comm.ranks if r.async_error or r.abort or r.init_state not in (0, 7)]
    if failed:
        said = ", ".join(
            _who(r.rank, r.host, r.pid, pids)
            + (f" async error {_result(r.async_error)}" if r.async_error else "")
            + (" aborted" if r.abort else "")
            + (f" init error {_result(r.init_state)}" if r.init_state not in (0, 7) else "")
            for r in failed
        )
        own = [r for r in failed if r.async_error in OWN_ERRORS or r.init_state in OWN_ERRORS]
        message = f"NCCL RAS: in communicator {comm.hash}, {said}"
        if not own:
            message += (
                ": an error no rank holds as its own (a peer that went away, ranks that disagree, an abort after a"
                " timeout), so RAS names no culprit"
            )
        out.append(
            Finding(
                watch_ids.RAS_ERROR,
                "error",
                message,
                ERROR_FIX if own else SHARED_FIX,
                ranks=_globals(failed, pids),
                culprits=_globals(own, pids),
            )
        )
    return out


# ncclResult_t (nccl.h): an error a rank holds as its own (its GPU, its system or network, NCCL itself, its
# arguments), and one that says nothing of the rank holding it (ranks that disagree; a peer that failed)
OWN_ERRORS = {1: "unhandled CUDA error", 2: "system error", 3: "internal error", 4: "invalid argument"}
SHARED_ERRORS = {5: "invalid usage", 6: "remote error"}


def _result(code: int) -> str:
    name = OWN_ERRORS.get(code) or SHARED_ERRORS.get(code)
    return f"{code} ({name})" if name else str(code)


def _counts(comm: RasComm) -> dict[int, tuple[int, ...]]:
    return {r.rank: tuple(r.count(op) for op in OPS) for r in comm.ranks}


def _held_since(polls: Sequence[RasStatus], comm: RasComm) -> float | None:
    """When this communicator's counts were last different (the time of the first reply with today's counts), or
    None when they differ between ranks nowhere (nothing to wait on) or the communicator is not in every reply."""
    now = _counts(comm)
    if len({tuple(c) for c in now.values()}) <= 1:
        return None
    since = None
    for poll in reversed(polls):
        same = next((c for c in poll.comms if c.hash == comm.hash), None)
        if same is None or _counts(same) != now:
            break
        since = poll.time
    return since if since is not None and since < polls[-1].time else None


def _behind(comm: RasComm, pids: Mapping[int, int], held_s: float, replies: int) -> Finding | None:
    """The op whose counts differ, the ranks at its lower count and those at its highest."""
    for op in OPS:
        by_rank = {r.rank: r.count(op) for r in comm.ranks}
        top = max(by_rank.values())
        behind = [r for r in comm.ranks if r.count(op) < top]
        if not behind:
            continue
        ahead = [r for r in comm.ranks if r.count(op) == top]
        lowest = min(r.count(op) for r in behind)
        frozen = f"no count moved in {replies} replies over {held_s:.0f} s"
        names = ", ".join(_who(r.rank, r.host, r.pid, pids) for r in behind[:8]) + (" …" if len(behind) > 8 else "")
        if len(behind) * 2 < len(comm.ranks):
            message = (
                f"NCCL RAS: in communicator {comm.hash} ({comm.size} ranks), {names} launched {op} only up to "
                f"operation {lowest} while the other {len(ahead)} reached {top}, and {frozen}: the ranks behind never "
                f"launched the {op} the others wait in"
            )
            culprits = _globals(behind, pids)
            return Finding(
                watch_ids.RAS_BEHIND, "error", message, BEHIND_FIX, ranks=_globals(comm.ranks, pids), culprits=culprits
            )
        first = ", ".join(_who(r.rank, r.host, r.pid, pids) for r in ahead[:8]) + (" …" if len(ahead) > 8 else "")
        message = (
            f"NCCL RAS: in communicator {comm.hash} ({comm.size} ranks), {first} launched {op} operation {top}, which "
            f"the other {len(behind)} have not (they reached {lowest}), and {frozen}: "
            + (
                "an extra call on the ranks ahead, or the others stuck before it: RAS's counts cannot tell which"
                if len(ahead) * 2 < len(comm.ranks)
                else "as many ranks ahead as behind: RAS's counts cannot tell which side is wrong"
            )
        )
        return Finding(watch_ids.RAS_BEHIND, "error", message, AHEAD_FIX, ranks=_globals(comm.ranks, pids))
    return None
