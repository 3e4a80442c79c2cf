"""The watch analysis over hand-built snapshots: each finding where it must fire and where it must not."""

from __future__ import annotations

import dataclasses

from watch_states import all_in, job, sample, stack, states

from ncclcheck.analysis.watch.judge import Judging, decided, next_delay, rejudge, settling, track
from ncclcheck.model.stacks import Frame
from ncclcheck.model.watch import Job, RankProc, RankSample, Snapshot, WatchState


def kinds(state: WatchState) -> dict[str, tuple[int, ...]]:
    return {f.id: f.culprits for f in state.findings}


def finding(state: WatchState, kind: str) -> tuple[tuple[int, ...], tuple[int, ...], str, str]:
    f = next(f for f in state.findings if f.id == kind)
    return f.ranks, f.culprits, f.severity, f.message


# mismatch: the majority names the odd ones out; a tie names nobody


def test_mismatch_with_a_clear_majority_blames_the_odd_rank() -> None:
    state = states(job(4), *[all_in(4, "all_reduce", r1=sample(1, stack("all_gather", 57)))] * 4)
    ranks, culprits, severity, message = finding(state, "mismatch")
    assert (ranks, culprits, severity) == ((0, 1, 2, 3), (1,), "error")
    assert message == (
        "rank 0,2-3 wait in all_reduce at train.py:88; rank 1 waits in all_gather at train.py:57 — "
        "mismatched collectives: rank 1 is the odd one out"
    )
    assert state.verdict.status == "problem"


def test_mismatch_tie_blames_nobody_and_shows_both_call_sites() -> None:
    for odd_rank in (0, 1):  # whichever rank diverged, the answer is the same: the stacks cannot tell
        state = states(
            job(2), *[all_in(2, "all_reduce", **{f"r{odd_rank}": sample(odd_rank, stack("broadcast", 60))})] * 4
        )
        ranks, culprits, _, message = finding(state, "mismatch")
        assert ranks == (0, 1) and culprits == ()
        assert "all_reduce at train.py:88" in message and "broadcast at train.py:60" in message
        assert "cannot tell which side is wrong" in message


def test_mismatch_two_against_two_is_a_tie_and_three_ways_without_majority_too() -> None:
    two_two = all_in(4, "all_reduce", r2=sample(2, stack("broadcast", 60)), r3=sample(3, stack("broadcast", 60)))
    assert finding(states(job(4), *[two_two] * 4), "mismatch")[1] == ()
    three = all_in(4, "all_reduce", r2=sample(2, stack("broadcast", 60)), r3=sample(3, stack("barrier", 70)))
    assert finding(states(job(4), *[three] * 4), "mismatch")[1] == ()


def test_the_same_collective_from_different_lines_is_not_a_mismatch() -> None:
    """``if rank == 0: broadcast(x) else: broadcast(y)`` is normal: all in broadcast, none moving, is a stall
    (or a size mismatch the stacks cannot show), and nobody is blamed."""
    state = states(job(3), *[all_in(3, "all_reduce", r1=sample(1, stack("all_reduce", 91)))] * 4)
    assert kinds(state) == {"stalled": ()}
    assert "from different lines (train.py:88, train.py:91)" in finding(state, "stalled")[3]
    quick = states(job(3), *[all_in(3, "all_reduce", r1=sample(1, stack("all_reduce", 91)))] * 7, every=0.3, stall=60.0)
    assert quick.findings == ()


def test_send_and_recv_pair_up_and_are_not_a_mismatch() -> None:
    rounds = [{0: sample(0, stack("send", 70)), 1: sample(1, stack("recv", 75))}] * 7
    assert states(job(2), *rounds, every=0.3, stall=60.0).findings == ()
    state = states(job(2), *rounds[:4])
    assert kinds(state) == {"stalled": ()} and "wait in send/recv" in finding(state, "stalled")[3]


