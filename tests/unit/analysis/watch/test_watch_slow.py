"""Fail-slow, pure: the rank the others wait for, from rounds of each rank's sampled stacks; where it must be named
and where it must not (balanced, varying together, a checkpoint, a compile, a stall, a tie, pipeline stages, the
lowest of 4,096 balanced ranks), job-wide through the agents' lines."""

from __future__ import annotations

import dataclasses
import json
import random

import conftest
import pytest
from watch_states import all_in, job, sample, stack

from ncclcheck.analysis.watch.judge import Judging, decided, next_delay, track
from ncclcheck.analysis.watch.nodes import merge
from ncclcheck.analysis.watch.shares import classify, rank_shares, tally
from ncclcheck.analysis.watch.slow import slowness
from ncclcheck.collectors.agent_streams import Streams
from ncclcheck.collectors.recorder import main_thread_stacks
from ncclcheck.model.agent_line import agent_line
from ncclcheck.model.shares import Place, Round, Tally, tally_from_json, tally_to_json, window
from ncclcheck.model.stacks import Frame
from ncclcheck.model.watch import RankView, Snapshot, WatchState
from ncclcheck.views.watch import to_json

FIXTURES = conftest.FIXTURES / "pyspy_record"
DATA = "/env/lib/python3.11/site-packages/torch/utils/data/dataloader.py"
N = 20  # samples a round: 10 a second over 2 s


def compute_stack(line: int = 32) -> tuple[Frame, ...]:
    return (Frame("compute", "/job/train.py", line), Frame("main", "/job/train.py", 75))


def loader_stack() -> tuple[Frame, ...]:
    return (Frame("_next_data", DATA, 785), Frame("__next__", DATA, 725), Frame("main", "/job/train.py", 74))


def rounds(
    waits: list[float], other: tuple[Frame, ...] | None = None, op: str = "all_reduce", offset: float = 0.0
) -> list[Round]:
    """One round per share of waiting, 2 s each from t=1000, ``N`` samples: in ``op`` at train.py:83, else in
    ``other`` (compute() by default); the main thread busy outside its waits."""
    out = []
    for i, w in enumerate(waits):
        waited = round(w * N)
        stacks = ((stack(op, 83, "main"), waited), (other or compute_stack(), N - waited))
        out.append(
            Round(
                1,
                1000.0 + offset + 2.05 * i,
                1002.0 + offset + 2.05 * i,
                tuple((s, n) for s, n in stacks if n),
                2.0 - 2 * w,
            )
        )
    return out


def view(rank: int, waits: list[float], host: str = "node0", **kw: object) -> RankView:
    s = dataclasses.replace(sample(rank, stack("all_reduce")), host=host)
    tallies = tuple(tally(r) for r in rounds(waits, **kw))  # type: ignore[arg-type]
    return RankView(s, "all_reduce", None, "all_reduce", 0, 0, 0, 0, 0, None, True, tallies=tallies)


def found(views: list[RankView], hosts: bool = False) -> dict[str, tuple[int, ...]]:
    return {f.id: f.culprits for f in slowness(views, hosts)}


# --- must fire ---


@pytest.mark.parametrize(("factor", "typical"), [(3.0, 0.65), (1.5, 0.35), (1.2, 0.2)])
def test_one_rank_slower_in_compute_is_named_with_what_it_costs(factor: float, typical: float) -> None:
    views = [view(0, [typical] * 4), view(1, [typical] * 4), view(2, [0.0] * 4)]
    [f] = slowness(views, False)
    assert f.id == "slow-rank" and f.severity == "warning" and f.culprits == (2,)
    assert f.message.startswith(
        f"rank 2 holds the others back: ranks 0-1 wait for it in all_reduce at train.py:83 {typical:.0%} of the time"
    )
    assert "it spends that time in compute() at train.py:32 (busy" in f.message
    assert f"about {1 / (1 - typical):.1f}× faster" in f.message
    assert dict(f.roles) == {2: "slow", 0: "waiting", 1: "waiting"}
    assert "throttled" in f.fix


