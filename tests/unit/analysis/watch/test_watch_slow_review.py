"""Fail-slow, pure, where a first version gave a wrong answer: ranks in another role or waiting themselves named as
the ones held back, a communication-bound note on a job that a rank holds back or whose waits are DDP's backward,
numbers taken over other spans than the one judged, the message's grammar, agents' rounds with impossible counts."""

from __future__ import annotations

import dataclasses
import math
import random

from test_watch_slow import N, compute_stack, found, view
from watch_states import sample, stack

from ncclcheck.analysis.watch.pooled import pooled
from ncclcheck.analysis.watch.shares import classify, tally
from ncclcheck.analysis.watch.slow import slowness
from ncclcheck.model.shares import Round, Tally, tally_from_json, tally_to_json
from ncclcheck.model.stacks import Frame
from ncclcheck.model.watch import RankView

GRAPH = "/env/lib/python3.11/site-packages/torch/autograd/graph.py"


def backward_stack() -> tuple[Frame, ...]:
    """DDP's backward: the autograd engine under the user's ``loss.backward()`` at train.py:60."""
    return (
        Frame("_engine_run_backward", GRAPH, 768),
        Frame("backward", "/env/lib/python3.11/site-packages/torch/_tensor.py", 581),
        Frame("main", "/job/train.py", 60),
    )


def spent(
    rank: int, shares: list[dict[tuple[Frame, ...], float]], host: str = "node0", offset: float = 0.0
) -> RankView:
    """A rank whose rounds (2 s, ``N`` samples, from t=1000) split their samples between stacks by the shares given
    (the rest in compute()); its main thread busy outside collectives."""
    tallies = []
    for i, parts in enumerate(shares):
        counts = {frames: round(share * N) for frames, share in parts.items()}
        rest = N - sum(counts.values())
        stacks = tuple((f, n) for f, n in [*counts.items(), (compute_stack(), rest)] if n)
        waited = sum(n for f, n in counts.items() if classify(f)[0] == "collective")
        start = 1000.0 + offset + 2.05 * i
        tallies.append(tally(Round(1, start, start + 2.0, stacks, 2.0 * (1 - waited / N))))
    s = dataclasses.replace(sample(rank, stack("all_reduce")), host=host)
    return RankView(s, "all_reduce", None, "all_reduce", 0, 0, 0, 0, 0, None, True, tallies=tuple(tallies))


# --- who is named ---


def test_ranks_waiting_in_a_collective_the_others_never_join_are_not_named() -> None:
    """Ranks 0-5 spend 60% in their group's heavy all_reduce at train.py:83; ranks 6-7 run their own group's
    all_reduce at train.py:99 (10%) and compute: another role, not what ranks 0-5 wait for."""
    theirs = stack("all_reduce", 99, "main")
    views = [view(r, [0.6] * 8) for r in range(6)] + [spent(r, [{theirs: 0.1}] * 8) for r in (6, 7)]
    assert found(views) == {}


def test_ranks_never_seen_in_the_collective_the_others_wait_in_most_are_not_named() -> None:
    """Even ranks wait 30% in the data-parallel all_reduce at train.py:83; odd ranks 10% there and 40% in a
    tensor-parallel all_reduce at train.py:50 that no even rank is ever seen in: the odd ranks wait on their own
    group, not on the even ones. A slow rank seen a little in both (its transfer) is still named."""
    tp, dp = stack("all_reduce", 50, "tp_layer"), stack("all_reduce", 83, "main")
    views = [spent(r, [{dp: 0.3}] * 8) if r % 2 == 0 else spent(r, [{dp: 0.1, tp: 0.4}] * 8) for r in range(8)]
    assert found(views) == {}
    views = [spent(r, [{tp: 0.05, dp: 0.55}] * 8) for r in range(6)] + [spent(6, [{tp: 0.55, dp: 0.05}] * 8)]
    assert found([*views, spent(7, [{tp: 0.03, dp: 0.03}] * 8)]) == {"slow-rank": (7,)}


def test_ranks_waiting_in_send_or_recv_are_waiting_not_holding_back() -> None:
    """Ranks 6-7 spend 60% in recv (a pipeline stage waiting on its peer): they wait too, they are no culprits."""
    views = [view(r, [0.6] * 6) for r in range(6)] + [view(r, [0.6] * 6, op="recv") for r in (6, 7)]
    assert found(views) == {}


