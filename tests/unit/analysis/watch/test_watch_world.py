"""Start-up and group creation as collectives of the world (``analysis.watch.world``), through the whole judge:
the ranks not there are the culprits; a slow start is not a hang; non-members of a group are not awaited."""

from __future__ import annotations

from watch_states import C10D, job, sample, stack, states

from ncclcheck.model.args import FrameLocals
from ncclcheck.model.stacks import Frame
from ncclcheck.model.watch import RankSample, WatchState

INIT = (
    Frame("_new_process_group_helper", C10D, 2169),
    Frame("init_process_group", C10D, 1899),
    Frame("<module>", "/job/train.py", 12),
)
BARRIER = Frame("_store_based_barrier", C10D, 1063)


def new_group(line: int = 20) -> tuple[Frame, ...]:
    return (
        BARRIER,
        Frame("_new_group_with_tag", C10D, 6096),
        Frame("new_group", C10D, 5863),
        Frame("<module>", "/job/train.py", line),
    )


def in_init(rank: int, world: int | None = None) -> RankSample:
    values = (("world_size", str(world)),) if world is not None else ()
    frames = (
        FrameLocals("_new_process_group_helper", C10D, 2169, (("group_name", '"0"'),)),
        FrameLocals("init_process_group", C10D, 1899, values),
        FrameLocals("<module>", "/job/train.py", 12, ()),
    )
    return RankSample(rank, rank, 1000 + rank, "node0", "sleeping", 0.0, 1, 1, 1.0, 0, INIT, None, locals=frames)


def in_new_group(rank: int, ranks: list[int], name: str = "1", barrier_of: int | None = 3) -> RankSample:
    count = (("rendezvous_count", str(barrier_of)), ("group_name", f'"{name}"')) if barrier_of else ()
    frames = (
        FrameLocals("_store_based_barrier", C10D, 1063, count),
        FrameLocals("_new_group_with_tag", C10D, 6096, ()),
        FrameLocals("new_group", C10D, 5863, (("ranks", str(ranks)),)),
        FrameLocals("<module>", "/job/train.py", 20, ()),
    )
    return RankSample(rank, rank, 1000 + rank, "node0", "sleeping", 0.0, 1, 1, 1.0, 0, new_group(), None, locals=frames)


def kinds(state: WatchState) -> dict[str, tuple[int, ...]]:
    return {f.id: f.culprits for f in state.findings}


def test_a_rank_that_never_reaches_init_is_named_after_stall_not_before() -> None:
    """A slow start (rank 1 still importing, polling for a file) looks the same for a while: after --stall only."""
    rounds = [{0: in_init(0), 1: sample(1, stack(None, 40, "wait_for_file"))}] * 3
    assert states(job(2), *rounds, every=1.0, stall=10.0).findings == ()  # 2 s in: a slow start, not judged
    state = states(job(2), *rounds, every=6.0, stall=10.0)
    assert kinds(state) == {"startup": (1,)}
    message = state.findings[0].message
    assert "rank 0 waits in init_process_group at train.py:12 for rank 1" in message
    assert "rank 1, at train.py:40 in wait_for_file, has not reached init_process_group" in message
    assert state.findings[0].chain[0].who == "rank 0" and state.findings[0].end is not None


def test_a_world_larger_than_the_launcher_started_names_the_rank_never_started_at_once() -> None:
    rounds = [{0: in_init(0, world=3), 1: in_init(1, world=3)}] * 6
    state = states(job(2), *rounds, every=0.3, stall=60.0)
    assert kinds(state) == {"startup": (2,)} and state.findings[0].end == "absent"
    assert "rank 2 was never started: the launcher runs 2 rank(s)" in state.findings[0].message


def test_a_rank_that_exited_before_init_is_named() -> None:
    gone = RankSample(1, 1, 1001, "node0", "gone", 0.0, 0, 0, None, None, (), None, exit_code=0)
    rounds = [{0: in_init(0), 1: gone}] * 6
    state = states(job(2), *rounds, every=0.3, stall=60.0)
    assert (
        kinds(state) == {"startup": (1,)} and "rank 1 exited with code 0 before reaching" in state.findings[0].message
    )


def test_must_not_every_rank_in_init_with_none_missing_is_no_startup_finding() -> None:
    """Nobody is missing: the store or the network; that is stalled's to say, never a startup culprit."""
    rounds = [{0: in_init(0, world=2), 1: in_init(1, world=2)}] * 4
    state = states(job(2), *rounds, every=5.0, stall=10.0)
    assert "startup" not in kinds(state) and all(not f.culprits for f in state.findings)