def test_a_rank_idle_in_its_data_loader_is_named_with_the_loader_fix() -> None:
    loading = [dataclasses.replace(r, main_cpu_s=0.05) for r in rounds([0.0] * 4, other=loader_stack())]
    slow = view(2, [0.0] * 4)
    slow = dataclasses.replace(slow, tallies=tuple(tally(r) for r in loading))
    [f] = slowness([view(0, [0.7] * 4), view(1, [0.7] * 4), slow], False)
    assert f.culprits == (2,) and "waiting for its DataLoader at train.py:74 (idle" in f.message
    assert "num_workers" in f.fix


def test_a_rank_starved_of_cpu_is_busy_and_the_message_says_something_else_runs_there() -> None:
    """A noisy neighbour: rank 2 computes, but another process takes its core: its main thread gets 30 % of the
    time and waits runnable 65 %. Busy, not idle, and said so."""
    starved = [dataclasses.replace(r, main_cpu_s=0.6, run_delay_s=1.3) for r in rounds([0.0] * 4)]
    slow = dataclasses.replace(view(2, [0.0] * 4), tallies=tuple(tally(r) for r in starved))
    [f] = slowness([view(0, [0.7] * 4), view(1, [0.7] * 4), slow], False)
    assert f.culprits == (2,)
    assert "(busy: its main thread used 30 % CPU and waited for a CPU 65 % of the time: something else runs" in (
        f.message
    )


def test_two_slow_ranks_of_eight_are_both_named() -> None:
    views = [view(r, [0.0] * 4 if r in (3, 6) else [0.5] * 4) for r in range(8)]
    [f] = slowness(views, False)
    assert f.culprits == (3, 6) and f.message.startswith(
        "ranks 3,6 hold the others back: ranks 0-2,4-5,7 wait for them"
    )


def test_a_node_whose_ranks_are_all_slow_is_named_as_the_node() -> None:
    views = [view(r, [0.6] * 4, host="a") for r in (0, 1)] + [view(r, [0.0] * 4, host="b") for r in (2, 3)]
    [f] = slowness(views, True)
    assert f.id == "slow-node" and f.culprits == (2, 3) and f.message.startswith("node b (ranks 2-3) holds the others")
    assert "look at the node" in f.fix


def test_nodes_whose_rounds_start_at_other_moments_are_compared_from_their_first_rounds() -> None:
    """Each node's agent starts its rounds when it starts: node b's come a second after node a's. Five rounds of
    each are enough (four in the span every rank covers)."""
    views = [view(r, [0.6] * 5, host="a") for r in (0, 1)] + [view(r, [0.0] * 5, host="b", offset=1.0) for r in (2, 3)]
    assert found(views, True) == {"slow-node": (2, 3)}


def test_two_slow_ranks_of_a_node_with_a_third_that_is_not_are_ranks_not_the_node() -> None:
    views = [view(r, [0.6] * 4, host="a") for r in (0, 1, 2)] + [view(r, [0.0] * 4, host="b") for r in (3, 4)]
    views += [view(5, [0.6] * 4, host="b")]
    assert found(views, True) == {"slow-rank": (3, 4)}


def test_of_two_ranks_the_one_that_does_not_wait_is_the_slow_one() -> None:
    assert found([view(0, [0.0] * 4), view(1, [0.6] * 4)]) == {"slow-rank": (0,)}


def test_the_slow_rank_is_found_among_4096_ranks() -> None:
    rng = random.Random(7)
    views = [_noisy(r, 0.0 if r == 1234 else 0.33, 6, rng) for r in range(4096)]
    assert found(views) == {"slow-rank": (1234,)}


# --- must not fire ---


def test_too_few_rounds_say_nothing_yet() -> None:
    assert found([view(0, [0.65] * 3), view(1, [0.65] * 3), view(2, [0.0] * 3)]) == {}


def test_a_balanced_job_is_not_slow() -> None:
    assert found([view(r, [0.3] * 8) for r in range(4)]) == {}


def test_a_job_whose_steps_vary_on_every_rank_together_is_not_slow() -> None:
    waits = [0.1, 0.6, 0.2, 0.5, 0.05, 0.4, 0.3, 0.15]
    assert found([view(r, waits) for r in range(4)]) == {}