def test_the_majority_counts_ranks_that_are_dead_busy_or_elsewhere() -> None:
    """Rank 3 exited; ranks 0-1 wait in all_reduce, rank 2 in barrier: 2 of 4 is no majority, rank 2 is not blamed."""
    rounds = [all_in(4, "all_reduce", r2=sample(2, stack("barrier", 60)), r3=sample(3, (), status="gone"))] * 4
    state = states(job(4), *rounds)
    assert finding(state, "dead")[1] == (3,) and finding(state, "mismatch")[1] == ()
    # this node holds ranks 4-7 of 8: three against one here is not a majority of the job
    rounds = [all_in(8, "all_reduce", first=4, r7=sample(7, stack("broadcast", 60)))] * 4
    assert finding(states(job(8, per_node=4, node=1), *rounds), "mismatch")[1] == ()


# the quick answer: every rank blocked, no movement at all, a few samples close together


def test_blocked_in_different_collectives_is_a_mismatch_within_the_quick_window() -> None:
    rounds = [all_in(3, "all_reduce", r2=sample(2, stack("broadcast", 60)))] * 7
    state = states(job(3), *rounds, every=0.3, stall=60.0)
    assert state.window_s < 2.0 and kinds(state) == {"mismatch": (2,)}
    assert decided(state)


def test_no_quick_answer_before_enough_samples() -> None:
    rounds = [all_in(3, "all_reduce", r2=sample(2, stack("broadcast", 60)))] * 3  # 2 intervals
    state = states(job(3), *rounds, every=1.0, stall=60.0)
    assert state.findings == () and state.verdict.status == "pending"
    assert "before judging" in state.verdict.message and not state.verdict.message.startswith("✓")


def test_a_spinning_main_thread_is_not_blocked_quickly_but_counts_after_stall() -> None:
    """NCCL spins the main thread in a barrier or a CUDA sync: CPU moves, nothing else. Not the quick path;
    after --stall it is standing still all the same."""

    def spinning(i: int) -> dict[int, RankSample]:
        return {r: sample(r, stack("all_reduce" if r else "barrier"), cpu=i * 0.3) for r in range(2)}

    assert states(job(2), *[spinning(i) for i in range(7)], every=0.3).findings == ()
    assert kinds(states(job(2), *[spinning(i) for i in range(4)], every=5.0)) == {"mismatch": ()}


def test_no_quick_answer_while_ranks_live_on_other_nodes() -> None:
    rounds = [all_in(4, "all_reduce", first=2, r3=sample(3, stack("broadcast", 60)))] * 7
    state = states(job(4, per_node=2, node=1), *rounds, every=0.3, stall=60.0)
    assert state.findings == () and state.verdict.status == "pending"
    later = states(job(4, per_node=2, node=1), *rounds[:4], every=5.0)
    ranks, culprits, _, message = finding(later, "mismatch")
    assert ranks == (2, 3) and culprits == () and "rank 0-1 on other nodes not seen from here" in message


# straggler: a rank outside any collective while the others wait


def test_straggler_names_what_it_does_for_how_long_and_whether_it_computes() -> None:
    rounds = [all_in(8, "all_reduce", r5=sample(5, stack(None, 40, "__next__"), cpu=0.0))] * 4
    ranks, culprits, severity, message = finding(states(job(8), *rounds), "straggler")
    assert culprits == (5,) and ranks == tuple(range(8)) and severity == "error"
    assert "rank 5 is not in any collective: it has been in __next__ at train.py:40 for at least 15 s" in message
    assert "its main thread is idle" in message and "rank 0-4,6-7 wait in all_reduce at train.py:88" in message
    busy = [all_in(2, "all_reduce", r1=sample(1, stack(None, 40, "load_batch"), cpu=i * 5.0)) for i in range(4)]
    assert "its main thread is busy: 100% CPU" in finding(states(job(2), *busy), "straggler")[3]


def test_straggler_needs_stall_and_says_how_long_until_judged() -> None:
    rounds = [all_in(2, "all_reduce", r1=sample(1, stack(None, 40, "load_batch")))] * 5
    state = states(job(2), *rounds, every=1.0, stall=10.0)
    assert state.findings == ()
    assert state.verdict.status == "pending" and "6 s more before judging" in state.verdict.message


def test_once_judges_what_stood_still_through_its_whole_window() -> None:
    """--once --settle 3 with --stall 30: a rank that stood still all along counts at the last look."""
    rounds = [all_in(2, "all_reduce", r1=sample(1, stack(None, 40, "load_batch")))] * 4
    assert states(job(2), *rounds, every=1.0, stall=30.0).findings == ()
    state = states(job(2), *rounds, every=1.0, stall=30.0, final=True)
    assert kinds(state) == {"straggler": (1,)}


