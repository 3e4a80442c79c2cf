"""Judging with each stuck rank's collective arguments: the wait-for graph of point-to-point ops, roots and
groups the ranks disagree on, a rank waiting on a sub-group, DDP's uneven inputs; each where it must fire and
where it must not."""

from __future__ import annotations

import dataclasses

from watch_states import C10D, job, sample, stack, states

from ncclcheck.analysis.watch.judge import Judging, judge
from ncclcheck.analysis.watch.subgroup import subgroup_wait
from ncclcheck.analysis.watch.track import Tracked
from ncclcheck.analysis.watch.waitfor import deadlocked
from ncclcheck.model.args import P2P, FrameLocals
from ncclcheck.model.stacks import Frame
from ncclcheck.model.watch import RankSample, WatchState

PG = "<torch._C._distributed_c10d.ProcessGroup at 0x7f0a>"
WORK = "<torch._C._distributed_c10d.Work at 0x7f1>"
SEND, RECV = "send", "recv"


def at(
    rank: int,
    op: str,
    line: int = 88,
    group: str | None = None,
    mine: tuple[tuple[str, str], ...] = (),
    frames: tuple[Frame, ...] | None = None,
    **values: int | None,
) -> RankSample:
    """Rank ``rank`` standing in ``op`` at ``line``, its locals as py-spy shows them (``group``: a kwarg; ``mine``:
    the locals of the user's frame that calls it; ``frames``: a stack other than ``stack(op, line)``)."""
    call = FrameLocals(
        op, C10D, 2800, (*tuple((k, str(v)) for k, v in values.items()), ("group", "None" if group is None else PG))
    )
    kwargs = "{}" if group is None else f'{{"group": {PG}}}'
    wrapper = FrameLocals("wrapper", "/env/torch/distributed/c10d_logger.py", 83, (("args", "()"), ("kwargs", kwargs)))
    user = FrameLocals("step", "/job/train.py", line, mine)
    return dataclasses.replace(sample(rank, frames or stack(op, line)), locals=(call, wrapper, user))


def stuck(*samples: RankSample) -> WatchState:
    return states(job(len(samples)), *[{s.rank: s for s in samples}] * 4)


def kinds(state: WatchState) -> dict[str, tuple[int, ...]]:
    return {f.id: f.culprits for f in state.findings}


def the(state: WatchState, kind: str) -> str:
    return next(f.message for f in state.findings if f.id == kind)


# the wait-for graph


def test_a_cycle_of_two_and_of_three_are_deadlocks() -> None:
    assert deadlocked({0: (P2P(RECV, 1),), 1: (P2P(RECV, 0),)}, range(2)) == {0: P2P(RECV, 1), 1: P2P(RECV, 0)}
    ring = {0: (P2P(RECV, 1),), 1: (P2P(RECV, 2),), 2: (P2P(RECV, 0),)}
    assert set(deadlocked(ring, range(3))) == {0, 1, 2}
    sends = {0: (P2P(SEND, 1),), 1: (P2P(SEND, 0),)}  # NCCL: two blocking sends to each other never return
    assert set(deadlocked(sends, range(2))) == {0, 1}


def test_a_matched_pair_and_a_chain_that_ends_outside_are_not_deadlocks() -> None:
    assert deadlocked({0: (P2P(SEND, 1),), 1: (P2P(RECV, 0),)}, range(2)) == {}  # the transport, not the code
    chain = {0: (P2P(RECV, 1),), 1: (P2P(RECV, 2),)}  # rank 2 runs elsewhere: it may still send
    assert deadlocked(chain, range(3)) == {}