@pytest.mark.parametrize("at", [0, 2, 5])
def test_a_checkpoint_written_once_by_one_rank_is_not_a_slow_rank(at: int) -> None:
    """Rank 0 writes a checkpoint for about 3 s (two rounds): the others wait all through it, then all run
    balanced again. Neither at 4 rounds nor over a longer window is rank 0 named."""
    base = [0.05] * 8
    others = [*base[:at], 0.9, 0.9, *base[at + 2 :]]
    writer = [*base[:at], 0.0, 0.0, *base[at + 2 :]]
    for n in (4, 8):
        views = [view(0, writer[:n]), view(1, others[:n]), view(2, others[:n])]
        assert found(views) == {}, (at, n)


def test_a_compile_on_the_first_steps_is_not_a_slow_rank() -> None:
    """Warm-up: rank 2 compiles through the first three rounds while the others wait in their first collective the
    whole time (no step at all); then the job runs balanced."""
    others = [1.0, 1.0, 1.0, 0.1, 0.1, 0.1, 0.1]
    compiling = [0.0, 0.0, 0.0, 0.1, 0.1, 0.1, 0.1]
    for n in range(4, 8):
        assert found([view(0, others[:n]), view(1, others[:n]), view(2, compiling[:n])]) == {}, n


def test_ranks_that_only_wait_are_stalled_not_slow() -> None:
    assert found([view(0, [1.0] * 6), view(1, [1.0] * 6), view(2, [0.0] * 6)]) == {}


def test_half_the_ranks_not_waiting_are_named_but_never_more_than_half() -> None:
    """The ranks that do not wait are the ones waited for, as long as they are at most half (two nodes: one of two);
    three of four not waiting while one waits is no slow minority (that one may wait on something else)."""
    half = [view(0, [0.0] * 4), view(1, [0.0] * 4), view(2, [0.6] * 4), view(3, [0.6] * 4)]
    assert found(half) == {"slow-rank": (0, 1)}
    assert found([view(0, [0.0] * 4), view(1, [0.0] * 4), view(2, [0.0] * 4), view(3, [0.6] * 4)]) == {}


def test_pipeline_stages_waiting_in_send_and_recv_are_judged_along_the_pipeline() -> None:
    """Their waits are no collective's: the stage the others wait for in recv is named as a pipeline's slow stage
    (tests/test_watch_slow_groups.py), never as the job-wide comparison's."""
    views = [view(0, [0.6] * 4, op="recv"), view(1, [0.6] * 4, op="recv"), view(2, [0.0] * 4, op="recv")]
    [f] = slowness(views, False)
    assert f.culprits == (2,) and f.message.startswith("Along the pipeline")


def test_the_lowest_of_4096_balanced_ranks_is_not_named() -> None:
    for seed in range(3):
        rng = random.Random(seed)
        views = [_noisy(r, 0.3, 30, rng) for r in range(4096)]
        assert found(views) == {}, seed


def test_a_rank_slow_in_half_the_window_only_is_not_named() -> None:
    views = [view(0, [0.6, 0.6, 0.05, 0.05]), view(1, [0.6, 0.6, 0.05, 0.05]), view(2, [0.0] * 4)]
    assert found(views) == {}


# --- communication-bound ---


def test_every_rank_waiting_much_and_none_behind_is_communication_bound() -> None:
    [f] = slowness([view(r, [0.6 + 0.05 * (r % 2)] * 4) for r in range(4)], False)
    assert f.id == "communication-bound" and f.severity == "info" and f.culprits == ()
    assert f.message.startswith("every rank waits in all_reduce at train.py:83 60%–65% of its time")


def test_communication_bound_needs_steps_and_no_rank_behind() -> None:
    assert found([view(r, [1.0] * 4) for r in range(3)]) == {}
    assert "communication-bound" not in found([view(0, [0.9] * 4), view(1, [0.9] * 4), view(2, [0.5] * 4)])


# --- through the watch's judge, its verdict and JSON ---


def _snapshots(waits: dict[int, list[float]], looks: int = 6) -> WatchState:
    """Looks 2 s apart, every rank moving (new socket bytes each look), one round each from look 1 on."""
    j = job(len(waits))
    state = None
    per_rank = {r: rounds(w) for r, w in waits.items()}
    for i in range(looks):
        samples = all_in(len(waits), "all_reduce", 83)
        samples = {
            r: dataclasses.replace(s, net_bytes=i * 1000, rounds=tuple(per_rank[r][i - 1 : i]) if i else ())
            for r, s in samples.items()
        }
        snap = Snapshot(i * 2.0, j, tuple(samples[r] for r in sorted(samples)), recording=True)
        state = track(state, snap, Judging(10.0))
    assert state is not None
    return state