def test_a_rank_that_only_started_waiting_is_not_judged_at_the_last_look() -> None:
    rounds = [{0: sample(0, stack(None, 80 + i)), 1: sample(1, stack(None, 40 + i))} for i in range(3)]
    rounds += [all_in(2, "all_reduce", r1=sample(1, stack(None, 40, "load_batch")))] * 2
    state = states(job(2), *rounds, every=1.0, stall=30.0, final=True)
    assert state.findings == () and state.verdict.message.startswith("… not judged")


def test_the_ranks_answer_is_still_coming_while_a_rank_waits_in_a_collective_for_less_than_stall() -> None:
    """A viewer's node warning (a launcher gone) comes at once; the straggler only once the others waited --stall:
    the look goes on while any rank in a collective has stood still less, or its stack is not read yet."""
    rounds = [all_in(4, "all_reduce", r1=sample(1, stack(None, 40, "load_batch")))] * 6
    early = states(job(4), *rounds[:4], every=1.0, stall=4.0)
    assert early.findings == () and settling(early, 4.0)
    late = states(job(4), *rounds, every=1.0, stall=4.0)
    assert kinds(late) == {"straggler": (1,)} and not settling(late, 4.0)
    unread = [all_in(4, "all_reduce", r1=sample(1, ()))] * 6
    assert settling(states(job(4), *unread, every=1.0, stall=4.0), 4.0)
    # a rank that is gone has nothing more to say; ranks all in user code are no collective's wait
    gone = [all_in(4, "all_reduce", r1=sample(1, (), status="gone"))] * 6
    assert not settling(states(job(4), *gone, every=1.0, stall=4.0), 4.0)
    busy = [{r: sample(r, stack(None, 80 + i)) for r in range(4)} for i in range(3)]
    assert not settling(states(job(4), *busy, every=1.0, stall=4.0), 4.0)


# dead: an error once others wait on it, a warning before; all exited: finished


def test_stopped_rank_is_dead_while_others_wait() -> None:
    stopped = sample(3, stack(None, 60, "forward"), status="stopped")
    ranks, culprits, severity, message = finding(states(job(4), *[all_in(4, "all_reduce", r3=stopped)] * 3), "dead")
    assert culprits == (3,) and ranks == (0, 1, 2, 3) and severity == "error"
    assert "rank 3 is stopped" in message and "kill -CONT 1003" in message
    assert "while rank 0-2 wait in all_reduce" in message


def test_a_rank_that_exited_while_the_others_run_on_is_not_dead() -> None:
    """A healthy shutdown: rank 1 is done (exit 0) while rank 0 writes the final checkpoint."""
    rounds = [{0: sample(0, stack(None, 80 + i)), 1: sample(1, (), status="zombie", exit_code=0)} for i in range(4)]
    state = states(job(2), *rounds)
    assert "dead" not in kinds(state) and kinds(state) == {"exited": ()} and state.findings[0].severity == "info"
    assert state.verdict.status == "pending" and "watching the others" in state.verdict.message
    assert not decided(state)
    crashed = [{0: sample(0, stack(None, 80 + i)), 1: sample(1, (), status="zombie", exit_code=1)} for i in range(4)]
    assert finding(states(job(2), *crashed), "exited")[1:3] == ((1,), "warning")


def test_a_stopped_rank_nobody_waits_on_yet_is_a_warning() -> None:
    rounds = [{0: sample(0, stack(None, 80 + i)), 1: sample(1, stack(None, 60), status="stopped")} for i in range(4)]
    state = states(job(2), *rounds)
    assert finding(state, "dead")[1:3] == ((1,), "warning") and not decided(state)


def test_exited_rank_is_an_error_as_soon_as_the_others_are_blocked() -> None:
    rounds = [all_in(3, "all_reduce", r2=sample(2, (), status="gone"))] * 7
    state = states(job(3), *rounds, every=0.3, stall=60.0)
    assert finding(state, "dead")[2] == "error" and state.verdict.status == "problem"