def test_batched_ops_wait_until_all_are_done() -> None:
    both = {0: (P2P(SEND, 1), P2P(RECV, 1)), 1: (P2P(SEND, 0), P2P(RECV, 0))}
    assert deadlocked(both, range(2)) == {}  # batch_isend_irecv both ways: the fix, not a deadlock
    half = {0: (P2P(RECV, 1), P2P(RECV, 2)), 1: (P2P(RECV, 0),), 2: (P2P(SEND, 0),)}
    assert set(deadlocked(half, range(3))) == {0, 1}  # rank 0's send from 2 matches, its recv from 1 never does


def test_a_recv_from_any_source_waits_on_every_other_rank() -> None:
    anyone = {0: (P2P(RECV, None),), 1: (P2P(RECV, 0),)}
    assert set(deadlocked(anyone, range(2))) == {0, 1}
    assert deadlocked(anyone, range(3)) == {}  # rank 2 runs on: it may send to rank 0
    assert deadlocked({0: (P2P(RECV, None),), 1: (P2P(SEND, 0),)}, range(2)) == {}


# p2p-deadlock


def test_recv_recv_is_a_deadlock_in_the_code_not_the_transport() -> None:
    state = stuck(at(0, RECV, 41, src=1, tag=0), at(1, RECV, 41, src=0, tag=0))
    assert kinds(state) == {"p2p-deadlock": (0, 1)} and state.verdict.status == "problem"
    message = the(state, "p2p-deadlock")
    assert message.startswith("rank 0 waits in recv from rank 1 at train.py:41; rank 1 waits in recv from rank 0")
    assert "in a cycle (0 → 1 → 0)" in message and "the network is not the cause" in message
    assert state.ranks[0].args is not None and state.ranks[0].args.text() == "recv from rank 1"


def test_a_matched_send_and_recv_that_stand_still_is_the_transport() -> None:
    state = stuck(at(0, SEND, 41, dst=1), at(1, RECV, 44, src=0))
    assert kinds(state) == {"stalled": ()}
    assert "every send has its matching recv posted" in the(state, "stalled")
    assert "never posted" not in the(state, "stalled")  # the arguments rule out what the stacks alone could not


# root-mismatch, group-mismatch


def test_reduce_with_each_rank_its_own_dst_is_a_tie_on_the_root() -> None:
    state = stuck(at(0, "reduce", 49, dst=0, group_dst=0), at(1, "reduce", 49, dst=1, group_dst=1))
    assert kinds(state) == {"root-mismatch": ()}
    message = the(state, "root-mismatch")
    assert "rank 0 with dst=0; rank 1 with dst=1" in message and "cannot tell which side" in message


def test_a_root_majority_names_the_odd_rank_and_agreement_is_a_stall() -> None:
    odd = [at(r, "broadcast", 51, src=0 if r != 2 else 2) for r in range(3)]
    assert kinds(stuck(*odd)) == {"root-mismatch": (2,)}
    agree = stuck(*[at(r, "broadcast", 51, src=1) for r in range(3)])
    assert kinds(agree) == {"stalled": ()}
    assert "every rank passes the same arguments (broadcast src=1)" in the(agree, "stalled")


def test_the_same_line_called_with_the_world_and_a_sub_group_is_a_group_mismatch() -> None:
    state = stuck(at(0, "all_reduce", 60), at(1, "all_reduce", 60, group="pair"), at(2, "all_reduce", 60))
    assert kinds(state) == {"group-mismatch": (1,)}
    assert "rank 0,2 with default group; rank 1 with other group" in the(state, "group-mismatch")


# subgroup-wait