def test_watch_names_the_slow_rank_and_its_verdict_is_a_warning() -> None:
    state = _snapshots({0: [0.65] * 5, 1: [0.65] * 5, 2: [0.0] * 5})
    assert [f.id for f in state.findings] == ["slow-rank"] and state.verdict.status == "warning"
    assert decided(state)
    report = to_json(state, 1.5)
    assert report["findings"][0]["kind"] == "slow-rank" and report["findings"][0]["culprits"] == [2]
    shares = {s["rank"]: s for s in report["shares"]}
    assert shares[2]["wait"] == 0.0 and shares[0]["wait"] == 0.65 and shares[2]["deviation"] == -0.65
    assert shares[2]["kinds"] == {"other": 1.0} and shares[2]["places"][0]["what"] == "compute"
    assert shares[2]["main_thread_cpu_percent"] == 100.0 and shares[2]["main_thread_cpu_wait_percent"] is None


def test_a_healthy_job_is_ok_only_once_the_shares_were_compared() -> None:
    early = _snapshots({r: [0.3] * 5 for r in range(3)}, looks=4)
    # never ✓ before the shares were compared: a rank three times slower looks the same so far (pending, exit 4)
    assert early.verdict.status == "pending" and "too soon to tell" in early.verdict.message
    assert early.verdict.message.startswith("… every rank is moving")
    assert not decided(early) and next_delay(early, 1.5) == 0.5
    later = _snapshots({r: [0.3] * 5 for r in range(3)}, looks=6)
    assert later.findings == () and decided(later)
    assert "none holds the others back (each waits 30%–30% of its time in collectives)" in later.verdict.message


def test_a_rank_that_waits_less_but_not_in_every_part_is_never_given_a_tick() -> None:
    """Rank 2 waits less than the others over the window, but one part shows no difference: not named, and the
    verdict says it may hold them back instead of ✓; --once keeps watching."""
    state = _snapshots({0: [0.6, 0.6, 0.05, 0.6, 0.6], 1: [0.6, 0.6, 0.05, 0.6, 0.6], 2: [0.0] * 5})
    assert state.findings == () and state.verdict.status == "pending", state.verdict
    assert "rank 2 waits less than the others (0% of the time, against 49%): it may hold them back" in (
        state.verdict.message
    )
    assert not decided(state)


def test_a_hang_is_judged_as_a_hang_whatever_the_shares_say() -> None:
    state = _snapshots({0: [0.65] * 5, 1: [0.65] * 5, 2: [0.0] * 5})
    j = state.job
    frozen = {
        r: dataclasses.replace(s, net_bytes=0)
        for r, s in all_in(3, "all_reduce", 83, r2=sample(2, stack("broadcast"))).items()
    }
    for i in range(8):
        state = track(state, Snapshot(20.0 + i, j, tuple(frozen[r] for r in range(3)), recording=True), Judging(3.0))
    assert "slow-rank" not in [f.id for f in state.findings] and state.verdict.status == "problem"


# --- job-wide, through the agents' lines ---


def test_a_slow_node_is_named_job_wide_from_the_agents_lines() -> None:
    streams = Streams()
    for host, node, ranks, wait in (("a", 0, (0, 1), 0.6), ("b", 1, (2, 3), 0.0)):
        j = dataclasses.replace(
            job(4, 2, node), ranks=tuple(dataclasses.replace(p, host=host) for p in job(4, 2, node).ranks)
        )
        per = {r: rounds([wait] * 5) for r in ranks}
        sent: dict[int, tuple[Frame, ...]] = {}
        rounds_sent: dict[int, float] = {}
        state = None
        for i in range(6):
            samples = {
                r: dataclasses.replace(
                    sample(r, stack("all_reduce", 83)),
                    host=host,
                    net_bytes=i * 1000,
                    rounds=tuple(per[r][i - 1 : i]) if i else (),
                )
                for r in ranks
            }
            state = track(state, Snapshot(i * 2.0, j, tuple(samples[r] for r in ranks), recording=True), Judging(10.0))
            line = agent_line(state, host, sent, 1000.0 + i, i, rounds_sent=rounds_sent)
            assert len(line["ranks"][0].get("counts", [])) == (1 if i else 0)  # each round sent once
            streams.add_line(json.dumps(line), 1000.0 + i)
    merged = merge(streams.reports, {}, 1006.0, Judging(10.0), 1.5)
    assert [(f.id, f.culprits) for f in merged.findings] == [("slow-node", (2, 3))], merged.findings
    assert merged.recording and {s.rank for s in merged.shares} == {0, 1, 2, 3}