def test_a_job_whose_ranks_all_exited_is_finished_not_dead() -> None:
    live = {r: sample(r, stack(None, 80 + r)) for r in range(2)}
    done = {0: sample(0, (), status="zombie", exit_code=0), 1: sample(1, (), status="gone")}
    state = states(job(2), live, done)
    assert kinds(state) == {"finished": ()} and state.findings[0].severity == "info"
    assert state.verdict.status == "finished" and decided(state)
    assert "rank 0 with exit code 0; rank 1: exit code not known" in state.findings[0].message


def test_a_finished_job_with_a_failed_rank_names_it() -> None:
    live = {r: sample(r, stack(None, 80 + r)) for r in range(2)}
    done = {0: sample(0, (), status="zombie", exit_code=0), 1: sample(1, (), status="zombie", exit_code=-9)}
    _ranks, culprits, severity, message = finding(states(job(2), live, done), "finished")
    assert (culprits, severity) == ((1,), "warning") and "rank 1 was killed by signal 9" in message


# the node's own view of a multi-node job


def test_every_local_rank_waiting_on_other_nodes_is_not_stalled() -> None:
    state = states(job(4, per_node=2, node=1), *[all_in(4, "all_reduce", first=2)] * 4)
    assert "stalled" not in kinds(state)
    ranks, culprits, severity, message = finding(state, "waiting-remote")
    assert ranks == (2, 3) and culprits == () and severity == "warning"
    assert "rank 0-1 run on other nodes" in message


def test_everyone_here_in_the_same_collective_is_stalled() -> None:
    state = states(job(4), *[all_in(4, "broadcast")] * 4)
    assert kinds(state) == {"stalled": ()} and finding(state, "stalled")[0] == (0, 1, 2, 3)
    assert "ncclcheck env" in state.findings[0].fix


# progress: sockets and stacks, never what other threads write


def test_healthy_job_never_flagged_however_long() -> None:
    # the same collective at every sample, but bytes keep crossing its sockets: progress
    rounds = [{r: sample(r, stack("all_reduce"), net=i * 4096) for r in range(4)} for i in range(50)]
    state = states(job(4), *rounds)
    assert state.findings == () and state.verdict.status == "ok"
    # stacks changing between samples: progress too
    rounds = [{r: sample(r, stack(None, 80 + i % 3, "forward")) for r in range(4)} for i in range(50)]
    assert states(job(4), *rounds).findings == ()
    # quick samples of a healthy loop: no quick mismatch either
    rounds = [{r: sample(r, stack("all_reduce" if i % 2 else "broadcast"), net=i) for r in range(2)} for i in range(20)]
    assert states(job(2), *rounds, every=0.3).findings == ()


def test_without_socket_counters_main_thread_cpu_keeps_findings_away() -> None:
    rounds = [{r: sample(r, stack("all_reduce"), net=None, cpu=i * 0.5) for r in range(2)} for i in range(10)]
    assert states(job(2), *rounds).findings == ()
    rounds = [{r: sample(r, stack("all_reduce"), net=None, cpu=1.0) for r in range(2)} for i in range(4)]
    assert kinds(states(job(2), *rounds)) == {"stalled": ()}


def test_since_resets_when_a_rank_moves() -> None:
    rounds = [all_in(2, "all_reduce")] * 3 + [all_in(2, "all_reduce", r1=sample(1, stack("all_reduce"), net=1))]
    state = states(job(2), *rounds)
    assert [v.since_s for v in state.ranks] == [15.0, 15.0] and [v.still_s for v in state.ranks] == [15.0, 0.0]
    assert state.ranks[1].progressing and not state.ranks[0].progressing


def test_native_frames_that_differ_between_samples_are_not_progress() -> None:
    # --native: a thread parked in c10d's wait wakes and sleeps in different C frames each sample.
    def parked(rank: int, i: int) -> RankSample:
        wait = ("pthread_cond_wait", "futex_wait", "__futex_abstimed_wait_common")[i % 3]
        return sample(rank, (Frame(wait, "libc.so.6", 0, native=True), *stack("all_reduce" if rank else "broadcast")))

    state = states(job(3), *[{r: parked(r, i + r) for r in range(3)} for i in range(4)])
    assert [v.since_s for v in state.ranks] == [15.0, 15.0, 15.0]
    assert kinds(state) == {"mismatch": (0,)}