def test_a_rank_waiting_in_a_collective_outside_the_group_creation_the_others_wait_in_is_the_culprit() -> None:
    collective = sample(2, stack("all_reduce", 21))
    rounds = [{0: in_new_group(0, [0, 1]), 1: in_new_group(1, [0, 1]), 2: collective}] * 6
    state = states(job(3), *rounds, every=0.3, stall=60.0)
    assert kinds(state) == {"group-creation": (2,)} and state.findings[0].end == "deadlock"
    assert "rank 2 never called new_group: it waits in all_reduce" in state.findings[0].message


def test_must_not_without_the_world_barrier_only_the_members_are_awaited() -> None:
    """new_group([0, 1]) with no store barrier: rank 0 waits for rank 1 to connect; rank 2, no member, went on."""
    rounds = [
        {
            0: in_new_group(0, [0, 1], barrier_of=None),
            1: sample(1, stack(None, 40, "load")),
            2: sample(2, stack("all_reduce", 21)),
        }
    ] * 4
    state = states(job(3), *rounds, every=5.0, stall=10.0)
    found = [f for f in state.findings if f.id == "group-creation"]
    assert found and found[0].culprits == (1,), state.findings


def test_must_not_a_group_creation_whose_arguments_were_not_read_names_nobody_by_it() -> None:
    unread = RankSample(0, 0, 1000, "node0", "sleeping", 0.0, 1, 1, 1.0, 0, new_group(), None)
    rounds = [{0: unread, 1: sample(1, stack(None, 40, "load"))}] * 4
    state = states(job(2), *rounds, every=5.0, stall=10.0)
    assert "group-creation" not in kinds(state)


def test_groups_created_in_different_orders_name_the_odd_side() -> None:
    rounds = [{0: in_new_group(0, [0, 1]), 1: in_new_group(1, [0, 2]), 2: in_new_group(2, [0, 1])}] * 6
    state = states(job(3), *rounds, every=0.3, stall=60.0)
    assert kinds(state) == {"group-order": (1,)}
    assert "rank 0,2 with ranks [0, 1]; rank 1 with ranks [0, 2]" in state.findings[0].message


def test_must_not_ranks_in_different_group_creations_of_different_names_are_no_order_finding() -> None:
    """Rank 2 is no member of [0, 1] (it returned at once) and already creates the next group: no order bug."""
    rounds = [
        {
            0: in_new_group(0, [0, 1], "1", None),
            1: in_new_group(1, [0, 1], "1", None),
            2: in_new_group(2, [2, 3], "2", None),
        }
    ] * 2
    state = states(job(3), *rounds, every=0.3, stall=60.0)
    assert "group-order" not in kinds(state)


def test_must_not_a_rank_past_init_is_never_the_culprit_of_the_others_still_inside_it() -> None:
    """Seen under load (the README's straggler job): rank 0 finished its side of init and entered its first
    all_reduce while ranks 1-2 were still inside init_process_group (gloo connects them to each other). A rank in a
    collective has a process group: it is past init and nobody inside init waits for it. Never "rank 0 never called
    init_process_group ... neither side can go on", however long it lasts."""
    starting = [{0: in_init(0, world=3), 1: in_init(1, world=3), 2: in_init(2, world=3)}] * 3
    moved = [{0: sample(0, stack("all_reduce", 31)), 1: in_init(1, world=3), 2: in_init(2, world=3)}]
    for rounds in (starting + moved, starting + moved * 6):
        state = states(job(3), *rounds, every=2.0, stall=10.0)
        assert "startup" not in kinds(state) and not any(0 in f.culprits for f in state.findings), state.findings


def test_must_not_a_rank_that_only_just_entered_a_collective_is_a_group_creation_deadlock_yet() -> None:
    """Rank 2 reaches its all_reduce in the last look while ranks 0-1 wait in new_group: one look of it is not a
    deadlock (it may be on its way to new_group); once it stays there through the quick window, it is."""
    waiting = {0: in_new_group(0, [0, 1]), 1: in_new_group(1, [0, 1])}
    rounds = [{**waiting, 2: sample(2, stack(None, 40, "load"))}] * 5 + [
        {**waiting, 2: sample(2, stack("all_reduce", 21))}
    ]
    state = states(job(3), *rounds, every=0.3, stall=60.0)
    assert "group-creation" not in kinds(state), state.findings
    later = states(job(3), *rounds, *[rounds[-1]] * 5, every=0.3, stall=60.0)
    assert kinds(later) == {"group-creation": (2,)} and later.findings[0].end == "deadlock"