def test_a_rank_that_itself_waits_for_the_slowest_is_not_named_with_it() -> None:
    """Rank 0 never waits, rank 1 waits 12% (for rank 0), the rest 30%: only rank 0 holds the others back. Over
    four rounds rank 1's 12% is not surely apart from rank 0's 0%: undecided, nobody named."""
    views = [view(0, [0.0] * 8), view(1, [0.12] * 8)] + [view(r, [0.3] * 8) for r in range(2, 8)]
    [f] = slowness(views, False)
    assert f.culprits == (0,) and f.message.startswith("rank 0 holds the others back: ranks 1-7 wait for it")
    assert dict(f.roles)[1] == "waiting"
    early = [view(0, [0.0] * 4), view(1, [0.12] * 4)] + [view(r, [0.3] * 4) for r in range(2, 8)]
    assert found(early) == {}


def test_a_rank_between_the_slowest_and_the_rest_leaves_it_undecided() -> None:
    """Ranks 0 and 1 may be equally slow (30% and 50%, 80 samples each: not apart beyond chance), the rest wait
    70%: naming rank 0 alone would call rank 1 a waiting one; both, maybe a waiting one a culprit."""
    views = [view(0, [0.3] * 4), view(1, [0.5] * 4)] + [view(r, [0.7] * 4) for r in range(2, 8)]
    assert found(views) == {}


def test_slow_ranks_never_seen_in_a_collective_are_named_with_a_caveat() -> None:
    """Ranks 6-7 never join a collective: the stacks cannot tell ranks the others wait for from ones that work
    apart (another role, their own group), more so where they run evaluate() at eval.py:10, which no other rank is
    seen in. Seen in the others' collective (even 5%), they are in it: no caveat."""
    caveat = "were never seen in a collective: if they work apart from the others (another role, or another process"
    views = [view(r, [0.6] * 4) for r in range(6)] + [view(r, [0.0] * 4) for r in (6, 7)]
    [f] = slowness(views, False)
    assert f.culprits == (6, 7) and f.message.endswith(
        f"; ranks 6-7 {caveat} group), the others wait for something else"
    )
    evaluate = (Frame("evaluate", "/job/eval.py", 10), Frame("main", "/job/train.py", 90))
    views = [view(0, [0.6] * 4), view(1, [0.6] * 4), view(2, [0.0] * 4, other=evaluate)]
    [f] = slowness(views, False)
    assert (
        f.culprits == (2,)
        and "; rank 2 was never seen in a collective (nor the others in evaluate() at eval.py:10)" in f.message
    )
    views = [view(r, [0.6] * 4) for r in range(6)] + [view(r, [0.05] * 4) for r in (6, 7)]
    assert "never seen" not in slowness(views, False)[0].message


# --- the numbers ---


def test_shares_are_compared_over_the_span_every_rank_covers() -> None:
    """Rank 2 restarted: its rounds begin 12 s after the others', who waited all through its restart. Since, it is
    slow (the others wait 30%): the message says 30% and about 1.4x, not the restart's wait."""
    others = [1.0] * 6 + [0.3] * 4
    views = [view(0, others), view(1, others), view(2, [0.0] * 4, offset=6 * 2.05)]
    [f] = slowness(views, False)
    assert f.culprits == (2,) and "wait for it in all_reduce at train.py:83 30% of the time" in f.message
    assert "about 1.4× faster" in f.message and "(80+ samples a rank)" in f.message


def test_a_wait_in_ddps_backward_says_the_gain_may_be_more() -> None:
    """CPU DDP: backward's own compute counts as waiting. Rank 3 is 3x slower in all of its step: its share in
    backward is 67%, the others' 89%; the wait difference is a floor on what the job would gain."""
    views = [spent(r, [{backward_stack(): 0.9}] * 8) for r in range(3)] + [spent(3, [{backward_stack(): 0.65}] * 8)]
    [f] = slowness(views, False)
    assert f.culprits == (3,) and "wait for it in DDP's backward at train.py:60 90% of the time" in f.message
    assert "about 1.3× faster or more" in f.message


# --- communication-bound ---


def test_a_job_one_rank_may_hold_back_is_not_communication_bound() -> None:
    """Rank 2 waits 15 points less than the others: too few rounds to name it, but not "no rank is behind"."""
    assert found([view(r, [0.6] * 4 if r == 2 else [0.75] * 4) for r in range(8)]) == {}
    assert found([view(r, [0.5] * 4 if r == 2 else [0.68] * 4) for r in range(8)]) == {}