def test_ddp_backward_counts_as_a_collective() -> None:
    """Rank 1 in DDP's backward (its all-reduce), ranks 0 and 2 in a collective elsewhere: they left the training
    loop, the classic uneven inputs; rank 1, the one still training, is not blamed by majority."""
    engine = Frame("_engine_run_backward", "/env/torch/autograd/graph.py", 769)
    state = states(job(3), *[all_in(3, "all_reduce", r1=sample(1, (engine, *stack(None, 95, "step"))))] * 4)
    assert state.ranks[1].collective == "backward" and kinds(state) == {"uneven-inputs": ()}


# without stacks: what cannot be seen is said, never passed as healthy


def test_no_stacks_and_nothing_moving_is_a_warning_not_healthy() -> None:
    rounds = [{r: sample(r, ()) for r in range(2)}] * 4
    state = states(job(2), *rounds)
    assert kinds(state) == {"no-progress": ()} and state.verdict.status == "warning"
    moving = [{r: sample(r, (), net=i * 4096) for r in range(2)} for i in range(4)]
    ok = states(job(2), *moving)
    assert ok.findings == () and "no stacks: collectives not compared" in ok.verdict.message
    spinning = [{r: sample(r, (), cpu=i * 0.5) for r in range(2)} for i in range(4)]
    busy = states(job(2), *spinning)  # CPU alone is no proof: an NCCL wait spins too
    assert busy.findings == () and busy.verdict.status == "undecided" and "cannot tell" in busy.verdict.message


def test_every_rank_stuck_outside_any_collective() -> None:
    """The hosts of an NCCL job ran ahead and block at the next synchronisation (.item()): the same line at
    every sample, no collective bytes. Idle main threads: nothing runs, a warning. Spinning ones: the stacks
    cannot tell a long computation from a hang: said, and never ✓."""
    idle = [{r: sample(r, stack(None, 95, "train_step"), cpu=1.0) for r in range(4)}] * 4
    state = states(job(4), *idle)
    assert kinds(state) == {"no-progress": ()} and "at train.py:95" in finding(state, "no-progress")[3]
    spin = [{r: sample(r, stack(None, 95, "train_step"), cpu=i * 5.0) for r in range(4)} for i in range(4)]
    state = states(job(4), *spin)
    assert state.findings == () and state.verdict.status == "undecided"
    assert "rank 0-3 in train_step at train.py:95 for 15 s" in state.verdict.message
    early = states(job(4), *spin[:2], every=1.0)
    assert early.verdict.status == "pending" and "9 s more" in early.verdict.message


def test_without_socket_counters_a_spinning_collective_is_neither_healthy_nor_stuck() -> None:
    """Sockets unreadable (another network namespace) and NCCL spinning in a barrier: no finding rests on the
    missing counters, and no ✓ either."""
    rounds = [{r: sample(r, stack("barrier"), net=None, cpu=i * 5.0) for r in range(4)} for i in range(4)]
    state = states(job(4), *rounds)
    assert state.findings == () and state.verdict.status == "undecided"
    assert "sockets cannot be counted from here" in state.verdict.message
    assert states(job(4), *rounds[:3], every=0.3).findings == ()  # no quick answer without counters


def test_a_rank_without_a_stack_is_not_blamed_as_a_straggler() -> None:
    unreadable = RankSample(1, 1, 1001, "node0", "sleeping", 0.0, 1, 1, 1.0, 0, (), "py-spy could not read pid 1001")
    state = states(job(2), *[all_in(2, "all_reduce", r1=unreadable)] * 4)
    assert "straggler" not in kinds(state)
    _ranks, culprits, _, message = finding(state, "unreadable")
    assert culprits == () and "py-spy could not read pid 1001" in message and "may be the rank they wait on" in message


# the verdict line and pacing


def test_the_first_sample_is_never_healthy() -> None:
    state = states(job(2), all_in(2, "all_reduce"))
    assert state.verdict.status == "pending" and "first sample" in state.verdict.message


def test_rejudge_at_the_last_look_and_the_sampling_pace() -> None:
    rounds = [all_in(2, "all_reduce", r1=sample(1, stack(None, 40, "load_batch")))] * 4
    state = states(job(2), *rounds, every=1.0, stall=30.0)
    assert state.findings == () and kinds(rejudge(state, Judging(30.0, final=True))) == {"straggler": (1,)}
    assert next_delay(None, 1.5) == 0.3 and next_delay(states(job(2), all_in(2, "all_reduce")), 1.5) == 0.3
    healthy = [{r: sample(r, stack(None, 80 + i)) for r in range(2)} for i in range(4)]
    assert next_delay(states(job(2), *healthy), 1.5) == 1.5


