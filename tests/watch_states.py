"""Hand-built watch snapshots: a job of N ranks, each in a collective or in user code, on a fixed clock."""

from __future__ import annotations

from ncclcheck.analysis.watch.judge import Judging, track
from ncclcheck.model.stacks import Frame
from ncclcheck.model.watch import Job, RankProc, RankSample, Snapshot, WatchState

C10D = "/env/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def stack(op: str | None, line: int = 88, user: str = "step") -> tuple[Frame, ...]:
    """Innermost first: torch's collective (if any), then the user's frames."""
    inner = (Frame(op, C10D, 2800), Frame("wrapper", "/env/torch/distributed/c10d_logger.py", 83)) if op else ()
    return (*inner, Frame(user, "/job/train.py", line), Frame("<module>", "/job/train.py", 120))


def job(world: int, per_node: int | None = None, node: int = 0) -> Job:
    """``world`` ranks, ``per_node`` of them on this node (node ``node``'s block); the rest are remote."""
    local = per_node or world
    ranks = tuple(
        RankProc(1000 + r, r, r % local, world, local, node, "node0", "python train.py")
        for r in range(node * local, (node + 1) * local)
    )
    return Job("job-1", world, world // local, 999, ranks)


def sample(
    rank: int,
    frames: tuple[Frame, ...],
    status: str = "sleeping",
    net: int | None = 0,
    cpu: float | None = 1.0,
    exit_code: int | None = None,
) -> RankSample:
    return RankSample(rank, rank, 1000 + rank, "node0", status, 1.0, 300 << 20, 12, cpu, net, frames, None, exit_code)


def states(
    j: Job, *rounds: dict[int, RankSample], every: float = 5.0, stall: float = 10.0, final: bool = False
) -> WatchState:
    """Feed the rounds of samples in order (``every`` seconds apart); the tracked state after the last."""
    state = None
    for i, samples in enumerate(rounds):
        judging = Judging(stall, final and i == len(rounds) - 1)
        state = track(state, Snapshot(i * every, j, tuple(samples[r] for r in sorted(samples))), judging)
    assert state is not None
    return state


def all_in(world: int, op: str, line: int = 88, first: int = 0, **odd: RankSample) -> dict[int, RankSample]:
    """Ranks ``first``..``world``-1 all in ``op`` at ``line``, but for the ``rN=sample(...)`` given."""
    base = {r: sample(r, stack(op, line)) for r in range(first, world)}
    base.update({int(k[1:]): v for k, v in odd.items()})
    return base
