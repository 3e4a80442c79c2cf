"""Hand-built watch snapshots: a job of N ranks, each in a collective or in user code, on a fixed clock."""

from __future__ import annotations

from ncclcheck.analysis.watch import track
from ncclcheck.model.smoke import Frame
from ncclcheck.model.watch import Job, RankProc, RankSample, Snapshot, WatchState

C10D = "/env/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def stack(op: str | None, line: int = 88, user: str = "step") -> tuple[Frame, ...]:
    """Innermost first: torch's collective (if any), then the user's frames."""
    inner = (Frame(op, C10D, 2800), Frame("wrapper", "/env/torch/distributed/c10d_logger.py", 83)) if op else ()
    return (*inner, Frame(user, "/job/train.py", line), Frame("<module>", "/job/train.py", 120))


def job(world: int, per_node: int | None = None) -> Job:
    local = per_node or world
    ranks = tuple(RankProc(1000 + r, r, r % local, world, local, 0, "node0", "python train.py") for r in range(local))
    return Job("job-1", world, world // local, 999, ranks)


def sample(rank: int, frames: tuple[Frame, ...], status: str = "sleeping", io: int = 0) -> RankSample:
    return RankSample(rank, rank, 1000 + rank, "node0", status, 1.0, 300 << 20, 12, io, frames, None)


def states(j: Job, *rounds: dict[int, RankSample], every: float = 5.0, stall: float = 10.0) -> WatchState:
    """Feed the rounds of samples in order (``every`` seconds apart); the tracked state after the last."""
    state = None
    for i, samples in enumerate(rounds):
        state = track(state, Snapshot(i * every, j, tuple(samples[r] for r in sorted(samples))), stall)
    assert state is not None
    return state


def all_in(world: int, op: str, line: int = 88, **odd: RankSample) -> dict[int, RankSample]:
    base = {r: sample(r, stack(op, line)) for r in range(world)}
    base.update({int(k[1:]): v for k, v in odd.items()})
    return base