def test_a_rank_waiting_on_its_sub_group_is_waiting_not_the_odd_one_out() -> None:
    """Pairs [0,1] and [2,3]; rank 3 skipped its pair's all_reduce and waits in the world barrier with 0 and 1."""
    samples = [at(r, "barrier", 69) for r in (0, 1, 3)] + [at(2, "all_reduce", 68, group="pair")]
    state = stuck(*sorted(samples, key=lambda s: s.rank))
    assert kinds(state) == {"subgroup-wait": ()}
    f = next(f for f in state.findings if f.id == "subgroup-wait")
    assert 2 not in f.culprits and dict(f.roles)[2] == "waiting (sub-group)"
    assert "rank 2 is waiting, not to blame" in f.message and "cannot tell which of rank 0-1,3" in f.message
    known = subgroup_wait(state.ranks, {2: frozenset({2, 3})})  # the seam: membership from elsewhere (Flight Recorder)
    assert known is not None and known.culprits == (3,) and "rank 3 of its sub-group did not join it" in known.message
    tracked = Tracked(state.time, state.window_s, state.samples, state.ranks)
    judged = judge(tracked, state.job, Judging(10.0), members={2: frozenset({2, 3})})
    assert {f.id: f.culprits for f in judged} == {"subgroup-wait": (3,)}


def test_without_arguments_the_old_vote_stays() -> None:
    """Arguments not read: today's majority vote, and a stall says they were not read."""
    plain = {r: sample(r, stack("barrier", 69)) for r in (0, 1, 3)} | {2: sample(2, stack("all_reduce", 68))}
    assert kinds(states(job(4), *[plain] * 4)) == {"mismatch": (2,)}
    same = stuck(sample(0, stack("all_reduce")), sample(1, stack("all_reduce")))
    assert "the arguments of rank 0-1 were not read" in the(same, "stalled")


# uneven-inputs


ENGINE = Frame("_engine_run_backward", "/env/torch/autograd/graph.py", 769)


def test_ddp_ranks_in_backward_while_another_waits_in_the_final_barrier_are_uneven_inputs() -> None:
    state = stuck(sample(0, (ENGINE, *stack(None, 74))), at(1, "barrier", 79))
    assert kinds(state) == {"uneven-inputs": ()}
    message = the(state, "uneven-inputs")
    assert "rank 1 waits in barrier at train.py:79" in message and "rank 1 left the training loop" in message
    fix = next(f.fix for f in state.findings if f.id == "uneven-inputs")
    assert "drop_last=True" in fix and "join()" in fix


def test_a_rank_that_left_the_loop_and_exited_is_uneven_inputs_not_a_dead_rank() -> None:
    rounds = [{0: sample(0, (ENGINE, *stack(None, 74))), 1: sample(1, (), status="gone", exit_code=0)}] * 4
    assert kinds(states(job(2), *rounds)) == {"uneven-inputs": ()}
    failed = [{0: sample(0, (ENGINE, *stack(None, 74))), 1: sample(1, (), status="zombie", exit_code=1)}] * 4
    assert "dead" in kinds(states(job(2), *failed))


def test_every_rank_in_backward_is_not_uneven_inputs() -> None:
    state = stuck(*[sample(r, (ENGINE, *stack(None, 74))) for r in range(2)])
    assert "uneven-inputs" not in kinds(state)


def test_a_sub_group_waiting_on_a_member_still_in_user_code_is_a_straggler() -> None:
    """Rank 3 has not moved on: it is busy in its own code. The others wait on it; that is a straggler, and
    neither rank 2 (in its pair's all_reduce) nor anyone else is said to have skipped a collective."""
    samples = [at(0, "barrier", 69), at(1, "barrier", 69), at(2, "all_reduce", 68, group="pair")]
    state = stuck(*samples, sample(3, stack(None, 33, "pace")))
    assert kinds(state) == {"straggler": (3,)}


def test_every_rank_in_the_same_sub_group_collective_is_still_a_stall() -> None:
    state = stuck(at(0, "all_reduce", 68, group="pair"), at(1, "all_reduce", 68, group="pair"))
    assert kinds(state) == {"stalled": ()}
    assert "every rank passes the same arguments (all_reduce on a sub-group)" in the(state, "stalled")