def test_4096_ranks_one_straggler_one_dead() -> None:
    world = 4096
    rounds = [
        all_in(
            world,
            "all_reduce",
            r77=sample(77, stack(None, 40, "load_batch")),
            r4000=sample(4000, stack(None, 60, "forward"), status="zombie"),
        )
    ] * 3
    state = states(job(world), *rounds)
    assert kinds(state) == {"dead": (4000,), "straggler": (77,)}
    assert len(state.ranks) == world


# more places where a finding must not fire


def test_a_straggler_whose_stack_still_changes_is_a_warning() -> None:
    """Rank 0 evaluates (its frames change) while the others wait in a barrier: slow, maybe not stuck."""
    rounds = [all_in(3, "barrier", r0=sample(0, stack(None, 40 + i, "evaluate"))) for i in range(4)]
    _ranks, culprits, severity, message = finding(states(job(3), *rounds), "straggler")
    assert (culprits, severity) == ((0,), "warning") and "slow, not stuck" in message


def test_ddp_backward_is_no_quick_answer() -> None:
    """The main thread waits while autograd's threads work: idle in backward is not blocked."""
    engine = Frame("_engine_run_backward", "/env/torch/autograd/graph.py", 769)
    rounds = [all_in(2, "all_reduce", r1=sample(1, (engine, *stack(None, 95, "step"))))] * 7
    assert states(job(2), *rounds, every=0.3, stall=60.0).findings == ()


def test_a_function_named_like_a_collective_outside_c10d_is_not_one() -> None:
    """DCP's _DistWrapper.all_reduce writes the checkpoint inside itself: that is not waiting in a collective."""
    dcp = Frame("all_reduce", "/env/torch/distributed/checkpoint/utils.py", 200)
    state = states(job(2), {r: sample(r, (Frame("write_data", "/env/x.py", 1), dcp, *stack(None))) for r in range(2)})
    assert [v.collective for v in state.ranks] == [None, None]


def test_one_rank_alone_is_never_stalled() -> None:
    assert "stalled" not in kinds(states(job(1), *[all_in(1, "barrier")] * 4))


def test_a_rank_waiting_while_others_progress_is_not_a_hang_of_the_job() -> None:
    rounds = [{0: sample(0, stack("all_reduce")), 1: sample(1, stack("all_reduce"), net=i * 4096)} for i in range(4)]
    state = states(job(2), *rounds)
    assert state.findings == () and state.verdict.status == "undecided" and "move on" in state.verdict.message


def test_finished_while_the_launcher_lives_is_not_the_end() -> None:
    live = Snapshot(0.0, job(2), tuple(sample(r, stack(None, 80)) for r in range(2)), True)
    gone = Snapshot(1.0, job(2), tuple(sample(r, (), status="gone") for r in range(2)), True)
    state = track(track(None, live, Judging(10.0)), gone, Judging(10.0))
    assert state.verdict.status == "finished" and not decided(state)
    assert "its launcher still runs" in state.findings[0].message
    over = track(state, dataclasses.replace(gone, time=2.0, launcher_running=False), Judging(10.0))
    assert decided(over)


def test_the_node_block_follows_rank_minus_local_rank() -> None:
    """torchrun numbers nodes' ranks one after the other, also when nodes run different numbers: node 1 holds
    ranks 4-5 of 6 (node 0 runs 4); ranks 2-3 are not missing here."""
    ranks = tuple(RankProc(2000 + r, r, r - 4, 6, 2, 1, "node1", "python train.py") for r in (4, 5))
    j = Job("job-2", 6, 2, 999, ranks)
    assert j.expected_local() == (4, 5) and j.remote() == (0, 1, 2, 3)


def test_no_rank_seen_is_not_healthy() -> None:
    state = track(None, Snapshot(0.0, Job("j", 2, None, None, ()), ()), Judging(10.0))
    assert state.verdict.status == "pending"