# --- the pieces ---


def test_a_real_record_of_a_rank_waiting_on_its_data_loader_is_read_as_such() -> None:
    """``py-spy record --format raw --threads --idle --full-filenames`` of the slow_job.py worker (MODE=data): ranks
    0 and 1 wait in all_reduce, rank 2 in its DataLoader."""
    kinds = {}
    for i, pid in enumerate((29684, 29685, 29686)):
        stacks = main_thread_stacks((FIXTURES / f"data_rank{i}.txt").read_text(), pid)
        t = tally(Round(pid, 0.0, 2.0, stacks))
        kinds[i] = dict(t.kinds)
        assert t.samples == sum(n for _, n in stacks) > 15
    assert kinds[0]["collective"] > kinds[0]["other"] and kinds[1]["collective"] > kinds[1]["other"]
    assert kinds[2]["data"] > kinds[2]["other"] and "collective" not in kinds[2]
    assert main_thread_stacks((FIXTURES / "data_rank0.txt").read_text(), 1) == ()  # another process's threads


def test_other_threads_and_unreadable_lines_are_left_out() -> None:
    text = (
        "thread (10): MainThread;<module> (/job/train.py:9);step (/job/train.py:5) 3\n"
        "thread (11): Thread-1 (heartbeat);run (/usr/lib/python3.11/threading.py:982) 40\n"
        "not a stack line\n"
        "thread (10): MainThread;<module> (/job/train.py:9);step (/job/train.py:5) 2\n"
    )
    assert main_thread_stacks(text, 10) == (
        ((Frame("step", "/job/train.py", 5), Frame("<module>", "/job/train.py", 9)), 5),
    )


def test_stacks_are_classified_by_what_they_are_in() -> None:
    assert classify(stack("all_reduce", 83))[:2] == ("collective", "all_reduce")
    assert classify(stack("recv", 83))[:2] == ("p2p", "recv")
    assert classify(loader_stack())[:2] == ("data", "DataLoader")
    save = (Frame("save", "/env/lib/python3.11/site-packages/torch/serialization.py", 900), *compute_stack())
    assert classify(save)[:2] == ("io", "save")
    backward = (Frame("_engine_run_backward", "/env/torch/autograd/graph.py", 768), *compute_stack())
    assert classify(backward)[:2] == ("collective", "backward")
    assert classify(compute_stack()) == ("other", "compute", "/job/train.py:32 (compute)")


def test_a_round_travels_in_an_agent_line_and_back() -> None:
    t = tally(rounds([0.4])[0])
    assert tally_from_json(tally_to_json(t)) == t._replace(start=round(t.start, 3), end=round(t.end, 3))
    assert tally_from_json({"start": 1}) is None and tally_from_json("x") is None


def test_the_window_keeps_the_last_minute_and_each_round_once() -> None:
    ts = [tally(r) for r in rounds([0.1] * 40)]
    kept = window((), ts)
    assert kept[-1] == ts[-1] and all(t.end >= ts[-1].end - 60 for t in kept) and len(kept) < 40
    assert window(kept, ts[-3:]) == kept


def test_shares_say_how_far_each_rank_sits_from_the_others() -> None:
    shares = {s.rank: s for s in rank_shares([view(0, [0.6] * 4), view(1, [0.5] * 4), view(2, [0.1] * 4)])}
    assert shares[2].deviation == pytest.approx(0.1 - 0.55) and shares[0].deviation == pytest.approx(0.6 - 0.3)
    assert shares[0].cpu_percent == pytest.approx(40.0) and shares[0].rounds == 4