def test_every_rank_in_recv_is_a_deadlock_even_without_peers() -> None:
    """recv on a sub-group by group_src (no global peer in the stack), or no locals at all: nobody sends."""
    pair = [at(r, RECV, 81, group="pair", group_src=(r + 1) % 2) for r in range(4)]
    state = stuck(*pair)
    assert kinds(state) == {"p2p-deadlock": (0, 1, 2, 3)}
    assert "rank 2 waits in recv from group rank 1 on a sub-group at train.py:81" in the(state, "p2p-deadlock")
    held = stuck(*[at(r, RECV, 81, group="pair", mine=(("req", WORK),), group_src=(r + 1) % 2) for r in range(4)])
    assert kinds(held) == {"stalled": ()}  # each may have isend'ed what its peer waits for before its recv


def test_every_rank_in_recv_without_locals_is_no_deadlock() -> None:
    """Without locals an isend posted before each recv (the tutorial's ring) cannot be ruled out: a stall whose
    arguments were not read, never "the network is not the cause"."""
    bare = stuck(sample(0, stack(RECV)), sample(1, stack(RECV)))
    assert kinds(bare) == {"stalled": ()} and "were not read" in the(bare, "stalled")


def test_a_stall_with_peers_not_known_says_so() -> None:
    state = stuck(at(0, SEND, 81, group="pair", group_dst=1), at(1, RECV, 82, group="pair", group_src=0))
    assert kinds(state) == {"stalled": ()}
    assert "the peers of rank 0-1 are not known" in the(state, "stalled")


def test_ranks_asleep_in_work_wait_are_in_a_collective_and_the_stall_says_the_peers_are_unknown() -> None:
    """batch_isend_irecv on both ranks, each posting only a recv, then req.wait(): the stack shows the user's frame."""
    handle = FrameLocals("exchange", "/job/train.py", 33, (("reqs", "[<torch._C._distributed_c10d.Work at 0x7f1>]"),))
    samples = [dataclasses.replace(sample(r, stack(None, 33, "exchange")), locals=(handle,)) for r in range(2)]
    state = stuck(*samples)
    assert [v.collective for v in state.ranks] == ["wait", "wait"] and kinds(state) == {"stalled": ()}
    assert "rank 0-1 wait on an async handle" in the(state, "stalled")
    assert "cannot tell the code from the transport" in next(f.fix for f in state.findings)
    assert state.ranks[0].args is not None and state.ranks[0].args.text() == "work.wait() on a handle"
    busy = stuck(samples[0], sample(1, stack(None, 33, "slow_batch")))
    assert kinds(busy) == {"straggler": (1,)}


# review: inputs that must not read as the code's fault


def test_recv_beside_an_isend_still_in_flight_is_no_deadlock() -> None:
    """The tutorial's ring: ``req = dist.isend(x, right); dist.recv(y, left); req.wait()``. Every rank stands in
    recv, but each has already posted the send its neighbour waits for: a slow or stuck transport, not the code."""
    ring = stuck(*[at(r, RECV, 41, mine=(("send_req", WORK),), src=(r - 1) % 3) for r in range(3)])
    assert "p2p-deadlock" not in kinds(ring) and kinds(ring) == {"stalled": ()}
    assert "async handle" in the(ring, "stalled") and "network is not the cause" not in the(ring, "stalled")
    pair = stuck(*[at(r, SEND, 41, mine=(("req", WORK),), dst=1 - r) for r in range(2)])  # irecv posted, then send
    assert kinds(pair) == {"stalled": ()}