def test_an_exit_code_seen_on_a_zombie_is_kept_once_it_is_reaped() -> None:
    live = {r: sample(r, stack(None, 80 + r)) for r in range(2)}
    zombie = {0: sample(0, (), status="zombie", exit_code=0), 1: sample(1, (), status="zombie", exit_code=1)}
    reaped = {r: sample(r, (), status="gone") for r in range(2)}
    state = states(job(2), live, zombie, reaped)
    assert [v.sample.exit_code for v in state.ranks] == [0, 1]
    # which ended first is not known: rank 1's error may follow rank 0's leaving early (gloo: "connection closed")
    _ranks, culprits, _severity, message = finding(state, "finished")
    assert culprits == () and "rank 1 may have failed for want of it" in message


# the second review: what is not progress, and who is not to blame


def test_a_round_of_failed_dumps_or_a_state_flip_is_not_progress() -> None:
    """A stuck job: one sample's dumps time out (no stacks), another's threads flip from sleeping to running.
    Neither is a move: the ranks stay still and the verdict never ticks."""
    stuck = all_in(2, "all_reduce", r1=sample(1, stack("broadcast", 60)))
    failed = {
        r: RankSample(r, r, 1000 + r, "node0", "sleeping", 0.0, 1, 1, 1.0, 0, (), "py-spy dump timed out after 5 s")
        for r in range(2)
    }
    flipped = {r: dataclasses.replace(v, status="running") for r, v in stuck.items()}
    state = states(job(2), stuck, stuck, failed, flipped, stuck, every=3.0)
    assert [v.still_s for v in state.ranks] == [12.0, 12.0] and kinds(state) == {"mismatch": ()}
    assert not any(s.verdict.status == "ok" for s in [states(job(2), stuck, failed, every=1.0)])


def test_a_tick_needs_progress_at_two_samples_in_a_row() -> None:
    once = [all_in(2, "all_reduce"), {r: sample(r, stack(None, 80)) for r in range(2)}]
    assert states(job(2), *once).verdict.status == "pending"
    twice = [*once, {r: sample(r, stack(None, 81)) for r in range(2)}]
    assert states(job(2), *twice).verdict.status == "ok"


def test_a_survivor_that_has_not_moved_since_a_rank_exited_may_wait_on_it() -> None:
    """NCCL's uneven-inputs hang: rank 1 left its loop and exited 0; rank 0 spins in .item() for a collective rank
    1 never joins. Not 'the others run on'."""
    rounds = [
        {0: sample(0, stack(None, 95, "train_step"), cpu=i * 5.0), 1: sample(1, (), status="gone", exit_code=0)}
        for i in range(4)
    ]
    ranks, _culprits, severity, message = finding(states(job(2), *rounds), "exited")
    assert (
        severity == "warning"
        and ranks == (0, 1)
        and "rank 0 has not moved for 15 s since: it may wait on it" in message
    )


def test_everyone_in_backward_is_never_blamed_on_the_transport() -> None:
    engine = Frame("_engine_run_backward", "/env/torch/autograd/graph.py", 769)
    idle = [{r: sample(r, (engine, *stack(None, 95, "step"))) for r in range(2)}] * 4
    state = states(job(2), *idle)
    assert "stalled" not in kinds(state) and "a long backward" in finding(state, "no-progress")[3]


def test_the_majority_is_by_collective_not_by_line() -> None:
    """Ranks 0-2 in all_reduce at :88, rank 3 in all_reduce at :91, rank 4 in barrier: only rank 4 is odd."""
    rounds = [all_in(5, "all_reduce", r3=sample(3, stack("all_reduce", 91)), r4=sample(4, stack("barrier", 70)))] * 4
    assert finding(states(job(5), *rounds), "mismatch")[1] == (4,)


def test_one_rank_here_waiting_on_other_nodes_is_waiting_remote() -> None:
    state = states(job(4, per_node=1, node=2), *[all_in(3, "all_reduce", first=2)] * 4)
    assert (
        kinds(state) == {"waiting-remote": ()}
        and "rank 0-1,3 run on other nodes" in finding(state, "waiting-remote")[3]
    )


def test_the_last_look_judges_against_the_window_asked_for() -> None:
    assert Judging(10.0, final=True, window_s=30.0).threshold(1.5) == 10.0
    assert Judging(30.0, final=True, window_s=5.0).threshold(1.5) == 5.0
    assert Judging(30.0, final=True).threshold(5.0) == 5.0


