"""The watch analysis over hand-built snapshots: mismatch, straggler, dead, stalled, healthy, and 4,096 ranks."""

from __future__ import annotations

from watch_states import all_in, job, sample, stack, states

from ncclcheck.model.smoke import Frame
from ncclcheck.model.watch import RankSample, WatchState


def kinds(state: WatchState) -> dict[str, tuple[int, ...]]:
    return {f.kind: f.ranks for f in state.findings}


def test_mismatched_collectives_name_the_odd_rank() -> None:
    rounds = [all_in(4, "all_reduce", r1=sample(1, stack("all_gather", 57)))] * 4
    state = states(job(4), *rounds)
    assert kinds(state) == {"mismatch": (1,)}
    assert state.findings[0].message == (
        "rank 0,2-3 wait in all_reduce at train.py:88; rank 1 waits in all_gather at train.py:57 — mismatched collectives"
    )


def test_same_collective_from_different_call_sites() -> None:
    rounds = [all_in(2, "all_reduce", r1=sample(1, stack("all_reduce", 91)))] * 4
    state = states(job(2), *rounds)
    assert kinds(state) == {"mismatch": (1,)}
    assert state.findings[0].message.endswith("the same collective from different call sites")


def test_straggler_names_what_it_does_and_for_how_long() -> None:
    slow = sample(5, stack(None, 40, "__next__"))
    state = states(job(8), *[all_in(8, "all_reduce", r5=slow)] * 4)
    assert kinds(state) == {"straggler": (5,)}
    assert (
        "rank 5 is not in any collective: it has been in __next__ at train.py:40 for 15 s" in state.findings[0].message
    )
    assert "rank 0-4,6-7 wait in all_reduce at train.py:88" in state.findings[0].message


def test_stopped_rank_is_dead_while_others_wait() -> None:
    stopped = sample(3, stack(None, 60, "forward"), status="stopped")
    state = states(job(4), *[all_in(4, "all_reduce", r3=stopped)] * 3)
    assert kinds(state) == {"dead": (3,)}
    assert "rank 3 is stopped" in state.findings[0].message and "kill -CONT 1003" in state.findings[0].message
    assert "while rank 0-2 wait in all_reduce" in state.findings[0].message


def test_everyone_in_the_same_collective_without_progress_is_stalled() -> None:
    state = states(job(4), *[all_in(4, "broadcast")] * 4)
    assert kinds(state) == {"stalled": (0, 1, 2, 3)}
    assert "ncclcheck env" in state.findings[0].fix


def test_not_long_enough_is_no_finding() -> None:
    assert states(job(4), *[all_in(4, "all_reduce", r1=sample(1, stack("all_gather")))] * 2).findings == ()


def test_healthy_job_never_flagged_however_long() -> None:
    # the same collective at every sample, but the socket I/O keeps moving: progress
    rounds = [{r: sample(r, stack("all_reduce"), io=i * 4096) for r in range(4)} for i in range(50)]
    assert states(job(4), *rounds).findings == ()
    # stacks changing between samples: progress too
    rounds = [{r: sample(r, stack(None, 80 + i % 3, "forward")) for r in range(4)} for i in range(50)]
    assert states(job(4), *rounds).findings == ()


def test_since_resets_when_a_rank_moves() -> None:
    rounds = [all_in(2, "all_reduce")] * 3 + [all_in(2, "all_reduce", r1=sample(1, stack("all_reduce"), io=1))]
    state = states(job(2), *rounds)
    assert [v.since_s for v in state.ranks] == [15.0, 0.0]
    assert state.ranks[1].progressing and not state.ranks[0].progressing


def test_native_frames_that_differ_between_samples_are_not_progress() -> None:
    # --native: a thread parked in c10d's wait wakes and sleeps in different C frames each sample.
    def parked(rank: int, i: int) -> RankSample:
        wait = ("pthread_cond_wait", "futex_wait", "__futex_abstimed_wait_common")[i % 3]
        return sample(rank, (Frame(wait, "libc.so.6", 0, native=True), *stack("all_reduce" if rank else "broadcast")))

    rounds = [{r: parked(r, i + r) for r in range(3)} for i in range(4)]
    state = states(job(3), *rounds)
    assert [v.since_s for v in state.ranks] == [15.0, 15.0, 15.0]
    assert kinds(state) == {"mismatch": (0,)}


def test_ddp_backward_counts_as_a_collective() -> None:
    engine = Frame("_engine_run_backward", "/env/torch/autograd/graph.py", 769)
    backward = sample(1, (engine, *stack(None, 95, "step")))
    state = states(job(2), *[all_in(2, "all_reduce", r1=backward)] * 4)
    assert state.ranks[1].collective == "backward"
    assert kinds(state) == {"mismatch": (1,)}


def test_4096_ranks_one_straggler_one_dead() -> None:
    world = 4096
    rounds = [all_in(world, "all_reduce", r77=sample(77, stack(None, 40, "load_batch")),
                     r4000=sample(4000, stack(None, 60, "forward"), status="zombie"))] * 3  # fmt: skip
    state = states(job(world), *rounds)
    assert kinds(state) == {"dead": (4000,), "straggler": (77,)}
    assert len(state.ranks) == world