def test_a_tensor_parallel_broadcast_from_each_groups_first_rank_is_no_root_mismatch() -> None:
    """Megatron: ``broadcast(t, src=<the first global rank of my group>, group=tp)``; groups [0,1] and [2,3]. The
    global src differs by group, by design; the root in the group (group_src, as torch computes it) is the same."""
    state = stuck(*[at(r, "broadcast", 51, group="tp", src=r // 2 * 2, group_src=0) for r in range(4)])
    assert kinds(state) == {"stalled": ()}
    odd = stuck(*[at(r, "broadcast", 51, group="tp", src=r // 2 * 2 + r % 2, group_src=r % 2) for r in range(2)])
    assert kinds(odd) == {"root-mismatch": ()} and "rank 0 with group_src=0; rank 1 with group_src=1" in the(
        odd, "root-mismatch"
    )


def _helper(line: int) -> tuple[Frame, ...]:
    """all_reduce from a shared helper (utils.py:10), called from train.py:``line``."""
    return (
        Frame("all_reduce", C10D, 2800),
        Frame("wrapper", "/env/torch/distributed/c10d_logger.py", 83),
        Frame("all_reduce_mean", "/job/utils.py", 10),
        Frame("step", "/job/train.py", line),
        Frame("<module>", "/job/train.py", 120),
    )


def test_a_shared_helper_called_with_a_sub_group_and_the_world_is_a_subgroup_wait_not_a_group_mismatch() -> None:
    """``all_reduce_mean(t, group=tp)`` at train.py:50 on rank 0 (its pair partner skipped it) and
    ``all_reduce_mean(t)`` at train.py:60 on the others: the same innermost line, different calls. The rank in the
    sub-group's collective waits; it is not the odd one out."""
    sub = at(0, "all_reduce", 10, group="tp", frames=_helper(50))
    state = stuck(sub, *[at(r, "all_reduce", 10, frames=_helper(60)) for r in range(1, 5)])
    assert kinds(state) == {"subgroup-wait": ()}
    assert dict(next(f.roles for f in state.findings))[0] == "waiting (sub-group)"


def test_two_independent_deadlocks_are_each_named_as_a_cycle() -> None:
    state = stuck(*[at(r, RECV, 41, src=r ^ 1) for r in range(4)])
    assert kinds(state) == {"p2p-deadlock": (0, 1, 2, 3)}
    assert "in cycles (0 → 1 → 0), (2 → 3 → 2)" in the(state, "p2p-deadlock")


def test_a_stall_on_sub_groups_with_their_own_roots_does_not_say_every_rank_passes_the_same_ones() -> None:
    state = stuck(*[at(r, "broadcast", 51, group="tp", src=r // 2 * 2, group_src=0) for r in range(4)])
    message = the(state, "stalled")
    assert "every rank passes the same arguments" not in message
    assert "broadcast src=0 on a sub-group, broadcast src=2 on a sub-group" in message


def test_a_dump_that_failed_this_time_keeps_the_ranks_call() -> None:
    """Rank 1's last dump timed out (a loaded node): its place, and so its call, are those seen before."""
    first = {0: at(0, "all_reduce", 60), 1: at(1, "all_reduce", 60, group="pair"), 2: at(2, "all_reduce", 60)}
    failed = {**first, 1: dataclasses.replace(first[1], stack=(), stack_error="py-spy dump timed out", locals=None)}
    state = states(job(3), first, first, first, failed)
    assert kinds(state)["group-mismatch"] == (1,) and "stalled" not in kinds(state)


def test_a_sub_group_wait_while_ranks_live_on_other_nodes_names_no_one_who_moved_on() -> None:
    """Rank 0 waits on its pair [0,2]; rank 2 lives on the other node, maybe busy in its own code: that it "moved on",
    or that it is among rank 1 (the only other rank seen), cannot be said."""
    state = states(job(4, 2, 0), *[{0: at(0, "all_reduce", 68, group="tp"), 1: at(1, "barrier", 69)}] * 4)
    assert kinds(state) == {"waiting-remote": ()}, state.findings


def test_a_sub_group_wait_beside_an_exited_rank_is_the_dead_rank() -> None:
    rounds = [{0: at(0, "all_reduce", 68, group="tp"), 1: at(1, "barrier", 69), 2: sample(2, (), status="gone")}] * 4
    assert kinds(states(job(3), *rounds)) == {"dead": (2,)}


def test_arguments_are_not_kept_once_the_rank_moved_at_the_same_frames() -> None:
    """Bytes moved while the frames stayed: the call may have ended and the next begun at the same line (a loop's
    broadcast whose src changes); what was read before is no longer known to be its arguments."""
    read = {0: at(0, "broadcast", 51, src=0), 1: at(1, "broadcast", 51, src=0)}
    moved = {r: dataclasses.replace(s, locals=None, net_bytes=4096) for r, s in read.items()}
    state = states(job(2), read, moved)
    assert [v.args for v in state.ranks] == [None, None]
    kept = states(job(2), read, {r: dataclasses.replace(s, locals=None) for r, s in read.items()})
    assert all(v.args is not None and v.args.src == 0 for v in kept.ranks)


def test_a_pipeline_stage_in_backward_while_the_next_waits_in_recv_is_not_uneven_inputs() -> None:
    """1F1B: stage 0 runs a micro-batch's backward while stage 1 waits in recv for the next one's activations: the
    schedule's own shape, not a rank that left the loop."""
    state = stuck(sample(0, (ENGINE, *stack(None, 74))), at(1, RECV, 90, src=0))
    assert "uneven-inputs" not in kinds(state), state.findings


def test_dst_and_group_dst_naming_the_same_rank_of_the_world_agree() -> None:
    """``reduce(t, dst=1)`` on rank 0, ``reduce(t, group_dst=1)`` on rank 1: on the default group the same rank
    (torch computes group_dst from dst, not dst from group_dst)."""
    state = stuck(at(0, "reduce", 49, dst=1, group_dst=1), at(1, "reduce", 49, group_dst=1))
    assert kinds(state) == {"stalled": ()}, state.findings


def test_a_member_waiting_in_the_same_sub_group_call_whose_locals_were_not_read_is_not_the_culprit() -> None:
    """Pairs [0,1] and [2,3], membership known (the seam). Rank 1 skipped its pair's all_reduce; ranks 2 and 3 are in
    theirs (rank 3's locals not read), rank 0 in its own. Rank 3 stands where rank 2 does: it did not skip it."""
    samples = [
        at(0, "all_reduce", 68, group="pair"),
        at(1, "barrier", 69),
        at(2, "all_reduce", 68, group="pair"),
        sample(3, stack("all_reduce", 68)),
    ]
    state = stuck(*samples)
    pairs = {0: frozenset({0, 1}), 2: frozenset({2, 3})}
    found = subgroup_wait(state.ranks, pairs)
    assert found is not None and found.culprits == (1,), found


def test_two_ranks_in_a_sub_group_call_may_be_the_whole_group_so_nobody_is_said_to_have_skipped_it() -> None:
    """Ranks 0 and 1 in their pair's all_reduce, ranks 2 and 3 already in the world barrier (their pair's done): a
    transport that stalls the pair's all_reduce looks like this, and [0,1] may be the whole sub-group."""
    samples = [at(r, "all_reduce", 68, group="pair") for r in (0, 1)] + [at(r, "barrier", 69) for r in (2, 3)]
    state = stuck(*samples)
    assert "subgroup-wait" not in kinds(state), state.findings
    known = subgroup_wait(state.ranks, {0: frozenset({0, 1}), 1: frozenset({0, 1})})
    assert known is None  # the membership says it too: nobody of [0,1] is missing


def test_a_member_that_just_joined_the_sub_group_call_is_not_missing_from_it() -> None:
    """Rank 3 reaches its pair's all_reduce at the last look (in it for less than --stall): rank 2 is not alone."""
    base = {0: at(0, "barrier", 69), 1: at(1, "barrier", 69), 2: at(2, "all_reduce", 68, group="pair")}
    busy = {**base, 3: sample(3, stack(None, 33, "pace"))}
    joined = {**base, 3: at(3, "all_reduce", 68, group="pair")}
    state = states(job(4), busy, busy, busy, joined)
    assert "subgroup-wait" not in kinds(state), state.findings