def test_time_in_ddps_backward_alone_is_not_communication_bound() -> None:
    """A balanced CPU DDP job: two thirds of each step are backward's compute, counted as waiting in it."""
    assert found([spent(r, [{backward_stack(): 0.67}] * 8) for r in range(4)]) == {}


def test_a_balanced_job_waiting_in_all_reduce_is_still_communication_bound_mostly() -> None:
    rng = random.Random(3)
    hits = 0
    for _ in range(50):
        views = [_binomial(r, 0.7, 6, rng) for r in range(8)]
        hits += found(views) == {"communication-bound": ()}
    assert hits >= 40


# --- the message ---


def test_one_waiting_rank_waits_in_the_singular() -> None:
    """(Its collective waits for someone: rank 0 is in it, never seen there or not.)"""
    [f] = slowness([view(0, [0.0] * 4), view(1, [0.6] * 4)], False)
    assert f.message.startswith("rank 0 holds the other back: rank 1 waits for it in all_reduce")
    assert "never seen" not in f.message


def test_two_slow_ranks_are_spoken_of_in_the_plural() -> None:
    views = [view(r, [0.0] * 4 if r in (3, 6) else [0.5] * 4) for r in range(8)]
    [f] = slowness(views, False)
    assert "; they spend that time in compute() at train.py:32 (busy: their main threads used 100 % CPU" in f.message
    assert f.fix.startswith("see what ranks 3,6 compute that the others do not (more work on their shards")


# --- agents' rounds and the sums ---


def test_rounds_with_impossible_counts_are_not_read() -> None:
    good = tally_to_json(tally(Round(1, 1000.0, 1002.0, ((compute_stack(), 20),), 1.0)))
    for bad in (
        {"samples": -20, "kinds": {"other": -20}},
        {"kinds": {"collective": 30, "other": -10}},
        {"kinds": {"collective": 30}},
        {"start": math.nan},
        {"end": math.inf},
        {"start": 1003.0},
        {"cpu_s": -1.0},
        {"places": [["other", "compute", None, 40]]},
    ):
        assert tally_from_json({**good, **bad}) is None, bad
    assert tally_from_json(good) is not None


def test_two_views_of_one_rank_keep_their_own_sums() -> None:
    """The same (host, rank) twice (an old report beside a new one): each view's sums are its own rounds'."""
    first = view(0, [0.5] * 6)
    pooled([first])
    longer = dataclasses.replace(first, tallies=(*first.tallies, *view(0, [0.0] * 7).tallies[6:]))
    a, b = pooled([first, longer])
    assert a is not None and b is not None and (a.samples, b.samples) == (6 * N, 7 * N)


def test_a_refresh_with_the_same_rounds_under_other_ranks_or_hosts_is_judged_afresh() -> None:
    """The answer is kept while the rounds are the very same tuples; renumbered ranks, renamed hosts or the hosts
    flag are another question."""
    views = [view(r, [0.6] * 4, host="a") for r in (0, 1)] + [view(r, [0.0] * 4, host="b") for r in (2, 3)]
    assert found(views, True) == {"slow-node": (2, 3)} and found(views, False) == {"slow-rank": (2, 3)}
    renamed = [dataclasses.replace(v, sample=dataclasses.replace(v.sample, host="c")) for v in views[2:]]
    assert slowness([*views[:2], *renamed], True)[0].message.startswith("node c (ranks 2-3)")
    swapped = [dataclasses.replace(v, sample=dataclasses.replace(v.sample, rank=3 - v.rank)) for v in views]
    assert found(swapped, True) == {"slow-node": (0, 1)}


def _binomial(rank: int, share: float, n: int, rng: random.Random) -> RankView:
    base = view(rank, [share] * n)
    tallies = []
    for t in base.tallies:
        waited = sum(rng.random() < share for _ in range(N))
        kinds = (("collective", waited), ("other", N - waited))
        places = tuple(p._replace(samples=waited if p.kind == "collective" else N - waited) for p in t.places)
        tallies.append(Tally(t.start, t.end, N, kinds, places, 2.0 * (1 - waited / N)))
    return dataclasses.replace(base, tallies=tuple(tallies))