def test_a_rank_paused_for_one_sample_is_not_dead() -> None:
    """py-spy --native or gdb pause a rank for a moment; stopped at two samples in a row is what counts."""
    paused = all_in(3, "all_reduce", r2=sample(2, stack("all_reduce"), status="stopped"))
    once = states(job(3), *[all_in(3, "all_reduce")] * 6, paused, every=0.3)
    assert "dead" not in kinds(once)
    twice = states(job(3), *[all_in(3, "all_reduce")] * 6, paused, paused, every=0.3)
    assert finding(twice, "dead")[1:3] == ((2,), "error")


def traced(rank: int, by: str = "py-spy (pid 4242)") -> RankSample:
    """A rank stopped under ptrace (``t``): a sampler's dump or a debugger holds it."""
    return dataclasses.replace(sample(rank, (), status="stopped"), tracer=by)


def test_a_rank_a_sampler_holds_a_few_seconds_is_not_dead_and_names_nobody() -> None:
    """Seen live on an H100 (gpu_check's p2p case): ``py-spy dump --native`` of rank 0 while ``ncclcheck run``
    watched held it under ptrace for two samples, and run called rank 0 "stopped" over a send/recv deadlock."""
    held = all_in(3, "all_reduce", r2=traced(2))
    for n in (2, 4):  # 0.3 s apart: held 0.3 s, then 0.9 s
        state = states(job(3), *[all_in(3, "all_reduce")] * 6, *[held] * n, every=0.3)
        assert "dead" not in kinds(state) and all(2 not in f.culprits for f in state.findings), state.findings
    # then it lets go, and the job's own hang is judged as it would be without it
    after = states(job(3), *[all_in(3, "all_reduce")] * 6, held, held, *[all_in(3, "all_reduce")] * 7, every=0.3)
    assert "dead" not in kinds(after)


def test_a_rank_a_tracer_holds_past_any_sampler_is_dead_and_the_tracer_is_named() -> None:
    held = all_in(3, "all_reduce", r2=traced(2, "gdb (pid 777)"))
    state = states(job(3), *[all_in(3, "all_reduce")] * 2, *[held] * 9, every=5.0)  # held 40 s
    _ranks, culprits, severity, message = finding(state, "dead")
    assert culprits == (2,) and severity == "error"
    assert "held stopped by gdb (pid 777) for 40 s" in message and "kill -CONT" not in message


def test_must_not_a_sampler_holding_the_rank_that_never_joined_turns_it_into_a_transport_stall() -> None:
    """Rank 1 in its own code while the others wait; then py-spy holds it 15 s: no verdict is made without it (every
    other rank in the collective reads "stalled", the transport), and it is named again once let go (review)."""

    def base() -> dict[int, RankSample]:
        return all_in(4, "all_reduce", r1=sample(1, stack(None, 50)))

    rounds = [base() for _ in range(9)]
    for _ in range(3):
        held = base()
        held[1] = dataclasses.replace(sample(1, stack(None, 50), status="stopped"), tracer="py-spy (pid 77)")
        rounds.append(held)
    state = states(job(4), *rounds, every=5.0, stall=10.0)
    assert not any(f.id == "stalled" or "transport" in f.fix for f in state.findings), state.findings
    again = states(job(4), *rounds, base(), base(), base(), every=5.0, stall=10.0)
    assert any(f.culprits == (1,) for f in again.findings), again.findings


def test_a_sigstopped_rank_is_still_dead_at_two_samples_whatever_the_stall() -> None:
    """The sampler's grace is for ptrace alone: a SIGSTOP (no tracer) counts at two samples in a row."""
    stopped = all_in(3, "all_reduce", r2=sample(2, (), status="stopped"))
    state = states(job(3), *[all_in(3, "all_reduce")] * 6, stopped, stopped, every=0.3, stall=600.0)
    assert finding(state, "dead")[1] == (2,)


def test_heartbeat_sized_traffic_grows_with_the_time_between_samples() -> None:
    from ncclcheck.collectors.sockets import significant

    before, now = {1: 0}, {1: 3000}  # ~120 B/s of NCCL RAS keepalives over 25 s
    assert significant(before, now) == 3000 and significant(before, now, floor=25 * 1024) == 0