def test_the_same_ranks_in_another_order_get_the_same_shares_and_a_subset_its_own() -> None:
    """The viewer asks for the job's shares, then for its live ranks' (another order): the same ranks with the same
    rounds get the same shares; a subset is not the same population, and its deviations are from its own median."""
    views = [view(0, [0.6] * 4), view(1, [0.5] * 4), view(2, [0.1] * 4), view(3, [0.55] * 4)]
    first = {s.rank: s for s in rank_shares(views)}
    again = rank_shares(list(reversed(views)))
    assert [s.rank for s in again] == [3, 2, 1, 0] and all(s == first[s.rank] for s in again)
    subset = {s.rank: s for s in rank_shares(views[:3])}  # right after the whole job's: must not be answered from it
    assert subset[2].deviation == pytest.approx(0.1 - 0.55) and first[2].deviation == pytest.approx(0.1 - 0.55)
    assert subset[0].deviation == pytest.approx(0.6 - 0.3) and first[0].deviation != pytest.approx(0.6 - 0.3)


def _noisy(rank: int, share: float, n: int, rng: random.Random) -> RankView:
    """A rank whose ``n`` rounds each hold a binomial draw of waits at ``share`` (counted rounds made directly: 4,096
    ranks of them stay quick)."""
    s = sample(rank, stack("all_reduce"))
    tallies = []
    for i in range(n):
        waited = sum(rng.random() < share for _ in range(N))
        kinds = (("collective", waited), ("other", N - waited))
        places = (Place("collective", "all_reduce", "/job/train.py:83 (main)", waited),)
        tallies.append(Tally(1000.0 + 2.05 * i, 1002.0 + 2.05 * i, N, kinds, places, 1.0))
    return RankView(s, "all_reduce", None, "all_reduce", 0, 0, 0, 0, 0, None, True, tallies=tuple(tallies))


class _Clock:
    """``time`` for ``watch --once``'s loop: sleeping advances it, nothing waits."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _Looks:
    """A live source handing out ``first`` until ``until_s`` on the clock, then ``then``."""

    def __init__(self, clock: _Clock, first: WatchState, then: WatchState, until_s: float) -> None:
        self.clock, self.first, self.then, self.until_s = clock, first, then, until_s

    def poll(self) -> WatchState:
        return self.first if self.clock.now < self.until_s else self.then

    def with_flight(self, state: WatchState) -> WatchState:
        return state

    def judged(self, final: bool = False, window_s: float | None = None) -> Judging:
        return Judging(10.0, final, window_s)


NOT_PROVEN = {0: [0.6, 0.6, 0.05, 0.6, 0.6], 1: [0.6, 0.6, 0.05, 0.6, 0.6], 2: [0.0] * 5}
PROVEN = {0: [0.65] * 5, 1: [0.65] * 5, 2: [0.0] * 5}


@pytest.mark.parametrize("proven_at", [30.0, 1000.0])
def test_once_watches_on_while_a_slow_rank_is_not_proven(monkeypatch: pytest.MonkeyPatch, proven_at: float) -> None:
    """``--once`` without ``--settle``: a rank that may hold the others back, not proven at the window's end, is
    watched on until the slow rank is proven (a warning, exit 1); never proven, it ends at the limit with exit 4
    (the evidence did not decide), never 0. With ``--settle`` the window is the user's: it ends there."""
    import argparse

    from ncclcheck.commands import watch as command

    clock = _Clock()
    monkeypatch.setattr(command, "time", clock)
    source = _Looks(clock, _snapshots(NOT_PROVEN), _snapshots(PROVEN), proven_at)
    state = command._once(source, argparse.Namespace(settle=None, stall=10.0, interval=1.5))  # type: ignore[arg-type]
    if proven_at < command.ONCE_LIMIT_S:
        assert state.verdict.status == "warning" and command.once_exit(state) == 1
        assert proven_at <= clock.now < proven_at + 10
    else:
        assert state.verdict.status == "pending" and command.once_exit(state) == 4
        assert command.ONCE_LIMIT_S <= clock.now < command.ONCE_LIMIT_S + 10
    clock.now = 0.0
    settled = command._once(source, argparse.Namespace(settle=5.0, stall=10.0, interval=1.5))  # type: ignore[arg-type]
    assert settled.verdict.status == "pending" and clock.now < 10


def test_once_exits_0_on_a_healthy_job_judged_ok() -> None:
    from ncclcheck.commands import watch as command

    healthy = _snapshots({r: [0.3] * 5 for r in range(3)})
    assert healthy.verdict.status == "ok" and command.once_exit(healthy) == 0
