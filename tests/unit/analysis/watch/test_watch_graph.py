"""Rules of the rank-level graph that no single finding module owns: every rank waiting in a different collective,
some on sub-groups (nobody can go on, nobody named); the hook's own frames never the user's place."""

from __future__ import annotations

from watch_states import C10D, job, sample, stack, states

from ncclcheck.analysis.stacks import call_site
from ncclcheck.model.args import FrameLocals
from ncclcheck.model.stacks import Frame
from ncclcheck.model.watch import RankSample

LOGGER = "/env/torch/distributed/c10d_logger.py"


def on_subgroup(rank: int, op: str, line: int) -> RankSample:
    """Rank ``rank`` in ``op`` on a sub-group (the group it passed is a ProcessGroup, not None), its locals read."""
    frames = stack(op, line)
    values = (
        FrameLocals(op, C10D, 2800, (("group", "<ProcessGroup at 0x7f01>"),)),
        FrameLocals("wrapper", LOGGER, 83, (("args", "(<Tensor at 0x7f02>)"), ("kwargs", '{"group": <ProcessGroup>}'))),
    )
    base = sample(rank, frames)
    return RankSample(**{**base.__dict__, "locals": values})


def test_two_ranks_of_a_sub_group_in_different_collectives_are_a_mismatch_nobody_blamed() -> None:
    rounds = [{0: on_subgroup(0, "all_reduce", 56), 1: on_subgroup(1, "broadcast", 58)}] * 4
    state = states(job(2), *rounds, every=5.0, stall=10.0)
    assert [(f.id, f.culprits) for f in state.findings] == [("mismatch", ())], state.findings
    assert "which rank skipped its call cannot be told" in state.findings[0].message


def test_must_not_a_rank_still_moving_or_busy_before_stall_is_no_sub_group_mismatch() -> None:
    """Every rank blocked (no CPU, no bytes) through the quick window is answered at once, as on the default group;
    a rank whose main thread still runs (NCCL spins it at a CUDA sync) only after --stall; one that moves, never."""
    blocked = [{0: on_subgroup(0, "all_reduce", 56), 1: on_subgroup(1, "broadcast", 58)}] * 4
    assert "mismatch" in {f.id for f in states(job(2), *blocked, every=1.0, stall=10.0).findings}

    def busy(i: int) -> RankSample:
        spinning = on_subgroup(1, "broadcast", 58)
        return RankSample(**{**spinning.__dict__, "main_cpu_s": 1.0 + i})

    spinning = [{0: on_subgroup(0, "all_reduce", 56), 1: busy(i)} for i in range(4)]
    assert "mismatch" not in {f.id for f in states(job(2), *spinning, every=1.0, stall=10.0).findings}
    moving = [{0: on_subgroup(0, "all_reduce", 56), 1: on_subgroup(1, "broadcast", 58 + i)} for i in range(4)]
    assert "mismatch" not in {f.id for f in states(job(2), *moving, every=5.0, stall=10.0).findings}


def test_ncclchecks_hook_is_never_the_users_place() -> None:
    hook = Frame("_after.<locals>.wrapper", "/runs/r1/control/hook/sitecustomize.py", 188)
    p2p = Frame("_wrap.<locals>.wrapper", "/runs/r1/control/hook/ncclcheck_hook_p2p.py", 79)
    mine = Frame("<module>", "/job/train.py", 12)
    init = Frame("init_process_group", C10D, 1899)
    assert call_site((init, hook, mine)) == "/job/train.py:12 (<module>)"
    assert call_site((Frame("recv", C10D, 2799), p2p, mine)) == "/job/train.py:12 (<module>)"
    both = {0: sample(0, (init, hook, mine)), 1: sample(1, (init, hook, mine))}
    assert states(job(2), both).ranks[0].call_site == "/job/train.py:12 (<module>)"
